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
  //   double scale, int32_t flags,    flags: AK_GLA_RECURRENT
  //   const ak_tensor* output,        [B, T, H, V] dtype of q
  //   const ak_tensor* final_state,   [N, H, K, V] float32, or NULL
  //   const ak_tensor* chunk_states)  [B, NT + 1, H, K, V] float32, or NULL (fixed length only)
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
  //   const ak_tensor* dg,            [B, T, H] float32; required with g or g_gamma, else NULL
  //   const ak_tensor* d_initial_state) [N, H, K, V] float32, or NULL
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
} as const satisfies Deno.ForeignLibraryInterface;

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
} as const;
