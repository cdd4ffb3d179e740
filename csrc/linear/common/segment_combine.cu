// The sequential step of a state pass split into segments: entry states of segments 1 .. Pm from the
// segments' summaries, E_1 = N_0 and E_{j+1} = M_j E_j + N_j (fp32 D x D products, tiny next to the
// passes around it). One block per (sequence, head, 32 state columns): a column block of E only
// depends on the same column block of the previous E, so it stays in shared memory throughout.
#include "cuda/runtime.cuh"
#include "linear/common/segments.h"

namespace ak::linear::cuda {
namespace {

constexpr int kCombineCols = 32;
constexpr int kCombineThreads = 256;

template <int D>
__global__ void __launch_bounds__(kCombineThreads) segment_combine_kernel(const float* fwd, const float* tr,
                                                                          float* entry, int Pm) {
  constexpr int kRows = D / (kCombineThreads / 32);  // rows per thread: r0 + 8 i
  extern __shared__ float e_tile[];  // [D][32]: E_j's column block
  const int col_blocks = D / kCombineCols;
  const int nh = blockIdx.x / col_blocks, c0 = (blockIdx.x - nh * col_blocks) * kCombineCols;
  const int64_t DD = static_cast<int64_t>(D) * D;
  const int64_t base = static_cast<int64_t>(nh) * Pm * DD;
  const int tid = threadIdx.x, col = tid & 31, r0 = tid >> 5;  // a warp a row set, lanes the columns
  for (int r = r0; r < D; r += kCombineThreads / 32) {
    const float v = fwd[base + static_cast<int64_t>(r) * D + c0 + col];
    e_tile[r * kCombineCols + col] = v;
    entry[base + static_cast<int64_t>(r) * D + c0 + col] = v;
  }
  __syncthreads();
  for (int j = 1; j < Pm; ++j) {
    const float* m = tr + base + (j - 1) * DD;  // M_j
    const float* nj = fwd + base + j * DD;      // N_j
    float* out = entry + base + j * DD;         // E_{j+1}
    float acc[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) acc[i] = nj[static_cast<int64_t>(r0 + 8 * i) * D + c0 + col];
    for (int k = 0; k < D; k += 4) {
      float e[4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) e[kk] = e_tile[(k + kk) * kCombineCols + col];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float4 mv = __ldg(reinterpret_cast<const float4*>(m + static_cast<int64_t>(r0 + 8 * i) * D + k));
        acc[i] = fmaf(mv.x, e[0], fmaf(mv.y, e[1], fmaf(mv.z, e[2], fmaf(mv.w, e[3], acc[i]))));
      }
    }
    __syncthreads();  // every thread has read E_j
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      e_tile[(r0 + 8 * i) * kCombineCols + col] = acc[i];
      out[static_cast<int64_t>(r0 + 8 * i) * D + c0 + col] = acc[i];
    }
    __syncthreads();
  }
}

}  // namespace

void launch_segment_combine(const float* fwd, const float* tr, float* entry, int N, int H, int D, int Pm,
                            cudaStream_t stream) {
  if (N == 0 || H == 0 || Pm <= 0) return;
  const int smem = D * kCombineCols * static_cast<int>(sizeof(float));
  const unsigned blocks = static_cast<unsigned>(N * H * (D / kCombineCols));
  if (D == 64) segment_combine_kernel<64><<<blocks, kCombineThreads, smem, stream>>>(fwd, tr, entry, Pm);
  else if (D == 128) segment_combine_kernel<128><<<blocks, kCombineThreads, smem, stream>>>(fwd, tr, entry, Pm);
  else segment_combine_kernel<256><<<blocks, kCombineThreads, smem, stream>>>(fwd, tr, entry, Pm);
  ak::cuda::check_launch("segment_combine_kernel");
}

}  // namespace ak::linear::cuda
