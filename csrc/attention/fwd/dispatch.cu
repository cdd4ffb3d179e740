// CUDA forward of softmax attention: fills the kernels' parameters from the validated call, asks the
// planner (planner.cpp) which registry row serves it, and launches that row.
#include <algorithm>
#include <cstdint>
#include <string>

#include "attention/bwd/launch.h"
#include "attention/call_fields.h"
#include "attention/fwd/dispatch.h"
#include "generated/attention_launchers.h"
#include "attention/planner.h"
#include "attention/problem.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {

bool aligned_16(const ak_tensor& t) {
  const int64_t bytes = t.dtype == AK_FLOAT8_E4M3 ? 1 : 2;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.shape[i] > 1 && ((t.strides[i] * bytes) % 16 != 0 || t.strides[i] == 0)) return false;
  }
  return true;
}

FwdParams forward_params(const AttnFwd& a) {
  const AttnProblem& pr = a.p;
  const ak_tensor& q = *a.q;
  const ak_tensor& k = *a.k;
  const ak_tensor& v = *a.v;
  const ak_tensor& o = *a.output;
  FwdParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  bshd_strides(q, pr.varlen, p.q_batch, p.q_row, p.q_head);
  bshd_strides(k, pr.varlen, p.k_batch, p.k_row, p.k_head);
  bshd_strides(v, pr.varlen, p.v_batch, p.v_row, p.v_head);
  bshd_strides(o, pr.varlen, p.o_batch, p.o_row, p.o_head);
  if (a.lse != nullptr) {
    const ak_tensor& l = *a.lse;
    if (pr.varlen) {
      p.lse_batch = 0, p.lse_head = l.strides[0], p.lse_row = l.strides[1];
    } else {
      p.lse_batch = l.strides[0], p.lse_head = l.strides[1], p.lse_row = l.strides[2];
    }
  }
  fill_call(p, pr);
  if (pr.varlen) {
    p.total_q = pr.q_start.back();
    p.total_kv = pr.kv_start.back();
  } else {
    p.total_q = pr.B * pr.Sq;
    p.total_kv = pr.B * pr.Skv;
  }
  constexpr float kLog2e = 1.4426950408889634f;
  if (pr.softcap > 0.0f) {
    p.softcap_mul = pr.sm_scale / pr.softcap;
    p.exp_scale = kLog2e;  // soft-capped scores are already scaled
  } else {
    p.exp_scale = pr.sm_scale * kLog2e;
  }
  return p;
}

void attention_fwd(const AttnFwd& a) {
  if (a.p.dtype == AK_FLOAT8_E4M3) return attention_fwd_e4m3(a);
  const AttnProblem& pr = a.p;
  const ak_tensor& q = *a.q;
  const ak_tensor& k = *a.k;
  const ak_tensor& v = *a.v;
  const ak_tensor& o = *a.output;
  ::ak::cuda::DeviceGuard guard(pr.device_index);
  cudaStream_t stream = ::ak::cuda::stream(pr.device_index);
  FwdParams p = forward_params(a);

  planning::FwdShape shape;
  static_cast<planning::CallShape&>(shape) = call_shape(pr);
  shape.total_kv = p.total_kv;
  shape.aligned = aligned_16(q) && aligned_16(k) && aligned_16(v) && aligned_16(o);
  const planning::FwdChoice choice =
      planning::plan_fwd(shape, ::ak::cuda::caps(pr.device_index), tuning::current());
  plan::set_last(choice.plan);
  if (choice.plan.rows.empty()) return;
  p.num_m_blocks = static_cast<int>((p.sq + choice.block_m - 1) / choice.block_m);
  p.heads_per_section = choice.heads_per_section;
  const int row = choice.plan.rows[0];
  const bool bf16 = pr.dtype == AK_BFLOAT16;
  if (choice.plan.path == "general") {
    const FwdGeneralArgs args{p, aligned_16(q) && aligned_16(k) && aligned_16(v)};
    bf16 ? ::ak::cuda::launch_row<__nv_bfloat16>(row, "attention.fwd", args, stream)
         : ::ak::cuda::launch_row<__half>(row, "attention.fwd", args, stream);
    return;
  }
  bf16 ? ::ak::cuda::launch_row<__nv_bfloat16>(row, "attention.fwd", p, stream)
       : ::ak::cuda::launch_row<__half>(row, "attention.fwd", p, stream);
}

// Backward: bwd/dispatch.cu (prep, then the main kernel, then the dq conversion).
void attention_bwd(const AttnBwd& a) { attention_bwd_run(a); }

}  // namespace ak::attention::cuda
