/*
 * attnkit: linear-attention entries (DeltaNet, Gated DeltaNet; GLA, simple GLA, retention, linear
 * attention). Included by attnkit.h.
 *
 * Per value head the state S has shape [K, V] (fp32). For each token t:
 *   gated:  S <- exp(g_t) S                        (g is a natural-log decay)
 *   delta:  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T
 *   output: o_t = S^T (scale q_t)
 * Grouped heads: q and k have HK heads, v, g, beta and the state H; value head h reads q/k head
 * h / (H / HK).
 *
 * Tensors are token-major views [B, T, heads, D]: any strides, as long as the last dimension is
 * contiguous, so head-major (BHTD) memory is read and written in place. With cu_seqlens (int32
 * [N + 1], starting at 0, nondecreasing, ending at or before T) B must be 1 and the tokens hold N
 * packed sequences; without it N = B. States are [N, H, K, V] fp32, contiguous.
 */
#ifndef ATTNKIT_LINEAR_H
#define ATTNKIT_LINEAR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of the delta-rule entries. */
#define AK_DELTA_GATED 1      /* g is given */
#define AK_DELTA_QK_L2NORM 2  /* L2-normalise q and k (per token and head) inside the kernel */
#define AK_DELTA_RECURRENT 4  /* token-by-token algorithm instead of the chunked one */

/*
 * Forward.
 *   q, k          [B, T, HK, K]  float16 | bfloat16 | float32
 *   v             [B, T, H, V]   dtype of q
 *   g             [B, T, H]      float32, or NULL unless AK_DELTA_GATED
 *   beta          [B, T, H]      float32
 *   initial_state [N, H, K, V]   float32, or NULL for zeros
 *   cu_seqlens    [N + 1]        int32, or NULL
 *   scale         query scale (callers pass K^-0.5 for the default)
 *   chunk_size    32, 64 or 128 (ignored with AK_DELTA_RECURRENT)
 * Outputs (written, never read):
 *   output        [B, T, H, V]   dtype of q; rows past cu_seqlens[N] are left untouched
 *   final_state   [N, H, K, V]   float32, or NULL
 *   chunk_states  [B, H, NC + 1, K, V] float32, or NULL; NC = ceil(T / chunk_size); entry c is the
 *                 state before chunk c, entry NC the final state (chunked, fixed length only)
 *   aw, au        [B, H, T, chunk_size] float32, or NULL (chunked, fixed length only): the chunk-local
 *                 WY factors, w = Aw k and u = Au v per chunk, with Aw = A diag(beta exp(gc)),
 *                 Au = A diag(beta), A = (I + tril(diag(beta) K K^T * decay, -1))^-1 and gc the
 *                 gate cumulated within the chunk
 *   saved         or NULL: a contiguous, 16-byte aligned 1-D buffer of the dtype of q, at least
 *                 H * NCS * (K * V + 64 * V + 64 * 64 + 64 * K) elements, NCS = B * ceil(T / 64)
 *                 without cu_seqlens and ceil(T / 64) + N with it. The forward may store there what the
 *                 backward would otherwise recompute (the state before every chunk of 64 tokens, the
 *                 chunk-local v - w S, the WY factors A and w), in a layout private to the library; it
 *                 then sets *saved_written to 1, else 0.
 *   saved_written int32, written when saved is given (may be NULL otherwise)
 */
AK_API ak_status ak_delta_rule_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                   const ak_tensor* beta, const ak_tensor* initial_state,
                                   const ak_tensor* cu_seqlens, double scale, int32_t chunk_size, int32_t flags,
                                   const ak_tensor* output, const ak_tensor* final_state,
                                   const ak_tensor* chunk_states, const ak_tensor* aw, const ak_tensor* au,
                                   const ak_tensor* saved, int32_t* saved_written);

/*
 * How many elements of `saved` the forward above, called with these arguments, would store (the
 * states-for-backward buffer), or 0 when it would store none (every CPU call, and CUDA calls that
 * take no Hopper state kernel). The same validation as the forward.
 */
AK_API ak_status ak_delta_rule_saved_size(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
                                          const ak_tensor* g, const ak_tensor* beta, const ak_tensor* initial_state,
                                          const ak_tensor* cu_seqlens, double scale, int32_t chunk_size,
                                          int32_t flags, const ak_tensor* output, const ak_tensor* chunk_states,
                                          const ak_tensor* aw, const ak_tensor* au, int64_t* elements);

