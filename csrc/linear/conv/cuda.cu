// The CUDA backend of the causal convolution: a thread per (row, channel) element, adjacent threads
// on adjacent channels so every load and store of a row is coalesced; grid-stride loops past the
// grid's size. The weight gradient: a thread per (part of the rows, channel) writing its W partial
// sums, then a thread per weight tap adding the parts in order.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/conv/backend.h"

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

}  // namespace

void forward(const ForwardArgs& a) {
  DeviceGuard guard(a.p.device);
  launch(a, a.rows, a.p.C, Output{}, "causal_conv1d_fwd");
  if (a.final_state.given()) launch(a, a.p.seqs.N * (a.p.W - 1), a.p.C, FinalState{}, "causal_conv1d_final_state");
}

void backward(BackwardArgs a) {
  DeviceGuard guard(a.p.device);
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
