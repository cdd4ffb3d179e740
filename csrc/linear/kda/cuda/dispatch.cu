// KDA's CUDA backend: executes the planner's choice (kda/planner.h): the chunked forward and backward
// through the registry's launch table, or the general path, the CPU backend (the exact recurrence with double
// states) on host copies of the tensors, the outputs copied back.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <memory>

#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "linear/gla/cuda/rows.cuh"
#include "linear/common/host_mirror.h"
#include "linear/gla/cuda/host_views.h"
#include "linear/kda/cuda/params.h"
#include "linear/kda/layouts.h"
#include "linear/kda/planner.h"
#include "linear/kda/problem.h"

namespace ak::linear::cuda {

namespace {

kda_planning::KdaShape shape_of(const DeltaProblem& p, bool fastmath, Impl impl,
                                std::initializer_list<const ak_tensor*> rows) {
  kda_planning::KdaShape s;
  s.impl = impl;
  s.dtype = p.dtype;
  s.K = p.K;
  s.V = p.V;
  s.recurrent = p.recurrent;
  s.fastmath = fastmath;
  for (const ak_tensor* t : rows) s.aligned = s.aligned && gla::aligned_rows(t);
  s.huge = p.T > INT32_MAX / 2 || p.N > INT32_MAX / 2;
  return s;
}

// The forward's views and its per-chunk operands (kda/cuda/params.h) in `scratch`; with `backward`, also
// A, Vn and dVn for the backward's kernels.
template <class T>
kda::FwdParams<T> forward_params(const KdaFwd& a, const ak_tensor* output, const ak_tensor* final_state,
                            const ChunkTables& tables, const kda_planning::KdaChoice& plan, bool backward,
                            std::unique_ptr<ak::cuda::Scratch>& scratch) {
  const DeltaProblem& p = a.p;
  kda::FwdParams<T> kp;
  kp.f = gla::forward_params<T>(p, tables, a.q, a.k, a.v, output, a.initial_state, final_state);
  kp.f.d.gk = gla::rows_in<float>(a.gate);
  kp.beta = {static_cast<const float*>(a.beta->data), a.beta->strides[0], a.beta->strides[1], a.beta->strides[2]};
  kp.chunks = tables.chunks;
  kda::ChunkOperands<T>& ops = kp.ops;
  ops.H = kp.f.H;
  ops.KD = plan.kd;
  ops.Vp = (kp.f.V + kda_layout::kVTile - 1) / kda_layout::kVTile * kda_layout::kVTile;
  const size_t slots = static_cast<size_t>(kp.chunks) * ops.H;
  const size_t rows_k = static_cast<size_t>(kda_layout::kChunk) * ops.KD;
  const size_t rows_v = static_cast<size_t>(kda_layout::kChunk) * ops.Vp;
  const size_t scores = static_cast<size_t>(kda_layout::kChunk) * kda_layout::kChunk;
  const size_t f32_count = slots * ops.KD + (backward ? slots * scores : 0);
  const size_t f32_bytes = (f32_count * sizeof(float) + 255) / 256 * 256;
  const size_t per_slot = 3 * rows_k + rows_v + scores + (backward ? 2 * rows_v : 0);
  scratch = std::make_unique<ak::cuda::Scratch>(p.device_index,
                                                f32_bytes + std::max<size_t>(1, slots * per_slot) * sizeof(T));
  ops.el = scratch->as<float>();
  if (backward) ops.a32 = ops.el + slots * ops.KD;
  T* base = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(ops.el) + f32_bytes);
  ops.w = base;
  ops.kd = ops.w + slots * rows_k;
  ops.qd = ops.kd + slots * rows_k;
  ops.p = ops.qd + slots * rows_k;
  ops.u = ops.p + slots * scores;
  if (backward) {
    ops.vn = ops.u + slots * rows_v;
    ops.dvn = ops.vn + slots * rows_v;
  }
  return kp;
}

template <class T>
void chunked_fwd(const KdaFwd& a, const kda_planning::KdaChoice& plan, cudaStream_t stream) {
  ChunkTables tables(a.p, gla::kChunk, stream, "chunk_kda");
  std::unique_ptr<ak::cuda::Scratch> scratch;
  const kda::FwdParams<T> kp = forward_params<T>(a, a.output, a.final_state, tables, plan, false, scratch);
  ak::cuda::launch_row<T>(plan.prep_row, "linear.kda.prep", kp, stream);
  ak::cuda::launch_row<T>(plan.fwd_row, "linear.kda.fwd", kp, stream);
}

// The backward: the forward again (its operands, A, the states before each chunk and Vn kept), the
// reverse state pass, the gradients per chunk; grouped heads' dq, dk summed in fp32 and converted.
template <class T>
void chunked_bwd(const KdaBwd& a, const kda_planning::KdaChoice& plan, cudaStream_t stream) {
  const DeltaProblem& p = a.p;
  ChunkTables tables(p, gla::kChunk, stream, "chunk_kda_bwd");
  KdaFwd f;
  f.p = a.p;
  f.q = a.q, f.k = a.k, f.v = a.v, f.gate = a.gate, f.beta = a.beta, f.initial_state = a.initial_state;
  std::unique_ptr<ak::cuda::Scratch> scratch;
  kda::BwdParams<T> bp;
  bp.f = forward_params<T>(f, nullptr, nullptr, tables, plan, true, scratch);
  const int N = static_cast<int>(p.N), H = static_cast<int>(p.H), K = static_cast<int>(p.K);
  const int V = static_cast<int>(p.V), HK = static_cast<int>(p.HK), group = static_cast<int>(p.group());
  const size_t state_slots = (static_cast<size_t>(tables.chunks) + N) * H * K * V;
  const size_t ws = group > 1 ? static_cast<size_t>(p.B) * p.T * HK * K : 0;
  ak::cuda::Scratch more(p.device_index, 2 * ws * sizeof(float) + 2 * state_slots * sizeof(T) + 256);
  float* ws_dq = group > 1 ? more.as<float>() : nullptr;
  float* ws_dk = group > 1 ? ws_dq + ws : nullptr;
  T* states = reinterpret_cast<T*>(more.as<float>() + 2 * ws);
  T* dstates = states + state_slots;
  bp.f.f.states16 = {states, H, K, V};
  bp.states = {states, H, K, V};
  bp.dstates = {dstates, H, K, V};
  bp.dout = gla::rows_in<T>(a.d_output);
  bp.dq = gla::rows_out<T>(a.dq);
  bp.dk = gla::rows_out<T>(a.dk);
  bp.dv = gla::rows_out<T>(a.dv);
  bp.ws_dq = ws_dq;
  bp.ws_dk = ws_dk;
  bp.dgate = gla::rows_out<float>(a.dgate);
  bp.dbeta = gla::rows_out<float>(a.dbeta);
  bp.d_final_state = gla::f32(a.d_final_state);
  bp.d_initial_state = gla::f32(a.d_initial_state);
  ak::cuda::launch_row<T>(plan.prep_row, "linear.kda.prep", bp.f, stream);
  ak::cuda::launch_row<T>(plan.fwd_row, "linear.kda.fwd", bp.f, stream);
  if (ws > 0) AK_CUDA_CHECK(cudaMemsetAsync(ws_dq, 0, 2 * ws * sizeof(float), stream));
  ak::cuda::launch_row<T>(plan.dstates_row, "linear.kda.dstates", bp, stream);
  ak::cuda::launch_row<T>(plan.grads_row, "linear.kda.grads", bp, stream);
  const int B = static_cast<int>(p.B), T_ = static_cast<int>(p.T);
  if (ws > 0) {
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((ws + 255) / 256, 65535));
    gla::gla_convert_rows_kernel<T><<<blocks, 256, 0, stream>>>(ws_dq, bp.dq, B, T_, HK, K);
    gla::gla_convert_rows_kernel<T><<<blocks, 256, 0, stream>>>(ws_dk, bp.dk, B, T_, HK, K);
    ak::cuda::check_launch("gla_convert_rows_kernel");
  }
  // Tokens past the last packed sequence get zero gradients.
  const UncoveredTail tail = uncovered_tail(p);
  if (tail.any) {
    const int t0 = tail.first;
    const int32_t* at = tail.first_at;
    gla::gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dq, t0, at, T_, HK, K);
    gla::gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dk, t0, at, T_, HK, K);
    gla::gla_zero_rows_kernel<T><<<64, 256, 0, stream>>>(bp.dv, t0, at, T_, H, V);
    gla::gla_zero_rows_kernel<float><<<64, 256, 0, stream>>>(bp.dgate, t0, at, T_, H, K);
    gla::gla_zero_rows_kernel<float><<<64, 256, 0, stream>>>(bp.dbeta, t0, at, T_, H, 1);
    ak::cuda::check_launch("gla_zero_rows_kernel");
  }
}

