// The paged causal convolution on a CUDA device. For W <= 8: one kernel, a thread per (sequence, channel)
// with adjacent threads on adjacent channels (every load and store of a row coalesced): the slot's history
// (zeros for a fresh slot) and the sequence's tokens pass through a window of W registers, each token's
// output is act(sum_i weight[c, i] window[i]) in float32, and the last W - 1 values go back to the slot.
// Offsets and indices are read on the device; the indices are also read back once to refuse a bad one
// before anything is written. Wider windows take the general path: the CPU backend on host copies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "linear/decode/conv_cpu.h"
#include "linear/decode/conv_cuda.h"
#include "linear/decode/slots.h"
#include "linear/common/host_mirror.h"

namespace ak::linear::cuda {
namespace {

using namespace ::ak::arch;

constexpr int kThreads = 128;

struct ConvParams {
  const void* x = nullptr;
  void* out = nullptr;
  void* state = nullptr;
  const void* weight = nullptr;
  int64_t x_b = 0, x_t = 0, o_b = 0, o_t = 0;  // row strides of x and the output (rank 2: t unused)
  int64_t slot_stride = 0;                      // elements between slots; each slot [W - 1, C] dense
  int64_t C = 0, T = 0, N = 0, slots = 0;
  const int32_t* offsets = nullptr;             // cu_seqlens [N + 1] on the device, or null (batch rows)
  const int32_t* indices = nullptr;             // or null: sequence n uses slot n
  const uint8_t* has_initial = nullptr;         // or null: every live slot resumes
  bool silu = false;
  const ak::cuda::DeviceCheck* check = nullptr;  // in a graph: write nothing once a check has failed
};

template <class T, class WT, int W>
__global__ void __launch_bounds__(kThreads) paged_conv_kernel(const ConvParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= p.C) return;
  const bool stop = ak::cuda::check_failed(p.check);  // tested before the first write: its load overlaps
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  T* state = static_cast<T*>(p.state);
  float w[W];
#pragma unroll
  for (int i = 0; i < W; ++i) w[i] = to_float(static_cast<const WT*>(p.weight)[c * W + i]);
  for (int64_t n = blockIdx.y; n < p.N; n += gridDim.y) {
    const int64_t b = p.offsets ? 0 : n;
    const int64_t t0 = p.offsets ? p.offsets[n] : 0, len = p.offsets ? p.offsets[n + 1] - t0 : p.T;
    const int64_t slot = p.indices ? p.indices[n] : n;
    const bool live = p.indices == nullptr || (slot > 0 && slot < p.slots);
    if (stop) return;
    if (!live) {  // padding (an index past the pool was refused before the launch): zero rows
      for (int64_t t = 0; t < len; ++t) out[b * p.o_b + (t0 + t) * p.o_t + c] = from_float<T>(0.f);
      continue;
    }
    const bool resume = p.has_initial == nullptr || p.has_initial[n] != 0;
    T* hist = state + slot * p.slot_stride + c;
    float e[W];  // e[0 .. W - 2]: the history, oldest first; e[W - 1]: the current token
#pragma unroll
    for (int i = 0; i + 1 < W; ++i) e[i] = resume ? to_float(hist[i * p.C]) : 0.f;
    for (int64_t t = 0; t < len; ++t) {
      e[W - 1] = to_float(x[b * p.x_b + (t0 + t) * p.x_t + c]);
      float z = 0.f;
#pragma unroll
      for (int i = 0; i < W; ++i) z = fmaf(w[i], e[i], z);
      out[b * p.o_b + (t0 + t) * p.o_t + c] = from_float<T>(p.silu ? z / (1.f + expf(-z)) : z);
#pragma unroll
      for (int i = 0; i + 1 < W; ++i) e[i] = e[i + 1];
    }
    // The stored values are the inputs' own (the window holds them unrounded), so the history is exact.
#pragma unroll
    for (int i = 0; i + 1 < W; ++i) hist[i * p.C] = from_float<T>(e[i]);
  }
}

template <class T, class WT>
void launch_typed(const ConvParams& p, int64_t W, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.C + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(p.N, 65535)));
  switch (W) {
    case 2: paged_conv_kernel<T, WT, 2><<<grid, kThreads, 0, stream>>>(p); break;
    case 3: paged_conv_kernel<T, WT, 3><<<grid, kThreads, 0, stream>>>(p); break;
    case 4: paged_conv_kernel<T, WT, 4><<<grid, kThreads, 0, stream>>>(p); break;
    case 5: paged_conv_kernel<T, WT, 5><<<grid, kThreads, 0, stream>>>(p); break;
    case 6: paged_conv_kernel<T, WT, 6><<<grid, kThreads, 0, stream>>>(p); break;
    case 7: paged_conv_kernel<T, WT, 7><<<grid, kThreads, 0, stream>>>(p); break;
    case 8: paged_conv_kernel<T, WT, 8><<<grid, kThreads, 0, stream>>>(p); break;
    default: fail(AK_ERR_INTERNAL, "paged_conv_kernel: W must be 2..8");
  }
  ak::cuda::check_launch("paged_conv_kernel");
}

