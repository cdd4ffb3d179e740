/**
 * KDA's bridge to the C entries: checks the arguments with the names the public API uses, reads
 * `"bhsd"` tensors in place through strided `[B, T, H, D]` views, casts gate and beta to float32 on
 * the device, converts `[N, H, V, K]` states to and from the kernels' `[N, H, K, V]`, allocates the
 * results and calls `ak_kda_fwd` / `ak_kda_bwd`.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { KdaFlags } from "../../ffi/symbols_linear.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { CuSeqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import type { DeltaCallOptions } from "./consistency.ts";
import {
  checkDOutput,
  checkHeadDims,
  checkHeads,
  checkScale,
  type DeltaSizes,
  expectInLayout,
  expectQkv,
  f32Result,
  GATE_DTYPES,
  qkvGradResults,
  rowsResult,
  scalarsF32,
  scalarsGrad,
  seqlensView,
  sequenceCount,
  tokenMajor,
} from "./delta_native.ts";
import { type LinearLayout, sequencePattern, warnIfLayoutLooksSwapped } from "./layouts.ts";
import { TensorScope } from "./scope.ts";

/**
 * The axis order of KDA's states (initial, final and their gradients): `"kv"` is attnkit's
 * `[N, H, K, V]` (flash-linear-attention's), `"vk"` is `[N, H, V, K]` (attention-gym's).
 *
 * @example
 * ```ts
 * import type { KdaStateLayout } from "@attnkit/attnkit";
 * const gym: KdaStateLayout = "vk"; // states [N, H, V, K]
 * ```
 */
export type KdaStateLayout = "kv" | "vk";

/** The tensors of one KDA call. */
export interface KdaInputs {
  /** Queries. */
  q: Tensor;
  /** Keys. */
  k: Tensor;
  /** Values. */
  v: Tensor;
  /** Natural-log decay per token, value head and key channel. */
  gate: Tensor;
  /** Write strength per token and value head. */
  beta: Tensor;
}

/** How to run one call. */
export interface KdaSettings {
  /** Memory order of q, k, v, gate, beta and the outputs. */
  layout: LinearLayout;
  /** Axis order of the states. */
  stateLayout: KdaStateLayout;
  /** Query scale; default K^-0.5. */
  scale?: number;
  /** Token-by-token algorithm. */
  recurrent: boolean;
  /** Approximate exponentials allowed. */
  fastmath: boolean;
  /** `"fused"`: the chunked kernels or an error; `"reference"`: the exact general path; default either. */
  impl?: "fused" | "reference";
  /** The initial state, in `stateLayout`, float32. */
  initialState?: Tensor;
  /** `[N + 1]` offsets of packed sequences (batch 1). */
  cuSeqlens?: CuSeqlens;
}

/** Caller-provided forward results. */
export type KdaForwardBuffers = Partial<Record<"output" | "finalState", Tensor>>;
/** Caller-provided gradient buffers (dgate and dbeta float32). */
export type KdaBackwardBuffers = Partial<
  Record<"dq" | "dk" | "dv" | "dgate" | "dbeta" | "dInitialState", Tensor>
>;

/** What the forward returns. */
export interface KdaForwardOutputs {
  /** Shaped like v, dtype of q. */
  output: Tensor;
  /** The state after each sequence, in the state layout, float32 (when asked). */
  finalState?: Tensor;
}

/** What the backward returns. */
export interface KdaBackwardOutputs {
  /** Gradient of q, its shape and dtype. */
  dq: Tensor;
  /** Gradient of k. */
  dk: Tensor;
  /** Gradient of v. */
  dv: Tensor;
  /** Gradient of gate, its shape, float32. */
  dgate: Tensor;
  /** Gradient of beta, its shape, float32. */
  dbeta: Tensor;
  /** Gradient of the initial state (when one was given), in the state layout. */
  dInitialState?: Tensor;
}

const FORWARD_BUFFERS: OptionSpec = { output: "any", finalState: "any" };
const BACKWARD_BUFFERS: OptionSpec = {
  dq: "any",
  dk: "any",
  dv: "any",
  dgate: "any",
  dbeta: "any",
  dInitialState: "any",
};

/** The shape of a state tensor in a state layout. */
export function stateShape(sizes: DeltaSizes, stateLayout: KdaStateLayout): number[] {
  const { N, H, K, V } = sizes;
  return stateLayout === "kv" ? [N, H, K, V] : [N, H, V, K];
}