/*
 * Backward: gradients of the forward above (recomputing what it needs) with respect to every input.
 *   d_output      [B, T, H, V]   dtype of q
 *   d_final_state [N, H, K, V]   float32, or NULL (zero)
 * Outputs:
 *   dq, dk        [B, T, HK, K]  dtype of q (summed over each group of value heads)
 *   dv            [B, T, H, V]   dtype of q
 *   dbeta         [B, T, H]      float32
 *   dg            [B, T, H]      float32, or NULL (required with AK_DELTA_GATED)
 *   d_initial_state [N, H, K, V] float32, or NULL
 * saved: NULL, or the buffer a forward with the same inputs, scale and flags filled (saved_written 1):
 * the backward then reads the per-chunk states from it instead of recomputing them.
 */
AK_API ak_status ak_delta_rule_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                   const ak_tensor* beta, const ak_tensor* initial_state,
                                   const ak_tensor* cu_seqlens, const ak_tensor* d_output,
                                   const ak_tensor* d_final_state, double scale, int32_t chunk_size,
                                   int32_t flags, const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv,
                                   const ak_tensor* dbeta, const ak_tensor* dg, const ak_tensor* d_initial_state,
                                   const ak_tensor* saved);

/*
 * Decode: one token per sequence.
 *   q, k      [B, HK, K]  float16 | bfloat16 | float32
 *   v         [B, H, V]   dtype of q
 *   g         [B, H]      float32, or NULL unless AK_DELTA_GATED
 *   beta      [B, H]      float32
 *   state     [B, H, K, V] float32 or the dtype of q (read)
 *   output    [B, H, V]   dtype of q
 *   new_state [B, H, K, V] dtype of state; may be the same memory as state (in-place update)
 * fp32 inputs are computed in full fp32 (no TF32).
 */
AK_API ak_status ak_delta_rule_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                      const ak_tensor* beta, const ak_tensor* state, double scale, int32_t flags,
                                      const ak_tensor* output, const ak_tensor* new_state);

/*
 * The gated linear family (GLA, simple GLA, retention, linear attention). Per value head, with the
 * natural-log decays gk (per key channel), g (per token) and g_gamma (per head), each absent = 0:
 *   S <- diag(exp(gk_t + g_t + g_gamma)) S + k_t v_t^T
 *   o_t = S^T (scale q_t)
 * Tensors and grouping as above (q, k [B, T, HK, K]; v and every gate with H heads).
 */
#define AK_GLA_RECURRENT 1 /* token-by-token algorithm instead of the chunked one */
#define AK_GLA_NORMALIZE 2 /* forward only, without decays: each output row divided by its normaliser */

/*
 * Forward.
 *   q, k          [B, T, HK, K]  float16 | bfloat16 | float32
 *   v             [B, T, H, V]   dtype of q
 *   gk            [B, T, H, K]   float32, or NULL
 *   g             [B, T, H]      float32, or NULL
 *   g_gamma       [H]            float32, or NULL
 *   initial_state [N, H, K, V]   float32, or NULL for zeros
 *   cu_seqlens    [N + 1]        int32, or NULL
 * Outputs (written, never read):
 *   output        [B, T, H, V]   dtype of q; rows past cu_seqlens[N] are left untouched
 *   final_state   [N, H, K, V]   float32, or NULL
 *   chunk_states  [B, NT + 1, H, K, V] float32, or NULL (fixed length only): NT = ceil(T / 64); entry c
 *                 is the state before chunk c of 64 tokens, entry NT the final state
 * With AK_GLA_NORMALIZE (no gk, g or g_gamma) each output row is o_t / (z_t + normalize_eps), z_t =
 * scale q_t . (k_1 + ... + k_t) over the sequence's tokens of this call (the initial state has no keys);
 * the states are the plain recurrence's. normalize_eps is ignored without the flag.
 */
AK_API ak_status ak_gla_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                            const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* initial_state,
                            const ak_tensor* cu_seqlens, double scale, int32_t flags, const ak_tensor* output,
                            const ak_tensor* final_state, const ak_tensor* chunk_states, double normalize_eps);

/*
 * Backward: gradients of the forward above with respect to every input.
 *   chunk_states  NULL, or what the forward with the same inputs wrote there (read instead of
 *                 recomputing the states)
 *   d_output      [B, T, H, V]   dtype of q
 *   d_final_state [N, H, K, V]   float32, or NULL (zero)
 * Outputs:
 *   dq, dk        [B, T, HK, K]  dtype of q (summed over each group of value heads)
 *   dv            [B, T, H, V]   dtype of q
 *   dgk           [B, T, H, K]   float32; required with gk, else NULL
 *   dg            [B, T, H]      float32 with g or g_gamma, else NULL: the gradient of the token's
 *                 scalar decay (g_gamma's gradient is its sum over tokens and sequences); NULL with
 *                 them when that gradient is not wanted (it is then not computed)
 *   d_initial_state [N, H, K, V] float32, or NULL
 * With AK_GLA_NORMALIZE (no gk, g or g_gamma) these are the gradients of ak_gla_fwd's normalised output
 * with the same normalize_eps (ignored without the flag).
 */
