/**
 * Sparse-attention symbols of the C ABI (csrc/include/attnkit_sparse.h): native sparse attention's three
 * branches, DeepSeek sparse attention decode and the lightning indexer. Optional tensors pass `null`.
 *
 * @module
 */
export const sparseSymbols = {
  // ak_status ak_nsa_compression_fwd(const ak_tensor* q, const ak_tensor* k_cmp, const ak_tensor* v_cmp,
  //                                  const ak_tensor* offsets, const ak_tensor* chunk_offsets,
  //                                  int64_t block_size, int64_t stride, double scale,
  //                                  const ak_tensor* output, const ak_tensor* lse)
  ak_nsa_compression_fwd: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "i64", "i64", "f64", "buffer", "buffer"],
    result: "i32",
  },
  // ak_status ak_nsa_topk(const ak_tensor* q, const ak_tensor* k_cmp, const ak_tensor* lse,
  //                       const ak_tensor* offsets, const ak_tensor* chunk_offsets, int64_t block_size,
  //                       double scale, const ak_tensor* block_indices)
  ak_nsa_topk: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "i64", "f64", "buffer"],
    result: "i32",
  },
  // ak_status ak_nsa_selection_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
  //                                const ak_tensor* block_indices, const ak_tensor* block_counts /* or NULL */,
  //                                const ak_tensor* offsets, int64_t block_size, double scale,
  //                                int32_t flags /* AK_SPARSE_CAUSAL = 1 | AK_SPARSE_CHECK_INDICES = 2 */,
  //                                const ak_tensor* output, const ak_tensor* lse /* or NULL */)
  ak_nsa_selection_fwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i64",
      "f64",
      "i32",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // ak_status ak_dsa_decode(const ak_tensor* q, const ak_tensor* kv, const ak_tensor* indices, int64_t q_start,
  //                         int64_t stride_kv, double scale,
  //                         int32_t flags /* AK_SPARSE_CAUSAL = 1 | AK_SPARSE_CHECK_INDICES = 2 */,
  //                         const ak_tensor* output)
  ak_dsa_decode: {
    parameters: ["buffer", "buffer", "buffer", "i64", "i64", "f64", "i32", "buffer"],
    result: "i32",
  },
  // ak_status ak_mla_decode(const ak_tensor* q, const ak_tensor* q_pe, const ak_tensor* k, const ak_tensor* k_pe,
  //                         double scale, const ak_tensor* output)
  ak_mla_decode: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "f64", "buffer"],
    result: "i32",
  },
  // ak_status ak_lightning_indexer(const ak_tensor* q, const ak_tensor* k, const ak_tensor* k_scale /* or NULL */,
  //                                const ak_tensor* weights, const ak_tensor* ks, const ak_tensor* ke,
  //                                int32_t flags /* AK_SPARSE_CHECK_INDICES = 2 | AK_SPARSE_CLEAN_LOGITS = 4 */,
  //                                const ak_tensor* logits)
  ak_lightning_indexer: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "buffer", "i32", "buffer"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;
