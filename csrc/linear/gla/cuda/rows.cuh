// Row kernels of the linear backwards' dispatch: zeroing the gradient rows of tokens past the last packed
// sequence, converting grouped heads' fp32 sums into the strided 16-bit output, and summing the
// gradients of a backward run by key pieces.
#pragma once

#include "arch/sm80.cuh"
#include "linear/common/views.cuh"

namespace ak::linear::cuda::gla {

// Zeroes rows [t_begin, T) of batch row 0 of a token-major view (W elements per head): gradients of
// the tokens past the last packed sequence.
template <class T>
__global__ void gla_zero_rows_kernel(Rows<T> x, int t_begin, const int32_t* t_begin_at, int T_, int heads, int W) {
  if (t_begin_at != nullptr) t_begin = min(max(*t_begin_at, 0), T_);
  const int64_t total = static_cast<int64_t>(T_ - t_begin) * heads * W;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / (static_cast<int64_t>(heads) * W), rem = e - t * heads * W;
    const int hh = static_cast<int>(rem / W), c = static_cast<int>(rem - static_cast<int64_t>(hh) * W);
    x.row(0, t_begin + t, hh)[c] = from_float<T>(0.f);
  }
}

// dq / dk of grouped heads: the fp32 sums [B, T, HK, K] converted into the strided output.
template <class T>
__global__ void gla_convert_rows_kernel(const float* src, Rows<T> dst, int B, int T_, int heads, int W) {
  const int64_t total = static_cast<int64_t>(B) * T_ * heads * W;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(e % W);
    const int64_t r = e / W;
    const int hh = static_cast<int>(r % heads);
    const int64_t bt = r / heads;
    const int t = static_cast<int>(bt % T_), b = static_cast<int>(bt / T_);
    dst.row(b, t, hh)[c] = from_float<T>(src[e]);
  }
}

// acc = (first ? 0 : acc) + piece over `count` contiguous elements: the value gradients of a backward run
// by key pieces, summed in fp32 (converted once at the end by gla_convert_rows_kernel).
template <class T>
__global__ void gla_accumulate_kernel(float* acc, const T* piece, int64_t count, bool first) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    acc[e] = (first ? 0.f : acc[e]) + to_float(piece[e]);
  }
}

// dst[b, t, h] += src[(b * T + t) * heads + h]: a per-token decay's gradient summed over the key pieces.
template <class F>
__global__ void gla_add_scalars_kernel(Rows<F> dst, const F* src, int B, int T_, int heads) {
  const int64_t total = static_cast<int64_t>(B) * T_ * heads;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int hh = static_cast<int>(e % heads);
    const int64_t bt = e / heads;
    *dst.row(bt / T_, bt % T_, hh) += src[e];
  }
}

}  // namespace ak::linear::cuda::gla
