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
    float f = 1.f, wc = 1.f, ws = 0.f;
    if (per_token) {
      int64_t i[3];
      a.rows.index(r, i);
      f = a.rows.factor_of(i);
      if (weighted) wc = a.cos[i[a.rows.token_dim]], ws = a.sin[i[a.rows.token_dim]];
    }
    alignas(16) T in[8], out[8];
    *reinterpret_cast<uint4*>(in) = *reinterpret_cast<const uint4*>(x + r * a.k + c);
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = phi_of(a.phi, ak::arch::to_float(in[j])) * f;
    T* row = dst + r * width;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = ak::arch::from_float<T>(y[j] * wc);
    *reinterpret_cast<uint4*>(row + c) = *reinterpret_cast<const uint4*>(out);
    if (weighted) {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = ak::arch::from_float<T>(y[j] * ws);
      *reinterpret_cast<uint4*>(row + a.k + c) = *reinterpret_cast<const uint4*>(out);
    }
  }
}

// Whether x and dst are dense rows of one 16-bit dtype, 16-byte aligned, with K a multiple of 8.
bool dense_16bit_rows(const FeaturesArgs& a) {
  if (a.x.dtype != a.dst.dtype || (a.x.dtype != AK_BFLOAT16 && a.x.dtype != AK_FLOAT16) || a.k % 8 != 0) return false;
  const int64_t width = a.cos != nullptr ? 2 * a.k : a.k;
  auto dense = [&](const FloatView& v, int64_t cols) {
    return v.s[3] == 1 && v.s[2] == cols && v.s[1] == a.rows.n[2] * cols && v.s[0] == a.rows.n[1] * a.rows.n[2] * cols &&
           reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
  };
  return dense(a.x, a.k) && dense(a.dst, width);
}

}  // namespace

void features(const FeaturesArgs& a) {
  if (!dense_16bit_rows(a)) return launch(a, FeaturesRow{}, "fmap_features");
  DeviceGuard guard(a.rows.device);
  const int64_t wanted = (a.rows.count * (a.k / 8) + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(ak::cuda::props(a.rows.device).multiProcessorCount) * 16;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  if (a.x.dtype == AK_BFLOAT16) {
    features_vec_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream(a.rows.device)>>>(a);
  } else {
    features_vec_kernel<__half><<<grid, kThreads, 0, stream(a.rows.device)>>>(a);
  }
  check_launch("fmap_features_vec");
}
void feature_grad(const FeatureGradArgs& a) { launch(a, FeatureGradRow{}, "fmap_feature_grad"); }
void values(const ValuesArgs& a) { launch(a, ValuesRow{}, "fmap_values"); }
void normalise(const NormaliseArgs& a) { launch(a, NormaliseRow{}, "fmap_normalise"); }
void normalise_grad(const NormaliseGradArgs& a) { launch(a, NormaliseGradRow{}, "fmap_normalise_grad"); }

}  // namespace ak::linear::feature_map::cuda
