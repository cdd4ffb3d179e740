// The CUDA backward of the delta rule: what its stages share (the problem description, the views of
// its tensors). The math is derived in bench/NOTES_linear_bwd.md.
//
// Every stage works on chunks of C tokens of one sequence. Chunk-local intermediates live in a
// "padded" layout [heads][NCt * C][D]: chunk g of the whole call (sequences in order, each split
// into ceil(len / C) chunks) owns rows g * C .. g * C + C - 1, rows past the chunk's length are
// zero. Per-chunk states live as [H][NCt][K][V].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "linear/common/chunk_map.cuh"
#include "linear/common/views.cuh"

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

// The general path's launcher arguments (the fast path's stages take StageArgs, fast.cuh).
struct GeneralArgs {
  Problem p;
  int device = 0;
};

// ---- shared by both paths ----
// Sums the per-value-head gradients dq_h, dk_h (fp32, padded [H][P][K]) over each group of value
// heads, applies the L2-norm backward when asked, and writes dq, dk in the input dtype.
void launch_reduce_dqk(const Problem& p, const float* dq_heads, const float* dk_heads, cudaStream_t stream);
// Writes zeros into the rows of dq, dk, dv, dbeta, dg that no sequence covers (varlen, tokens at
// or past cu_seqlens[N]): nothing depends on them.
void launch_zero_uncovered(const Problem& p, int first_token, const int32_t* first_at, cudaStream_t stream);

}  // namespace ak::linear::cuda::bwd
