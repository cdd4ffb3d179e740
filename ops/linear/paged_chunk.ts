/**
 * Chunked prefill on a paged state pool (inference only): {@link pagedChunkKda} and
 * {@link pagedChunkGdn} read each sequence's state from `stateCache [numSlots, H, V, K]` (float32 or
 * bfloat16), run the chunked forward over its tokens and write the state after the last token back in
 * place, so a decode step ({@link recurrentKdaDecode}, {@link recurrentGdnDecode}) can continue from the
 * same slot. `stateIndices[n]` names sequence n's slot (<= 0: padding, zero output rows, no slot
 * touched); `hasInitialState[n] = false` starts from zero without reading the slot.
 *
 * `pagedChunkGdn` is one native call: on CUDA its state kernels read and write float32 slots in place,
 * otherwise the slots are gathered and scattered around the forward. `pagedChunkKda` runs the training op
 * between a gather and a scatter (pool_run.ts). Either first reads the `[N]` indices back once to refuse an
 * index past the pool or a slot named twice (unless `checkIndices` is false), and zeroes the padding
 * sequences' rows where they live.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectTensor } from "../checks.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import { checkScale } from "./delta_native.ts";
import { chunkGatedDeltaRule, chunkGatedDeltaRuleOnPool } from "./delta_rule.ts";
import { chunkKda } from "./kda.ts";
import { checkPool, type Pool, type PoolOptions, runOnPool } from "./pool_run.ts";
import { checkReplay, type ReplayForward, type ReplayState, runWithReplay } from "./replay_state.ts";

/** Options of {@link pagedChunkKda} and {@link pagedChunkGdn}. */
export interface PagedChunkOptions extends PoolOptions {
  /** Packed sequences in a batch of one: `[N + 1]` offsets (the last may stay below T). */
  cuSeqlens?: CuSeqlens;
  /** The query scale (default `1 / sqrt(K)`). */
  scale?: number;
  /**
   * Zero-drift serving: the {@link ReplayState} of this pool. The pool then holds each slot's float32 state
   * after its last complete 64-token chunk and the replay state the tokens since; each call replays a slot's
   * cached tokens before its new ones, so prefill followed by one-token calls (decode) gives the bits the
   * training op gives on the whole sequence (same kernels, a float32 pool). q, k, v must have the caches'
   * dtype and the gate and beta float32. The call plans on the device and can be captured in a graph; an
   * eager call first reads the indices, offsets and counts back to refuse bad ones (unless `checkIndices`
   * is false). A captured call sees no lengths: with few long sequences the state pass may then be split
   * differently from an eager call (see `captureGraph`).
   */
  replayState?: ReplayState;
}

/** Options of {@link pagedChunkGdn}: also the in-kernel q/k L2 norm. */
export interface PagedChunkGdnOptions extends PagedChunkOptions {
  /** L2-normalise q and k in the kernel (default false). */
  useQkL2norm?: boolean;
}

const SPEC: OptionSpec = {
  cuSeqlens: "any",
  hasInitialState: "any",
  scale: "any",
  checkIndices: "boolean",
  replayState: "any",
};
const GDN_SPEC: OptionSpec = { ...SPEC, useQkL2norm: "boolean" };

/**
 * KDA's chunked forward over a paged state pool, advancing each sequence's slot in place (inference
 * only). Inputs as {@link chunkKda} takes them in `"bshd"`: q, k `[B, T, HK, K]`, v `[B, T, H, V]`, gate
 * `[B, T, H, K]` (per-token natural-log decays, float32), beta `[B, T, H]` (float32).
 *
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place.
 * @param stateIndices `[N]` int32: sequence n's slot (N = B, or the packed sequences); <= 0 is padding.
 * @returns The output `[B, T, H, V]` in q's dtype (rows past the last packed offset unspecified).
 *
 * @example
 * ```ts
 * import { pagedChunkKda, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 40, 2, 16]);
 * using k = Tensor.randn([2, 40, 2, 16], { std: 0.25 });
 * using v = Tensor.randn([2, 40, 2, 16]);
 * using gate = Tensor.rand([2, 40, 2, 16], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([2, 40, 2]);
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([2, 3], { dtype: "int32" });
 * using o = pagedChunkKda(q, k, v, gate, beta, pool, slots);
 * console.log(o.shape); // [2, 40, 2, 16]
 * ```
 */
