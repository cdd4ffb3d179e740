// The paged decode step on a CUDA device: a fused kernel (decode/bulk.cuh on sm_90a, decode/fused.cuh
// elsewhere) when the planner says one serves the call, else the general path, the CPU backend on host copies of the tensors (the pool
// included) with the outputs and the pool copied back.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "linear/decode/cpu.h"
#include "linear/decode/cuda.h"
#include "linear/decode/params.h"
#include "linear/decode/planner.h"
#include "linear/decode/slots.h"
#include "linear/common/host_mirror.h"

namespace ak::linear::cuda {

namespace {

// The exact path: the CPU backend on host copies of every tensor (the pool included), copied back.
void general(const PagedDecode& d) {
  HostMirror m;
  PagedDecode h = d;
  h.qkv = m.input(d.qkv), h.raw_gate = m.input(d.raw_gate), h.raw_beta = m.input(d.raw_beta);
  h.a_log = m.input(d.a_log), h.dt_bias = m.input(d.dt_bias);
  h.indices = m.input(d.indices), h.has_initial = m.input(d.has_initial);
  h.state = m.in_out(d.state), h.output = m.output(d.output);  // padding rows too are written
  require_slots_in_pool(h.indices, d.B, d.slots);
  ak::linear::cpu::paged_decode(h);
  m.write_back();
}

template <class T>
void fused(const PagedDecode& d, int row, const ak::cuda::DeviceCheck* check) {
  paged::DecodeParams<T> p;
  p.check = check;
  p.qkv = static_cast<const T*>(d.qkv->data), p.qkv_row = d.qkv->strides[0];
  p.raw_gate = d.raw_gate->data, p.gate_dtype = d.raw_gate->dtype;
  p.gate_b = d.raw_gate->strides[1], p.gate_h = d.raw_gate->strides[2];
  p.raw_beta = d.raw_beta->data, p.beta_dtype = d.raw_beta->dtype;
  p.beta_b = d.raw_beta->strides[1], p.beta_h = d.raw_beta->strides[2];
  p.a_log = static_cast<const float*>(d.a_log->data), p.dt_bias = static_cast<const float*>(d.dt_bias->data);
  p.state = d.state->data, p.state_bf16 = d.state->dtype == AK_BFLOAT16, p.slot_stride = d.state->strides[0];
  p.slots = d.slots;
  p.indices = static_cast<const int32_t*>(d.indices->data);
  p.has_initial = d.has_initial ? static_cast<const uint8_t*>(d.has_initial->data) : nullptr;
  p.out = static_cast<T*>(d.output->data), p.out_b = d.output->strides[1], p.out_h = d.output->strides[2];
  p.B = static_cast<int>(d.B), p.H = static_cast<int>(d.H), p.HK = static_cast<int>(d.HK);
  p.K = static_cast<int>(d.K), p.V = static_cast<int>(d.V);
  p.per_channel = d.per_channel, p.bounded = d.bounded;
  p.scale = static_cast<float>(d.scale), p.lower_bound = static_cast<float>(d.lower_bound);
  ak::cuda::launch_row<T>(row, "linear.paged_decode", p, ak::cuda::stream(d.qkv->device_index));
}

}  // namespace

void paged_decode(const PagedDecode& d) {
  ak::cuda::DeviceGuard guard(d.qkv->device_index);
  paged_planning::PagedDecodeShape s;
  s.dtype = d.qkv->dtype;
  s.K = d.K;
  s.per_channel = d.per_channel;
  const size_t elem = d.state->dtype == AK_BFLOAT16 ? 2 : 4;
  s.aligned = reinterpret_cast<uintptr_t>(d.state->data) % 16 == 0 && (d.state->strides[0] * elem) % 16 == 0;
  paged_planning::PagedDecodeChoice c =
      plan_paged_decode(s, ak::cuda::caps(d.qkv->device_index), tuning::current());
  if (d.impl == DecodeImpl::reference) {
    c.fused = false, c.plan.path = "general", c.plan.rows.clear();
    c.plan.detail("why", "impl 'reference'");
  }
  if (d.impl == DecodeImpl::fused && !c.fused) {
    std::string why = "no fused kernel is built";
    for (const auto& [key, value] : c.plan.details) why = key == "why" ? value : why;
    fail(AK_ERR_UNSUPPORTED, "impl 'fused': no fused kernel serves this call: " + why);
  }
  plan::set_last(c.plan);
  if (d.B == 0) return;
  if (!c.fused) return general(d);
  // Bad indices are refused before anything is written: one small read-back of [B] int32 (it
  // synchronises the stream) unless the caller vouches for them; checked on the device in a capture.
  const ak::cuda::DeviceCheck* check =
      require_slots_on_device(d.qkv->device_index, d.indices, d.B, d.slots, d.trusted_indices, "ak_paged_decode");
  if (d.qkv->dtype == AK_BFLOAT16) return fused<__nv_bfloat16>(d, c.row, check);
  if (d.qkv->dtype == AK_FLOAT16) return fused<__half>(d, c.row, check);
  fused<float>(d, c.row, check);
}

}  // namespace ak::linear::cuda
