/**
 * Linear attention, flash-linear-attention's `chunk_linear_attn` with an explicit layout: per value
 * head `S <- S + k_t v_t^T`, `o_t = S^T (scale q_t)` (no decay), and with `normalize` each output
 * divided by `z_t + 1e-10`, `z_t = scale q_t . (k_1 + ... + k_t)` summed over the tokens of the
 * token's own sequence (the initial state carries no key sum).
 *
 * The forward divides in the kernel where it can (one native call: the CPU backend, and on CUDA the
 * split state kernel at bfloat16, K = V = 128, which carries the keys' sum beside the state). Elsewhere
 * the normaliser is computed outside the kernel, as FLA does, but in float32 on the device: `z` is
 * linear attention itself with values of ones (`V = 1`), which also keeps packed sequences apart.
 * Its backward is derived by hand: with `n = z + eps`, `o' = o / n`,
 * `do = dO' / n` and `dz = -sum_V(dO' * o') / n`; dq and dk add the gradients of both products,
 * which run in float32 for 16-bit inputs (their sum is a difference of terms larger than itself).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions } from "../args.ts";
import { expectSameDevice, expectSameDType, expectTensor } from "../checks.ts";
import type { Device } from "../device.ts";
import { explain } from "../kernels.ts";
import { Tensor } from "../tensor.ts";
import {
  BACKWARD_OPTIONS,
  FORWARD_OPTIONS,
  type GlaBackwardOptions,
  type GlaEngine,
  type GlaGradients,
  type GlaOptions,
  type GlaResult,
  KERNEL,
  parseOptions,
  runBackward,
  runForward,
} from "./gla_functional.ts";
import {
  checkGlaCall,
  glaBackward,
  type GlaBackwardExtras,
  type GlaBackwardOutputs,
  glaForward,
  type GlaForwardOutputs,
  type GlaForwardWants,
  type GlaInputs,
  type GlaSettings,
} from "./gla_native.ts";
import { expectInLayout, provided } from "./delta_native.ts";
import { sequencePattern } from "./layouts.ts";
import { TensorScope } from "./scope.ts";

/** Options of {@link chunkLinearAttn}. */
export interface LinearAttnOptions extends GlaOptions {
  /** Divide each output by `scale q_t . sum_{s <= t} k_s + 1e-10` (default false). */
  normalize?: boolean;
}

/** Options of {@link chunkLinearAttnBackward}. */
export interface LinearAttnBackwardOptions extends GlaBackwardOptions {
  /** The forward's `normalize`. */
  normalize?: boolean;
}

const NORMALIZE = { normalize: "boolean" } as const;
/** Added to the normaliser (FLA's epsilon). */
const NORMALIZE_EPS = 1e-10;
const GRADIENT_BUFFERS = { dq: "any", dk: "any", dv: "any", dInitialState: "any" } as const;

/**
 * The kernel's output buffer for a packed call: zeros, so that the rows past the last offset, which the
 * kernel leaves as they are, hold zeros rather than memory nothing wrote (the elementwise steps below read
 * every row). Undefined for a fixed-length call, which writes every row.
 */
function packedOutput(
  scope: TensorScope,
  s: GlaSettings,
  like: Tensor,
  dtype: Tensor["dtype"],
): Tensor | undefined {
  if (s.cuSeqlens === undefined) return undefined;
  return scope.temp(Tensor.zeros(like.shape, { dtype, device: like.device }));
}

/** The unnormalised output (owned by the scope). */
function rawOutput(
  op: string,
  scope: TensorScope,
  inputs: GlaInputs,
  s: GlaSettings,
  wants: GlaForwardWants,
  finalState?: Tensor,
): { output: Tensor; finalState?: Tensor } {
  const given = packedOutput(scope, s, inputs.v, inputs.q.dtype);
  const raw = glaForward(op, inputs, s, wants, { finalState, output: given });
  if (!given) scope.temp(raw.output);
  return raw;
}

/** `z + eps` as float32 in the layout's `[.., H, 1]` shape: linear attention of q, k over ones. */
function normaliser(op: string, scope: TensorScope, inputs: GlaInputs, s: GlaSettings): Tensor {
  const { q, k, v } = inputs;
  const f32 = (t: Tensor) => t.dtype === "float32" ? t : scope.temp(t.cast("float32"));
  const onesShape = [...v.shape.slice(0, 3), 1];
  const ones = scope.temp(Tensor.ones(onesShape, { dtype: "float32", device: v.device }));
  const plain = { layout: s.layout, scale: s.scale, recurrent: s.recurrent, cuSeqlens: s.cuSeqlens };
  const z = rawOutput(op, scope, { q: f32(q), k: f32(k), v: ones }, plain, {}).output;
  return scope.temp(z.add(NORMALIZE_EPS));
}

