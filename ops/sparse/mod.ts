/**
 * Sparse attention: native sparse attention's compressed, selection and selected branches over packed
 * sequences, DeepSeek sparse attention decode over a latent cache, and the lightning indexer that scores
 * which cache rows each query should read.
 *
 * @module
 */
export { OutputWithLse } from "./common.ts";
export {
  MAX_SELECTED_BLOCKS,
  NSACmpFwdVarlenOp,
  type NSACmpFwdVarlenOptions,
  NSAFwdVarlenOp,
  type NSAFwdVarlenOptions,
  NSATopkVarlenOp,
  type NSATopkVarlenOptions,
} from "./nsa.ts";
export {
  nsaChunkOffsets,
  type NsaChunkOffsetsOptions,
  nsaTokenIndices,
  type NsaTokenIndicesOptions,
} from "./packing.ts";
export {
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  type DeepSeekSparseAttentionDecodeWithKVCacheFwdOptions,
} from "./dsa.ts";
export { FP8LightningIndexerFwdOp, type FP8LightningIndexerFwdOptions } from "./indexer.ts";