// The general path: the CPU backend on host copies. mirror_inputs moves a call to the CPU with host
// copies of the inputs both directions read; each direction adds its own outputs.
template <class Call>
void mirror_inputs(HostMirror& m, Call& h, const Call& a) {
  h.p.device_type = AK_CPU;
  h.q = m.input(a.q), h.k = m.input(a.k), h.v = m.input(a.v);
  h.gate = m.input(a.gate), h.beta = m.input(a.beta);
  h.initial_state = m.input(a.initial_state);
  h.p.cu_seqlens = m.input(a.p.cu_seqlens);
}

void general_fwd(const KdaFwd& a) {
  HostMirror m;
  KdaFwd h = a;
  mirror_inputs(m, h, a);
  // A packed call leaves the rows past its last offset as they are.
  h.output = m.output(a.output, token_rows(a.p.varlen, a.p.seq_start));
  h.final_state = m.output(a.final_state);
  ak::linear::cpu::kda_fwd(h);
  m.write_back();
}

}  // namespace

void kda_fwd(const KdaFwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const kda_planning::KdaChoice plan = kda_planning::plan_kda_fwd(
      shape_of(p, a.fastmath, a.impl, {a.q, a.k, a.v, a.output, a.gate}), ak::cuda::caps(p.device_index));
  plan::set_last(plan.plan);
  if (!plan.chunked) return general_fwd(a);
  if (p.dtype == AK_BFLOAT16) return chunked_fwd<__nv_bfloat16>(a, plan, stream);
  return chunked_fwd<__half>(a, plan, stream);
}