/** A float32 view of the tensor: itself, or a cast owned by the scope. */
function f32(scope: TensorScope, t: Tensor): Tensor {
  return t.dtype === "float32" ? t : scope.temp(t.cast("float32"));
}

/** Writes `value` (float32) as the result: into the caller's buffer, else a new tensor of `dtype`. */
function emit(scope: TensorScope, value: Tensor, dtype: Tensor["dtype"], given: Tensor | undefined): Tensor {
  if (given) return given.copyFrom(value);
  return scope.result(value.dtype === dtype ? scope.keep(value) : value.cast(dtype));
}

/** Planner answers by call shape: whether the normaliser runs inside the kernel on that device. */
const fusedByShape = new Map<string, boolean>();

/** A normalised forward as the planner sees it. */
export interface NormalisedCall {
  device: Device;
  dtype: Tensor["dtype"];
  /** Key (feature) and value head dims. */
  K: number;
  V: number;
  /** Sequences and value heads. */
  N: number;
  H: number;
  recurrent: boolean;
  chunkStates: boolean;
}

/** Whether one native call gives the normalised output (always on the CPU backend). */
export function fusedNormaliser(c: NormalisedCall): boolean {
  if (c.device === "cpu") return true;
  const query = {
    op: "linear.gla.fwd",
    device: c.device,
    dtype: c.dtype as "bfloat16",
    k: c.K,
    v: c.V,
    b: c.N,
    h: c.H,
    channel: false,
    recurrent: c.recurrent,
    normalize: true,
    chunkStates: c.chunkStates,
  } as const;
  const key = JSON.stringify(query);
  let fused = fusedByShape.get(key);
  if (fused === undefined) {
    fused = explain(query).path === "state_split";
    fusedByShape.set(key, fused);
  }
  return fused;
}

/** Linear attention with the normaliser: the kernel's output divided by `z + eps`. */
const NORMALIZED: GlaEngine = {
  forward(op, inputs, s, wants: GlaForwardWants, out): GlaForwardOutputs {
    const { B, T, H, K, V, N } = checkGlaCall(op, inputs, s);
    const { device, dtype } = inputs.q;
    if (
      fusedNormaliser({ device, dtype, K, V, N, H, recurrent: s.recurrent, chunkStates: !!wants.chunkStates })
    ) {
      return glaForward(op, inputs, s, { ...wants, normalizeEps: NORMALIZE_EPS }, out);
    }
    const q = inputs.q;
    const shape = s.layout === "bshd" ? [B, T, H, V] : [B, H, T, V];
    const given = provided(op, "output", out?.output, shape, q.dtype, q.device);
    using scope = new TensorScope();
    const raw = rawOutput(op, scope, inputs, s, wants, out?.finalState);
    if (raw.finalState && raw.finalState !== out?.finalState) scope.result(raw.finalState);
    const n = normaliser(op, scope, inputs, s);
    const normalized = scope.temp(f32(scope, raw.output).div(n));
    const output = emit(scope, normalized, q.dtype, given);
    scope.release();
    return { output, finalState: raw.finalState };
  },
  backward(op, inputs, s, dOutput, extras: GlaBackwardExtras): GlaBackwardOutputs {
    const { B, T, H, HK, K, V } = checkGlaCall(op, inputs, s);
    const q = inputs.q;
    const dOut = expectTensor(op, "dOutput", dOutput);
    expectSameDType(op, "dOutput", dOut, q, "q");
    expectSameDevice(op, "dOutput", dOut, q, "q");
    expectInLayout(op, "dOutput", dOut, s.layout, sequencePattern(s.layout, "H", "V"), { B, T, H, V });
    const out = checkOptions<Record<keyof typeof GRADIENT_BUFFERS, Tensor | undefined>>(
      op,
      extras.out ?? undefined,
      GRADIENT_BUFFERS,
      "out",
    );
    const qkShape = s.layout === "bshd" ? [B, T, HK, K] : [B, HK, T, K];
    const givenDq = provided(op, "dq", out.dq, qkShape, q.dtype, q.device);
    const givenDk = provided(op, "dk", out.dk, qkShape, q.dtype, q.device);
    const vShape = s.layout === "bshd" ? [B, T, H, V] : [B, H, T, V];
    const givenDv = provided(op, "dv", out.dv, vShape, q.dtype, q.device);
    using scope = new TensorScope();
    // Recompute the unnormalised output and the normaliser (both cheap next to the backward).
    // dq and dk are differences of two products a few times their size, so everything here runs in
    // float32 and the sum is rounded once: a 16-bit rounding of either product, or of the output the
    // second one is weighted by, would be multiplied by that ratio.
    const wide = { ...inputs, q: f32(scope, q), k: f32(scope, inputs.k), v: f32(scope, inputs.v) };
    const raw = rawOutput(op, scope, wide, s, {}).output;
    const n = normaliser(op, scope, wide, s);
    const dO = f32(scope, dOut);
    const normalized = scope.temp(raw.div(n));
    const dRaw = scope.temp(dO.div(n));
    const dotted = scope.temp(scope.temp(dO.mul(normalized)).sum(-1, { keepDim: true }));
    const dz = scope.temp(scope.temp(dotted.div(n)).neg());
    const narrow = q.dtype !== "float32";
    const main = glaBackward(op, wide, s, dRaw, {
      ...extras,
      out: { dv: narrow ? undefined : givenDv, dInitialState: out.dInitialState },
    });
    scope.temp(main.dq), scope.temp(main.dk);
    let dv = main.dv;
    if (narrow) dv = emit(scope, scope.temp(main.dv), q.dtype, givenDv);
    else if (dv !== givenDv) scope.result(dv);
    if (main.dInitialState && main.dInitialState !== out.dInitialState) scope.result(main.dInitialState);
    const ones = scope.temp(Tensor.ones(dz.shape, { dtype: "float32", device: q.device }));
    const plain = { layout: s.layout, scale: s.scale, recurrent: s.recurrent, cuSeqlens: s.cuSeqlens };
    const z = glaBackward(op, { q: wide.q, k: wide.k, v: ones }, plain, dz);
    for (const t of [z.dq, z.dk, z.dv]) scope.temp(t);
    const dq = emit(scope, scope.temp(f32(scope, main.dq).add(z.dq)), q.dtype, givenDq);
    const dk = emit(scope, scope.temp(f32(scope, main.dk).add(z.dk)), q.dtype, givenDk);
    scope.release();
    return { dq, dk, dv, dInitialState: main.dInitialState };
  },
};