AK_API ak_status ak_gla_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                            const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* initial_state,
                            const ak_tensor* cu_seqlens, const ak_tensor* chunk_states, const ak_tensor* d_output,
                            const ak_tensor* d_final_state, double scale, int32_t flags, const ak_tensor* dq,
                            const ak_tensor* dk, const ak_tensor* dv, const ak_tensor* dgk, const ak_tensor* dg,
                            const ak_tensor* d_initial_state, double normalize_eps);

/*
 * Decode: one token per sequence.
 *   q, k      [B, HK, K]  float16 | bfloat16 | float32
 *   v         [B, H, V]   dtype of q
 *   gk        [B, H, K]   float32, or NULL
 *   g         [B, H]      float32, or NULL
 *   g_gamma   [H]         float32, or NULL
 *   state     [B, H, K, V] float32 (read)
 *   output    [B, H, V]   dtype of q
 *   new_state [B, H, K, V] float32; may be the same memory as state (in-place update)
 * fp32 inputs are computed in full fp32 (no TF32).
 */
AK_API ak_status ak_gla_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gk,
                               const ak_tensor* g, const ak_tensor* g_gamma, const ak_tensor* state, double scale,
                               const ak_tensor* output, const ak_tensor* new_state);

/*
 * Feature-map linear attention: the element-wise stages around the gated-linear kernel (one pass
 * each, float32 math per element). Every 4-D tensor is a strided view [d0, d1, d2, cols] whose
 * first three dims are a row's (batch, token, head) in either order; token_dim (1 or 2) says which
 * holds the token. cos, sin: [T] float32 contiguous, both or NULL. Float tensors of any float dtype
 * unless stated. The factor of token t is 1, 1 / (t + 1) or 1 / T (AK_FMAP_FACTOR_*).
 */
enum { AK_FMAP_IDENTITY = 0, AK_FMAP_ELU1 = 1, AK_FMAP_RELU = 2 };
enum { AK_FMAP_FACTOR_NONE = 0, AK_FMAP_FACTOR_CAUSAL = 1, AK_FMAP_FACTOR_MEAN = 2 };

/* dst [.., K'] = phi(x) * factor, or with weights [phi(x) f cos_t, phi(x) f sin_t] (K' = 2K); x [.., K]. */
AK_API ak_status ak_fmap_features(const ak_tensor* dst, const ak_tensor* x, const ak_tensor* cos,
                                  const ak_tensor* sin, int32_t phi, int32_t factor, int32_t token_dim);
/* dx [.., K] = phi'(x) * factor * (d_features, or d_features[:K] cos_t + d_features[K:] sin_t). */
AK_API ak_status ak_fmap_feature_grad(const ak_tensor* dx, const ak_tensor* x, const ak_tensor* d_features,
                                      const ak_tensor* cos, const ak_tensor* sin, int32_t phi, int32_t factor,
                                      int32_t token_dim);
/* dst [.., W] = [v | 1 | 0 ...] with v [.., w], w + 1 <= W. */
AK_API ak_status ak_fmap_values(const ak_tensor* dst, const ak_tensor* v);
/* dst [.., w] = num[.., :w] / (num[.., w] + eps * factor): num is the kernel's output over [v | 1 ..]. */
AK_API ak_status ak_fmap_normalise(const ak_tensor* dst, const ak_tensor* num, double eps, int32_t factor,
                                   int32_t token_dim);
/*
 * The kernel's output gradient for dst = normalise(num): with D = num[w] + eps * factor and
 * o = num[:w] / D, dst [.., W] (W >= w + 2) = [r | hi | lo | 0 ...] where r = dO / D rounded to dst's
 * dtype, dD = -(r . o), hi = dD rounded and lo = dD - hi rounded (the normaliser's share crosses in
 * two columns so the kernel's float32 sums cancel what they should). d_output [.., w].
 */
AK_API ak_status ak_fmap_normalise_grad(const ak_tensor* dst, const ak_tensor* d_output, const ak_tensor* num,
                                        double eps, int32_t factor, int32_t token_dim);