function checkStateTensor(
  op: string,
  name: string,
  t: unknown,
  q: Tensor,
  sizes: DeltaSizes,
  s: KdaSettings,
) {
  const x = expectTensor(op, name, t);
  expectDType(op, name, x, ["float32"]);
  expectSameDevice(op, name, x, q, "q");
  try {
    expectShape(op, name, x, stateShape(sizes, s.stateLayout));
  } catch (e) {
    throw invalidArgument(
      op,
      `${(e as Error).message.slice(op.length + 2)} (stateLayout "${s.stateLayout}")`,
    );
  }
  return x;
}

/** Checks the tensors and settings of a forward or backward call; returns the sizes. */
export function checkKdaCall(op: string, inputs: KdaInputs, s: KdaSettings): DeltaSizes {
  const { q, k, v, gate, beta } = expectQkv(op, inputs, { gate: inputs.gate, beta: inputs.beta });
  expectDType(op, "gate", gate, GATE_DTYPES);
  expectDType(op, "beta", beta, GATE_DTYPES);
  for (const [name, t] of [["k", k], ["v", v], ["gate", gate], ["beta", beta]] as const) {
    expectSameDevice(op, name, t, q, "q");
  }
  const L = s.layout;
  const sizes = expectInLayout(op, "q", q, L, sequencePattern(L, "HK", "K"));
  expectInLayout(op, "k", k, L, sequencePattern(L, "HK", "K"), sizes);
  expectInLayout(op, "v", v, L, sequencePattern(L, "H", "V"), sizes);
  expectInLayout(op, "gate", gate, L, sequencePattern(L, "H", "K"), sizes);
  expectInLayout(op, "beta", beta, L, sequencePattern(L, "H"), sizes);
  const { B, T, H, HK, K, V } = sizes;
  checkHeads(op, HK, H);
  checkHeadDims(op, K, V);
  checkScale(op, s.scale, K);
  const N = sequenceCount(op, s.cuSeqlens, B, q);
  const all = { B, T, H, HK, K, V, N };
  if (s.initialState !== undefined) checkStateTensor(op, "initialState", s.initialState, q, all, s);
  warnIfLayoutLooksSwapped(op, L, T, HK);
  return all;
}

/** The options a backward must share with its forward, in the delta rule's terms (consistency.ts). */
export function kdaCallOptions(s: KdaSettings, K: number): DeltaCallOptions {
  return {
    layout: s.layout,
    useQkL2norm: false,
    scale: typeof s.scale === "number" ? s.scale : K ** -0.5,
    chunkSize: s.recurrent ? undefined : 64,
    initialState: s.initialState !== undefined,
    cuSeqlens: s.cuSeqlens !== undefined,
  };
}

// A [N, H, V, K] state seen as [N, H, K, V] (a transposed, strided view of its memory).
function kvView(t: Tensor, sizes: DeltaSizes): Uint8Array<ArrayBuffer> {
  const { N, H, K, V } = sizes;
  return t.viewDescriptor([N, H, K, V], [H * V * K, V * K, 1, K]);
}

// A state for the C side ([N, H, K, V] contiguous): the tensor itself, or a transposed copy.
function stateIn(op: string, scope: TensorScope, t: Tensor, sizes: DeltaSizes, s: KdaSettings) {
  if (s.stateLayout === "kv") return t.descriptor();
  const { N, H, K, V } = sizes;
  const kv = scope.temp(Tensor.empty([N, H, K, V], { dtype: "float32", device: t.device }));
  unwrap(native().ak_copy(kv.descriptor(), kvView(t, sizes)), op);
  return kv.descriptor();
}

// A state result in the state layout (the caller's buffer, else a new one), the [N, H, K, V] buffer
// the C side writes, and `finish`, which moves the values into the result when they differ.
function stateOut(
  op: string,
  scope: TensorScope,
  name: string,
  given: Tensor | undefined,
  sizes: DeltaSizes,
  s: KdaSettings,
  device: string,
) {
  const result = f32Result(op, scope, stateShape(sizes, s.stateLayout), device, name, given);
  if (s.stateLayout === "kv") return { result, written: result, finish: () => result };
  const { N, H, K, V } = sizes;
  const written = scope.temp(Tensor.empty([N, H, K, V], { dtype: "float32", device }));
  return {
    result,
    written,
    finish: () => {
      unwrap(native().ak_copy(kvView(result, sizes), written.descriptor()), op);
      return result;
    },
  };
}

