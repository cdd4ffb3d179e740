// A batched fp32 SIMT GEMM for the general path of the delta-rule backward (general.cu):
//
//   Out[b] (M x N) = alpha * X[b] (M x R) * Y[b] (N x R)^T      (or += when accumulate)
//
// The reduction index r is contiguous in both X and Y (rows of a padded chunk or of a state),
// which is how every chunk-local product of the backward is laid out. A batch item is a (chunk g,
// head h) pair; each operand finds its matrix from (g, h) with a chunk stride, a head stride and a
// head divisor (k, q buffers are shared by `group` value heads: head h reads head h / group).
//
// Tiling: a block of 256 threads computes a 64 x 64 tile of Out, each thread a 4 x 4 register tile,
// stepping through R in slices of 16. The slices are stored transposed in shared memory (r-major,
// rows padded by 4 floats) so the inner loop reads both operands as float4 (broadcast for X, 16
// consecutive float4 for Y) and the transposing stores have at most 2-way bank conflicts. The next
// slice is loaded into registers while the current one is multiplied.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ak::linear::cuda::bwd::general_gemm {

constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileR = 16;
constexpr int kGemmThreads = 256;
constexpr int kPad = 4;  // row padding of the transposed tiles (keeps float4 alignment)

// Where the matrix of batch item (g, h) starts: p + g * chunk_stride + (h / head_div) * head_stride.
// Rows are `ld` floats apart.
struct Operand {
  const float* p = nullptr;
  int64_t ld = 0, chunk_stride = 0, head_stride = 0;
  int head_div = 1;
  __device__ __forceinline__ const float* at(int g, int h) const {
    return p + static_cast<int64_t>(g) * chunk_stride + static_cast<int64_t>(h / head_div) * head_stride;
  }
};

struct Output {
  float* p = nullptr;
  int64_t ld = 0, chunk_stride = 0, head_stride = 0;
  __device__ __forceinline__ float* at(int g, int h) const {
    return p + static_cast<int64_t>(g) * chunk_stride + static_cast<int64_t>(h) * head_stride;
  }
};

struct Shape {
  int M = 0, N = 0, R = 0;
  int chunks = 0, heads = 0;  // batch: chunks x heads
  float alpha = 1.f;
  bool accumulate = false;
};

// Grid: x = chunk * tiles_n * tiles_m + tile, y = head (chunks can exceed gridDim.y's limit).
__global__ void __launch_bounds__(kGemmThreads) gemm_xyt(Shape s, Operand X, Operand Y, Output O) {
  __shared__ __align__(16) float xs[kTileR][kTileM + kPad];
  __shared__ __align__(16) float ys[kTileR][kTileN + kPad];
  const int tiles_m = (s.M + kTileM - 1) / kTileM, tiles_n = (s.N + kTileN - 1) / kTileN;
  const int per_chunk = tiles_m * tiles_n;
  const int g = blockIdx.x / per_chunk, tile = blockIdx.x - g * per_chunk;
  const int h = blockIdx.y;
  const int m0 = (tile / tiles_n) * kTileM, n0 = (tile % tiles_n) * kTileN;
  const float* x = X.at(g, h);
  const float* y = Y.at(g, h);
  const int tid = threadIdx.x;

  // Loader mapping: thread loads column lr of the slice for rows lrow + 16 * k (k = 0..3); a warp
  // reads two 64-byte row pieces per load.
  const int lr = tid % kTileR, lrow = tid / kTileR;
  // Compute mapping: rows ty * 4 .. +3, columns tx * 4 .. +3.
  const int tx = tid % 16, ty = tid / 16;

  float xv[4], yv[4];
  auto load = [&](int r0) {
    const int r = r0 + lr;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int m = m0 + lrow + 16 * k, n = n0 + lrow + 16 * k;
      xv[k] = (r < s.R && m < s.M) ? x[m * X.ld + r] : 0.f;
      yv[k] = (r < s.R && n < s.N) ? y[n * Y.ld + r] : 0.f;
    }
  };
  float acc[4][4] = {};
  load(0);
  for (int r0 = 0; r0 < s.R; r0 += kTileR) {
    __syncthreads();  // the previous slice has been consumed
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      xs[lr][lrow + 16 * k] = xv[k];
      ys[lr][lrow + 16 * k] = yv[k];
    }
    __syncthreads();
    if (r0 + kTileR < s.R) load(r0 + kTileR);
#pragma unroll
    for (int r = 0; r < kTileR; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[r][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&ys[r][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
  }
  float* o = O.at(g, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= s.M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= s.N) continue;
      float* dst = o + m * O.ld + n;
      const float v = s.alpha * acc[i][j];
      *dst = s.accumulate ? *dst + v : v;
    }
  }
}

}  // namespace ak::linear::cuda::bwd::general_gemm
