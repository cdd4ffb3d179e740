/**
 * Sliding-window GQA forward ops of seed 001: fixed length (BSHD, square) and varlen (packed THD).
 * A query at position p admits key j when every applicable condition holds: `j <= p` (isCausal),
 * `j >= p - windowSizeLeft` (left >= 0), `j <= p + windowSizeRight` (right >= 0). For varlen, p is
 * the row's local index plus `seqlen_k - seqlen_q` of its own sequence (bottom-right).
 *
 * @module
 */
import type { Tensor } from "../tensor.ts";
import {
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
} from "./options.ts";
import {
  checkPackedSizes,
  checkSquareSizes,
  DTypePin,
  expectBoolean,
  expectMaxSeqlen,
  expectPackedCall,
  expectSquareCall,
  type PackedSizes,
  type SquareSizes,
} from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";
import { expectSize } from "./options.ts";

/** Options of {@link GroupedQueryAttentionSlidingWindowFwdOp}: sizes and the mask (causal by default). */
export interface GroupedQueryAttentionSlidingWindowFwdOptions extends SquareSizes, MaskOptions {}

/**
 * Fixed-length sliding-window GQA forward: q `[batch, seqLen, heads, dim]`, k and v
 * `[batch, seqLen, headsKv, dim]`; returns the output `[batch, seqLen, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionSlidingWindowFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionSlidingWindowFwdOp({
 *   batch: 1, heads: 4, headsKv: 1, seqLen: 256, dim: 64, windowSizeLeft: 63,
 * });
 * using q = Tensor.randn([1, 256, 4, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 256, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using o = op.forward(q, kv, kv);
 * ```
 */
export class GroupedQueryAttentionSlidingWindowFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #score: ResolvedScore = resolveScore("GroupedQueryAttentionSlidingWindowFwdOp", {});
  readonly #pin = new DTypePin();

  /** Checks the sizes and the window once. */
  constructor(options: GroupedQueryAttentionSlidingWindowFwdOptions) {
    const op = "GroupedQueryAttentionSlidingWindowFwdOp";
    this.sizes = checkSquareSizes(op, options);
    this.mask = resolveMask(op, {
      ...options,
      isCausal: expectBoolean(op, "isCausal", options.isCausal, true),
    }, true);
  }

  /** Runs the forward; `out` may supply the output buffer. */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): Tensor {
    const op = "GroupedQueryAttentionSlidingWindowFwdOp";
    expectSquareCall(op, this.sizes, q, k, v);
    this.#pin.check(op, q);
    return runForward({
      op,
      query: { kind: "dense", q, layout: "bshd" },
      kv: { kind: "dense", k, v, layout: "bshd" },
      mask: this.mask,
      score: this.#score,
      out,
    }, false).output;
  }
}

/** Options of {@link GroupedQueryAttentionSlidingWindowVarlenFwdOp}: sizes and the mask (causal by default). */
export interface GroupedQueryAttentionSlidingWindowVarlenFwdOptions extends PackedSizes, MaskOptions {}

/**
 * Varlen sliding-window GQA forward on packed sequences: q `[totalQ, heads, dim]`, k and v
 * `[totalK, headsKv, dim]`, `cuSeqlensQ` / `cuSeqlensK` int32 `[batch + 1]` on q's device;
 * `maxSeqlenQ` is checked against the query lengths. Returns the output `[totalQ, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionSlidingWindowVarlenFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionSlidingWindowVarlenFwdOp({
 *   batch: 2, heads: 4, headsKv: 2, dim: 64, windowSizeLeft: 16,
 * });
 * using q = Tensor.randn([50, 4, 64], { dtype: "float16", seed: 1 });
 * using kv = Tensor.randn([50, 2, 64], { dtype: "float16", seed: 2 });
 * using cu = Tensor.from(new Int32Array([0, 20, 50]));
 * using o = op.forward(q, kv, kv, cu, cu, 30);
 * ```
 */
export class GroupedQueryAttentionSlidingWindowVarlenFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<PackedSizes>;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #score: ResolvedScore = resolveScore("GroupedQueryAttentionSlidingWindowVarlenFwdOp", {});
  readonly #pin = new DTypePin();

  /** Checks the sizes and the window once. */
  constructor(options: GroupedQueryAttentionSlidingWindowVarlenFwdOptions) {
    const op = "GroupedQueryAttentionSlidingWindowVarlenFwdOp";
    this.sizes = checkPackedSizes(op, options);
    this.mask = resolveMask(op, {
      ...options,
      isCausal: expectBoolean(op, "isCausal", options.isCausal, true),
    }, true);
  }

  /** Runs the forward; `out` may supply the output buffer. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cuSeqlensQ: Tensor,
    cuSeqlensK: Tensor,
    maxSeqlenQ: number,
    out?: ForwardBuffers,
  ): Tensor {
    const op = "GroupedQueryAttentionSlidingWindowVarlenFwdOp";
    expectPackedCall(op, this.sizes, { q, k, v, cuSeqlensQ, cuSeqlensKv: cuSeqlensK }, "cuSeqlensK");
    this.#pin.check(op, q);
    expectMaxSeqlen(op, "cuSeqlensQ", cuSeqlensQ, "maxSeqlenQ", expectSize(op, "maxSeqlenQ", maxSeqlenQ, 0));
    return runForward({
      op,
      query: { kind: "packed", q, cuSeqlens: cuSeqlensQ },
      kv: { kind: "packed", k, v, cuSeqlens: cuSeqlensK },
      mask: this.mask,
      score: this.#score,
      out,
    }, false).output;
  }
}
