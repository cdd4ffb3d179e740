// KDA's CUDA backend, for now the general path only: the CPU backend (the exact recurrence with double
// states) on host copies of the tensors, the outputs copied back. Exact and slow; the plan says so.
#include "core/plan.h"
#include "cuda/backend.h"
#include "cuda/runtime.cuh"
#include "linear/gla/cuda/host_mirror.h"
#include "linear/kda/planner.h"
#include "linear/kda/problem.h"

namespace ak::linear::cuda {

void kda_fwd(const KdaFwd& a) {
  ak::cuda::DeviceGuard guard(a.p.device_index);
  plan::set_last(kda_planning::plan_kda("linear.kda.fwd", a.p.recurrent, a.fastmath));
  HostMirror m;
  KdaFwd h = a;
  h.p.device_type = AK_CPU;
  h.q = m.add(a.q, false), h.k = m.add(a.k, false), h.v = m.add(a.v, false);
  h.gate = m.add(a.gate, false), h.beta = m.add(a.beta, false);
  h.initial_state = m.add(a.initial_state, false);
  h.output = m.add(a.output, true), h.final_state = m.add(a.final_state, true);
  h.p.cu_seqlens = m.add(a.p.cu_seqlens, false);
  ak::linear::cpu::kda_fwd(h);
  m.write_back();
}

void kda_bwd(const KdaBwd& a) {
  ak::cuda::DeviceGuard guard(a.p.device_index);
  plan::set_last(kda_planning::plan_kda("linear.kda.bwd", a.p.recurrent, a.fastmath));
  HostMirror m;
  KdaBwd h = a;
  h.p.device_type = AK_CPU;
  h.q = m.add(a.q, false), h.k = m.add(a.k, false), h.v = m.add(a.v, false);
  h.gate = m.add(a.gate, false), h.beta = m.add(a.beta, false);
  h.initial_state = m.add(a.initial_state, false);
  h.d_output = m.add(a.d_output, false), h.d_final_state = m.add(a.d_final_state, false);
  h.dq = m.add(a.dq, true), h.dk = m.add(a.dk, true), h.dv = m.add(a.dv, true);
  h.dgate = m.add(a.dgate, true), h.dbeta = m.add(a.dbeta, true);
  h.d_initial_state = m.add(a.d_initial_state, true);
  h.p.cu_seqlens = m.add(a.p.cu_seqlens, false);
  ak::linear::cpu::kda_bwd(h);
  m.write_back();
}

}  // namespace ak::linear::cuda
