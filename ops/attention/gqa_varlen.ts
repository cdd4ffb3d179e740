/**
 * `GroupedQueryAttentionPrefillVarlenFwdOp`: packed variable-length GQA prefill (layout `"thd"`).
 * Causal prefill is bottom-right aligned per sequence: key j is visible to query i iff
 * `j <= i + (kv_len - q_len)`.
 *
 * @module
 */
import type { Layout } from "../layout.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import {
  expectSize,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import {
  checkPackedSizes,
  DTypePin,
  expectBoolean,
  expectMaxSeqlen,
  expectOptions,
  expectPackedCall,
  packedLayout,
  type PackedSizes,
} from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";
import { packedSources } from "./sources.ts";

/** Options of {@link GroupedQueryAttentionPrefillVarlenFwdOp}. */
export interface GroupedQueryAttentionPrefillVarlenFwdOptions extends PackedSizes, ScoreOptions {
  /** `"thd"`: packed `[totalTokens, heads, dim]` (required, so every call names its layout). */
  layout: Extract<Layout, "thd">;
  /** Longest query sequence a call may hold (checked when `validateInputs`). */
  maxSeqlenQ: number;
  /** Longest key sequence a call may hold (checked when `validateInputs`). */
  maxSeqlenK: number;
  /** Causal mask, bottom-right aligned per sequence (default false). */
  isCausal?: boolean;
  /**
   * Check the max lengths against the offsets (default false; reads device offsets on the host). The
   * native entry checks the offsets (start 0, nondecreasing, last = token count) on every call
   * regardless.
   */
  validateInputs?: boolean;
}

/**
 * Packed varlen GQA prefill: q `[totalQ, heads, dim]`, k and v `[totalK, headsKv, dim]`,
 * `cuSeqlensQ` / `cuSeqlensK` `[batch + 1]` (host numbers, or int32 / int64 tensors on q's device).
 * Returns the output `[totalQ, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionPrefillVarlenFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionPrefillVarlenFwdOp({
 *   layout: "thd", batch: 3, heads: 8, headsKv: 1, dim: 128, maxSeqlenQ: 64, maxSeqlenK: 64,
 *   isCausal: true, validateInputs: true,
 * });
 * using q = Tensor.randn([100, 8, 128], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([100, 1, 128], { dtype: "bfloat16", seed: 2 });
 * const cu = [0, 1, 40, 100]; // three sequences: 1, 39 and 60 tokens
 * using o = op.forward(q, kv, kv, cu, cu);
 * ```
 */
export class GroupedQueryAttentionPrefillVarlenFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<PackedSizes>;
  /** `"thd"`. */
  readonly layout: Extract<Layout, "thd">;
  /** Longest query sequence (checked when validateInputs). */
  readonly maxSeqlenQ: number;
  /** Longest key sequence (checked when validateInputs). */
  readonly maxSeqlenK: number;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale and softcap. */
  readonly score: ResolvedScore;
  /** Whether calls check the max lengths against the offsets. */
  readonly validateInputs: boolean;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionPrefillVarlenFwdOptions) {
    const op = "GroupedQueryAttentionPrefillVarlenFwdOp";
    options = expectOptions(op, options);
    this.sizes = checkPackedSizes(op, options);
    this.layout = packedLayout(op, options.layout);
    this.maxSeqlenQ = expectSize(op, "maxSeqlenQ", options.maxSeqlenQ, 0);
    this.maxSeqlenK = expectSize(op, "maxSeqlenK", options.maxSeqlenK, 0);
    this.mask = resolveMask(op, { isCausal: expectBoolean(op, "isCausal", options.isCausal, false) });
    this.score = resolveScore(op, options);
    this.validateInputs = expectBoolean(op, "validateInputs", options.validateInputs, false);
  }

  /** Runs the forward; `out` may supply the output buffer (the returned output is the caller's). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cuSeqlensQ: CuSeqlens,
    cuSeqlensK: CuSeqlens,
    out?: ForwardBuffers,
  ): Tensor {
    const op = "GroupedQueryAttentionPrefillVarlenFwdOp";
    using cu = expectPackedCall(op, this.sizes, { q, k, v, cuSeqlensQ, cuSeqlensK });
    this.#pin.check(op, q);
    if (this.validateInputs) {
      expectMaxSeqlen(op, "cuSeqlensQ", cu.q, "maxSeqlenQ", this.maxSeqlenQ);
      expectMaxSeqlen(op, "cuSeqlensK", cu.k, "maxSeqlenK", this.maxSeqlenK);
    }
    return runForward({
      op,
      ...packedSources(q, k, v, cu),
      mask: this.mask,
      score: this.score,
      out,
    }, false).output;
  }
}