/*
 * The whole bidirectional forward in two passes: with X the features of a row (phi, then cos / sin
 * weights: F = K or 2K columns), sums [B, H, F, V + 1] float32 contiguous receives
 * Y = sum_t X(k_t)^T [v_t | 1], and out [.., V] = X(q_t) Y[:, :V] / (X(q_t) Y[:, V] + eps) with
 * normalised != 0, else X(q_t) Y[:, :V]. q, k [.., K], v and out share one dtype. On CUDA: float16 or
 * bfloat16, F and V multiples of 64, contiguous columns, other strides multiples of 8 elements,
 * 16-byte aligned data (else AK_ERR_INVALID_ARGUMENT); the sums are added in a fixed order (the same
 * bits on every call).
 */
AK_API ak_status ak_fmap_bidirectional(const ak_tensor* out, const ak_tensor* q, const ak_tensor* k,
                                       const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
                                       const ak_tensor* sums, int32_t phi, int32_t normalised, double eps,
                                       int32_t token_dim);
/*
 * Its gradients dq, dk [.., K] and dv [.., V] from d_output [.., V] (one dtype with q, k, v). Workspaces,
 * contiguous: sums and d_sums [B, H, F, V + 1] float32, r_rows [B, H, T, V] in the data's dtype, dd
 * [B, H, T] float32. On CUDA additionally K a multiple of 64 and V of 64 or 128.
 */
AK_API ak_status ak_fmap_bidirectional_grad(const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv,
                                            const ak_tensor* d_output, const ak_tensor* q, const ak_tensor* k,
                                            const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
                                            const ak_tensor* sums, const ak_tensor* d_sums, const ak_tensor* r_rows,
                                            const ak_tensor* dd, int32_t phi, int32_t normalised, double eps,
                                            int32_t token_dim);

/*
 * Causal depthwise convolution (the short convolution before linear attention). x [B, T, C] with
 * contiguous channels (any batch and token strides), weight [C, W] contiguous, 1 <= W <= 8. With
 * e the inputs of a sequence extended on the left by its history (e[m] = history[m] for m < W - 1,
 * e[W - 1 + p] = x[p]), token p of the sequence and channel c:
 *   z[p, c] = sum_{i < W} weight[c, i] * e[p + i, c]   (weight[c, W - 1] meets the current token)
 *   output  = z, or silu(z) with AK_CONV_SILU (recomputed by the backward)
 * Sequences: the B batch rows, or with cu_seqlens (int32 [N + 1], from 0, nondecreasing, ending at
 * or before T; B = 1) the packed sequences of row 0, repeated offsets being empty ones. Histories
 * [N, W - 1, C] contiguous, oldest first, dtype of x: initial_state (NULL: zeros) and final_state,
 * each sequence's last W - 1 inputs (the initial history filling in before a short sequence).
 * x, output, dx, d_output: float16 | bfloat16 | float32 (one dtype); weight float32 or x's dtype.
 * Sums in float32; each result is rounded once. Rows past cu_seqlens[N]: the output leaves them
 * untouched, dx gets zeros. dweight (float32 or weight's dtype) is a fixed-order reduction: the
 * same bits on every run.
 */
enum { AK_CONV_NONE = 0, AK_CONV_SILU = 1 };

/* Writes output [B, T, C] and, when not NULL, final_state [N, W - 1, C]. */
AK_API ak_status ak_causal_conv1d_fwd(const ak_tensor* x, const ak_tensor* weight, const ak_tensor* initial_state,
                                      const ak_tensor* cu_seqlens, int32_t activation, const ak_tensor* output,
                                      const ak_tensor* final_state);
/*
 * Gradients of sum(d_output * output) + sum(d_final_state * final_state): dx [B, T, C], dweight
 * [C, W], d_initial_state [N, W - 1, C] (each NULL to skip; d_initial_state is defined whether or
 * not initial_state was given). d_final_state: NULL for zero.
 */
AK_API ak_status ak_causal_conv1d_bwd(const ak_tensor* x, const ak_tensor* weight, const ak_tensor* initial_state,
                                      const ak_tensor* cu_seqlens, const ak_tensor* d_output,
                                      const ak_tensor* d_final_state, int32_t activation, const ak_tensor* dx,
                                      const ak_tensor* dweight, const ak_tensor* d_initial_state);

