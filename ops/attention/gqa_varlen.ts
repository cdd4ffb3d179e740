/**
 * `GroupedQueryAttentionPrefillVarlenFwdOp` of seed 001: packed variable-length GQA prefill (THD).
 * Causal prefill is bottom-right aligned per sequence: key j is visible to query i iff
 * `j <= i + (kv_len - q_len)`.
 *
 * @module
 */
import type { Tensor } from "../tensor.ts";
import {
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import { expectSize } from "./options.ts";
import {
  checkPackedSizes,
  DTypePin,
  expectBoolean,
  expectMaxSeqlen,
  expectPackedCall,
  type PackedSizes,
} from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";

/** Options of {@link GroupedQueryAttentionPrefillVarlenFwdOp}. */
export interface GroupedQueryAttentionPrefillVarlenFwdOptions extends PackedSizes, ScoreOptions {
  /** Longest query sequence a call may hold (checked when `validateInputs`). */
  maxSeqlenQ: number;
  /** Longest key sequence a call may hold (checked when `validateInputs`). */
  maxSeqlenKv: number;
  /** Causal mask, bottom-right aligned per sequence (default true). */
  isCausal?: boolean;
  /**
   * Read cu_seqlens on the host and check the max lengths (default false). The native entry checks
   * cu_seqlens (start 0, nondecreasing, last = token count) on every call regardless.
   */
  validateInputs?: boolean;
}

/**
 * Packed varlen GQA prefill: q `[totalQ, heads, dim]`, k and v `[totalKv, headsKv, dim]`,
 * `cuSeqlensQ` / `cuSeqlensKv` int32 `[batch + 1]` on q's device. Returns the output
 * `[totalQ, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionPrefillVarlenFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionPrefillVarlenFwdOp({
 *   batch: 3, heads: 8, headsKv: 1, dim: 128, maxSeqlenQ: 64, maxSeqlenKv: 64, validateInputs: true,
 * });
 * using q = Tensor.randn([100, 8, 128], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([100, 1, 128], { dtype: "bfloat16", seed: 2 });
 * using cu = Tensor.from(new Int32Array([0, 1, 40, 100]));
 * using o = op.forward(q, kv, kv, cu, cu);
 * ```
 */
export class GroupedQueryAttentionPrefillVarlenFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<PackedSizes>;
  /** Longest query sequence (checked when validateInputs). */
  readonly maxSeqlenQ: number;
  /** Longest key sequence (checked when validateInputs). */
  readonly maxSeqlenKv: number;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale and softcap. */
  readonly score: ResolvedScore;
  /** Whether calls read cu_seqlens to check the max lengths. */
  readonly validateInputs: boolean;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionPrefillVarlenFwdOptions) {
    const op = "GroupedQueryAttentionPrefillVarlenFwdOp";
    this.sizes = checkPackedSizes(op, options);
    this.maxSeqlenQ = expectSize(op, "maxSeqlenQ", options.maxSeqlenQ, 0);
    this.maxSeqlenKv = expectSize(op, "maxSeqlenKv", options.maxSeqlenKv, 0);
    this.mask = resolveMask(op, { isCausal: expectBoolean(op, "isCausal", options.isCausal, true) }, true);
    this.score = resolveScore(op, options);
    this.validateInputs = expectBoolean(op, "validateInputs", options.validateInputs, false);
  }

  /** Runs the forward; `out` may supply the output buffer. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cuSeqlensQ: Tensor,
    cuSeqlensKv: Tensor,
    out?: ForwardBuffers,
  ): Tensor {
    const op = "GroupedQueryAttentionPrefillVarlenFwdOp";
    expectPackedCall(op, this.sizes, { q, k, v, cuSeqlensQ, cuSeqlensKv });
    this.#pin.check(op, q);
    if (this.validateInputs) {
      expectMaxSeqlen(op, "cuSeqlensQ", cuSeqlensQ, "maxSeqlenQ", this.maxSeqlenQ);
      expectMaxSeqlen(op, "cuSeqlensKv", cuSeqlensKv, "maxSeqlenKv", this.maxSeqlenKv);
    }
    return runForward({
      op,
      query: { kind: "packed", q, cuSeqlens: cuSeqlensQ },
      kv: { kind: "packed", k, v, cuSeqlens: cuSeqlensKv },
      mask: this.mask,
      score: this.score,
      out,
    }, false).output;
  }
}
