// KDA's CUDA backend: executes the planner's choice (kda/planner.h): the chunked forward through the
// registry's launch table, or the general path, the CPU backend (the exact recurrence with double
// states) on host copies of the tensors, the outputs copied back.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "linear/gla/cuda/host_mirror.h"
#include "linear/gla/cuda/host_views.h"
#include "linear/kda/cuda/params.h"
#include "linear/kda/layouts.h"
#include "linear/kda/planner.h"
#include "linear/kda/problem.h"

namespace ak::linear::cuda {

namespace {

kda_planning::KdaShape shape_of(const DeltaProblem& p, bool fastmath,
                                std::initializer_list<const ak_tensor*> rows) {
  kda_planning::KdaShape s;
  s.dtype = p.dtype;
  s.K = p.K;
  s.V = p.V;
  s.recurrent = p.recurrent;
  s.fastmath = fastmath;
  for (const ak_tensor* t : rows) s.aligned = s.aligned && gla::aligned_rows(t);
  s.huge = p.T > INT32_MAX / 2 || p.N > INT32_MAX / 2;
  return s;
}

template <class T>
void chunked_fwd(const KdaFwd& a, const kda_planning::KdaChoice& plan, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  gla::MapTables tables(p, stream);
  kda::FwdParams<T> kp;
  kp.f = gla::forward_params<T>(p, tables, a.q, a.k, a.v, a.output, a.initial_state, a.final_state);
  const gla::FwdParams<T>& fp = kp.f;
  kp.f.d.gk = gla::rows_in<float>(a.gate);
  kp.beta = {static_cast<const float*>(a.beta->data), a.beta->strides[0], a.beta->strides[1], a.beta->strides[2]};
  kp.chunks = tables.chunks;
  // The per-chunk operands the prep kernel hands to the state pass (kda/cuda/params.h).
  kda::ChunkOperands<T>& ops = kp.ops;
  ops.H = fp.H;
  ops.KD = plan.kd;
  ops.Vp = (fp.V + kda_layout::kVTile - 1) / kda_layout::kVTile * kda_layout::kVTile;
  const size_t slots = static_cast<size_t>(kp.chunks) * fp.H;
  const size_t rows_k = static_cast<size_t>(kda_layout::kChunk) * ops.KD;
  const size_t per_slot = 3 * rows_k + static_cast<size_t>(kda_layout::kChunk) * ops.Vp +
                          static_cast<size_t>(kda_layout::kChunk) * kda_layout::kChunk;
  const size_t el_bytes = (slots * ops.KD * sizeof(float) + 255) / 256 * 256;
  ak::cuda::Scratch scratch(p.device_index, el_bytes + std::max<size_t>(1, slots * per_slot) * sizeof(T));
  ops.el = scratch.as<float>();
  T* base = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(ops.el) + el_bytes);
  ops.w = base;
  ops.kd = ops.w + slots * rows_k;
  ops.qd = ops.kd + slots * rows_k;
  ops.p = ops.qd + slots * rows_k;
  ops.u = ops.p + slots * kda_layout::kChunk * kda_layout::kChunk;
  ak::cuda::launch_row<T>(plan.prep_row, "linear.kda.prep", kp, stream);
  ak::cuda::launch_row<T>(plan.fwd_row, "linear.kda.fwd", kp, stream);
}

// The general path: the CPU backend on host copies. mirror_inputs moves a call to the CPU with host
// copies of the inputs both directions read; each direction adds its own outputs.
template <class Call>
void mirror_inputs(HostMirror& m, Call& h, const Call& a) {
  h.p.device_type = AK_CPU;
  h.q = m.add(a.q, false), h.k = m.add(a.k, false), h.v = m.add(a.v, false);
  h.gate = m.add(a.gate, false), h.beta = m.add(a.beta, false);
  h.initial_state = m.add(a.initial_state, false);
  h.p.cu_seqlens = m.add(a.p.cu_seqlens, false);
}

void general_fwd(const KdaFwd& a) {
  HostMirror m;
  KdaFwd h = a;
  mirror_inputs(m, h, a);
  h.output = m.add(a.output, true), h.final_state = m.add(a.final_state, true);
  ak::linear::cpu::kda_fwd(h);
  m.write_back();
}

}  // namespace

void kda_fwd(const KdaFwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const kda_planning::KdaChoice plan = kda_planning::plan_kda_fwd(
      shape_of(p, a.fastmath, {a.q, a.k, a.v, a.output, a.gate}), ak::cuda::caps(p.device_index));
  plan::set_last(plan.plan);
  if (!plan.chunked) return general_fwd(a);
  if (p.dtype == AK_BFLOAT16) return chunked_fwd<__nv_bfloat16>(a, plan, stream);
  return chunked_fwd<__half>(a, plan, stream);
}

void kda_bwd(const KdaBwd& a) {
  ak::cuda::DeviceGuard guard(a.p.device_index);
  kda_planning::KdaShape s;
  s.recurrent = a.p.recurrent;
  s.fastmath = a.fastmath;
  plan::set_last(kda_planning::plan_kda_bwd(s));
  HostMirror m;
  KdaBwd h = a;
  mirror_inputs(m, h, a);
  h.d_output = m.add(a.d_output, false), h.d_final_state = m.add(a.d_final_state, false);
  h.dq = m.add(a.dq, true), h.dk = m.add(a.dk, true), h.dv = m.add(a.dv, true);
  h.dgate = m.add(a.dgate, true), h.dbeta = m.add(a.dbeta, true);
  h.d_initial_state = m.add(a.d_initial_state, true);
  ak::linear::cpu::kda_bwd(h);
  m.write_back();
}

}  // namespace ak::linear::cuda
