/**
 * Softmax attention: MHA and GQA, dense (BSHD / BHSD) and packed varlen, causal (bottom-right
 * aligned), sliding windows and softcap; forward with LSE and backward recomputing from it. The op
 * classes follow seed 001 (construct once, call many); `attention` / `attentionBackward` are the
 * functional forms.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using o = attention(q, kv, kv, { isCausal: true });
 * ```
 *
 * @module
 */
export type { AttentionLayout, MaskOptions, ResolvedMask, ResolvedScore, ScoreOptions } from "./options.ts";
export type { KvSource, QuerySource } from "./sources.ts";
export type { AttentionGradients, AttentionOutput, BackwardBuffers, ForwardBuffers } from "./run.ts";
export {
  attention,
  attentionBackward,
  type AttentionBackwardOptions,
  type AttentionOptions,
} from "./functional.ts";
export type { PackedSizes, SquareSizes } from "./op_support.ts";
export {
  GroupedQueryAttentionBwdOp,
  type GroupedQueryAttentionBwdOptions,
  GroupedQueryAttentionFwdOp,
  type GroupedQueryAttentionFwdOptions,
} from "./gqa.ts";
export {
  MultiHeadAttentionBwdOp,
  type MultiHeadAttentionBwdOptions,
  MultiHeadAttentionFwdOp,
  type MultiHeadAttentionFwdOptions,
} from "./mha.ts";
export { GroupedQueryAttentionDenseFwdOp, type GroupedQueryAttentionDenseFwdOptions } from "./gqa_dense.ts";
export {
  GroupedQueryAttentionSlidingWindowFwdOp,
  type GroupedQueryAttentionSlidingWindowFwdOptions,
  GroupedQueryAttentionSlidingWindowVarlenFwdOp,
  type GroupedQueryAttentionSlidingWindowVarlenFwdOptions,
} from "./gqa_sliding_window.ts";
export {
  GroupedQueryAttentionPrefillVarlenFwdOp,
  type GroupedQueryAttentionPrefillVarlenFwdOptions,
} from "./gqa_varlen.ts";
