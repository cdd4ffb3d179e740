/**
 * Gated linear attention (GLA), flash-linear-attention's `chunk_gla` and `fused_recurrent_gla` with
 * an explicit layout. Per value head the state S (`[K, V]`, float32) follows, for each token t:
 * `S <- diag(exp(gk_t)) S + k_t v_t^T` and `o_t = S^T (scale q_t)`, gk being a natural-log decay
 * per key channel (`[B, T, H, K]` in `"bshd"`, `[B, H, T, K]` in `"bhsd"`; any floating dtype, cast
 * to float32 on the device). q and k may have HK heads dividing the H value heads. Gradients: dq,
 * dk, dv in the dtype of q, dgk float32.
 *
 * @module
 */
import type { Tensor } from "../tensor.ts";
import {
  BACKWARD_OPTIONS,
  FORWARD_OPTIONS,
  type GlaBackwardOptions,
  type GlaGradients,
  type GlaOptions,
  type GlaResult,
  parseOptions,
  runBackward,
  runForward,
} from "./gla_functional.ts";

function forward(
  op: string,
  recurrent: boolean,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor,
  options: unknown,
) {
  const { o, s } = parseOptions<GlaOptions>(op, options, FORWARD_OPTIONS, recurrent);
  return runForward({
    op,
    inputs: { q, k, v, gk },
    s,
    outputFinalState: o.outputFinalState ?? false,
    out: o.out,
    callerTensors: { q, k, v, gk },
  });
}

function backward(
  op: string,
  recurrent: boolean,
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor,
  options: unknown,
): GlaGradients {
  const { o, s } = parseOptions<GlaBackwardOptions>(op, options, BACKWARD_OPTIONS, recurrent);
  return runBackward(op, { q, k, v, gk }, s, dOutput, o);
}

/**
 * Gated linear attention, chunked (chunks of 64 tokens; any T works).
 *
 * @example
 * ```ts
 * import { chunkGla, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 100, 2, 64]);
 * using k = Tensor.randn([1, 100, 2, 64], { std: 0.125 });
 * using v = Tensor.randn([1, 100, 2, 64]);
 * using gk = Tensor.rand([1, 100, 2, 64], { low: -0.2, high: 0 }); // log decays
 * using r = chunkGla(q, k, v, gk, { layout: "bshd", outputFinalState: true });
 * console.log(r.output.shape, r.finalState?.shape); // [1, 100, 2, 64] [1, 2, 64, 64]
 * using dO = Tensor.randn([1, 100, 2, 64]);
 * using grads = r.backward(dO);
 * console.log(grads.dgk?.dtype); // "float32"
 * ```
 */
export function chunkGla(q: Tensor, k: Tensor, v: Tensor, gk: Tensor, options: GlaOptions): GlaResult {
  return forward("chunkGla", false, q, k, v, gk, options);
}

/**
 * Gated linear attention, token by token (the same result as {@link chunkGla} up to rounding).
 *
 * @example
 * ```ts
 * import { recurrentGla, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 4, 16, 32]); // "bhsd": [batch, heads, seq, dim]
 * using k = Tensor.randn([2, 4, 16, 32]);
 * using v = Tensor.randn([2, 4, 16, 32]);
 * using gk = Tensor.rand([2, 4, 16, 32], { low: -0.5, high: 0 });
 * using r = recurrentGla(q, k, v, gk, { layout: "bhsd" });
 * console.log(r.output.shape); // [2, 4, 16, 32]
 * ```
 */
export function recurrentGla(q: Tensor, k: Tensor, v: Tensor, gk: Tensor, options: GlaOptions): GlaResult {
  return forward("recurrentGla", true, q, k, v, gk, options);
}

/**
 * Gradients of {@link chunkGla} from `dOutput` (first, shaped like the output) and an optional
 * `dFinalState`, with the forward's inputs and options. With `cuSeqlens`, the gradients of tokens
 * past the last sequence are zero.
 *
 * @example
 * ```ts
 * import { chunkGlaBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 32]);
 * using k = Tensor.randn([1, 40, 2, 32]);
 * using v = Tensor.randn([1, 40, 2, 32]);
 * using gk = Tensor.rand([1, 40, 2, 32], { low: -0.5, high: 0 });
 * using dO = Tensor.randn([1, 40, 2, 32]);
 * using grads = chunkGlaBackward(dO, q, k, v, gk, { layout: "bshd" });
 * console.log(grads.dq.shape, grads.dgk?.shape); // [1, 40, 2, 32] [1, 40, 2, 32]
 * ```
 */
export function chunkGlaBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor,
  options: GlaBackwardOptions,
): GlaGradients {
  return backward("chunkGlaBackward", false, dOutput, q, k, v, gk, options);
}

/**
 * Gradients of {@link recurrentGla}, output gradient first.
 *
 * @example
 * ```ts
 * import { recurrentGlaBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 10, 1, 16]);
 * using k = Tensor.randn([1, 10, 1, 16]);
 * using v = Tensor.randn([1, 10, 1, 16]);
 * using gk = Tensor.rand([1, 10, 1, 16], { low: -0.5, high: 0 });
 * using dO = Tensor.randn([1, 10, 1, 16]);
 * using grads = recurrentGlaBackward(dO, q, k, v, gk, { layout: "bshd" });
 * ```
 */
export function recurrentGlaBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor,
  options: GlaBackwardOptions,
): GlaGradients {
  return backward("recurrentGlaBackward", true, dOutput, q, k, v, gk, options);
}
