/*
 * Sparse attention (included by attnkit.h): native sparse attention's three branches over packed
 * sequences, DeepSeek sparse attention decode and the lightning indexer. Every tensor is contiguous and
 * on one device; float tensors are float16, bfloat16 or float32 (the indexer: bfloat16 or float8_e4m3)
 * and the results are computed in float32 (double on the CPU) and rounded once.
 *
 * Packed sequences (NSA): offsets [N + 1] int32, offsets[0] = 0, nondecreasing, offsets[N] = T, the
 * tokens of q. chunk_offsets [N + 1] int32: the compressed rows of sequence n start at chunk_offsets[n]
 * (0 first, nondecreasing, at most the compressed tensor's rows). Both are always read back and checked.
 */
#ifndef ATTNKIT_SPARSE_H
#define ATTNKIT_SPARSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of the sparse entries. */
#define AK_SPARSE_CAUSAL 1        /* NSA selection, DSA decode: keys past the query's position are skipped */
#define AK_SPARSE_CHECK_INDICES 2 /* read the index lists back and refuse a bad entry before anything runs */
#define AK_SPARSE_CLEAN_LOGITS 4  /* indexer: -inf outside a query's key range (else 0) */

/*
 * NSA, compressed branch: q [T, H, K], k_cmp [C, Hkv, K], v_cmp [C, Hkv, V] (q's dtype, Hkv divides H).
 * Compressed row c of a sequence covers its tokens [c stride, c stride + block_size); the query at
 * position i attends the rows whose block ends by i: nc(i) = i + 1 < block_size ? 0 :
 * (i + 1 - block_size) / stride + 1, rows chunk_offsets[n] .. + nc(i) - 1, which must exist for the
 * last token of each sequence. output [T, H, V] q's dtype; lse [T, H] float32 (0 and output 0 where
 * nothing is visible).
 */
AK_API ak_status ak_nsa_compression_fwd(const ak_tensor* q, const ak_tensor* k_cmp, const ak_tensor* v_cmp,
                                        const ak_tensor* offsets, const ak_tensor* chunk_offsets,
                                        int64_t block_size, int64_t stride, double scale, const ak_tensor* output,
                                        const ak_tensor* lse);

/*
 * NSA, block selection: q [T, H, K], k_cmp [C, Hkv, K], lse [T, H] float32 (the compressed branch's).
 * For the query at position i (current block b = i / block_size) and KV head hk, block c <= b has
 * importance sum over the group's heads of exp(scale q . k_cmp[c] - lse) (the compressed row c of the
 * sequence), except blocks 0, b - 1 and b, forced with importance G = H / Hkv. block_indices
 * [T, Hkv, S] int32 (S <= 128): the S most important, in decreasing importance, ties to the smaller
 * index, then -1.
 */
AK_API ak_status ak_nsa_topk(const ak_tensor* q, const ak_tensor* k_cmp, const ak_tensor* lse,
                             const ak_tensor* offsets, const ak_tensor* chunk_offsets, int64_t block_size,
                             double scale, const ak_tensor* block_indices);

/*
 * NSA, selected branch: q [T, H, K], k [T, Hkv, K], v [T, Hkv, V], block_indices [T, Hkv, S] int32,
 * block_counts [T, Hkv] int32 or NULL (all S): the query attends the keys of the first
 * block_counts entries' blocks (positions b block_size .. within its sequence; with AK_SPARSE_CAUSAL
 * only those up to its own). -1 is padding. With AK_SPARSE_CHECK_INDICES, an entry below -1 or past the
 * sequence's blocks, a block listed twice or a count outside [0, S] is refused; without it such entries
 * are skipped (a repeated block counts once, counts are clamped). output [T, H, V] q's dtype (0 where
 * nothing is visible); lse [T, H] float32 (-inf there) or NULL.
 */
AK_API ak_status ak_nsa_selection_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                      const ak_tensor* block_indices, const ak_tensor* block_counts,
                                      const ak_tensor* offsets, int64_t block_size, double scale, int32_t flags,
                                      const ak_tensor* output, const ak_tensor* lse);

/*
 * DeepSeek sparse attention, decode: q [B, Sq, H, D + tail], kv [B, Skv, Hkv, D + tail] (the value is
 * its first D), indices [B, Sq, Hkv, topk] int32. Query s sits at position q_start + s and attends the
 * listed cache rows j with 0 <= j < Skv (others are padding) and, with AK_SPARSE_CAUSAL,
 * j stride_kv + stride_kv - 1 <= its position. With AK_SPARSE_CHECK_INDICES a row listed twice for one
 * query is refused; without it each listing counts. output [B, Sq, H, D] q's dtype (0 where nothing is
 * visible).
 */
AK_API ak_status ak_dsa_decode(const ak_tensor* q, const ak_tensor* kv, const ak_tensor* indices, int64_t q_start,
                               int64_t stride_kv, double scale, int32_t flags, const ak_tensor* output);

/*
 * Multi-head latent attention (DeepSeek's MLA), one decode step, on the kernels of ak_dsa_decode with every
 * cache row attended: q [B, H, D], q_pe [B, H, P], k [B, Skv, Hkv, D] (the latent, also the value),
 * k_pe [B, Skv, Hkv, P], all float16 or all bfloat16; P may be 0. Head h scores
 * scale (q_h . k_j + q_pe_h . k_pe_j) against the rows of KV head h / (H / Hkv). output [B, H, D] q's dtype.
 */
AK_API ak_status ak_mla_decode(const ak_tensor* q, const ak_tensor* q_pe, const ak_tensor* k, const ak_tensor* k_pe,
                               double scale, const ak_tensor* output);

/*
 * The lightning indexer: q [Sq, H, D], k [Sk, D] (q's dtype: bfloat16 or float8_e4m3), k_scale [Sk] float32
 * or NULL (ones), weights [Sq, H] float32, ks and ke [Sq] int32 with 0 <= ks <= ke <= Sk (checked with
 * AK_SPARSE_CHECK_INDICES; without it an out-of-range bound is clamped on use). logits [Sq, Sk] float32:
 * sum_h weights[i, h] max(0, k_scale[j] q[i, h] . k[j]) for ks[i] <= j < ke[i]; outside, -inf with
 * AK_SPARSE_CLEAN_LOGITS, else 0.
 */
AK_API ak_status ak_lightning_indexer(const ak_tensor* q, const ak_tensor* k, const ak_tensor* k_scale,
                                      const ak_tensor* weights, const ak_tensor* ks, const ak_tensor* ke,
                                      int32_t flags, const ak_tensor* logits);

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_SPARSE_H */
