// The CUDA backend of the feature-map stages: a warp per row (adjacent lanes on adjacent columns, so
// a row is read and written in whole segments), enough blocks to fill the device and grid-stride
// loops for the rest. Every stage is one pass over its tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "linear/feature_map/backend.h"

namespace ak::linear::feature_map::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::stream;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct WarpTotal {
  __device__ float operator()(float v) const {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  }
};

// Each warp takes rows warp, warp + warps, ...; the loop is uniform across a warp (the shuffles of
// normalise_grad need every lane).
template <class Args, class Row>
__global__ void __launch_bounds__(kThreads) rows_kernel(const Args a, Row row) {
  const int lane = threadIdx.x % 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t r = first; r < a.rows.count; r += step) row(a, r, lane);
}

template <class Args, class Row>
void launch(const Args& a, Row row, const char* name) {
  DeviceGuard guard(a.rows.device);
  const int64_t wanted = (a.rows.count + kWarps - 1) / kWarps;
  const int64_t cap = static_cast<int64_t>(ak::cuda::props(a.rows.device).multiProcessorCount) * 16;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  rows_kernel<<<grid, kThreads, 0, stream(a.rows.device)>>>(a, row);
  check_launch(name);
}

struct FeaturesRow {
  __device__ void operator()(const FeaturesArgs& a, int64_t r, int lane) const { features_row(a, r, lane, 32); }
};
struct FeatureGradRow {
  __device__ void operator()(const FeatureGradArgs& a, int64_t r, int lane) const {
    feature_grad_row(a, r, lane, 32);
  }
};
struct ValuesRow {
  __device__ void operator()(const ValuesArgs& a, int64_t r, int lane) const { values_row(a, r, lane, 32); }
};
struct NormaliseRow {
  __device__ void operator()(const NormaliseArgs& a, int64_t r, int lane) const { normalise_row(a, r, lane, 32); }
};
struct NormaliseGradRow {
  __device__ void operator()(const NormaliseGradArgs& a, int64_t r, int lane) const {
    normalise_grad_row(a, r, lane, 32, WarpTotal{});
  }
};

// Row r's per-token factor and cosformer weights (1, 1 and 0 without them): the features' and their
// gradient's, which take them in the same order.
struct TokenWeights {
  float f = 1.f, wc = 1.f, ws = 0.f;
};
template <class Args>
__device__ __forceinline__ TokenWeights token_weights(const Args& a, int64_t r) {
  int64_t i[3];
  a.rows.index(r, i);
  TokenWeights w;
  w.f = a.rows.factor_of(i);
  if (a.cos != nullptr) w.wc = a.cos[i[a.rows.token_dim]], w.ws = a.sin[i[a.rows.token_dim]];
  return w;
}

// The features of dense 16-bit rows, eight columns a thread in 16-byte pieces: a thread's row and
// column come from its index (one division per piece), and the token index only when a row factor or
// cosformer's weights need it.
template <class T>
__global__ void __launch_bounds__(kThreads) features_vec_kernel(const FeaturesArgs a) {
  const int64_t pieces = a.k / 8, total = a.rows.count * pieces;
  const bool weighted = a.cos != nullptr, per_token = weighted || a.rows.factor != AK_FMAP_FACTOR_NONE;
  const int64_t width = weighted ? 2 * a.k : a.k;
  const T* x = static_cast<const T*>(a.x.data);
  T* dst = static_cast<T*>(a.dst.data);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = e / pieces, c = (e - r * pieces) * 8;
    const TokenWeights w = per_token ? token_weights(a, r) : TokenWeights{};
    alignas(16) T in[8], out[8];
    *reinterpret_cast<uint4*>(in) = *reinterpret_cast<const uint4*>(x + r * a.k + c);
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = phi_of(a.phi, ak::arch::to_float(in[j])) * w.f;
    T* row = dst + r * width;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = ak::arch::from_float<T>(y[j] * w.wc);
    *reinterpret_cast<uint4*>(row + c) = *reinterpret_cast<const uint4*>(out);
    if (weighted) {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = ak::arch::from_float<T>(y[j] * w.ws);
      *reinterpret_cast<uint4*>(row + a.k + c) = *reinterpret_cast<const uint4*>(out);
    }
  }
}

