// The CUDA backward of the delta rule: what its stages share (problem description, chunk map,
// workspace layout, launchers). The math is derived in bench/NOTES_linear_bwd.md.
//
// Every stage works on chunks of C tokens of one sequence. Chunk-local intermediates live in a
// "padded" layout [heads][NCt * C][D]: chunk g of the whole call (sequences in order, each split
// into ceil(len / C) chunks) owns rows g * C .. g * C + C - 1, rows past the chunk's length are
// zero. Per-chunk states live as [H][NCt][K][V].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ak::linear::cuda::bwd {

// A token-major view [B, T, heads, D] with a contiguous last dimension (strides in elements).
struct RowView {
  const void* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __host__ __device__ int64_t offset(int64_t row, int64_t t, int64_t head) const {
    return row * sb + t * st + head * sh;
  }
};
// Same, writable.
struct OutView {
  void* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __host__ __device__ int64_t offset(int64_t row, int64_t t, int64_t head) const {
    return row * sb + t * st + head * sh;
  }
};

// Which tokens each chunk covers. Fixed length: computed; varlen: tables built on the host.
struct ChunkMap {
  const int4* seq = nullptr;    // varlen: per sequence {row, begin, end, first chunk}
  const int4* chunk = nullptr;  // varlen: per chunk {row, t0, len, sequence}
  int T = 0;                    // tokens per batch row
  int nc_fixed = 0;             // fixed length: chunks per sequence
  int C = 64;

  // {row, begin, end, first chunk} of sequence n.
  __device__ __forceinline__ int4 seq_of(int n) const {
    if (seq != nullptr) return seq[n];
    return make_int4(n, 0, T, n * nc_fixed);
  }
  // {row, first token, length, sequence} of chunk g.
  __device__ __forceinline__ int4 chunk_of(int g) const {
    if (chunk != nullptr) return chunk[g];
    const int n = g / nc_fixed, c = g - n * nc_fixed;
    const int t0 = c * C;
    return make_int4(n, t0, min(C, T - t0), n);
  }
};

// What every stage needs to know about the call.
struct Problem {
  int N = 0, H = 0, HK = 0, group = 1, K = 0, V = 0, C = 64;
  int NCt = 0;  // chunks in the whole call
  float scale = 1.f;
  bool gated = false, l2norm = false;
  int dtype = 0;  // AK_FLOAT32 / AK_FLOAT16 / AK_BFLOAT16 of q, k, v, d_output, dq, dk, dv
  ChunkMap map;
  RowView q, k, v, dout, g, beta;  // g, beta: float32 [B, T, H] (D = 1)
  const float* initial_state = nullptr;  // [N, H, K, V] or null
  const float* d_final_state = nullptr;  // [N, H, K, V] or null
  OutView dq, dk, dv, dbeta, dg;         // dg only when gated
  float* d_initial_state = nullptr;      // [N, H, K, V] or null
  // The forward's saved per-chunk states and v_new (chunks of 64; [H][NCt][K][V] then [H][NCt * 64][V],
  // the fast path's own layouts), or null: the fast path then skips its states stage.
  const void* saved = nullptr;
  __host__ __device__ int64_t padded() const { return static_cast<int64_t>(NCt) * C; }
};

// L2 normalisation of q and k: x * rsqrt(sum(x^2) + eps), as the forward and the CPU backend do.
constexpr float kL2NormEps = 1e-6f;

// ---- the general path: fp32 SIMT stages (any K, V <= 256, chunk 32/64/128, every dtype) ----
void run_general(const Problem& p, cudaStream_t stream, int device);

// ---- the tensor-core path: bf16/f16, K = V in {64, 128, 256}, chunk 64 ----
bool fast_supported(const Problem& p, int device);
void run_fast(const Problem& p, cudaStream_t stream, int device);

// ---- shared by both paths ----
// Sums the per-value-head gradients dq_h, dk_h (fp32, padded [H][P][K]) over each group of value
// heads, applies the L2-norm backward when asked, and writes dq, dk in the input dtype.
void launch_reduce_dqk(const Problem& p, const float* dq_heads, const float* dk_heads, cudaStream_t stream);
// Writes zeros into the rows of dq, dk, dv, dbeta, dg that no sequence covers (varlen, tokens at
// or past cu_seqlens[N]): nothing depends on them.
void launch_zero_uncovered(const Problem& p, int first_token, cudaStream_t stream);

}  // namespace ak::linear::cuda::bwd
