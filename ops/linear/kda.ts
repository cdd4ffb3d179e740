/**
 * KDA (Kimi delta attention), attention-gym's and flash-linear-attention's `chunk_kda` and
 * `recurrent_kda` with an explicit layout: the gated delta rule with a natural-log decay per key
 * channel. Per value head the state S (`[K, V]`, float32) follows, for each token t:
 * `S <- diag(exp(gate_t)) S`, `u_t = beta_t (v_t - S^T k_t)`, `S <- S + k_t u_t^T`,
 * `o_t = S^T (scale q_t)` (scale defaults to `K ** -0.5`).
 *
 * Shapes: `"bshd"` q, k `[B, T, HK, K]`, v `[B, T, H, V]`, gate `[B, T, H, K]`, beta `[B, T, H]`;
 * `"bhsd"` the same with heads before tokens. q and k may have HK heads dividing the H value heads
 * (each block of H / HK consecutive value heads shares one q/k head); gate, beta and the state are per
 * value head. q, k, v share one dtype (float16, bfloat16 or float32); gate and beta may be any
 * floating dtype (cast to float32 on the device). States are float32, `[N, H, K, V]` by default or
 * `[N, H, V, K]` with `stateLayout: "vk"` (attention-gym's order) for the initial and final states
 * and their gradients.
 *
 * The gate: per-token values (not cumulated; the chunked form cumulates inside), finite and <= 0 (a
 * decay). The CPU backend and the CUDA general path run the exact recurrence in double for any value:
 * a positive gate grows the state and a large one overflows it to infinity, exactly as the recurrence
 * says. A kernel with a narrower supported range refuses a call outside it with an error, never
 * computes it wrongly.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectForwardTensorsLive } from "../checks.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import { checkAgainstForwards, rememberForward } from "./consistency.ts";
import {
  kdaBackward,
  type KdaBackwardBuffers,
  type KdaBackwardOutputs,
  kdaCallOptions,
  kdaForward,
  type KdaInputs,
  type KdaSettings,
  type KdaStateLayout,
} from "./kda_native.ts";
import { type LinearLayout, linearLayout } from "./layouts.ts";
import { callerBuffers, disposable, keepOffsets } from "./results.ts";
import { recurrentOnPool, type RecurrentPoolOptions, splitPoolOptions } from "./pool_run.ts";

/** Options of {@link chunkKda} and {@link recurrentKda}. */
export interface KdaOptions {
  /**
   * Required: `"bshd"` (q `[B, T, HK, K]`, gate `[B, T, H, K]`, beta `[B, T, H]`) or `"bhsd"`
   * (q `[B, HK, T, K]`, gate `[B, H, T, K]`, beta `[B, H, T]`); outputs come back in the same layout.
   */
  layout: LinearLayout;
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** State before the first token, float32, in `stateLayout` (default zeros). */
  initialState?: Tensor;
  /** Also return the state after the last token (default false). */
  outputFinalState?: boolean;
  /**
   * Offsets of packed sequences, `[N + 1]`: host numbers or an int32/int64 tensor on the device of q
   * (q must then have batch size 1). They start at 0, never decrease (a repeated offset is an empty
   * sequence, whose state passes through) and may end before T (fixed capacity: the output rows past
   * the end are left unwritten, their gradients are zero).
   */
  cuSeqlens?: CuSeqlens;
  /** `"kv"` (default): states `[N, H, K, V]`; `"vk"`: `[N, H, V, K]`, attention-gym's order. */
  stateLayout?: KdaStateLayout;
  /**
   * Allow approximate exponentials for the decays (default false). The CPU backend and the CUDA
   * general path compute exactly either way; a fast kernel would trade a few ulps of the decays (and
   * subnormal contributions) for speed.
   */
  fastmath?: boolean;
  /**
   * Which implementation runs (attention-gym's `impl`): `"fused"` the chunked CUDA kernels, and a call
   * they cannot serve (float32, K above 128, the token-by-token form, the CPU backend) is refused with
   * the reason; `"reference"` the exact float64 recurrence (the CPU backend; on CUDA over host copies).
   * Default: the planner picks, the kernels where they serve the call, else the reference. There is no
   * silent fallback from an explicit choice.
   */
  impl?: "fused" | "reference";
  /**
   * Buffers to write the results into instead of new tensors (exact shape, dtype and device);
   * `out.finalState` implies `outputFinalState`. They stay the caller's.
   */
  out?: { output?: Tensor; finalState?: Tensor };
}

/** Options of {@link chunkKdaBackward} and {@link recurrentKdaBackward}: the forward's, and the gradients'. */
export interface KdaBackwardOptions extends Omit<KdaOptions, "out" | "outputFinalState"> {
  /** Gradient of the final state, float32 in `stateLayout` (default zero). */
  dFinalState?: Tensor;
  /** Buffers for the gradients (exact shape, dtype and device; dgate and dbeta float32). */
  out?: KdaBackwardBuffers;
}

