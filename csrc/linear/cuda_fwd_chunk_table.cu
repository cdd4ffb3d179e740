// The varlen chunk tables of the fast chunked forward: sequence n's chunks are
// chunk_first[n] .. chunk_first[n + 1] - 1 and chunk_seq names each chunk's sequence. One block scans
// the per-sequence chunk counts ceil(len / C), 1024 sequences at a time.
#include "../cuda/runtime.cuh"
#include "cuda_fwd_kernels.h"

namespace ak::linear::cuda::fwd {
namespace {

constexpr int kTableThreads = 1024;

__global__ void __launch_bounds__(kTableThreads)
    chunk_table_kernel(const int32_t* cu, int N, int C, int32_t* chunk_first, int32_t* chunk_seq) {
  __shared__ int warp_total[kTableThreads / 32];
  __shared__ int carry;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < N; base += kTableThreads) {
    const int n = base + tid;
    const int count = n < N ? (cu[n + 1] - cu[n] + C - 1) / C : 0;
    int x = count;  // inclusive scan within the warp
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, m);
      if (lane >= m) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int s = warp_total[lane];
#pragma unroll
      for (int m = 1; m < 32; m <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, s, m);
        if (lane >= m) s += y;
      }
      warp_total[lane] = s;  // inclusive totals of warps 0..lane
    }
    __syncthreads();
    const int start = carry + (warp > 0 ? warp_total[warp - 1] : 0) + x - count;
    if (n < N) {
      chunk_first[n] = start;
      for (int j = 0; j < count; ++j) chunk_seq[start + j] = n;
    }
    __syncthreads();  // everyone has read carry
    if (tid == kTableThreads - 1) carry = start + count;
    __syncthreads();
  }
  if (tid == 0) chunk_first[N] = carry;
}

}  // namespace

void launch_chunk_table(const int32_t* cu, int N, int C, int32_t* chunk_first, int32_t* chunk_seq,
                        cudaStream_t stream) {
  chunk_table_kernel<<<1, kTableThreads, 0, stream>>>(cu, N, C, chunk_first, chunk_seq);
  ak::cuda::check_launch("chunk_table_kernel");
}

}  // namespace ak::linear::cuda::fwd
