/**
 * The delta-rule family's bridge to the C entries: checks the arguments (with the names the public
 * API uses), turns `"bhsd"` tensors into strided `[B, T, H, D]` views read in place (no copy), casts
 * g and beta to float32 where needed, allocates the results and calls `ak_delta_rule_fwd/bwd/decode`.
 * Every public function and op of `ops/linear/` runs through here, and so do the checks that a
 * backward's options match its forward's (`consistency.ts`).
 *
 * @module
 */
import { checkOptions, type OptionSpec } from "../args.ts";
import { AttnkitError, invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { DeltaFlags, PoolMode } from "../../ffi/symbols_linear.ts";
import { expectDType, expectSameDevice, expectSameDType, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { LAYOUTS } from "../layout.ts";
import { type CuSeqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import {
  checkAgainstForwards,
  type DeltaCallOptions,
  rememberForward,
  type Unchecked,
} from "./consistency.ts";
import { type LinearLayout, sequencePattern, warnIfLayoutLooksSwapped } from "./layouts.ts";
import { type DeltaSavedCall, DeltaSavedStates } from "./saved.ts";
import { TensorScope } from "./scope.ts";
import { type KernelMap, withChoice, withKernelMap, withPlanner } from "../tune/choice.ts";

/** Chunk sizes the chunked algorithm accepts. */
export const CHUNK_SIZES: readonly number[] = [32, 64, 128];
/** Largest head dimension K or V. */
export const MAX_HEAD_DIM = 256;

/** The dtypes q, k and v may have. */
export const QKV_DTYPES: readonly DType[] = ["float16", "bfloat16", "float32"];
/** The dtypes a gate may have (cast to float32 on the device). */
export const GATE_DTYPES: readonly DType[] = ["float16", "bfloat16", "float32", "float64"];

/** The tensors of one delta-rule call. */
export interface DeltaInputs {
  /** Queries. */
  q: Tensor;
  /** Keys. */
  k: Tensor;
  /** Values. */
  v: Tensor;
  /** Natural-log decay per token and value head (gated rule only). */
  g?: Tensor;
  /** Write strength per token and value head. */
  beta: Tensor;
}

/** How to run one delta-rule call. */
export interface DeltaSettings {
  /** Memory order of q, k, v, g, beta and the outputs. */
  layout: LinearLayout;
  /** Gated delta rule (g given). */
  gated: boolean;
  /** Query scale; default K^-0.5. */
  scale?: number;
  /** Chunk size of the chunked algorithm (also the checkpoint interval of the backward). */
  chunkSize: number;
  /** Token-by-token algorithm. */
  recurrent: boolean;
  /** L2-normalise q and k inside the kernel. */
  l2norm: boolean;
  /** `[N, H, K, V]` float32. */
  initialState?: Tensor;
  /** `[N + 1]` offsets of packed sequences (batch 1): host numbers or an int32/int64 tensor. */
  cuSeqlens?: CuSeqlens;
  /** The kernel choice of an op class with `tune` / `kernelMap`; undefined: the planner's. */
  choice?: DeltaKernelChoice;
}

/** How a delta-rule op class picks its kernels: `tune` and `kernelMap` as its options gave them. */
export interface DeltaKernelChoice {
  /** Tune each shape class on its first call (DeltaKernelOptions.tune). */
  tune: boolean;
  /** Settings for the op's calls (DeltaKernelOptions.kernelMap): forward and backward keys. */
  kernelMap?: KernelMap;
}

/** The settings of `map` whose keys belong to a stage (`linear.fwd` or `linear.bwd`); undefined if none. */
function stageMap(map: KernelMap | undefined, stage: string): KernelMap | undefined {
  const picked = Object.entries(map ?? {}).filter(([k]) => k.startsWith(`${stage}.`));
  return picked.length > 0 ? Object.fromEntries(picked) : undefined;
}

/** The sizes of a call. */
export interface DeltaSizes {
  /** Batch. */
  B: number;
  /** Tokens per batch row. */
  T: number;
  /** Value heads. */
  H: number;
  /** Query/key heads. */
  HK: number;
  /** Key head dimension. */
  K: number;
  /** Value head dimension. */
  V: number;
  /** Sequences: B, or the number of packed sequences. */
  N: number;
}

/** What the forward computes besides the output. */
export interface ForwardWants {
  /** The state after the last token of each sequence. */
  finalState?: boolean;
  /** The state before every chunk and the final state, `[B, H, NC + 1, K, V]`. */
  chunkStates?: boolean;
  /** The chunk-local WY factors Aw and Au, `[B, H, T, chunkSize]`. */
  factors?: boolean;
  /**
   * A handle for the backward: what it would recompute where the backend stores it, and the call's
   * options either way (see {@link DeltaSavedStates}).
   */
  saved?: boolean;
  /** Remember the call's options for the backward's checks (default true; not for inference). */
  remember?: boolean;
}

/** What the forward returns. */
export interface ForwardOutputs {
  /** `[B, T, H, V]` (bshd) or `[B, H, T, V]` (bhsd), dtype of q. */
  output: Tensor;
  /** `[N, H, K, V]` float32, when asked. */
  finalState?: Tensor;
  /** `[B, H, NC + 1, K, V]` float32, when asked. */
  chunkStates?: Tensor;
  /** `[B, H, T, chunkSize]` float32, when asked. */
  aw?: Tensor;
  /** `[B, H, T, chunkSize]` float32, when asked. */
  au?: Tensor;
  /** When asked: the handle for the backward (holding the per-chunk states where stored). */
  saved?: DeltaSavedStates;
}

/** What one pass (forward or backward) of the delta rule tunes, and how closely candidates must agree. */
interface DeltaStage {
  /** The tuning-key prefix of the pass (`kernelMap` keys outside it belong to the other pass). */
  prefix: "linear.fwd" | "linear.bwd";
  /** The keys whose values are the tuning candidates. */
  keys: readonly string[];
  /** Relative RMS agreement with the planner's outputs: 16-bit inputs, float32 inputs. */
  relRms: readonly [number, number];
}

const FORWARD_STAGE: DeltaStage = {
  prefix: "linear.fwd",
  keys: ["linear.fwd.state", "linear.fwd.state.tile"],
  relRms: [8e-3, 1e-4],
};
const BACKWARD_STAGE: DeltaStage = {
  prefix: "linear.bwd",
  keys: ["linear.bwd.grads", "linear.bwd.states.tile", "linear.bwd.dstates.tile"],
  relRms: [3e-2, 1e-3],
};

/**
 * A pass under the op's kernel choice (tune / kernelMap): `call` is the user's call, `outputs` one run
 * whose tensors the tuner compares (both with the choice taken out of the settings).
 */
function underChoice<T>(
  op: string,
  inputs: DeltaInputs,
  s: DeltaSettings,
  stage: DeltaStage,
  outputs: (plain: DeltaSettings) => Tensor[],
  call: (plain: DeltaSettings) => T,
): T {
  const plain: DeltaSettings = { ...s, choice: undefined };
  const tune = s.choice?.tune ?? false;
  const kernelMap = stageMap(s.choice?.kernelMap, stage.prefix);
  if (!tune && !kernelMap) return withPlanner(op, () => call(plain));
  const { q } = inputs;
  return withChoice({
    op,
    device: q.device,
    kernelMap,
    tune,
    keys: stage.keys,
    shapeClass: shapeClass(q, s, checkDeltaCall(op, inputs, plain), stage.prefix),
    relRms: stage.relRms[q.dtype === "float32" ? 1 : 0],
    run: () => {
      const tensors = outputs(plain);
      return { tensors, [Symbol.dispose]: () => tensors.forEach((t) => t.dispose()) };
    },
  }, () => call(plain));
}

/** A delta-rule call's shape class for the tuning cache. */
function shapeClass(q: Tensor, s: DeltaSettings, sizes: DeltaSizes, pass: string): string {
  return JSON.stringify({
    pass,
    dtype: q.dtype,
    layout: s.layout,
    ...sizes,
    gated: s.gated,
    chunk: s.chunkSize,
    l2norm: s.l2norm,
    recurrent: s.recurrent,
    varlen: s.cuSeqlens !== undefined,
    initial: s.initialState !== undefined,
  });
}

/** What the backward returns. */
export interface BackwardOutputs {
  /** Gradient of q, its shape and dtype. */
  dq: Tensor;
  /** Gradient of k. */
  dk: Tensor;
  /** Gradient of v. */
  dv: Tensor;
  /** Gradient of beta, its shape, float32. */
  dbeta: Tensor;
  /** Gradient of g (gated rule only), its shape, float32. */
  dg?: Tensor;
  /** Gradient of the initial state, when one was given. */
  dInitialState?: Tensor;
}

// ---- checks ----

/** The query scale of a call: `scale`, checked, or `K ** -0.5`. */
export function checkScale(op: string, scale: number | undefined, K: number): number {
  if (scale === undefined) return K ** -0.5;
  if (typeof scale !== "number" || !Number.isFinite(scale)) {
    throw invalidArgument(op, `scale: expected a finite number, got ${String(scale)}`);
  }
  return scale;
}

/** Checks a chunk size option: 32, 64 or 128. */
export function checkChunkSize(op: string, chunkSize: unknown): number {
  if (typeof chunkSize !== "number" || !CHUNK_SIZES.includes(chunkSize)) {
    throw invalidArgument(op, `chunkSize: expected ${CHUNK_SIZES.join(", ")}, got ${String(chunkSize)}`);
  }
  return chunkSize;
}

/**
 * q, k, v and the call's other tensors (`others`, by name), each checked to be a tensor in that
 * order; then q's dtype (one of QKV_DTYPES) and that k and v share it.
 */
export function expectQkv<N extends string>(
  op: string,
  inputs: { q: unknown; k: unknown; v: unknown },
  others: Record<N, unknown>,
): { q: Tensor; k: Tensor; v: Tensor } & Record<N, Tensor> {
  const q = expectTensor(op, "q", inputs.q);
  const k = expectTensor(op, "k", inputs.k);
  const v = expectTensor(op, "v", inputs.v);
  const checked = {} as Record<N, Tensor>;
  for (const name of Object.keys(others) as N[]) checked[name] = expectTensor(op, name, others[name]);
  expectDType(op, "q", q, QKV_DTYPES);
  expectSameDType(op, "k", k, q, "q");
  expectSameDType(op, "v", v, q, "q");
  return { ...checked, q, k, v };
}

/** Checks that K and V are in 1..MAX_HEAD_DIM. */
export function checkHeadDims(op: string, K: number, V: number): void {
  if (K < 1 || K > MAX_HEAD_DIM) {
    throw invalidArgument(op, `q: head dimension K must be in 1..${MAX_HEAD_DIM}, got ${K}`);
  }
  if (V < 1 || V > MAX_HEAD_DIM) {
    throw invalidArgument(op, `v: head dimension V must be in 1..${MAX_HEAD_DIM}, got ${V}`);
  }
}

/** Checks that the HK query/key heads divide the H value heads. */
export function checkHeads(op: string, HK: number, H: number): void {
  if (HK < 1 || H < 1 || H % HK !== 0) {
    throw invalidArgument(
      op,
      `v: its ${H} value heads must be a positive multiple of the ${HK} query/key heads of q`,
    );
  }
}

/** `expectShape`, with the layout named when the shape does not fit it. */
export function expectInLayout(
  op: string,
  name: string,
  t: Tensor,
  layout: LinearLayout,
  pattern: string[],
  sizes?: Record<string, number>,
): Record<string, number> {
  try {
    return expectShape(op, name, t, pattern, sizes);
  } catch (e) {
    if (!(e instanceof AttnkitError) || !e.message.startsWith(`${op}: `)) throw e;
    const reason = e.message.slice(op.length + 2);
    throw invalidArgument(op, `${reason} (layout "${layout}" reads ${LAYOUTS[layout]})`);
  }
}

/** The number of packed sequences `cuSeqlens` describes (its values are checked where it is read). */
export function packedSequences(op: string, cu: unknown, q: Tensor): number {
  let count: number;
  let shape: string;
  if (cu instanceof Tensor) {
    const t = expectTensor(op, "cuSeqlens", cu);
    expectDType(op, "cuSeqlens", t, ["int32", "int64"]);
    expectSameDevice(op, "cuSeqlens", t, q, "q");
    count = t.ndim === 1 ? t.shape[0] : 0;
    shape = `shape [${t.shape.join(", ")}]`;
  } else if (Array.isArray(cu) || cu instanceof Int32Array || cu instanceof BigInt64Array) {
    count = cu.length;
    shape = `${count} offsets`;
  } else {
    // Not a form offsets take: the shared check's message lists them.
    int32Seqlens(op, "cuSeqlens", cu, q.device)[Symbol.dispose]();
    throw invalidArgument(op, "cuSeqlens: expected offsets");
  }
  if (count < 2) {
    throw invalidArgument(op, `cuSeqlens: expected shape [N + 1] with N >= 1 sequences, got ${shape}`);
  }
  return count - 1;
}

/** The sequence count of a call: B, or the packed sequences of `cuSeqlens` (which take batch size 1). */
export function sequenceCount(op: string, cuSeqlens: unknown, B: number, q: Tensor): number {
  if (cuSeqlens === undefined) return B;
  const N = packedSequences(op, cuSeqlens, q);
  if (B !== 1) throw invalidArgument(op, `q: packed input (cuSeqlens given) needs batch size 1, got ${B}`);
  return N;
}

/** Checks a float32 state argument (initialState, dFinalState): on q's device, of this shape. */
export function checkStateArg(
  op: string,
  name: string,
  t: unknown,
  q: Tensor,
  shape: readonly number[],
): Tensor {
  const x = expectTensor(op, name, t);
  expectDType(op, name, x, ["float32"]);
  expectSameDevice(op, name, x, q, "q");
  expectShape(op, name, x, shape);
  return x;
}

/** Checks a backward's dOutput: q's dtype and device, the output's shape in the layout. */
export function checkDOutput(
  op: string,
  dOutput: unknown,
  q: Tensor,
  layout: LinearLayout,
  sizes: DeltaSizes,
): Tensor {
  const { B, T, H, V } = sizes;
  const dO = expectTensor(op, "dOutput", dOutput);
  expectSameDType(op, "dOutput", dO, q, "q");
  expectSameDevice(op, "dOutput", dO, q, "q");
  expectInLayout(op, "dOutput", dO, layout, sequencePattern(layout, "H", "V"), { B, T, H, V });
  return dO;
}

/** Checks the tensors and settings of a forward or backward call; returns the sizes. */
export function checkDeltaCall(op: string, inputs: DeltaInputs, s: DeltaSettings): DeltaSizes {
  const { q, k, v, beta } = expectQkv(op, inputs, { beta: inputs.beta });
  expectSameDevice(op, "k", k, q, "q");
  expectSameDevice(op, "v", v, q, "q");
  expectSameDevice(op, "beta", beta, q, "q");
  expectDType(op, "beta", beta, GATE_DTYPES);
  const L = s.layout;
  const sizes = expectInLayout(op, "q", q, L, sequencePattern(L, "HK", "K"));
  expectInLayout(op, "k", k, L, sequencePattern(L, "HK", "K"), sizes);
  expectInLayout(op, "v", v, L, sequencePattern(L, "H", "V"), sizes);
  expectInLayout(op, "beta", beta, L, sequencePattern(L, "H"), sizes);
  if (s.gated) {
    const g = expectTensor(op, "g", inputs.g);
    expectSameDevice(op, "g", g, q, "q");
    expectDType(op, "g", g, GATE_DTYPES);
    expectInLayout(op, "g", g, L, sequencePattern(L, "H"), sizes);
  } else if (inputs.g !== undefined) {
    throw invalidArgument(op, "g: given to the ungated delta rule");
  }
  const { B, T, H, HK, K, V } = sizes;
  checkHeads(op, HK, H);
  checkHeadDims(op, K, V);
  if (!s.recurrent) checkChunkSize(op, s.chunkSize);
  checkScale(op, s.scale, K);
  const N = sequenceCount(op, s.cuSeqlens, B, q);
  if (s.initialState !== undefined) checkStateArg(op, "initialState", s.initialState, q, [N, H, K, V]);
  warnIfLayoutLooksSwapped(op, L, T, HK);
  return { B, T, H, HK, K, V, N };
}

/** The options of a call as a backward compares them with its forward's. */
export function callOptions(s: DeltaSettings, K: number): DeltaCallOptions {
  return {
    layout: s.layout,
    useQkL2norm: s.l2norm,
    scale: checkScale("callOptions", s.scale, K),
    chunkSize: s.recurrent ? undefined : s.chunkSize,
    initialState: s.initialState !== undefined,
    cuSeqlens: s.cuSeqlens !== undefined,
  };
}

/** Caller-provided forward results (e.g. NaN-poisoned buffers in tests, or reused memory). */
export type DeltaForwardBuffers = Partial<
  Record<"output" | "finalState" | "chunkStates" | "aw" | "au", Tensor>
>;
/** Caller-provided gradient buffers. */
export type DeltaBackwardBuffers = Partial<
  Record<"dq" | "dk" | "dv" | "dbeta" | "dg" | "dInitialState", Tensor>
>;

// The keys of the caller-provided buffer objects (each value is checked where it is used).
const FORWARD_BUFFERS: OptionSpec = {
  output: "any",
  finalState: "any",
  chunkStates: "any",
  aw: "any",
  au: "any",
};
const BACKWARD_BUFFERS: OptionSpec = {
  dq: "any",
  dk: "any",
  dv: "any",
  dbeta: "any",
  dg: "any",
  dInitialState: "any",
};
const DECODE_BUFFERS: OptionSpec = { output: "any", newState: "any" };

/** Checks a caller-provided result buffer: a live tensor of exactly this shape, dtype and device. */
export function provided(
  op: string,
  name: string,
  t: Tensor | undefined,
  shape: readonly number[],
  dtype: DType,
  device: string,
): Tensor | undefined {
  if (t === undefined || t === null) return undefined;
  const out = expectTensor(op, `out.${name}`, t);
  expectShape(op, `out.${name}`, out, shape);
  if (out.dtype !== dtype) {
    throw invalidArgument(op, `out.${name}: expected dtype ${dtype}, got ${out.dtype}`);
  }
  if (out.device !== device) {
    throw invalidArgument(op, `out.${name}: expected device ${device}, got ${out.device}`);
  }
  return out;
}

// ---- layouts ----

/** The `[B, T, heads, D]` view the C ABI reads, of a bshd or bhsd tensor (read in place). */
export function tokenMajor(t: Tensor, layout: LinearLayout): Uint8Array<ArrayBuffer> {
  if (layout === "bshd") return t.descriptor();
  const [B, heads, T, D] = t.shape;
  return t.viewDescriptor([B, T, heads, D], [heads * T * D, D, T * D, 1]);
}

/**
 * The tensor for a `[B, T, heads, D]` result in the layout (the caller's buffer, else a new one), and
 * the view the C side writes.
 */
export function rowsResult(
  op: string,
  scope: TensorScope,
  layout: LinearLayout,
  sizes: { B: number; T: number; heads: number; D: number },
  dtype: DType,
  device: string,
  name: string,
  given: Tensor | undefined,
): { tensor: Tensor; view: Uint8Array<ArrayBuffer> } {
  const { B, T, heads, D } = sizes;
  const shape = layout === "bshd" ? [B, T, heads, D] : [B, heads, T, D];
  const tensor = provided(op, name, given, shape, dtype, device) ??
    scope.result(Tensor.empty(shape, { dtype, device }));
  return { tensor, view: tokenMajor(tensor, layout) };
}

/** A float32 state-like result: the caller's buffer, else a new tensor. */
export function f32Result(
  op: string,
  scope: TensorScope,
  shape: number[],
  device: string,
  name: string,
  given: Tensor | undefined,
): Tensor {
  return provided(op, name, given, shape, "float32", device) ??
    scope.result(Tensor.empty(shape, { dtype: "float32", device }));
}

/**
 * The forward's output rows (the layout of q, dtype of q) and, when asked for or given, its float32
 * final state `[N, H, K, V]`: the caller's buffers, else new tensors owned by the scope's results.
 */
export function forwardResults(
  op: string,
  scope: TensorScope,
  layout: LinearLayout,
  sizes: { B: number; T: number; H: number; K: number; V: number; N: number },
  q: Tensor,
  wantFinalState: boolean | undefined,
  out: { output?: Tensor; finalState?: Tensor },
): { output: { tensor: Tensor; view: Uint8Array<ArrayBuffer> }; finalState: Tensor | undefined } {
  const { B, T, H, K, V, N } = sizes;
  const output = rowsResult(
    op,
    scope,
    layout,
    { B, T, heads: H, D: V },
    q.dtype,
    q.device,
    "output",
    out.output,
  );
  const finalState = wantFinalState || out.finalState
    ? f32Result(op, scope, [N, H, K, V], q.device, "finalState", out.finalState)
    : undefined;
  return { output, finalState };
}

/**
 * A decode step's output `[B, H, V]` (dtype of q) and new state (the state itself in place, else one
 * shaped and typed like it): the caller's buffers, else new tensors owned by the scope's results.
 */
export function decodeResults(
  op: string,
  scope: TensorScope,
  q: Tensor,
  state: Tensor,
  sizes: { B: number; H: number; V: number },
  inPlace: boolean,
  out: { output?: Tensor; newState?: Tensor },
): { output: Tensor; newState: Tensor } {
  const { B, H, V } = sizes;
  const output = provided(op, "output", out.output, [B, H, V], q.dtype, q.device) ??
    scope.result(Tensor.empty([B, H, V], { dtype: q.dtype, device: q.device }));
  if (inPlace && out.newState !== undefined) {
    throw invalidArgument(op, "out.newState: not used in place (the state itself is updated)");
  }
  const newState = inPlace
    ? state
    : provided(op, "newState", out.newState, state.shape, state.dtype, q.device) ??
      scope.result(Tensor.empty(state.shape, { dtype: state.dtype, device: state.device }));
  return { output, newState };
}

/** g or beta as the contiguous float32 `[B, T, H]` the C side reads (a cast/permute when needed). */
export function scalarsF32(
  op: string,
  scope: TensorScope,
  t: Tensor,
  layout: LinearLayout,
): Uint8Array<ArrayBuffer> {
  if (layout === "bshd" && t.dtype === "float32") return t.descriptor();
  const [B, X, Y] = t.shape;
  const [T, H] = layout === "bshd" ? [X, Y] : [Y, X];
  const out = scope.temp(Tensor.empty([B, T, H], { dtype: "float32", device: t.device }));
  const source = layout === "bshd" ? t.descriptor() : t.viewDescriptor([B, T, H], [H * T, 1, T]);
  unwrap(native().ak_copy(out.descriptor(), source), op);
  return out.descriptor();
}

/**
 * The float32 gradient of g or beta (`[B, T, H]` or `[B, H, T]` by layout; the caller's buffer, else
 * a new one): the kernels accumulate these sums in float32 and write float32, and a 16-bit gate
 * would lose their precision, so they keep it whatever the gate's dtype. The C side writes rows of
 * `[B, T, H]`; for bhsd it writes a scratch buffer that `finish` transposes into the result.
 */
export function scalarsGrad(
  op: string,
  scope: TensorScope,
  layout: LinearLayout,
  sizes: DeltaSizes,
  like: Tensor,
  name: string,
  given: Tensor | undefined,
): { view: Uint8Array<ArrayBuffer>; finish: () => Tensor } {
  const { B, T, H } = sizes;
  const target = provided(op, name, given, like.shape, "float32", like.device) ??
    scope.result(Tensor.empty(like.shape, { dtype: "float32", device: like.device }));
  if (layout === "bshd") return { view: target.descriptor(), finish: () => target };
  const buffer = scope.temp(Tensor.empty([B, T, H], { dtype: "float32", device: like.device }));
  return {
    view: buffer.descriptor(),
    finish: () => {
      unwrap(native().ak_copy(target.viewDescriptor([B, T, H], [H * T, 1, T]), buffer.descriptor()), op);
      return target;
    },
  };
}

/** What a saved-states handle is valid for: the sizes and every option a backward must share. */
function savedCall(inputs: DeltaInputs, s: DeltaSettings, sizes: DeltaSizes): DeltaSavedCall {
  const { B, T, H, HK, K, V, N } = sizes;
  return {
    sizes: `B=${B} T=${T} H=${H} HK=${HK} K=${K} V=${V} N=${N}`,
    dtype: inputs.q.dtype,
    device: inputs.q.device,
    gated: s.gated,
    options: callOptions(s, K),
  };
}

function flagsOf(s: { gated: boolean; l2norm: boolean; recurrent?: boolean }): number {
  return (s.gated ? DeltaFlags.GATED : 0) | (s.l2norm ? DeltaFlags.QK_L2NORM : 0) |
    (s.recurrent ? DeltaFlags.RECURRENT : 0);
}

/** The int32 offsets the C side reads (a converted copy owned by the scope when needed), or null. */
export function seqlensView(
  op: string,
  scope: TensorScope,
  cuSeqlens: CuSeqlens | undefined,
  device: string,
): Uint8Array<ArrayBuffer> | null {
  if (cuSeqlens === undefined) return null;
  const cu = int32Seqlens(op, "cuSeqlens", cuSeqlens, device);
  if (cu.owned) scope.temp(cu.tensor);
  return cu.tensor.descriptor();
}

/** The dq, dk and dv results of a backward (q's dtype, in the layout) and the views the C side writes. */
export function qkvGradResults(
  op: string,
  scope: TensorScope,
  layout: LinearLayout,
  sizes: DeltaSizes,
  q: Tensor,
  out: { dq?: Tensor; dk?: Tensor; dv?: Tensor },
) {
  const { B, T, H, HK, K, V } = sizes;
  return {
    dq: rowsResult(op, scope, layout, { B, T, heads: HK, D: K }, q.dtype, q.device, "dq", out.dq),
    dk: rowsResult(op, scope, layout, { B, T, heads: HK, D: K }, q.dtype, q.device, "dk", out.dk),
    dv: rowsResult(op, scope, layout, { B, T, heads: H, D: V }, q.dtype, q.device, "dv", out.dv),
  };
}

// The descriptors of the inputs shared by the forward and the backward.
function prepareInputs(op: string, scope: TensorScope, inputs: DeltaInputs, s: DeltaSettings) {
  const cuSeqlens = seqlensView(op, scope, s.cuSeqlens, inputs.q.device);
  return {
    // The leading arguments of ak_delta_rule_fwd, ak_delta_rule_saved_size and ak_delta_rule_bwd, in
    // their order (the pool forward takes them without the initial state).
    operands: [
      tokenMajor(inputs.q, s.layout),
      tokenMajor(inputs.k, s.layout),
      tokenMajor(inputs.v, s.layout),
      s.gated ? scalarsF32(op, scope, inputs.g!, s.layout) : null,
      scalarsF32(op, scope, inputs.beta, s.layout),
      s.initialState?.descriptor() ?? null,
      cuSeqlens,
    ] as const,
    scale: checkScale(op, s.scale, inputs.q.shape[3]), // K is the last dimension in both layouts
    flags: flagsOf(s),
  };
}

// ---- calls ----

/**
 * Runs the forward. The output rows past the last packed sequence (`cuSeqlens[N]`) are left
 * unwritten. Results in `out` are the caller's; the others are new tensors.
 */
export function deltaForward(
  op: string,
  inputs: DeltaInputs,
  s: DeltaSettings,
  wants: ForwardWants = {},
  out?: DeltaForwardBuffers,
): ForwardOutputs {
  if (s.choice) {
    return underChoice(op, inputs, s, FORWARD_STAGE, (plain) => {
      const r = deltaForward(op, inputs, plain, { finalState: true, remember: false });
      return [r.output, r.finalState!];
    }, (plain) => deltaForward(op, inputs, plain, wants, out));
  }
  out = checkOptions<DeltaForwardBuffers>(op, out ?? undefined, FORWARD_BUFFERS, "out");
  const sizes = checkDeltaCall(op, inputs, s);
  const { B, T, H, K, V } = sizes;
  if ((wants.chunkStates || wants.factors) && (s.recurrent || s.cuSeqlens !== undefined)) {
    throw invalidArgument(op, "chunk states and WY factors exist only for the chunked, fixed-length forward");
  }
  const device = inputs.q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s);
  const { output, finalState } = forwardResults(op, scope, s.layout, sizes, inputs.q, wants.finalState, out);
  const NC = Math.ceil(T / s.chunkSize);
  const chunkStates = wants.chunkStates
    ? f32Result(op, scope, [B, H, NC + 1, K, V], device, "chunkStates", out.chunkStates)
    : undefined;
  const aw = wants.factors ? f32Result(op, scope, [B, H, T, s.chunkSize], device, "aw", out.aw) : undefined;
  const au = wants.factors ? f32Result(op, scope, [B, H, T, s.chunkSize], device, "au", out.au) : undefined;
  // The arguments ak_delta_rule_fwd and ak_delta_rule_saved_size both start with.
  const call = [
    ...x.operands,
    x.scale,
    s.recurrent ? 64 : s.chunkSize,
    x.flags,
    output.view,
  ] as const;
  // Whether (and how much) the forward would store for the backward is the planner's answer.
  let savedBuffer: Tensor | undefined;
  if (wants.saved && device !== "cpu") {
    const elements = new BigInt64Array(1);
    unwrap(
      native().ak_delta_rule_saved_size(
        ...call,
        chunkStates?.descriptor() ?? null,
        aw?.descriptor() ?? null,
        au?.descriptor() ?? null,
        new Uint8Array(elements.buffer),
      ),
      op,
    );
    if (elements[0] > 0n) {
      savedBuffer = scope.temp(Tensor.empty([Number(elements[0])], { dtype: inputs.q.dtype, device }));
    }
  }
  const written = new Int32Array(1);
  unwrap(
    native().ak_delta_rule_fwd(
      ...call,
      finalState?.descriptor() ?? null,
      chunkStates?.descriptor() ?? null,
      aw?.descriptor() ?? null,
      au?.descriptor() ?? null,
      savedBuffer?.descriptor() ?? null,
      new Uint8Array(written.buffer),
    ),
    op,
  );
  // The buffer moves to the handle only when the forward filled it; else the scope frees it.
  let saved: DeltaSavedStates | undefined;
  if (wants.saved) {
    const stored = savedBuffer !== undefined && written[0] === 1 ? scope.keep(savedBuffer) : undefined;
    saved = new DeltaSavedStates(stored, savedCall(inputs, s, sizes));
  }
  if (wants.remember !== false) rememberForward(inputs, callOptions(s, K));
  scope.release();
  return { output: output.tensor, finalState, chunkStates, aw, au, saved };
}

/** A state pool a forward advances in place (`pagedChunkGdn`): the slots of each sequence's state. */
export interface PoolStates {
  /** `[numSlots, H, V, K]` float32 | bfloat16. */
  cache: Tensor;
  /** `[N]` int32: sequence n's slot; <= 0 is padding. */
  indices: Tensor;
  /** `[N]` bool, or undefined (every live slot resumes). */
  hasInitialState?: Tensor;
  /** The caller vouches for the indices: nothing is read back. */
  trusted: boolean;
}

/**
 * Runs the forward from and into a state pool, in one native call: each sequence starts from its slot and
 * leaves its final state there; padding sequences' rows are zero. Returns the output (`"bshd"`).
 */
export function deltaForwardOnPool(
  op: string,
  inputs: DeltaInputs,
  s: DeltaSettings,
  pool: PoolStates,
): Tensor {
  const sizes = checkDeltaCall(op, inputs, s);
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s);
  const [q, k, v, g, beta, , cuSeqlens] = x.operands; // the pool holds the initial states
  const { output } = forwardResults(op, scope, s.layout, sizes, inputs.q, false, {});
  unwrap(
    native().ak_delta_rule_fwd_pool(
      q,
      k,
      v,
      g,
      beta,
      cuSeqlens,
      x.scale,
      s.recurrent ? 64 : s.chunkSize,
      x.flags,
      output.view,
      pool.cache.descriptor(op),
      pool.indices.descriptor(op),
      pool.hasInitialState?.descriptor(op) ?? null,
      pool.trusted ? PoolMode.TRUSTED_INDICES : 0,
    ),
    op,
  );
  scope.release();
  return output.tensor;
}

/** What a backward takes besides the inputs and settings. */
export interface BackwardExtras {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /** Compute dInitialState when an initial state was given (default true). */
  wantDInitialState?: boolean;
  /** Caller-provided gradient buffers. */
  out?: DeltaBackwardBuffers;
  /** What the forward of the same call stored (read, not disposed). */
  saved?: DeltaSavedStates;
  /** Options the check against earlier forwards leaves out (e.g. an initial state read from S). */
  unchecked?: Unchecked;
}

/**
 * Runs the backward: gradients of the forward with the same inputs and settings, from `dOutput`
 * (the output's layout and dtype) and an optional `dFinalState`. Gradient rows of tokens past the
 * last packed sequence are zero. Refuses settings that contradict the forward that made `saved`, or
 * every forward seen on these inputs (`consistency.ts`).
 */
export function deltaBackward(
  op: string,
  inputs: DeltaInputs,
  s: DeltaSettings,
  dOutput: Tensor,
  extras: BackwardExtras = {},
): BackwardOutputs {
  if (s.choice) {
    return underChoice(op, inputs, s, BACKWARD_STAGE, (plain) => {
      const r = deltaBackward(op, inputs, plain, dOutput, { ...extras, out: undefined });
      return [r.dq, r.dk, r.dv, r.dbeta, r.dg, r.dInitialState].filter((t): t is Tensor => t !== undefined);
    }, (plain) => deltaBackward(op, inputs, plain, dOutput, extras));
  }
  const { dFinalState, wantDInitialState = true, saved } = extras;
  const out = checkOptions<DeltaBackwardBuffers>(op, extras.out ?? undefined, BACKWARD_BUFFERS, "out");
  const sizes = checkDeltaCall(op, inputs, s);
  const { H, K, V, N } = sizes;
  const q = inputs.q;
  const dO = checkDOutput(op, dOutput, q, s.layout, sizes);
  if (dFinalState !== undefined && dFinalState !== null) {
    checkStateArg(op, "dFinalState", dFinalState, q, [N, H, K, V]);
  }
  if (saved !== undefined && saved !== null && !(saved instanceof DeltaSavedStates)) {
    throw invalidArgument(op, "saved: expected the saved states a forward returned");
  }
  const savedBuffer = saved ? saved.bufferFor(op, savedCall(inputs, s, sizes)) : undefined;
  if (!saved) checkAgainstForwards(op, inputs, callOptions(s, K), extras.unchecked);
  const device = q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s);
  const { dq, dk, dv } = qkvGradResults(op, scope, s.layout, sizes, q, out);
  const dbeta = scalarsGrad(op, scope, s.layout, sizes, inputs.beta, "dbeta", out.dbeta);
  const dg = s.gated ? scalarsGrad(op, scope, s.layout, sizes, inputs.g!, "dg", out.dg) : undefined;
  const dInitialState = s.initialState && wantDInitialState
    ? f32Result(op, scope, [N, H, K, V], device, "dInitialState", out.dInitialState)
    : undefined;
  unwrap(
    native().ak_delta_rule_bwd(
      ...x.operands,
      tokenMajor(dO, s.layout),
      dFinalState?.descriptor() ?? null,
      x.scale,
      s.recurrent ? 64 : s.chunkSize,
      x.flags,
      dq.view,
      dk.view,
      dv.view,
      dbeta.view,
      dg?.view ?? null,
      dInitialState?.descriptor() ?? null,
      savedBuffer?.descriptor() ?? null,
    ),
    op,
  );
  const result = {
    dq: dq.tensor,
    dk: dk.tensor,
    dv: dv.tensor,
    dbeta: dbeta.finish(),
    dg: dg?.finish(),
    dInitialState,
  };
  scope.release();
  return result;
}

