/**
 * Softmax-attention symbols of the C ABI (csrc/include/attnkit_attention.h). Optional tensors
 * (cu_seqlens, lse in the forward) pass `null` for NULL.
 *
 * @module
 */
export const attentionSymbols = {
  // ak_status ak_attention_fwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
  //                            const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
  //                            double softcap, int32_t flags, int32_t window_left, int32_t window_right,
  //                            const ak_tensor* output, const ak_tensor* lse)
  ak_attention_fwd: {
    parameters: [
      "buffer", // q
      "buffer", // k
      "buffer", // v
      "buffer", // cu_seqlens_q (or null)
      "buffer", // cu_seqlens_kv (or null)
      "f64", // sm_scale
      "f64", // softcap (0: none)
      "i32", // flags: AK_ATTN_CAUSAL = 1
      "i32", // window_left (-1: unlimited)
      "i32", // window_right (-1: unlimited)
      "buffer", // output
      "buffer", // lse (or null)
    ],
    result: "i32",
  },
  // ak_status ak_attention_fwd_fp8(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
  //                                const ak_tensor* q_scale, const ak_tensor* k_scale, const ak_tensor* v_scale,
  //                                double sm_scale, double softcap, int32_t flags, int32_t window_left,
  //                                int32_t window_right, const ak_tensor* output)
  ak_attention_fwd_fp8: {
    parameters: [
      "buffer", // q (float8_e4m3 [B, Sq, Hq, D])
      "buffer", // k
      "buffer", // v
      "buffer", // q_scale (float32 [B, Hkv])
      "buffer", // k_scale
      "buffer", // v_scale
      "f64", // sm_scale
      "f64", // softcap (0: none)
      "i32", // flags: AK_ATTN_CAUSAL = 1
      "i32", // window_left (-1: unlimited)
      "i32", // window_right (-1: unlimited)
      "buffer", // output (float16 | bfloat16 [B, Sq, Hq, D])
    ],
    result: "i32",
  },
  // ak_status ak_attention_bwd(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
  //                            const ak_tensor* output, const ak_tensor* d_output, const ak_tensor* lse,
  //                            const ak_tensor* cu_seqlens_q, const ak_tensor* cu_seqlens_kv, double sm_scale,
  //                            double softcap, int32_t flags, int32_t window_left, int32_t window_right,
  //                            const ak_tensor* dq, const ak_tensor* dk, const ak_tensor* dv)
  ak_attention_bwd: {
    parameters: [
      "buffer", // q
      "buffer", // k
      "buffer", // v
      "buffer", // output
      "buffer", // d_output
      "buffer", // lse
      "buffer", // cu_seqlens_q (or null)
      "buffer", // cu_seqlens_kv (or null)
      "f64", // sm_scale
      "f64", // softcap (0: none)
      "i32", // flags: AK_ATTN_CAUSAL = 1, AK_ATTN_DETERMINISTIC = 2
      "i32", // window_left (-1: unlimited)
      "i32", // window_right (-1: unlimited)
      "buffer", // dq
      "buffer", // dk
      "buffer", // dv
    ],
    result: "i32",
  },
  // ak_status ak_attention_decode(const ak_tensor* q, const ak_tensor* k, const ak_tensor* v,
  //                               const ak_tensor* lengths, const ak_tensor* block_table /* or NULL */,
  //                               int64_t page_size, double sm_scale, double softcap, int32_t flags,
  //                               const ak_tensor* output)
  ak_attention_decode: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "i64", "f64", "f64", "i32", "buffer"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** `flags` bits of the attention entries. */
export const AttentionFlags = {
  /** Causal mask, bottom-right aligned. */
  CAUSAL: 1,
  /** Backward: a fixed reduction order. */
  DETERMINISTIC: 2,
} as const;