export function pagedChunkKda(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: PagedChunkOptions = {},
): Tensor {
  const op = "pagedChunkKda";
  const o = checkOptions<PagedChunkOptions>(op, options, SPEC);
  const qt = expectTensor(op, "q", q), vt = expectTensor(op, "v", v);
  if (qt.ndim !== 4) throw invalidArgument(op, `q: expected [B, T, HK, K], got [${qt.shape.join(", ")}]`);
  const p = checkPool(op, qt, vt, stateCache, stateIndices, o);
  const scale = checkScale(op, o.scale ?? undefined, p.K);
  if (o.replayState !== undefined && o.replayState !== null) {
    return replayed(
      op,
      [qt, k, vt, gate, beta, "gate"],
      p,
      o,
      false,
      (t, initial, cu) =>
        chunkKda(t.q, t.k, t.v, t.gate, t.beta, {
          layout: "bshd",
          initialState: initial,
          stateLayout: "vk",
          outputFinalState: true,
          cuSeqlens: cu,
          scale,
        }),
    );
  }
  return runOnPool(op, qt, p, o.cuSeqlens, false, (initial, output) =>
    chunkKda(qt, k, vt, gate, beta, {
      layout: "bshd",
      initialState: initial,
      stateLayout: "vk",
      outputFinalState: true,
      ...(o.cuSeqlens !== undefined ? { cuSeqlens: o.cuSeqlens } : {}),
      scale: checkScale(op, o.scale ?? undefined, p.K),
      out: { output },
    }));
}

/**
 * Gated DeltaNet's chunked forward over a paged state pool `[numSlots, H, V, K]`, advancing each
 * sequence's slot in place (inference only). Inputs as {@link chunkGatedDeltaRule} takes them in
 * `"bshd"`: q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g `[B, T, H]` and beta `[B, T, H]` (float32).
 *
 * @param stateCache `[numSlots, H, V, K]` float32 | bfloat16, advanced in place.
 * @param stateIndices `[N]` int32: sequence n's slot (N = B, or the packed sequences); <= 0 is padding.
 * @returns The output `[B, T, H, V]` in q's dtype (rows past the last packed offset unspecified).
 *
 * @example
 * ```ts
 * import { pagedChunkGdn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 30, 2, 16]);
 * using k = Tensor.randn([1, 30, 2, 16]);
 * using v = Tensor.randn([1, 30, 2, 16]);
 * using g = Tensor.rand([1, 30, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 30, 2]);
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([1, 0], { dtype: "int32" }); // the second sequence is padding
 * using o = pagedChunkGdn(q, k, v, g, beta, pool, slots, { cuSeqlens: [0, 20, 30], useQkL2norm: true });
 * console.log(o.shape); // [1, 30, 2, 16]
 * ```
 */
export function pagedChunkGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: PagedChunkGdnOptions = {},
): Tensor {
  const op = "pagedChunkGdn";
  const o = checkOptions<PagedChunkGdnOptions>(op, options, GDN_SPEC);
  const qt = expectTensor(op, "q", q), vt = expectTensor(op, "v", v);
  if (qt.ndim !== 4) throw invalidArgument(op, `q: expected [B, T, HK, K], got [${qt.shape.join(", ")}]`);
  const p = checkPool(op, qt, vt, stateCache, stateIndices, o);
  // The delta rule keeps states as [N, H, K, V]: the pool copies transpose on the way in and out.
  if (o.replayState !== undefined && o.replayState !== null) {
    const scale = checkScale(op, o.scale ?? undefined, p.K);
    return replayed(
      op,
      [qt, k, vt, g, beta, "g"],
      p,
      o,
      true,
      (t, initial, cu) =>
        chunkGatedDeltaRule(t.q, t.k, t.v, t.gate, t.beta, {
          layout: "bshd",
          initialState: initial,
          outputFinalState: true,
          useQkL2norm: o.useQkL2norm ?? false,
          cuSeqlens: cu,
          scale,
        }),
    );
  }
  // One native call: the slots are read and written by the state kernels (CUDA's fast path on a float32
  // pool), or gathered and scattered around the forward by the library.
  return chunkGatedDeltaRuleOnPool(op, { q: qt, k, v: vt, g, beta }, {
    cache: p.cache,
    indices: p.indices,
    hasInitialState: p.hasInitialState,
    trusted: !p.checkIndices,
  }, {
    ...(o.cuSeqlens !== undefined ? { cuSeqlens: o.cuSeqlens } : {}),
    scale: o.scale ?? undefined,
    useQkL2norm: o.useQkL2norm ?? false,
  });
}

/**
 * A paged call with a replay state: the inputs checked against it, then the replayed runs (replay_state.ts).
 * `kv`: the delta rule's `[N, H, K, V]` states (a per-head gate); else KDA's `[N, H, V, K]` (per channel).
 */
function replayed(
  op: string,
  [q, k, v, gate, beta, gateName]: [Tensor, unknown, Tensor, unknown, unknown, string],
  p: Pool,
  o: PagedChunkOptions,
  kv: boolean,
  forward: ReplayForward,
): Tensor {
  const x = {
    q,
    k: expectTensor(op, "k", k),
    v,
    gate: expectTensor(op, gateName, gate),
    beta: expectTensor(op, "beta", beta),
  };
  const r = checkReplay(op, o.replayState, x, p, !kv);
  return runWithReplay(op, x, p, o.cuSeqlens, kv, r, forward);
}