// The feature gradient of dense 16-bit rows in 16-byte pieces (features_vec_kernel's reverse): the row
// kernel's arithmetic in its order, so its bits are the row kernel's.
template <class T>
__global__ void __launch_bounds__(kThreads) feature_grad_vec_kernel(const FeatureGradArgs a) {
  const int64_t pieces = a.k / 8, total = a.rows.count * pieces;
  const bool weighted = a.cos != nullptr, per_token = weighted || a.rows.factor != AK_FMAP_FACTOR_NONE;
  const int64_t width = weighted ? 2 * a.k : a.k;
  const T* x = static_cast<const T*>(a.x.data);
  const T* df = static_cast<const T*>(a.df.data);
  T* dx = static_cast<T*>(a.dx.data);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = e / pieces, c = (e - r * pieces) * 8;
    const TokenWeights w = per_token ? token_weights(a, r) : TokenWeights{};
    alignas(16) T xs[8], gs[8], hs[8], out[8];
    *reinterpret_cast<uint4*>(xs) = *reinterpret_cast<const uint4*>(x + r * a.k + c);
    *reinterpret_cast<uint4*>(gs) = *reinterpret_cast<const uint4*>(df + r * width + c);
    if (weighted) *reinterpret_cast<uint4*>(hs) = *reinterpret_cast<const uint4*>(df + r * width + a.k + c);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float g = ak::arch::to_float(gs[j]);
      if (weighted) g = g * w.wc + ak::arch::to_float(hs[j]) * w.ws;
      out[j] = ak::arch::from_float<T>(through_phi(a.phi, ak::arch::to_float(xs[j]), g * w.f));
    }
    *reinterpret_cast<uint4*>(dx + r * a.k + c) = *reinterpret_cast<const uint4*>(out);
  }
}

// [v | 1 | 0 ...] of dense 16-bit rows in 16-byte pieces (w and width multiples of 8).
template <class T>
__global__ void __launch_bounds__(kThreads) values_vec_kernel(const ValuesArgs a) {
  const int64_t pieces = a.width / 8, total = a.rows.count * pieces;
  const T* v = static_cast<const T*>(a.v.data);
  T* dst = static_cast<T*>(a.dst.data);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = e / pieces, c = (e - r * pieces) * 8;
    alignas(16) T out[8];
    if (c < a.w) {
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(v + r * a.w + c);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = ak::arch::from_float<T>(c + j == a.w ? 1.f : 0.f);
    }
    *reinterpret_cast<uint4*>(dst + r * a.width + c) = *reinterpret_cast<const uint4*>(out);
  }
}

// The normaliser's gradient rows of dense 16-bit views in 16-byte pieces: a row's w / 8 pieces are
// adjacent lanes of one warp (w / 8 a power of two up to 32), which sum the row's dot product by
// shuffles; its first lane writes the tail piece [dD high | dD low | 0 ...]. Every lane of a warp runs
// the same iterations (the shuffles need them all), lanes past the last row load nothing.
template <class T>
__global__ void __launch_bounds__(kThreads) normalise_grad_vec_kernel(const NormaliseGradArgs a) {
  const int group = static_cast<int>(a.w / 8);
  const int64_t total = a.rows.count * group;
  const int64_t rounded_total = (total + 31) / 32 * 32;
  const T* d_output = static_cast<const T*>(a.d_output.data);
  const T* num = static_cast<const T*>(a.num.data);
  T* dst = static_cast<T*>(a.dst.data);
  const int lane = threadIdx.x % 32;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < rounded_total;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const bool live = e < total;
    const int64_t r = live ? e / group : 0, c = live ? (e - r * group) * 8 : 0;
    float dot = 0.f, den = 1.f;
    if (live) {
      int64_t i[3];
      a.rows.index(r, i);
      den = ak::arch::to_float(num[r * a.width + a.w]) + a.eps * a.rows.factor_of(i);
      alignas(16) T g[8], n[8], out[8];
      *reinterpret_cast<uint4*>(g) = *reinterpret_cast<const uint4*>(d_output + r * a.w + c);
      *reinterpret_cast<uint4*>(n) = *reinterpret_cast<const uint4*>(num + r * a.width + c);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        out[j] = ak::arch::from_float<T>(ak::arch::to_float(g[j]) / den);
        dot += ak::arch::to_float(out[j]) * (ak::arch::to_float(n[j]) / den);
      }
      *reinterpret_cast<uint4*>(dst + r * a.width + c) = *reinterpret_cast<const uint4*>(out);
    }
    for (int m = 1; m < group; m <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
    if (live && c == 0) {
      const float dD = -dot;
      const T high = ak::arch::from_float<T>(dD);
      alignas(16) T tail[8];
      tail[0] = high;
      tail[1] = ak::arch::from_float<T>(dD - ak::arch::to_float(high));
#pragma unroll
      for (int j = 2; j < 8; ++j) tail[j] = ak::arch::from_float<T>(0.f);
      *reinterpret_cast<uint4*>(dst + r * a.width + a.w) = *reinterpret_cast<const uint4*>(tail);
    }
  }
}

