// The CUDA backend of the causal convolution. The common layout (channels a multiple of 8, 16-byte
// aligned rows, W <= 4) runs the tiled kernels (cuda_tiled.cuh). Any other: a thread per (row,
// channel) element, adjacent threads on adjacent channels so every load and store of a row is
// coalesced; grid-stride loops past the grid's size. The weight gradient: per part of the rows and
// channel the W partial sums, then a thread per weight tap adding the parts in order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/runtime.cuh"
#include "linear/conv/backend.h"
#include "linear/conv/cuda_tiled.cuh"

namespace ak::linear::conv::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::Scratch;
using ak::cuda::stream;

constexpr int kThreads = 256;

// element(a, i, c) for every i < count and channel c < C, flattened with c fastest.
template <class Args, class Element>
__global__ void __launch_bounds__(kThreads) elements_kernel(const Args a, int64_t count, int64_t C, Element element) {
  const int64_t total = count * C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total; e += step) {
    element(a, e / C, e % C);
  }
}

template <class Args, class Element>
void launch(const Args& a, int64_t count, int64_t C, Element element, const char* name) {
  const int64_t total = count * C;
  if (total == 0) return;
  const int device = a.p.device;
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(ak::cuda::props(device).multiProcessorCount) * 32;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  elements_kernel<<<grid, kThreads, 0, stream(device)>>>(a, count, C, element);
  check_launch(name);
}

struct Output {
  __device__ void operator()(const ForwardArgs& a, int64_t r, int64_t c) const { output_at(a, r, c); }
};
struct FinalState {
  __device__ void operator()(const ForwardArgs& a, int64_t nk, int64_t c) const {
    final_state_at(a, nk / (a.p.W - 1), nk % (a.p.W - 1), c);
  }
};
struct InputGrad {
  __device__ void operator()(const BackwardArgs& a, int64_t r, int64_t c) const { dx_at(a, r, c); }
};
struct InitialGrad {
  __device__ void operator()(const BackwardArgs& a, int64_t nk, int64_t c) const {
    d_initial_at(a, nk / (a.p.W - 1), nk % (a.p.W - 1), c);
  }
};
struct WeightPart {
  __device__ void operator()(const BackwardArgs& a, int64_t q, int64_t c) const { dweight_part(a, q, c); }
};
struct WeightSum {
  __device__ void operator()(const BackwardArgs& a, int64_t ci, int64_t) const { dweight_sum(a, ci); }
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool tiled_tokens(const Tokens& t) {
  return !t.f.given() || (aligned16(t.f.data) && t.batch_stride % 8 == 0 && t.token_stride % 8 == 0);
}
bool tiled_floats(const Floats& f) { return !f.given() || aligned16(f.data); }

// Whether the tiled kernels serve a call (their layout and the grid's row limit).
bool tiled_layout(const Problem& p, int64_t rows) {
  return p.C % 8 == 0 && p.W >= 1 && p.W <= tiled::kMaxTiledWidth && tiled_tokens(p.x) &&
         tiled_floats(p.initial) && (rows + tiled::kBlockRows - 1) / tiled::kBlockRows <= 65535;
}

dim3 tiled_grid(int64_t C, int64_t rows) {
  return dim3(static_cast<unsigned>((C / tiled::kVec + tiled::kGroups - 1) / tiled::kGroups),
              static_cast<unsigned>((rows + tiled::kBlockRows - 1) / tiled::kBlockRows));
}

// fn(dtype constant, width constant) for x's dtype and W <= 4.
template <class F>
void with_tiled(int32_t dtype, int64_t W, F&& fn) {
  auto by_width = [&](auto dt) {
    switch (W) {
      case 1: fn(dt, std::integral_constant<int, 1>{}); break;
      case 2: fn(dt, std::integral_constant<int, 2>{}); break;
      case 3: fn(dt, std::integral_constant<int, 3>{}); break;
      default: fn(dt, std::integral_constant<int, 4>{});
    }
  };
  switch (dtype) {
    case AK_FLOAT16: by_width(std::integral_constant<int, AK_FLOAT16>{}); break;
    case AK_BFLOAT16: by_width(std::integral_constant<int, AK_BFLOAT16>{}); break;
    default: by_width(std::integral_constant<int, AK_FLOAT32>{});
  }
}

}  // namespace

void forward(const ForwardArgs& a) {
  DeviceGuard guard(a.p.device);
  if (a.rows > 0 && tiled_layout(a.p, a.rows) && tiled_tokens(a.output)) {
    with_tiled(a.p.x.f.dtype, a.p.W, [&](auto dt, auto w) {
      tiled::forward_kernel<decltype(dt)::value, decltype(w)::value>
          <<<tiled_grid(a.p.C, a.rows), tiled::kBlockThreads, 0, stream(a.p.device)>>>(a);
      check_launch("causal_conv1d_fwd_tiled");
    });
  } else {
    launch(a, a.rows, a.p.C, Output{}, "causal_conv1d_fwd");
  }
  if (a.final_state.given()) launch(a, a.p.seqs.N * (a.p.W - 1), a.p.C, FinalState{}, "causal_conv1d_final_state");
}

void backward(BackwardArgs a) {
  DeviceGuard guard(a.p.device);
  if (a.rows > 0 && tiled_layout(a.p, a.rows) && tiled_tokens(a.d_output) && tiled_tokens(a.dx) &&
      tiled_floats(a.d_final)) {
    // dx and the weight's partials per block row in one pass; the history's gradient as below.
    const dim3 grid = tiled_grid(a.p.C, a.rows);
    const int64_t taps = a.p.C * a.p.W;
    Scratch partial(a.p.device, static_cast<size_t>(a.dweight.given() ? grid.y * taps : 1) * sizeof(float));
    a.partial = a.dweight.given() ? partial.as<float>() : nullptr;
    a.parts = grid.y;
    with_tiled(a.p.x.f.dtype, a.p.W, [&](auto dt, auto w) {
      tiled::backward_kernel<decltype(dt)::value, decltype(w)::value>
          <<<grid, tiled::kBlockThreads, 0, stream(a.p.device)>>>(a);
      check_launch("causal_conv1d_bwd_tiled");
    });
    if (a.d_initial.given()) {
      launch(a, a.p.seqs.N * (a.p.W - 1), a.p.C, InitialGrad{}, "causal_conv1d_d_initial_state");
    }
    if (a.dweight.given()) launch(a, taps, 1, WeightSum{}, "causal_conv1d_dweight_sum");
    return;
  }
  if (a.dx.f.given()) launch(a, a.rows, a.p.C, InputGrad{}, "causal_conv1d_dx");
  if (a.d_initial.given()) {
    launch(a, a.p.seqs.N * (a.p.W - 1), a.p.C, InitialGrad{}, "causal_conv1d_d_initial_state");
  }
  if (a.dweight.given()) {
    split_rows(a);
    const int64_t taps = a.p.C * a.p.W;
    Scratch partial(a.p.device, static_cast<size_t>(std::max<int64_t>(1, a.parts * taps)) * sizeof(float));
    a.partial = partial.as<float>();
    launch(a, a.parts, a.p.C, WeightPart{}, "causal_conv1d_dweight_parts");
    launch(a, taps, 1, WeightSum{}, "causal_conv1d_dweight_sum");
  }
}

}  // namespace ak::linear::conv::cuda
