// What every CUDA forward kernel of softmax attention receives, and the index arithmetic they share
// (sequence bounds, the key range a block of query rows can see, which key tiles need a mask).
// Plain C++ so the host dispatcher and the device kernels agree on one definition.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define AK_ATTN_HD __host__ __device__ __forceinline__
#else
#define AK_ATTN_HD inline
#endif

namespace ak::attention::cuda {

// "Unlimited" window side: large enough for any sequence, small enough that i + off + w never
// overflows int32.
constexpr int kWindowUnlimited = 1 << 30;

// What the kernels of both directions read of a call: the inputs, the extents, the scale, the soft
// cap and the window.
struct CallParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  // Element strides. Dense: batch, row (sequence position), head. Varlen: batch stride 0 and rows
  // index the packed token dimension. The last (head-dim) stride is 1.
  int64_t q_batch = 0, q_row = 0, q_head = 0;
  int64_t k_batch = 0, k_row = 0, k_head = 0;
  int64_t v_batch = 0, v_row = 0, v_head = 0;

  int n_seq = 0;  // B, or the number of varlen sequences
  int hq = 0, hkv = 0, group = 1;
  int d = 0;            // head dim
  int sq = 0, skv = 0;  // dense lengths; for varlen the longest query / key sequence
  const int32_t* cu_q = nullptr;  // varlen: device cu_seqlens, else null
  const int32_t* cu_kv = nullptr;

  float sm_scale = 1.0f;
  float softcap = 0.0f;      // 0: none
  float softcap_mul = 0.0f;  // sm_scale / softcap: tanh argument per raw score
  float exp_scale = 0.0f;    // multiplies a score into log2 units (the direction's own convention)
  int window_left = kWindowUnlimited, window_right = kWindowUnlimited;
};

struct FwdParams : CallParams {
  void* o = nullptr;
  float* lse = nullptr;  // null when the caller wants no LSE
  int64_t o_batch = 0, o_row = 0, o_head = 0;
  int64_t lse_batch = 0, lse_head = 0, lse_row = 0;
  int64_t total_q = 0, total_kv = 0;  // varlen: rows of the packed tensors

  // float8_e4m3 inputs (dense only): float32 [n_seq, hkv] dequantisation scales, the output dtype,
  // and v pointing at V transposed to [n_seq, hkv, d, vt_keys] with keys reordered inside each 16
  // (fwd/fp8.cu). Null / 0 for 16-bit inputs.
  const float* q_scale = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int32_t out_dtype = 0;
  int vt_keys = 0;

  int num_m_blocks = 0;   // query blocks of the longest sequence, for the grid
  int heads_per_section = 1;  // sm90 tile order: (batch, head) pairs whose K/V share L2
};

struct SeqBounds {
  int q_off, q_len;    // first row of the sequence in q/o (0 when dense), its length
  int kv_off, kv_len;
};

#ifdef __CUDACC__
__device__ __forceinline__ SeqBounds seq_bounds(const FwdParams& p, int b) {
  if (p.cu_q != nullptr) {
    const int q0 = p.cu_q[b], q1 = p.cu_q[b + 1];
    const int k0 = p.cu_kv[b], k1 = p.cu_kv[b + 1];
    return {q0, q1 - q0, k0, k1 - k0};
  }
  return {0, p.sq, 0, p.skv};
}
#endif

// The key tiles [n_lo, n_hi) that query rows [m0, m1) of a sequence can see, and the mask bounds.
// Query row i sits at key position i + off (off = kv_len - q_len, bottom-right alignment) and sees
// keys [i + off - left, i + off + right], clipped to [0, kv_len).
struct KeyRange {
  int n_lo, n_hi;  // empty when n_hi <= n_lo
  // A tile starting at key n0 needs no mask when n0 >= unmasked_from && n0 + block_n <= unmasked_to.
  int unmasked_from, unmasked_to;
};

AK_ATTN_HD KeyRange key_range(int m0, int m1, int q_len, int kv_len, int left, int right, int block_n) {
  const int off = kv_len - q_len;
  // Bounds in int64 would be safer, but window sides are clamped to 2^30 and lengths are < 2^30.
  int lo = m0 + off - left;
  lo = lo < 0 ? 0 : lo;
  int hi = (m1 - 1) + off + right + 1;
  hi = hi > kv_len ? kv_len : hi;
  KeyRange r;
  if (m1 <= m0 || hi <= lo) {
    r.n_lo = 0;
    r.n_hi = 0;
  } else {
    r.n_lo = lo / block_n;
    r.n_hi = (hi + block_n - 1) / block_n;
  }
  // Every row of the block admits keys >= (m1 - 1) + off - left and <= m0 + off + right.
  r.unmasked_from = (m1 - 1) + off - left;
  int to = m0 + off + right + 1;
  r.unmasked_to = to > kv_len ? kv_len : to;
  return r;
}

AK_ATTN_HD bool tile_needs_mask(const KeyRange& r, int n0, int block_n) {
  return n0 < r.unmasked_from || n0 + block_n > r.unmasked_to;
}

// Work tile t of a launch -> (query block, head, sequence). Tiles come in sections of
// `heads_per_section` (sequence, head) pairs whose K/V fit in L2 together; within a section the
// query blocks run from the last (the most keys under a causal mask) to the first, so long tiles
// start early and short ones fill the tail.
struct TileCoord {
  int m_block, h, b;
};

AK_ATTN_HD TileCoord decode_tile(int t, int num_m, int hq, int n_seq, int heads_per_section) {
  const int total = hq * n_seq;
  const int per_section = num_m * heads_per_section;
  const int section = t / per_section;
  const int first = section * heads_per_section;
  const int width = total - first < heads_per_section ? total - first : heads_per_section;
  const int inner = t - section * per_section;
  const int bh = first + inner % width;
  return {num_m - 1 - inner / width, bh % hq, bh / hq};
}

// The general kernel's launcher arguments.
struct FwdGeneralArgs {
  FwdParams p;
  bool aligned = true;  // q, k, v and their strides allow 16-byte copies
};

}  // namespace ak::attention::cuda