// Whether a view holds dense rows of `cols` elements of a 16-bit dtype over the call's rows, 16-byte
// aligned.
bool dense_16bit(const FloatView& v, const Rows& rows, int64_t cols) {
  return (v.dtype == AK_BFLOAT16 || v.dtype == AK_FLOAT16) && cols % 8 == 0 && v.s[3] == 1 && v.s[2] == cols &&
         v.s[1] == rows.n[2] * cols && v.s[0] == rows.n[1] * rows.n[2] * cols &&
         reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
}

// A grid-stride launch over `pieces` 16-byte pieces of kernel<bfloat16> or kernel<half> by dtype.
template <class Args, class Bf16Kernel, class HalfKernel>
void launch_pieces(const Args& a, int32_t dtype, int64_t pieces, Bf16Kernel bf16, HalfKernel half,
                   const char* name) {
  DeviceGuard guard(a.rows.device);
  const int64_t wanted = (pieces + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(ak::cuda::props(a.rows.device).multiProcessorCount) * 16;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  if (dtype == AK_BFLOAT16) {
    bf16<<<grid, kThreads, 0, stream(a.rows.device)>>>(a);
  } else {
    half<<<grid, kThreads, 0, stream(a.rows.device)>>>(a);
  }
  check_launch(name);
}

}  // namespace

void features(const FeaturesArgs& a) {
  const int64_t width = a.cos != nullptr ? 2 * a.k : a.k;
  const bool dense = a.x.dtype == a.dst.dtype && dense_16bit(a.x, a.rows, a.k) && dense_16bit(a.dst, a.rows, width);
  if (!dense) return launch(a, FeaturesRow{}, "fmap_features");
  launch_pieces(a, a.dst.dtype, a.rows.count * (a.k / 8), features_vec_kernel<__nv_bfloat16>,
                features_vec_kernel<__half>, "fmap_features_vec");
}
void feature_grad(const FeatureGradArgs& a) {
  const int64_t width = a.cos != nullptr ? 2 * a.k : a.k;
  const bool dense = a.x.dtype == a.dx.dtype && a.df.dtype == a.dx.dtype && dense_16bit(a.x, a.rows, a.k) &&
                     dense_16bit(a.dx, a.rows, a.k) && dense_16bit(a.df, a.rows, width);
  if (!dense) return launch(a, FeatureGradRow{}, "fmap_feature_grad");
  launch_pieces(a, a.dx.dtype, a.rows.count * (a.k / 8), feature_grad_vec_kernel<__nv_bfloat16>,
                feature_grad_vec_kernel<__half>, "fmap_feature_grad_vec");
}
void values(const ValuesArgs& a) {
  const bool dense = a.v.dtype == a.dst.dtype && dense_16bit(a.v, a.rows, a.w) && dense_16bit(a.dst, a.rows, a.width);
  if (!dense) return launch(a, ValuesRow{}, "fmap_values");
  launch_pieces(a, a.dst.dtype, a.rows.count * (a.width / 8), values_vec_kernel<__nv_bfloat16>,
                values_vec_kernel<__half>, "fmap_values_vec");
}
void normalise(const NormaliseArgs& a) { launch(a, NormaliseRow{}, "fmap_normalise"); }
void normalise_grad(const NormaliseGradArgs& a) {
  const int64_t group = a.w / 8;
  const bool dense = a.w % 8 == 0 && group > 0 && group <= 32 && (group & (group - 1)) == 0 &&
                     a.width == a.w + 8 && a.d_output.dtype == a.dst.dtype && a.num.dtype == a.dst.dtype &&
                     dense_16bit(a.d_output, a.rows, a.w) && dense_16bit(a.num, a.rows, a.width) &&
                     dense_16bit(a.dst, a.rows, a.width);
  if (!dense) return launch(a, NormaliseGradRow{}, "fmap_normalise_grad");
  launch_pieces(a, a.dst.dtype, (a.rows.count * group + 31) / 32 * 32, normalise_grad_vec_kernel<__nv_bfloat16>,
                normalise_grad_vec_kernel<__half>, "fmap_normalise_grad_vec");
}

}  // namespace ak::linear::feature_map::cuda