function engineOf(op: string, normalize: unknown): GlaEngine {
  if (normalize !== undefined && typeof normalize !== "boolean") {
    throw invalidArgument(op, `normalize: expected a boolean, got ${typeof normalize}`);
  }
  return normalize ? NORMALIZED : KERNEL;
}

/**
 * Linear attention, chunked, with the optional normaliser of FLA's `normalize`.
 *
 * @example
 * ```ts
 * import { chunkLinearAttn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.rand([1, 100, 2, 32]); // positive features keep the normaliser away from 0
 * using k = Tensor.rand([1, 100, 2, 32]);
 * using v = Tensor.randn([1, 100, 2, 32]);
 * using r = chunkLinearAttn(q, k, v, { layout: "bshd", normalize: true, outputFinalState: true });
 * using dO = Tensor.randn([1, 100, 2, 32]);
 * using grads = r.backward(dO);
 * console.log(grads.dq.shape); // [1, 100, 2, 32]
 * ```
 */
export function chunkLinearAttn(q: Tensor, k: Tensor, v: Tensor, options: LinearAttnOptions): GlaResult {
  const op = "chunkLinearAttn";
  const { o, s } = parseOptions<LinearAttnOptions>(op, options, { ...FORWARD_OPTIONS, ...NORMALIZE }, false);
  return runForward({
    op,
    inputs: { q, k, v },
    s,
    outputFinalState: o.outputFinalState ?? false,
    out: o.out,
    engine: engineOf(op, o.normalize),
    callerTensors: { q, k, v },
  });
}

/**
 * Gradients of {@link chunkLinearAttn} from `dOutput` (first) and an optional `dFinalState`, with
 * the forward's inputs and options (`normalize` included).
 *
 * @example
 * ```ts
 * import { chunkLinearAttnBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.rand([1, 40, 2, 16]);
 * using k = Tensor.rand([1, 40, 2, 16]);
 * using v = Tensor.randn([1, 40, 2, 16]);
 * using dO = Tensor.randn([1, 40, 2, 16]);
 * using grads = chunkLinearAttnBackward(dO, q, k, v, { layout: "bshd", normalize: true });
 * console.log(grads.dk.shape); // [1, 40, 2, 16]
 * ```
 */
export function chunkLinearAttnBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: LinearAttnBackwardOptions,
): GlaGradients {
  const op = "chunkLinearAttnBackward";
  const { o, s } = parseOptions<LinearAttnBackwardOptions>(
    op,
    options,
    { ...BACKWARD_OPTIONS, ...NORMALIZE },
    false,
  );
  return runBackward(op, { q, k, v }, s, dOutput, o, engineOf(op, o.normalize));
}
