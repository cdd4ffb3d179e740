/** Linear-attention symbols of the C ABI (csrc/include/attnkit_linear.h). */
export const linearSymbols = {
  // ak_status ak_delta_rule_fwd(
  //   const ak_tensor* q,             [B, T, HK, K] float16 | bfloat16 | float32, last dim contiguous
  //   const ak_tensor* k,             [B, T, HK, K] dtype of q
  //   const ak_tensor* v,             [B, T, H, V]  dtype of q
  //   const ak_tensor* g,             [B, T, H] float32, or NULL unless AK_DELTA_GATED
  //   const ak_tensor* beta,          [B, T, H] float32
  //   const ak_tensor* initial_state, [N, H, K, V] float32 contiguous, or NULL
  //   const ak_tensor* cu_seqlens,    [N + 1] int32, or NULL
  //   double scale, int32_t chunk_size, int32_t flags,
  //   const ak_tensor* output,        [B, T, H, V] dtype of q
  //   const ak_tensor* final_state,   [N, H, K, V] float32, or NULL
  //   const ak_tensor* chunk_states,  [B, H, NC + 1, K, V] float32, or NULL
  //   const ak_tensor* aw,            [B, H, T, chunk_size] float32, or NULL
  //   const ak_tensor* au,            [B, H, T, chunk_size] float32, or NULL
  //   const ak_tensor* saved,         1-D dtype of q, >= H NCS (K V + 64 V + 64 * 64 + 64 K) elements, or NULL
  //   int32_t* saved_written)         set to 1 when the forward filled `saved`, else 0
  ak_delta_rule_fwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // The forward advancing a state pool in place (attnkit_linear.h):
  // ak_status ak_delta_rule_fwd_pool(
  //   q, k, v, g, beta, cu_seqlens, double scale, int32_t chunk_size, int32_t flags,
  //   const ak_tensor* output,            [B, T, H, V] dtype of q, contiguous
  //   const ak_tensor* state_cache,       [num_slots, H, V, K] float32 | bfloat16, in place
  //   const ak_tensor* state_indices,     [N] int32: <= 0 marks padding
  //   const ak_tensor* has_initial_state, [N] bool, or NULL
  //   int32_t pool_mode)                  0 | AK_POOL_TRUSTED_INDICES = 2
  ak_delta_rule_fwd_pool: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i32",
    ],
    result: "i32",
  },
  // ak_status ak_delta_rule_saved_size(
  //   q, k, v, g, beta, initial_state, cu_seqlens, double scale, int32_t chunk_size, int32_t flags,
  //   const ak_tensor* output, const ak_tensor* chunk_states, const ak_tensor* aw, const ak_tensor* au,
  //   int64_t* elements)              what the forward with these arguments would store in `saved` (0: none)
  ak_delta_rule_saved_size: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // ak_status ak_delta_rule_bwd(
  //   const ak_tensor* q, const ak_tensor* k, const ak_tensor* v, const ak_tensor* g,
  //   const ak_tensor* beta, const ak_tensor* initial_state, const ak_tensor* cu_seqlens,
  //   const ak_tensor* d_output,      [B, T, H, V] dtype of q
  //   const ak_tensor* d_final_state, [N, H, K, V] float32, or NULL
  //   double scale, int32_t chunk_size, int32_t flags,
  //   const ak_tensor* dq,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dk,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dv,            [B, T, H, V]  dtype of q
  //   const ak_tensor* dbeta,         [B, T, H] float32
  //   const ak_tensor* dg,            [B, T, H] float32, or NULL (required with AK_DELTA_GATED)
  //   const ak_tensor* d_initial_state, [N, H, K, V] float32, or NULL
  //   const ak_tensor* saved)         a buffer its forward filled (saved_written 1), or NULL
  ak_delta_rule_bwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // ak_status ak_delta_rule_decode(
  //   const ak_tensor* q,         [B, HK, K] float16 | bfloat16 | float32
  //   const ak_tensor* k,         [B, HK, K] dtype of q
  //   const ak_tensor* v,         [B, H, V]  dtype of q
  //   const ak_tensor* g,         [B, H] float32, or NULL unless AK_DELTA_GATED
  //   const ak_tensor* beta,      [B, H] float32
  //   const ak_tensor* state,     [B, H, K, V] float32 or dtype of q
  //   double scale, int32_t flags,
  //   const ak_tensor* output,    [B, H, V] dtype of q
  //   const ak_tensor* new_state) [B, H, K, V] dtype of state; may be state itself (in place)
  ak_delta_rule_decode: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // ak_status ak_gla_fwd(
  //   const ak_tensor* q,             [B, T, HK, K] float16 | bfloat16 | float32, last dim contiguous
  //   const ak_tensor* k,             [B, T, HK, K] dtype of q
  //   const ak_tensor* v,             [B, T, H, V]  dtype of q
  //   const ak_tensor* gk,            [B, T, H, K] float32, or NULL
  //   const ak_tensor* g,             [B, T, H] float32, or NULL
  //   const ak_tensor* g_gamma,       [H] float32, or NULL
  //   const ak_tensor* initial_state, [N, H, K, V] float32, or NULL
  //   const ak_tensor* cu_seqlens,    [N + 1] int32, or NULL
  //   double scale, int32_t flags,    flags: AK_GLA_RECURRENT | AK_GLA_NORMALIZE
  //   const ak_tensor* output,        [B, T, H, V] dtype of q
  //   const ak_tensor* final_state,   [N, H, K, V] float32, or NULL
  //   const ak_tensor* chunk_states,  [B, NT + 1, H, K, V] float32, or NULL (fixed length only)
  //   double normalize_eps)           added to each normaliser with AK_GLA_NORMALIZE
  ak_gla_fwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "f64",
    ],
    result: "i32",
  },
  // ak_status ak_gla_bwd(
  //   q, k, v, gk, g, g_gamma, initial_state, cu_seqlens as in ak_gla_fwd,
  //   const ak_tensor* chunk_states,  the forward's [B, NT + 1, H, K, V] float32, or NULL (recompute)
  //   const ak_tensor* d_output,      [B, T, H, V] dtype of q
  //   const ak_tensor* d_final_state, [N, H, K, V] float32, or NULL
  //   double scale, int32_t flags,
  //   const ak_tensor* dq,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dk,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dv,            [B, T, H, V]  dtype of q
  //   const ak_tensor* dgk,           [B, T, H, K] float32; required with gk, else NULL
  //   const ak_tensor* dg,            [B, T, H] float32 with g or g_gamma (NULL: not computed), else NULL
  //   const ak_tensor* d_initial_state, [N, H, K, V] float32, or NULL
  //   double normalize_eps)           with AK_GLA_NORMALIZE: the forward's
  ak_gla_bwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
    ],
    result: "i32",
  },
  // ak_status ak_gla_decode(
  //   const ak_tensor* q,         [B, HK, K] float16 | bfloat16 | float32
  //   const ak_tensor* k,         [B, HK, K] dtype of q
  //   const ak_tensor* v,         [B, H, V]  dtype of q
  //   const ak_tensor* gk,        [B, H, K] float32, or NULL
  //   const ak_tensor* g,         [B, H] float32, or NULL
  //   const ak_tensor* g_gamma,   [H] float32, or NULL
  //   const ak_tensor* state,     [B, H, K, V] float32
  //   double scale,
  //   const ak_tensor* output,    [B, H, V] dtype of q
  //   const ak_tensor* new_state) [B, H, K, V] float32; may be state itself (in place)
  ak_gla_decode: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // Feature-map linear attention's element-wise stages (attnkit_linear.h, AK_FMAP_*):
  // ak_status ak_fmap_features(const ak_tensor* dst, const ak_tensor* x, const ak_tensor* cos /* or NULL */,
  //                            const ak_tensor* sin /* or NULL */, int32_t phi, int32_t factor, int32_t token_dim)
  ak_fmap_features: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "i32", "i32", "i32"],
    result: "i32",
  },
  // ak_status ak_fmap_feature_grad(const ak_tensor* dx, const ak_tensor* x, const ak_tensor* d_features,
  //                                const ak_tensor* cos, const ak_tensor* sin, int32_t phi, int32_t factor,
  //                                int32_t token_dim)
  ak_fmap_feature_grad: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "i32", "i32", "i32"],
    result: "i32",
  },
  // ak_status ak_fmap_values(const ak_tensor* dst, const ak_tensor* v)
  ak_fmap_values: { parameters: ["buffer", "buffer"], result: "i32" },
  // ak_status ak_fmap_normalise(const ak_tensor* dst, const ak_tensor* num, double eps, int32_t factor,
  //                             int32_t token_dim)
  ak_fmap_normalise: { parameters: ["buffer", "buffer", "f64", "i32", "i32"], result: "i32" },
  // ak_status ak_fmap_normalise_grad(const ak_tensor* dst, const ak_tensor* d_output, const ak_tensor* num,
  //                                  double eps, int32_t factor, int32_t token_dim)
  ak_fmap_normalise_grad: { parameters: ["buffer", "buffer", "buffer", "f64", "i32", "i32"], result: "i32" },
  // ak_status ak_fmap_bidirectional(const ak_tensor* out, const ak_tensor* q, const ak_tensor* k,
  //                                 const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
  //                                 const ak_tensor* sums, int32_t phi, int32_t normalised, double eps,
  //                                 int32_t token_dim)
  ak_fmap_bidirectional: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i32",
      "i32",
      "f64",
      "i32",
    ],
    result: "i32",
  },
  // ak_status ak_fmap_bidirectional_grad(const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv,
  //                                      const ak_tensor* d_output, const ak_tensor* q, const ak_tensor* k,
  //                                      const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
  //                                      const ak_tensor* sums, const ak_tensor* d_sums, const ak_tensor* r_rows,
  //                                      const ak_tensor* dd, int32_t phi, int32_t normalised, double eps,
  //                                      int32_t token_dim)
  ak_fmap_bidirectional_grad: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i32",
      "i32",
      "f64",
      "i32",
    ],
    result: "i32",
  },
  // Causal depthwise convolution (attnkit_linear.h, AK_CONV_*):
  // ak_status ak_causal_conv1d_fwd(const ak_tensor* x,             [B, T, C] float16 | bfloat16 | float32
  //                                const ak_tensor* weight,        [C, W] float32 or x's dtype, contiguous
  //                                const ak_tensor* initial_state, [N, W - 1, C] x's dtype, or NULL
  //                                const ak_tensor* cu_seqlens,    [N + 1] int32, or NULL
  //                                int32_t activation,             AK_CONV_NONE | AK_CONV_SILU
  //                                const ak_tensor* output,        [B, T, C] x's dtype
  //                                const ak_tensor* final_state)   [N, W - 1, C] x's dtype, or NULL
  ak_causal_conv1d_fwd: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "i32", "buffer", "buffer"],
    result: "i32",
  },
  // ak_status ak_causal_conv1d_bwd(const ak_tensor* x, const ak_tensor* weight,
  //                                const ak_tensor* initial_state,   or NULL
  //                                const ak_tensor* cu_seqlens,      or NULL
  //                                const ak_tensor* d_output,        [B, T, C] x's dtype
  //                                const ak_tensor* d_final_state,   [N, W - 1, C] x's dtype, or NULL
  //                                int32_t activation,
  //                                const ak_tensor* dx,              [B, T, C] x's dtype, or NULL
  //                                const ak_tensor* dweight,         [C, W] float32 or weight's dtype, or NULL
  //                                const ak_tensor* d_initial_state) [N, W - 1, C] x's dtype, or NULL
  ak_causal_conv1d_bwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i32",
      "buffer",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // The paged decode step (attnkit_linear.h, AK_DECODE_*):
  // ak_status ak_paged_decode(
  //   const ak_tensor* packed_qkv,        [B, 2 HK K + H V] float16 | bfloat16 | float32
  //   const ak_tensor* raw_gate,          [1, B, H] or [1, B, H, K] (AK_DECODE_PER_CHANNEL)
  //   const ak_tensor* raw_beta,          [1, B, H]
  //   const ak_tensor* a_log,             [H] float32
  //   const ak_tensor* dt_bias,           [H] or [H, K] float32
  //   const ak_tensor* state_cache,       [num_slots, H, V, K] float32 | bfloat16, updated in place
  //   const ak_tensor* state_indices,     [B] int32
  //   const ak_tensor* has_initial_state, [B] bool, or NULL
  //   double scale, double lower_bound, int32_t flags,
  //   const ak_tensor* output)            [1, B, H, V] dtype of packed_qkv
  ak_paged_decode: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "f64",
      "i32",
      "buffer",
    ],
    result: "i32",
  },
  // The causal convolution over a paged history pool (attnkit_linear.h):
  // ak_status ak_paged_conv1d(
  //   const ak_tensor* x,                 [B, T, C] or [B, C] float16 | bfloat16 | float32
  //   const ak_tensor* weight,            [C, W] float32 or x's dtype
  //   const ak_tensor* state_cache,       [num_slots, W - 1, C] x's dtype, updated in place
  //   const ak_tensor* state_indices,     [N] int32, or NULL ([B, C] only)
  //   const ak_tensor* has_initial_state, [N] bool, or NULL
  //   const ak_tensor* cu_seqlens,        [N + 1] int32, or NULL
  //   int32_t activation,                 AK_CONV_NONE = 0 | AK_CONV_SILU = 1
  //   const ak_tensor* output)            x's shape and dtype
  ak_paged_conv1d: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "buffer", "i32", "buffer"],
    result: "i32",
  },
  // States between a pool and per-sequence tensors (attnkit_linear.h, AK_POOL_*):
  // ak_status ak_state_pool_copy(
  //   const ak_tensor* state_cache,       [num_slots, ...] float32 | bfloat16
  //   const ak_tensor* state_indices,     [N] int32
  //   const ak_tensor* has_initial_state, [N] bool, or NULL
  //   const ak_tensor* states,            [N, ...] float32 contiguous, or with its last two dims swapped
  //   int32_t mode)                       AK_POOL_GATHER = 0 | AK_POOL_SCATTER = 1, | AK_POOL_TRUSTED_INDICES = 2
  ak_state_pool_copy: { parameters: ["buffer", "buffer", "buffer", "buffer", "i32"], result: "i32" },
  // Zeroes the output rows of padding sequences (attnkit_linear.h):
  // ak_status ak_zero_padding_rows(
  //   const ak_tensor* output,        [B, T, ...] contiguous, any dtype, in place
  //   const ak_tensor* state_indices, [N] int32: <= 0 marks padding
  //   const ak_tensor* cu_seqlens)    [N + 1] int32 | int64 (B = 1), or NULL (N = B)
  ak_zero_padding_rows: { parameters: ["buffer", "buffer", "buffer"], result: "i32" },
  // The replay plan of a paged chunked call with a replay state (attnkit_linear.h):
  // ak_status ak_replay_plan(
  //   const ak_tensor* state_indices,      [N] int32
  //   const ak_tensor* has_initial_state,  [N] bool, or NULL
  //   const ak_tensor* counts,             [num_slots] int32
  //   const ak_tensor* cu_seqlens,         [N + 1] int32 (B = 1), or NULL (N = B)
  //   int64_t B, int64_t T,
  //   const ak_tensor* cu_a, cu_b,         int32 [N + 1] each, written
  //   const ak_tensor* plan,               int32 [2 B T + 191 N], written
  //   int32_t flags)                       AK_REPLAY_TRUSTED = 1
  ak_replay_plan: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "i64", "i64", "buffer", "buffer", "buffer", "i32"],
    result: "i32",
  },
  // ak_status ak_replay_rows(const ak_tensor* first, const ak_tensor* second, const ak_tensor* codes,
  //                          const ak_tensor* out)
  ak_replay_rows: { parameters: ["buffer", "buffer", "buffer", "buffer"], result: "i32" },
  // ak_status ak_replay_keep(const ak_tensor* run, const ak_tensor* cache, const ak_tensor* plan,
  //                          const ak_tensor* state_indices)
  ak_replay_keep: { parameters: ["buffer", "buffer", "buffer", "buffer"], result: "i32" },
  // ak_status ak_replay_commit(const ak_tensor* counts, const ak_tensor* plan, const ak_tensor* state_indices)
  ak_replay_commit: { parameters: ["buffer", "buffer", "buffer"], result: "i32" },
  // Gate transforms (attnkit_linear.h, AK_GATE_*):
  // ak_status ak_gate_transform_fwd(
  //   const ak_tensor* raw,      [..., H] or [..., H, D] float16 | bfloat16 | float32 | float64, any strides
  //   const ak_tensor* a_log,    [H] float32 contiguous
  //   const ak_tensor* dt_bias,  [H] (per head) or [H, D] (per channel) float32 contiguous
  //   int32_t kind,              AK_GATE_SOFTPLUS = 0 | AK_GATE_BOUNDED = 1
  //   double lower_bound,        in [-3e38, 0] (bounded); 0 (softplus)
  //   int32_t flags,             AK_GATE_FASTMATH = 1
  //   const ak_tensor* gate)     shape of raw, float32, any non-overlapping strides
  ak_gate_transform_fwd: {
    parameters: ["buffer", "buffer", "buffer", "i32", "f64", "i32", "buffer"],
    result: "i32",
  },
  // ak_status ak_gate_transform_bwd(
  //   const ak_tensor* raw, const ak_tensor* a_log, const ak_tensor* dt_bias,   as in the forward
  //   const ak_tensor* d_gate,     shape of raw, float32, any strides
  //   int32_t kind, double lower_bound, int32_t flags,
  //   const ak_tensor* d_raw,      shape and dtype of raw, any non-overlapping strides
  //   const ak_tensor* d_a_log,    [H] float32 contiguous
  //   const ak_tensor* d_dt_bias)  shape of dt_bias, float32 contiguous
  ak_gate_transform_bwd: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "i32", "f64", "i32", "buffer", "buffer", "buffer"],
    result: "i32",
  },
  // KDA (attnkit_linear.h, AK_KDA_*):
  // ak_status ak_kda_fwd(
  //   const ak_tensor* q,             [B, T, HK, K] float16 | bfloat16 | float32, last dim contiguous
  //   const ak_tensor* k,             [B, T, HK, K] dtype of q
  //   const ak_tensor* v,             [B, T, H, V]  dtype of q
  //   const ak_tensor* gate,          [B, T, H, K] float32 (natural-log decays per key channel)
  //   const ak_tensor* beta,          [B, T, H] float32
  //   const ak_tensor* initial_state, [N, H, K, V] float32 contiguous, or NULL
  //   const ak_tensor* cu_seqlens,    [N + 1] int32, or NULL
  //   double scale, int32_t flags,    AK_KDA_RECURRENT = 1 | AK_KDA_FASTMATH = 2
  //   const ak_tensor* output,        [B, T, H, V] dtype of q
  //   const ak_tensor* final_state)   [N, H, K, V] float32, or NULL
  ak_kda_fwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  // ak_status ak_kda_bwd(
  //   q, k, v, gate, beta, initial_state, cu_seqlens as in ak_kda_fwd,
  //   const ak_tensor* d_output,      [B, T, H, V] dtype of q
  //   const ak_tensor* d_final_state, [N, H, K, V] float32, or NULL
  //   double scale, int32_t flags,
  //   const ak_tensor* dq,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dk,            [B, T, HK, K] dtype of q
  //   const ak_tensor* dv,            [B, T, H, V]  dtype of q
  //   const ak_tensor* dgate,         [B, T, H, K] float32
  //   const ak_tensor* dbeta,         [B, T, H] float32
  //   const ak_tensor* d_initial_state) [N, H, K, V] float32, or NULL
  ak_kda_bwd: {
    parameters: [
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f64",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** ak_state_pool_copy's modes and ak_delta_rule_fwd_pool's pool_mode (attnkit_linear.h, AK_POOL_*). */
export const PoolMode = {
  GATHER: 0,
  SCATTER: 1,
  /** The caller vouches for the indices: a CUDA call reads nothing back. */
  TRUSTED_INDICES: 2,
} as const;

/** Flags of the delta-rule entries (`AK_DELTA_*` in attnkit_linear.h). */
export const DeltaFlags = {
  /** g is given. */
  GATED: 1,
  /** L2-normalise q and k inside the kernel. */
  QK_L2NORM: 2,
  /** Token-by-token algorithm instead of the chunked one. */
  RECURRENT: 4,
} as const;

/** Flags of the gated linear family's entries (`AK_GLA_*` in attnkit_linear.h). */
export const GlaFlags = {
  /** Token-by-token algorithm instead of the chunked one. */
  RECURRENT: 1,
  /** Without decays: each output row divided by its normaliser plus eps (the backward: its gradients). */
  NORMALIZE: 2,
} as const;

/** Flags of the KDA entries (`AK_KDA_*` in attnkit_linear.h). */
export const KdaFlags = {
  /** Token-by-token algorithm instead of the chunked one. */
  RECURRENT: 1,
  /** Approximate exponentials allowed (no effect on the exact CPU backend and CUDA general path). */
  FASTMATH: 2,
  /** The chunked kernels must serve the call (else refused, naming why). */
  IMPL_FUSED: 4,
  /** The exact general path, whatever the planner would pick. */
  IMPL_REFERENCE: 8,
} as const;