/*
 * KDA (Kimi delta attention): the gated delta rule with a natural-log decay per key channel. Per value
 * head, for each token t (states [K, V] as above):
 *   S <- diag(exp(gate_t)) S;  u_t = beta_t (v_t - S^T k_t);  S <- S + k_t u_t^T;  o_t = S^T (scale q_t)
 * gate holds per-token values (not cumulated). The documented range is finite and <= 0; the CPU
 * backend and the CUDA general path compute the exact recurrence for any value (a positive gate grows
 * the state, a huge one overflows it); a kernel with a narrower range refuses calls outside it.
 */
#define AK_KDA_RECURRENT 1 /* token-by-token algorithm instead of the chunked one */
#define AK_KDA_FASTMATH 2  /* approximate exponentials allowed (no effect on the exact paths) */
#define AK_KDA_IMPL_FUSED 4     /* the chunked kernels must serve the call, else AK_ERR_UNSUPPORTED naming why */
#define AK_KDA_IMPL_REFERENCE 8 /* the exact general path (float64 recurrence), whatever the planner would pick */

/*
 * Forward.
 *   q, k          [B, T, HK, K]  float16 | bfloat16 | float32
 *   v             [B, T, H, V]   dtype of q
 *   gate          [B, T, H, K]   float32
 *   beta          [B, T, H]      float32
 *   initial_state [N, H, K, V]   float32, or NULL for zeros
 *   cu_seqlens    [N + 1]        int32, or NULL
 * Outputs (written, never read):
 *   output        [B, T, H, V]   dtype of q; rows past cu_seqlens[N] are left untouched
 *   final_state   [N, H, K, V]   float32, or NULL
 */
AK_API ak_status ak_kda_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gate,
                            const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
                            double scale, int32_t flags, const ak_tensor* output, const ak_tensor* final_state);

/*
 * Backward: gradients of the forward above with respect to every input.
 *   d_output      [B, T, H, V]   dtype of q
 *   d_final_state [N, H, K, V]   float32, or NULL (zero)
 * Outputs (rows past cu_seqlens[N] are zero):
 *   dq, dk        [B, T, HK, K]  dtype of q (summed over each group of value heads)
 *   dv            [B, T, H, V]   dtype of q
 *   dgate         [B, T, H, K]   float32
 *   dbeta         [B, T, H]      float32
 *   d_initial_state [N, H, K, V] float32, or NULL
 */
AK_API ak_status ak_kda_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* gate,
                            const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
                            const ak_tensor* d_output, const ak_tensor* d_final_state, double scale, int32_t flags,
                            const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv, const ak_tensor* dgate,
                            const ak_tensor* dbeta, const ak_tensor* d_initial_state);

/*
 * One decode step on a paged state pool, its preprocessing fused (recurrentGdnDecode and
 * recurrentKdaDecode). Per sequence b with slot = state_indices[b] > 0, per value head h (q/k head
 * h / (H / HK)): q and k L2-normalised (x / sqrt(sum x^2 + 1e-6)), beta = sigmoid(raw_beta), the gate
 * g = -exp(a_log) softplus(raw_gate + dt_bias) (AK_DECODE_BOUNDED: lower_bound sigmoid(exp(a_log)
 * (raw_gate + dt_bias))), and with the slot's state S [V, K] (zero when has_initial_state[b] is false):
 *   S <- S diag(exp(g));  u = beta (v - S k);  S <- S + u k^T;  o = scale S q
 * A sequence whose index is <= 0 gets a zero output and leaves the pool untouched. Positive indices
 * must be unique and below num_slots: the call reads them to the host and refuses a bad one before
 * writing anything (on a CUDA device that read synchronises the stream). With AK_DECODE_TRUSTED_INDICES
 * a CUDA call skips that read: an index past the pool is skipped on the device (zero output, nothing
 * touched) and a live slot named twice ends unspecified.
 *   packed_qkv        [B, 2 HK K + H V] float16 | bfloat16 | float32, rows [Q of HK heads | K | V of H heads]
 *   raw_gate          [1, B, H] (one gate per head) or, with AK_DECODE_PER_CHANNEL, [1, B, H, K];
 *                     float16 | bfloat16 | float32
 *   raw_beta          [1, B, H] float16 | bfloat16 | float32
 *   a_log             [H] float32;  dt_bias [H] or, per channel, [H, K] float32
 *   state_cache       [num_slots, H, V, K] float32 | bfloat16, every slot dense (slots may be apart);
 *                     read and written in place (the arithmetic is float32 or wider)
 *   state_indices     [B] int32 contiguous;  has_initial_state [B] bool contiguous, or NULL (all resume)
 *   scale             finite;  lower_bound finite, <= 0 (used by AK_DECODE_BOUNDED)
 *   output            [1, B, H, V] dtype of packed_qkv (written)
 */