/** Options of a forward result's own {@link KdaResult.backward}. */
export interface KdaResultBackwardOptions {
  /** Gradient of the final state, float32 in the forward's `stateLayout` (default zero). */
  dFinalState?: Tensor;
  /** Buffers for the gradients, as in {@link KdaBackwardOptions.out}. */
  out?: KdaBackwardBuffers;
}

/** What the backward functions return; `using` disposes every tensor the library allocated. */
export interface KdaGradients extends Disposable {
  /** Shaped like q, dtype of q (summed over each group of value heads). */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like gate, float32. */
  dgate: Tensor;
  /** Shaped like beta, float32. */
  dbeta: Tensor;
  /** Float32 in the state layout, when `initialState` was given. */
  dInitialState?: Tensor;
}

/** What the forward functions return; `using` disposes the tensors the library allocated. */
export interface KdaResult extends Disposable {
  /** Shaped like v, dtype of q. With `cuSeqlens`, rows past the last sequence are unspecified. */
  output: Tensor;
  /** Float32 in the state layout when `outputFinalState` was set, else undefined. */
  finalState?: Tensor;
  /**
   * Gradients of this forward from the output's gradient, with the forward's inputs and options. The
   * result refers to the inputs (it does not copy them): one disposed since the forward is refused.
   */
  backward(dOutput: Tensor, options?: KdaResultBackwardOptions): KdaGradients;
}

const COMMON: OptionSpec = {
  layout: "any",
  scale: "any",
  initialState: "any",
  cuSeqlens: "any",
  stateLayout: ["kv", "vk"],
  fastmath: "boolean",
  impl: ["fused", "reference"],
  out: "object",
};
const FORWARD: OptionSpec = { ...COMMON, outputFinalState: "boolean" };
const BACKWARD: OptionSpec = { ...COMMON, dFinalState: "any" };
const RESULT_BACKWARD: OptionSpec = { dFinalState: "any", out: "object" };

// The state layout the last forward on a gate tensor used: a backward with the other one is refused
// (a square state would otherwise be read transposed without any error).
const stateLayouts = new WeakMap<Tensor, KdaStateLayout>();

function settings(op: string, recurrent: boolean, o: Partial<KdaBackwardOptions & KdaOptions>): KdaSettings {
  return {
    layout: linearLayout(op, o.layout),
    stateLayout: o.stateLayout ?? "kv",
    scale: o.scale ?? undefined,
    recurrent,
    fastmath: o.fastmath ?? false,
    impl: o.impl ?? undefined,
    initialState: o.initialState ?? undefined,
    cuSeqlens: o.cuSeqlens ?? undefined,
  };
}

function identity(x: KdaInputs) {
  return { q: x.q, k: x.k, v: x.v, g: x.gate, beta: x.beta };
}

function gradients(r: KdaBackwardOutputs, out: unknown): KdaGradients {
  return disposable(r, callerBuffers(out));
}

function forward(op: string, recurrent: boolean, x: KdaInputs, options: unknown): KdaResult {
  const o = checkOptions<KdaOptions>(op, options, FORWARD);
  const s = settings(op, recurrent, o);
  const r = kdaForward(op, x, s, { finalState: o.outputFinalState ?? false }, o.out ?? undefined);
  rememberForward(identity(x), kdaCallOptions(s, x.q.shape[3]));
  stateLayouts.set(x.gate, s.stateLayout);
  // The backward reruns with these: the caller's tensors (referenced) and a copy of host offsets.
  const kept = { ...s, cuSeqlens: keepOffsets(s.cuSeqlens) };
  let disposed = false;
  const result = disposable({ output: r.output, finalState: r.finalState }, callerBuffers(o.out), () => {
    disposed = true;
  });
  return Object.assign(result, {
    backward(dOutput: Tensor, options?: KdaResultBackwardOptions): KdaGradients {
      const bop = `${op}.backward`;
      const b = checkOptions<KdaResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      if (disposed) throw invalidArgument(bop, "the result was disposed");
      expectForwardTensorsLive(bop, { ...x, initialState: s.initialState, cuSeqlens: s.cuSeqlens });
      const g = kdaBackward(bop, x, kept, dOutput, { dFinalState: b.dFinalState ?? undefined, out: b.out });
      return gradients(g, b.out);
    },
  });
}

function backward(
  op: string,
  recurrent: boolean,
  dOutput: Tensor,
  x: KdaInputs,
  options: unknown,
): KdaGradients {
  const o = checkOptions<KdaBackwardOptions>(op, options, BACKWARD);
  const s = settings(op, recurrent, o);
  // A backward whose options contradict every forward seen on these inputs is refused, naming one.
  checkAgainstForwards(op, identity(x), kdaCallOptions(s, x.q?.shape?.[3] ?? 1));
  const seen = stateLayouts.get(x.gate);
  if (seen !== undefined && seen !== s.stateLayout) {
    throw invalidArgument(
      op,
      `stateLayout: the forward on these inputs ran with stateLayout "${seen}", this backward with ` +
        `"${s.stateLayout}"; pass the forward's options`,
    );
  }
  const g = kdaBackward(op, x, s, dOutput, { dFinalState: o.dFinalState ?? undefined, out: o.out });
  return gradients(g, o.out);
}