// The descriptors of the inputs shared by the forward and the backward.
function prepareInputs(op: string, scope: TensorScope, inputs: KdaInputs, s: KdaSettings, sizes: DeltaSizes) {
  const cuSeqlens = seqlensView(op, scope, s.cuSeqlens, inputs.q.device);
  const gate = inputs.gate.dtype === "float32" ? inputs.gate : scope.temp(inputs.gate.cast("float32"));
  return {
    // The leading arguments of ak_kda_fwd and ak_kda_bwd, in their order.
    operands: [
      tokenMajor(inputs.q, s.layout),
      tokenMajor(inputs.k, s.layout),
      tokenMajor(inputs.v, s.layout),
      tokenMajor(gate, s.layout),
      scalarsF32(op, scope, inputs.beta, s.layout),
      s.initialState !== undefined ? stateIn(op, scope, s.initialState, sizes, s) : null,
      cuSeqlens,
    ] as const,
    scale: checkScale(op, s.scale, inputs.q.shape[3]), // K is the last dimension in both layouts
    flags: (s.recurrent ? KdaFlags.RECURRENT : 0) | (s.fastmath ? KdaFlags.FASTMATH : 0) |
      (s.impl === "fused" ? KdaFlags.IMPL_FUSED : s.impl === "reference" ? KdaFlags.IMPL_REFERENCE : 0),
  };
}

/**
 * Runs the forward. The output rows past the last packed sequence (`cuSeqlens[N]`) are left
 * unwritten. Results in `out` are the caller's; the others are new tensors.
 */
export function kdaForward(
  op: string,
  inputs: KdaInputs,
  s: KdaSettings,
  wants: { finalState?: boolean } = {},
  out?: KdaForwardBuffers,
): KdaForwardOutputs {
  out = checkOptions<KdaForwardBuffers>(op, out ?? undefined, FORWARD_BUFFERS, "out");
  const sizes = checkKdaCall(op, inputs, s);
  const { B, T, H, V } = sizes;
  const device = inputs.q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s, sizes);
  const dims = { B, T, heads: H, D: V };
  const output = rowsResult(op, scope, s.layout, dims, inputs.q.dtype, device, "output", out.output);
  const finalState = wants.finalState || out.finalState
    ? stateOut(op, scope, "finalState", out.finalState, sizes, s, device)
    : undefined;
  unwrap(
    native().ak_kda_fwd(
      ...x.operands,
      x.scale,
      x.flags,
      output.view,
      finalState?.written.descriptor() ?? null,
    ),
    op,
  );
  const result = { output: output.tensor, finalState: finalState?.finish() };
  scope.release();
  return result;
}

/**
 * Runs the backward: gradients of the forward with the same inputs and settings, from `dOutput`
 * (the output's layout and dtype) and an optional `dFinalState` (in the state layout). Gradient rows
 * of tokens past the last packed sequence are zero.
 */
export function kdaBackward(
  op: string,
  inputs: KdaInputs,
  s: KdaSettings,
  dOutput: Tensor,
  extras: { dFinalState?: Tensor; out?: KdaBackwardBuffers } = {},
): KdaBackwardOutputs {
  const out = checkOptions<KdaBackwardBuffers>(op, extras.out ?? undefined, BACKWARD_BUFFERS, "out");
  const sizes = checkKdaCall(op, inputs, s);
  const { B, T, H, K } = sizes;
  const q = inputs.q;
  const dO = checkDOutput(op, dOutput, q, s.layout, sizes);
  const dFinalState = extras.dFinalState ?? undefined;
  if (dFinalState !== undefined) checkStateTensor(op, "dFinalState", dFinalState, q, sizes, s);
  const device = q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s, sizes);
  const { dq, dk, dv } = qkvGradResults(op, scope, s.layout, sizes, q, out);
  const dgate = rowsResult(
    op,
    scope,
    s.layout,
    { B, T, heads: H, D: K },
    "float32",
    device,
    "dgate",
    out.dgate,
  );
  const dbeta = scalarsGrad(op, scope, s.layout, sizes, inputs.beta, "dbeta", out.dbeta);
  const dInitialState = s.initialState !== undefined
    ? stateOut(op, scope, "dInitialState", out.dInitialState, sizes, s, device)
    : undefined;
  unwrap(
    native().ak_kda_bwd(
      ...x.operands,
      tokenMajor(dO, s.layout),
      dFinalState !== undefined ? stateIn(op, scope, dFinalState, sizes, s) : null,
      x.scale,
      x.flags,
      dq.view,
      dk.view,
      dv.view,
      dgate.view,
      dbeta.view,
      dInitialState?.written.descriptor() ?? null,
    ),
    op,
  );
  const result = {
    dq: dq.tensor,
    dk: dk.tensor,
    dv: dv.tensor,
    dgate: dgate.tensor,
    dbeta: dbeta.finish(),
    dInitialState: dInitialState?.finish(),
  };
  scope.release();
  return result;
}