#define AK_DECODE_PER_CHANNEL 1 /* a gate per key channel (KDA); else one per head (GDN) */
#define AK_DECODE_BOUNDED 2     /* the bounded gate transform (per channel only); else softplus */
#define AK_DECODE_TRUSTED_INDICES 4 /* CUDA: no host read of state_indices (see above) */
#define AK_DECODE_IMPL_FUSED 8      /* a fused kernel must serve the call, else AK_ERR_UNSUPPORTED naming why */
#define AK_DECODE_IMPL_REFERENCE 16 /* the exact general path (the CPU backend; on CUDA on host copies) */
AK_API ak_status ak_paged_decode(const ak_tensor* packed_qkv, const ak_tensor* raw_gate, const ak_tensor* raw_beta,
                                 const ak_tensor* a_log, const ak_tensor* dt_bias, const ak_tensor* state_cache,
                                 const ak_tensor* state_indices, const ak_tensor* has_initial_state, double scale,
                                 double lower_bound, int32_t flags, const ak_tensor* output);

/*
 * The causal depthwise convolution over a paged history pool, inference only (pagedCausalConv1d,
 * causalConv1dDecode). Per sequence n with slot s = state_indices[n] (or n without them): its window is
 * the slot's history (zeros when has_initial_state[n] is false) followed by its tokens; output row t is
 * act(sum_i weight[c, i] e[t + i]) as ak_causal_conv1d_fwd computes it, and the window's last W - 1 rows
 * become the slot's history (an empty sequence keeps it, or clears it when fresh). A sequence whose
 * explicit index is <= 0 gets zero rows and leaves the pool untouched.
 *   x                 [B, T, C] (rows of each batch row or, with cu_seqlens, B = 1 and packed sequences)
 *                     or [B, C] (one token per sequence); float16 | bfloat16 | float32, channels contiguous
 *   weight            [C, W] contiguous, W >= 2, float32 or x's dtype
 *   state_cache       [num_slots, W - 1, C] x's dtype, every slot dense (slots may be apart), in place
 *   state_indices     [N] int32 contiguous; required with [B, T, C]; NULL for [B, C]: sequence n uses slot n
 *   has_initial_state [N] bool contiguous, or NULL (every live slot resumes)
 *   cu_seqlens        [N + 1] int32, or NULL (N = B)
 *   flags             AK_CONV_NONE | AK_CONV_SILU, optionally | AK_CONV_TRUSTED_INDICES: a CUDA call then
 *                     reads no index back (an index past the pool is skipped on the device, a live slot
 *                     named twice ends unspecified); without it the indices are read back and a bad one
 *                     is refused before anything is written (inside a graph capture: checked on the device);
 *                     and at most one of AK_CONV_IMPL_FUSED (the fused kernel must serve the call: CUDA and
 *                     W <= 8, else AK_ERR_UNSUPPORTED naming why) and AK_CONV_IMPL_REFERENCE (the exact
 *                     general path: the CPU backend, on host copies for CUDA tensors)
 *   output            x's shape and dtype (rows past cu_seqlens[N] untouched)
 */
#define AK_CONV_TRUSTED_INDICES 4
#define AK_CONV_IMPL_FUSED 8
#define AK_CONV_IMPL_REFERENCE 16
AK_API ak_status ak_paged_conv1d(const ak_tensor* x, const ak_tensor* weight, const ak_tensor* state_cache,
                                 const ak_tensor* state_indices, const ak_tensor* has_initial_state,
                                 const ak_tensor* cu_seqlens, int32_t flags, const ak_tensor* output);

/*
 * States between a pool and per-sequence tensors (the paged chunked prefill's gather and scatter):
 *   state_cache       [num_slots, ...] float32 | bfloat16, every slot dense, slots apart (stride >= a slot)
 *   state_indices     [N] int32 contiguous: sequence n's slot; <= 0 is padding
 *   has_initial_state [N] bool contiguous, or NULL (every live slot resumes); read by the gather only
 *   states            [N, ...] float32: contiguous, or (rank >= 3) the view of a contiguous [N, ..., C, R]
 *                     with its last two dims swapped to the pool's [.., R, C] (strides [.., 1, R]), e.g.
 *                     the delta rule's [N, H, K, V] states against a [num_slots, H, V, K] pool
 * AK_POOL_GATHER writes states[n] = state_cache[state_indices[n]] for live, resumed sequences and zero for
 * the others; AK_POOL_SCATTER writes state_cache[state_indices[n]] = states[n] (rounded to nearest even for
 * bfloat16) for live sequences only. An index at or past num_slots, or a live slot named by two entries, is
 * refused before anything is written; on CUDA that check reads the [N] indices back to the host (one
 * synchronous copy), then one kernel moves every sequence. mode is AK_POOL_GATHER or AK_POOL_SCATTER,
 * optionally | AK_POOL_TRUSTED_INDICES: a CUDA call then reads nothing back (an index past the pool is
 * skipped on the device, a live slot named twice ends unspecified); the CPU always checks.
 */
