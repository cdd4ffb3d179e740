/**
 * Softmax attention: MHA and GQA, dense (`"bshd"` / `"bhsd"`) and packed varlen (`"thd"`), causal
 * (bottom-right aligned), sliding windows and softcap; forward with LSE, and a backward recomputing
 * from it. Every call names its layout; `isCausal` defaults to false. The op classes are built once
 * and called many times; `attention` / `attentionBackward` are the functional forms, and a forward's
 * result runs its own backward.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using r = attention(q, kv, kv, { layout: "bshd", isCausal: true });
 * using grads = r.backward(r.output);
 * ```
 *
 * @module
 */
export type { MaskOptions, ResolvedMask, ResolvedScore, ScoreOptions } from "./options.ts";
export type { KvSource, QuerySource } from "./sources.ts";
export type {
  AttentionGradients,
  AttentionOutput,
  AttentionResult,
  BackwardBuffers,
  ForwardBuffers,
  ResultBackwardOptions,
} from "./run.ts";
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
  type KernelOptions,
} from "./gqa.ts";
export {
  MultiHeadAttentionBwdOp,
  type MultiHeadAttentionBwdOptions,
  MultiHeadAttentionFwdOp,
  type MultiHeadAttentionFwdOptions,
} from "./mha.ts";
export { GroupedQueryAttentionDenseFwdOp, type GroupedQueryAttentionDenseFwdOptions } from "./gqa_dense.ts";
export {
  GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp,
  type GroupedQueryAttentionPrefillPagedWithKVCacheFwdOptions,
} from "./gqa_prefill_paged.ts";
export type { RopeLayout } from "./transforms.ts";
export {
  GroupedQueryAttentionPrefillFwdOp,
  type GroupedQueryAttentionPrefillFwdOptions,
} from "./gqa_prefill.ts";
export {
  MultiHeadLatentAttentionDecodeWithKVCacheFwdOp,
  type MultiHeadLatentAttentionDecodeWithKVCacheFwdOptions,
} from "./mla.ts";
export {
  type DecodeCallOptions,
  type GroupedQueryAttentionDecodeOptions,
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  type GroupedQueryAttentionDecodePagedWithKVCacheFwdOptions,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  type GroupedQueryAttentionDecodeWithKVCacheFwdOptions,
  type MultiHeadAttentionDecodeOptions,
  MultiHeadAttentionDecodePagedWithKVCacheFwdOp,
  type MultiHeadAttentionDecodePagedWithKVCacheFwdOptions,
  MultiHeadAttentionDecodeWithKVCacheFwdOp,
  type MultiHeadAttentionDecodeWithKVCacheFwdOptions,
  type PagedOptions,
} from "./decode.ts";
export type { CacheKind, DecodeSizes } from "./kv_cache.ts";
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