/** The tensors of one decode step. */
export interface DecodeInputs extends DeltaInputs {
  /** `[B, H, K, V]`, float32 or the dtype of q. */
  state: Tensor;
}

/** How to run one decode step. */
export interface DecodeSettings {
  /** Gated delta rule. */
  gated: boolean;
  /** Query scale; default K^-0.5. */
  scale?: number;
  /** L2-normalise q and k inside the kernel. */
  l2norm: boolean;
  /** Write the new state over `state` instead of into a new tensor. */
  inPlace: boolean;
  /** The op's `linear.decode` setting, if any. */
  kernelMap?: KernelMap;
}

/** Runs one decode step: q, k `[B, HK, K]`, v `[B, H, V]`, g and beta `[B, H]`, state `[B, H, K, V]`. */
export function deltaDecode(
  op: string,
  inputs: DecodeInputs,
  s: DecodeSettings,
  out?: { output?: Tensor; newState?: Tensor },
): { output: Tensor; newState: Tensor } {
  out = checkOptions<{ output?: Tensor; newState?: Tensor }>(op, out ?? undefined, DECODE_BUFFERS, "out");
  const { q, k, v, beta, state } = expectQkv(op, inputs, { beta: inputs.beta, state: inputs.state });
  expectDType(op, "beta", beta, GATE_DTYPES);
  for (const [name, t] of [["k", k], ["v", v], ["beta", beta], ["state", state]] as const) {
    expectSameDevice(op, name, t, q, "q");
  }
  const sizes = expectShape(op, "q", q, ["B", "HK", "K"]);
  expectShape(op, "k", k, ["B", "HK", "K"], sizes);
  expectShape(op, "v", v, ["B", "H", "V"], sizes);
  expectShape(op, "beta", beta, ["B", "H"], sizes);
  const { B, H, HK, K, V } = sizes;
  checkHeads(op, HK, H);
  checkHeadDims(op, K, V);
  if (s.gated) {
    const g = expectTensor(op, "g", inputs.g);
    expectSameDevice(op, "g", g, q, "q");
    expectDType(op, "g", g, GATE_DTYPES);
    expectShape(op, "g", g, ["B", "H"], sizes);
  }
  expectShape(op, "state", state, [B, H, K, V]);
  if (state.dtype !== "float32" && state.dtype !== q.dtype) {
    throw invalidArgument(op, `state: expected dtype float32 or ${q.dtype} (that of q), got ${state.dtype}`);
  }
  const scale = checkScale(op, s.scale, K);
  using scope = new TensorScope();
  const asF32 = (t: Tensor) => {
    if (t.dtype === "float32") return t.descriptor();
    return scope.temp(t.cast("float32")).descriptor();
  };
  const { output, newState } = decodeResults(op, scope, q, state, { B, H, V }, s.inPlace, out);
  const call = () =>
    unwrap(
      native().ak_delta_rule_decode(
        q.descriptor(),
        k.descriptor(),
        v.descriptor(),
        s.gated ? asF32(inputs.g!) : null,
        asF32(beta),
        state.descriptor(),
        scale,
        flagsOf(s),
        output.descriptor(),
        newState.descriptor(),
      ),
      op,
    );
  if (s.kernelMap) withKernelMap(op, s.kernelMap, call);
  else withPlanner(op, call);
  scope.release();
  return { output, newState };
}