enum { AK_POOL_GATHER = 0, AK_POOL_SCATTER = 1, AK_POOL_TRUSTED_INDICES = 2 };
AK_API ak_status ak_state_pool_copy(const ak_tensor* state_cache, const ak_tensor* state_indices,
                                    const ak_tensor* has_initial_state, const ak_tensor* states, int32_t mode);

/*
 * The forward above advancing a state pool in place (the paged chunked prefill; inference only): q, k, v,
 * g, beta, cu_seqlens, scale, chunk_size, flags and output as for ak_delta_rule_fwd, and
 *   state_cache       [num_slots, H, V, K] float32 | bfloat16, every slot dense, slots apart
 *   state_indices     [N] int32 contiguous: sequence n's slot; <= 0 is padding (nothing read or written,
 *                     its output rows zero)
 *   has_initial_state [N] bool contiguous, or NULL: false starts that sequence from zero
 * Sequence n starts from state_cache[state_indices[n]] (its [V, K] read as the [K, V] state) and its final
 * state is written there (rounded to nearest even for bfloat16). The indices are checked as by
 * ak_state_pool_copy (pool_mode 0 or AK_POOL_TRUSTED_INDICES); inside a graph capture on the device.
 */
AK_API ak_status ak_delta_rule_fwd_pool(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
                                        const ak_tensor* beta, const ak_tensor* cu_seqlens, double scale,
                                        int32_t chunk_size, int32_t flags, const ak_tensor* output,
                                        const ak_tensor* state_cache, const ak_tensor* state_indices,
                                        const ak_tensor* has_initial_state, int32_t pool_mode);

/*
 * Zeroes the output rows of padding sequences (state_indices[n] <= 0), e.g. after a paged chunked prefill.
 * Everything is read on the output's device, nothing on the host:
 *   output         [B, T, ...] contiguous, any dtype, written in place (all bits zero)
 *   state_indices  [N] int32 contiguous
 *   cu_seqlens     [N + 1] int32 | int64 contiguous (B = 1): sequence n owns rows [cu_seqlens[n],
 *                  cu_seqlens[n + 1]) of T, each offset clamped to [0, T] (not checked: bad offsets zero
 *                  fewer rows, never memory outside output); or NULL: N = B, sequence n owns batch row n
 * Rows of live sequences, and rows past cu_seqlens[N], are left as they are (never read).
 */
AK_API ak_status ak_zero_padding_rows(const ak_tensor* output, const ak_tensor* state_indices,
                                      const ak_tensor* cu_seqlens);

/*
 * The replay plan of a paged chunked call with a replay state (zero-drift serving), made where the tensors
 * live. Sequence n (state_indices[n] > 0, below num_slots) holds h = counts[slot] cached tokens (0 when
 * has_initial_state[n] is false; clamped to 0..63) and brings the len new rows of its batch row (N = B,
 * T each) or of cu_seqlens[n] .. cu_seqlens[n + 1] (B = 1); of its h + len tokens the first
 * f = (h + len) / 64 * 64 form run A, the rest run B. cu_a and cu_b (int32 [N + 1]) receive the runs'
 * offsets (cu_a[N] <= B T + 63 N, cu_b[N] <= 63 N), and plan (int32, contiguous), in order:
 *   src_a [B T + 63 N], src_b [63 N]   each run row's source code: c > 0 cached row c - 1 (slot * 64 + j),
 *                                c < 0 input row -c - 1, 0 none (rows past the run's last offset)
 *   out [B T]                    each input row's output code: c > 0 run A row c - 1, c < 0 run B row
 *                                -c - 1, 0 a zero row (padding, rows past the last offset)
 *   keep [N, 64]                 1 + the run B row that becomes the slot's cached row r, or 0
 *   count [N]                    the slot's new count, or -1 (padding)
 * so plan has 2 B T + 191 N entries. Unless flags has AK_REPLAY_TRUSTED, an eager CUDA call reads
 * the indices, offsets and counts back and refuses an index past the pool, a live slot named twice, bad
 * offsets (0 first, nondecreasing, at most B T) or a resumed count outside 0..63 before writing anything;
 * inside a graph capture the indices and offsets are checked on the device instead. The CPU always checks.
 */