template <class T>
void launch_weights(const PagedConv& d, const ConvParams& p, cudaStream_t stream) {
  if (d.weight->dtype == AK_FLOAT32) return launch_typed<T, float>(p, d.W, stream);
  launch_typed<T, T>(p, d.W, stream);
}

void fused(const PagedConv& d, const ak::cuda::DeviceCheck* check) {
  const ak_tensor& x = *d.x;
  const ak_tensor& out = *d.output;
  ConvParams p;
  p.x = x.data, p.out = out.data, p.state = d.state->data, p.weight = d.weight->data;
  p.x_b = x.strides[0], p.x_t = x.rank == 3 ? x.strides[1] : 0;
  p.o_b = out.strides[0], p.o_t = out.rank == 3 ? out.strides[1] : 0;
  p.slot_stride = d.state->strides[0];
  p.C = d.C, p.T = d.T, p.N = d.N, p.slots = d.slots;
  p.offsets = d.cu_seqlens ? static_cast<const int32_t*>(d.cu_seqlens->data) : nullptr;
  p.indices = d.indices ? static_cast<const int32_t*>(d.indices->data) : nullptr;
  p.has_initial = d.has_initial ? static_cast<const uint8_t*>(d.has_initial->data) : nullptr;
  p.silu = d.activation == AK_CONV_SILU;
  p.check = check;
  const cudaStream_t s = ak::cuda::stream(x.device_index);
  if (x.dtype == AK_BFLOAT16) return launch_weights<__nv_bfloat16>(d, p, s);
  if (x.dtype == AK_FLOAT16) return launch_weights<__half>(d, p, s);
  launch_weights<float>(d, p, s);
}

void general(const PagedConv& d) {
  HostMirror m;
  PagedConv h = d;
  h.x = m.input(d.x), h.weight = m.input(d.weight);
  h.indices = m.input(d.indices), h.has_initial = m.input(d.has_initial);
  // Rows past the last packed offset stay as they are: only dense calls write every row.
  const Written rows = d.offsets ? Written::along(1, d.offsets[0], d.offsets[d.N]) : Written::all();
  h.state = m.in_out(d.state), h.output = m.output(d.output, rows);
  require_slots_in_pool(h.indices, d.N, d.slots);
  ak::linear::cpu::paged_conv(h);
  m.write_back();
}

}  // namespace

void paged_conv(const PagedConv& d) {
  ak::cuda::DeviceGuard guard(d.x->device_index);
  if (d.W > kMaxFusedConvWidth || d.reference) return general(d);
  // Refused before anything is written (a small read-back); checked on the device in a capture, the
  // offsets too (the entry did not read them back).
  fused(d, require_slots_on_device(d.x->device_index, d.indices, d.N, d.slots, d.trusted_indices,
                                   "ak_paged_conv1d", d.cu_seqlens, d.T));
}

}  // namespace ak::linear::cuda
