/*
 * attnkit: softmax-attention entries (MHA, GQA; dense, causal, sliding window, varlen). Included by
 * attnkit.h.
 *
 * Scores z = sm_scale * q . k; with softcap c > 0, z <- c * tanh(z / c) before masking. Query row i
 * of a sequence sits at key position p = i + Skv - Sq (bottom-right alignment); key j is admitted
 * when p - window_left <= j <= p + window_right (-1: unlimited on that side); causal sets
 * window_right to 0. Softmax and accumulation in fp32. A row with no admitted key gets output 0 and
 * LSE -inf. GQA: query head h reads KV head h / (Hq / Hkv).
 *
 * Layout BSHD: q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D], output [B, Sq, Hq, D]; any strides with
 * the last dimension contiguous (so BHSD memory is read in place). Varlen (cu_seqlens_q and
 * cu_seqlens_kv both given, int32 [N + 1], starting at 0, nondecreasing): q [Tq, Hq, D], k and v
 * [Tkv, Hkv, D], output [Tq, Hq, D], each sequence aligned on its own lengths.
 * LSE: float32 natural log, [B, Hq, Sq], or [Hq, Tq] for varlen.
 */
#ifndef ATTNKIT_ATTENTION_H
#define ATTNKIT_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

#define AK_ATTN_CAUSAL 1         /* causal mask (bottom-right aligned) */
#define AK_ATTN_DETERMINISTIC 2  /* backward: a fixed reduction order for dq (and dk/dv across groups) */

/*
 *   q, k, v        float16 | bfloat16, one dtype; head dim D a multiple of 8, at most 256
 *   cu_seqlens_q, cu_seqlens_kv   int32 [N + 1] or both NULL
 *   sm_scale       callers pass D^-0.5 for the default
 *   softcap        0 for none
 *   window_left, window_right     -1 for unlimited
 * Outputs: output (dtype of q), lse (float32, or NULL when not wanted)
 */
AK_API ak_status ak_attention_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                  const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
                                  double softcap, int32_t flags, int32_t window_left, int32_t window_right,
                                  const ak_tensor* output, const ak_tensor* lse);

/*
 * The forward of float8_e4m3 inputs, dense layout only: q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D] in
 * e4m3 with per-(batch, KV head) dequantisation scales (the value a stored x stands for is x * scale):
 *   q_scale, k_scale, v_scale   float32 [B, Hkv], contiguous (q's row of query head h is q_scale[b, h / group])
 *   output                      float16 | bfloat16 [B, Sq, Hq, D] (the output dtype)
 * Scores, masks, soft cap and windows as ak_attention_fwd. On Hopper at D 128 the products run on 8-bit
 * tensor cores: the probabilities P (at most 1 after the running maximum) are scaled by 256 and rounded to
 * e4m3 before P V. Elsewhere the inputs are dequantised to the output dtype and take ak_attention_fwd's
 * kernels; the CPU backend computes in fp32 from the exact values.
 */
AK_API ak_status ak_attention_fwd_fp8(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                      const ak_tensor* q_scale, const ak_tensor* k_scale, const ak_tensor* v_scale,
                                      double sm_scale, double softcap, int32_t flags, int32_t window_left,
                                      int32_t window_right, const ak_tensor* output);

/*
 * Backward from the forward's output and LSE (recomputing the scores; no S x S matrix is stored).
 *   output, d_output  shaped like q, dtype of q
 *   lse               as the forward wrote it
 * Outputs: dq (shaped like q), dk and dv (shaped like k, summed over each KV group), dtype of q.
 */
AK_API ak_status ak_attention_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                  const ak_tensor* output, const ak_tensor* d_output, const ak_tensor* lse,
                                  const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
                                  double softcap, int32_t flags, int32_t window_left, int32_t window_right,
                                  const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv);

/*
 * Decode over a KV cache, split over the keys: each sequence's Sq new queries against its lengths[b] keys.
 *   q              [B, Sq, H, D] contiguous, float16 | bfloat16; D 64, 128 or 256 and (H / Hkv) Sq D <= 4096
 *                  (else AK_ERR_UNSUPPORTED, naming why: such calls take the gather and the packed forward)
 *   k, v           q's dtype: contiguous [B, Skv, Hkv, D] (block_table NULL), or paged [rows, Hkv, D] with
 *                  block_table [B, max_pages] int32 naming each sequence's pages of page_size rows
 *   lengths        [B] int32: keys per sequence, read on the device (clamped to the cache; a page outside
 *                  the cache reads as zeros: callers check both first, on the host)
 *   flags          AK_ATTN_CAUSAL: query i of a sequence with L keys sees keys j <= L - Sq + i
 * Output: [B, Sq, H, D] in q's dtype (0 for a query that sees no key).
 */
AK_API ak_status ak_attention_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                     const ak_tensor* lengths, const ak_tensor* block_table, int64_t page_size,
                                     double sm_scale, double softcap, int32_t flags, const ak_tensor* output);

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_ATTENTION_H */