namespace {

void general_bwd(const KdaBwd& a) {
  HostMirror m;
  KdaBwd h = a;
  mirror_inputs(m, h, a);
  h.d_output = m.input(a.d_output), h.d_final_state = m.input(a.d_final_state);
  // Every gradient element is written (tokens past a packed call's last offset get zeros).
  h.dq = m.output(a.dq), h.dk = m.output(a.dk), h.dv = m.output(a.dv);
  h.dgate = m.output(a.dgate), h.dbeta = m.output(a.dbeta);
  h.d_initial_state = m.output(a.d_initial_state);
  ak::linear::cpu::kda_bwd(h);
  m.write_back();
}

}  // namespace

void kda_bwd(const KdaBwd& a) {
  const DeltaProblem& p = a.p;
  ak::cuda::DeviceGuard guard(p.device_index);
  cudaStream_t stream = ak::cuda::stream(p.device_index);
  const kda_planning::KdaChoice plan = kda_planning::plan_kda_bwd(
      shape_of(p, a.fastmath, a.impl, {a.q, a.k, a.v, a.d_output, a.dq, a.dk, a.dv, a.gate, a.dgate}),
      ak::cuda::caps(p.device_index));
  plan::set_last(plan.plan);
  if (!plan.chunked) return general_bwd(a);
  if (p.dtype == AK_BFLOAT16) return chunked_bwd<__nv_bfloat16>(a, plan, stream);
  return chunked_bwd<__half>(a, plan, stream);
}

}  // namespace ak::linear::cuda
