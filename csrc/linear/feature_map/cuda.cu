// The CUDA backend of the feature-map stages: a warp per row (adjacent lanes on adjacent columns, so
// a row is read and written in whole segments), enough blocks to fill the device and grid-stride
// loops for the rest. Every stage is one pass over its tensors.
#include <cuda_runtime.h>

#include <algorithm>

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

}  // namespace

void features(const FeaturesArgs& a) { launch(a, FeaturesRow{}, "fmap_features"); }
void feature_grad(const FeatureGradArgs& a) { launch(a, FeatureGradRow{}, "fmap_feature_grad"); }
void values(const ValuesArgs& a) { launch(a, ValuesRow{}, "fmap_values"); }
void normalise(const NormaliseArgs& a) { launch(a, NormaliseRow{}, "fmap_normalise"); }
void normalise_grad(const NormaliseGradArgs& a) { launch(a, NormaliseGradRow{}, "fmap_normalise_grad"); }

}  // namespace ak::linear::feature_map::cuda
