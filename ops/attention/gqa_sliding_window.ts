/**
 * Sliding-window GQA forward ops: fixed length (square, `"bshd"` or `"bhsd"`) and varlen (packed,
 * `"thd"`). A query at position p admits key j when every applicable condition holds: `j <= p`
 * (isCausal), `j >= p - windowSizeLeft` (left >= 0), `j <= p + windowSizeRight` (right >= 0). For
 * varlen, p is the row's local index plus `seqlen_k - seqlen_q` of its own sequence (bottom-right).
 * As everywhere, `isCausal` defaults to false: a window open on the right (`windowSizeRight` -1, the
 * default) admits every later key, so a causal sliding window says `isCausal: true` (or
 * `windowSizeRight: 0`).
 *
 * @module
 */
import type { Layout } from "../layout.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import {
  expectSize,
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
} from "./options.ts";
import {
  checkPackedSizes,
  checkSquareSizes,
  denseLayout,
  DTypePin,
  expectMaxSeqlen,
  expectOptions,
  expectPackedCall,
  expectSquareCall,
  packedLayout,
  type PackedSizes,
  type SquareSizes,
} from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";
import { denseSources, packedSources } from "./sources.ts";

/** Options of {@link GroupedQueryAttentionSlidingWindowFwdOp}: layout (required), sizes and the mask. */
export interface GroupedQueryAttentionSlidingWindowFwdOptions extends SquareSizes, MaskOptions {
  /** Layout of q, k, v and the output: `"bshd"` or `"bhsd"` (required). */
  layout: Extract<Layout, "bshd" | "bhsd">;
}

/**
 * Fixed-length sliding-window GQA forward: q `[batch, seqLen, heads, dim]`, k and v
 * `[batch, seqLen, headsKv, dim]` (`"bshd"`; `"bhsd"` puts heads before seqLen); returns the output,
 * shaped like q.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionSlidingWindowFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionSlidingWindowFwdOp({
 *   layout: "bshd", batch: 1, heads: 4, headsKv: 1, seqLen: 256, dim: 64, isCausal: true, windowSizeLeft: 63,
 * });
 * using q = Tensor.randn([1, 256, 4, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 256, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using o = op.forward(q, kv, kv);
 * ```
 */
export class GroupedQueryAttentionSlidingWindowFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** Layout of every call's tensors. */
  readonly layout: Extract<Layout, "bshd" | "bhsd">;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #score: ResolvedScore = resolveScore("GroupedQueryAttentionSlidingWindowFwdOp", {});
  readonly #pin = new DTypePin();

  /** Checks the sizes, the layout and the window once. */
  constructor(options: GroupedQueryAttentionSlidingWindowFwdOptions) {
    const op = "GroupedQueryAttentionSlidingWindowFwdOp";
    options = expectOptions(op, options);
    this.sizes = checkSquareSizes(op, options);
    this.layout = denseLayout(op, options.layout);
    this.mask = resolveMask(op, options);
  }

  /** Runs the forward; `out` may supply the output buffer (the returned output is the caller's). */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): Tensor {
    const op = "GroupedQueryAttentionSlidingWindowFwdOp";
    expectSquareCall(op, this.sizes, this.layout, q, k, v);
    this.#pin.check(op, q);
    return runForward({
      op,
      ...denseSources(q, k, v, this.layout),
      mask: this.mask,
      score: this.#score,
      out,
    }, false).output;
  }
}

/** Options of {@link GroupedQueryAttentionSlidingWindowVarlenFwdOp}: layout `"thd"`, sizes and the mask. */
export interface GroupedQueryAttentionSlidingWindowVarlenFwdOptions extends PackedSizes, MaskOptions {
  /** `"thd"`: packed `[totalTokens, heads, dim]` (required, so every call names its layout). */
  layout: Extract<Layout, "thd">;
}

/**
 * Varlen sliding-window GQA forward on packed sequences: q `[totalQ, heads, dim]`, k and v
 * `[totalK, headsKv, dim]`, `cuSeqlensQ` / `cuSeqlensK` `[batch + 1]` (host numbers, or int32 / int64
 * tensors on q's device); `maxSeqlenQ` is checked against the query lengths. Returns the output
 * `[totalQ, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionSlidingWindowVarlenFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionSlidingWindowVarlenFwdOp({
 *   layout: "thd", batch: 2, heads: 4, headsKv: 2, dim: 64, isCausal: true, windowSizeLeft: 16,
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
  /** `"thd"`. */
  readonly layout: Extract<Layout, "thd">;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #score: ResolvedScore = resolveScore("GroupedQueryAttentionSlidingWindowVarlenFwdOp", {});
  readonly #pin = new DTypePin();

  /** Checks the sizes, the layout and the window once. */
  constructor(options: GroupedQueryAttentionSlidingWindowVarlenFwdOptions) {
    const op = "GroupedQueryAttentionSlidingWindowVarlenFwdOp";
    options = expectOptions(op, options);
    this.sizes = checkPackedSizes(op, options);
    this.layout = packedLayout(op, options.layout);
    this.mask = resolveMask(op, options);
  }

  /** Runs the forward; `out` may supply the output buffer (the returned output is the caller's). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cuSeqlensQ: CuSeqlens,
    cuSeqlensK: CuSeqlens,
    maxSeqlenQ: number,
    out?: ForwardBuffers,
  ): Tensor {
    const op = "GroupedQueryAttentionSlidingWindowVarlenFwdOp";
    const maxQ = expectSize(op, "maxSeqlenQ", maxSeqlenQ, 0);
    using cu = expectPackedCall(op, this.sizes, { q, k, v, cuSeqlensQ, cuSeqlensK });
    this.#pin.check(op, q);
    expectMaxSeqlen(op, "cuSeqlensQ", cu.q, "maxSeqlenQ", maxQ);
    return runForward({
      op,
      ...packedSources(q, k, v, cu),
      mask: this.mask,
      score: this.#score,
      out,
    }, false).output;
  }
}