enum { AK_REPLAY_TRUSTED = 1 };
AK_API ak_status ak_replay_plan(const ak_tensor* state_indices, const ak_tensor* has_initial_state,
                                const ak_tensor* counts, const ak_tensor* cu_seqlens, int64_t B, int64_t T,
                                const ak_tensor* cu_a, const ak_tensor* cu_b, const ak_tensor* plan, int32_t flags);

/*
 * out[m] = first[c - 1] for c = codes[m] > 0, second[-c - 1] for c < 0, all bits zero for 0 or a code past
 * its source's rows. first [R1, ...], second [R2, ...] and out [M, ...] contiguous, one dtype and row
 * shape; codes int32 [M].
 */
AK_API ak_status ak_replay_rows(const ak_tensor* first, const ak_tensor* second, const ak_tensor* codes,
                                const ak_tensor* out);

/*
 * The cached rows a replayed call keeps: cache[slot, r] = run[keep[n, r] - 1] for each live sequence n
 * (slot = state_indices[n]) and each r whose keep code (from plan, ak_replay_plan) is positive. run
 * [rows, ...] (run B's inputs) and cache [num_slots, 64, ...] contiguous, one dtype and row shape.
 */
AK_API ak_status ak_replay_keep(const ak_tensor* run, const ak_tensor* cache, const ak_tensor* plan,
                                const ak_tensor* state_indices);

/* counts[state_indices[n]] = the plan's new count of each live sequence n (int32 [num_slots], in place). */
AK_API ak_status ak_replay_commit(const ak_tensor* counts, const ak_tensor* plan, const ak_tensor* state_indices);

/*
 * Gate transforms: raw gate projections to float32 natural-log decays, element by element in float32.
 * With x = raw + dt_bias and a = exp(a_log) of the element's head:
 *   AK_GATE_SOFTPLUS  gate = -a * softplus(x)              (range (-inf, 0]; lower_bound must be 0)
 *   AK_GATE_BOUNDED   gate = lower_bound * sigmoid(a * x)   (range [lower_bound, 0]; lower_bound in [-3e38, 0])
 *   raw      [..., H] (per head) or [..., H, D] (per channel), float16 | bfloat16 | float32 | float64,
 *            any strides
 *   a_log    [H] float32 contiguous
 *   dt_bias  [H] (per head) or [H, D] (per channel) float32 contiguous: its rank selects the form
 *   flags    AK_GATE_FASTMATH: the CUDA kernels may use the hardware's approximate exp, log and division
 *            (errors of a few 1e-6 times a, or |lower_bound|); the CPU always computes the accurate forms;
 *            at most one of AK_GATE_IMPL_FUSED (the CUDA kernels: refused on the CPU) and
 *            AK_GATE_IMPL_REFERENCE (the CPU backend's accurate forms, on CUDA over host copies)
 */
enum { AK_GATE_SOFTPLUS = 0, AK_GATE_BOUNDED = 1 };
#define AK_GATE_FASTMATH 1
#define AK_GATE_IMPL_FUSED 2
#define AK_GATE_IMPL_REFERENCE 4

/* Writes gate (shape of raw, float32, any strides that do not overlap). */
AK_API ak_status ak_gate_transform_fwd(const ak_tensor* raw, const ak_tensor* a_log, const ak_tensor* dt_bias,
                                       int32_t kind, double lower_bound, int32_t flags, const ak_tensor* gate);
/*
 * Gradients of sum(d_gate * gate): d_raw (shape and dtype of raw, any strides that do not overlap),
 * d_a_log [H] and d_dt_bias (shape of dt_bias), float32 contiguous. d_gate: shape of raw, float32, any
 * strides. d_a_log and d_dt_bias are float32 sums over the rows in an order fixed by the shape
 * (per-block partials, then the partials in block order, no atomics): the same bits on every run of
 * one backend. Without rows they are zeros.
 */
AK_API ak_status ak_gate_transform_bwd(const ak_tensor* raw, const ak_tensor* a_log, const ak_tensor* dt_bias,
                                       const ak_tensor* d_gate, int32_t kind, double lower_bound, int32_t flags,
                                       const ak_tensor* d_raw, const ak_tensor* d_a_log, const ak_tensor* d_dt_bias);

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_LINEAR_H */