/**
 * KDA, chunked (the chunked and the token-by-token forms compute the same recurrence; any T works).
 * Returns the output (and the final state with `outputFinalState`) and runs its own backward.
 *
 * @example
 * ```ts
 * import { chunkKda, Tensor } from "@attnkit/attnkit";
 * const [B, T, H, D] = [1, 100, 2, 32];
 * using q = Tensor.randn([B, T, H, D]);
 * using k = Tensor.randn([B, T, H, D], { std: D ** -0.5 });
 * using v = Tensor.randn([B, T, H, D]);
 * using gate = Tensor.rand([B, T, H, D], { low: -0.5, high: 0 }); // log decays per key channel
 * using beta = Tensor.rand([B, T, H]);
 * using r = chunkKda(q, k, v, gate, beta, { layout: "bshd", outputFinalState: true });
 * console.log(r.output.shape, r.finalState?.shape); // [1, 100, 2, 32] [1, 2, 32, 32]
 * using dO = Tensor.randn([B, T, H, D]);
 * using grads = r.backward(dO);
 * console.log(grads.dgate.dtype, grads.dbeta.shape); // "float32" [1, 100, 2]
 * ```
 */
export function chunkKda(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: KdaOptions,
): KdaResult {
  return forward("chunkKda", false, { q, k, v, gate, beta }, options);
}

/**
 * KDA, token by token (the same result as {@link chunkKda} up to rounding).
 *
 * @example
 * ```ts
 * import { recurrentKda, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 4, 8, 16]); // "bhsd": [batch, heads, seq, dim]
 * using k = Tensor.randn([1, 4, 8, 16], { std: 0.25 });
 * using v = Tensor.randn([1, 4, 8, 16]);
 * using gate = Tensor.rand([1, 4, 8, 16], { low: -1, high: 0 });
 * using beta = Tensor.rand([1, 4, 8]);
 * using h0 = Tensor.randn([1, 4, 16, 16]); // [N, H, V, K] with stateLayout "vk"
 * using r = recurrentKda(q, k, v, gate, beta, { layout: "bhsd", initialState: h0, stateLayout: "vk" });
 * console.log(r.output.shape); // [1, 4, 8, 16]
 * ```
 */
export function recurrentKda(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: KdaOptions & RecurrentPoolOptions,
): KdaResult {
  const op = "recurrentKda";
  const { pool, rest } = splitPoolOptions(op, options);
  if (pool) {
    return recurrentOnPool(op, q, v, rest, pool, false, (o) => forward(op, true, { q, k, v, gate, beta }, o));
  }
  return forward(op, true, { q, k, v, gate, beta }, rest);
}

/**
 * Gradients of {@link chunkKda} from `dOutput` (first, shaped like the output) and an optional
 * `dFinalState`, with the forward's inputs and options: dq, dk, dv (dtype of q), dgate, dbeta
 * (float32) and dInitialState. With `cuSeqlens`, tokens past the last sequence get zero gradients.
 *
 * @example
 * ```ts
 * import { chunkKdaBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 16]);
 * using k = Tensor.randn([1, 40, 2, 16], { std: 0.25 });
 * using v = Tensor.randn([1, 40, 2, 16]);
 * using gate = Tensor.rand([1, 40, 2, 16], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 40, 2]);
 * using dO = Tensor.randn([1, 40, 2, 16]);
 * using g = chunkKdaBackward(dO, q, k, v, gate, beta, { layout: "bshd", cuSeqlens: [0, 15, 15, 40] });
 * console.log(g.dgate.shape); // [1, 40, 2, 16]
 * ```
 */
export function chunkKdaBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: KdaBackwardOptions,
): KdaGradients {
  return backward("chunkKdaBackward", false, dOutput, { q, k, v, gate, beta }, options);
}

/**
 * Gradients of {@link recurrentKda}, output gradient first.
 *
 * @example
 * ```ts
 * import { recurrentKdaBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 10, 1, 8]);
 * using k = Tensor.randn([2, 10, 1, 8]);
 * using v = Tensor.randn([2, 10, 1, 8]);
 * using gate = Tensor.rand([2, 10, 1, 8], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([2, 10, 1]);
 * using dO = Tensor.randn([2, 10, 1, 8]);
 * using g = recurrentKdaBackward(dO, q, k, v, gate, beta, { layout: "bshd" });
 * ```
 */
export function recurrentKdaBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: KdaBackwardOptions,
): KdaGradients {
  return backward("recurrentKdaBackward", true, dOutput, { q, k, v, gate, beta }, options);
}
