// CUDA forward of softmax attention: fills the kernels' parameters from the validated call, asks the
// planner (planner.cpp) which registry row serves it, and launches that row.
#include <algorithm>
#include <cstdint>
#include <string>

#include "attention/bwd/launch.h"
#include "attention/launchers.h"
#include "attention/planner.h"
#include "attention/problem.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {
namespace {

// Strides of one BSHD (or packed THD) tensor, in elements: batch (0 for varlen), row, head.
struct Strides3 {
  int64_t batch, row, head;
};

Strides3 bshd_strides(const ak_tensor& t, bool varlen) {
  if (varlen) return {0, t.strides[0], t.strides[1]};
  return {t.strides[0], t.strides[1], t.strides[2]};
}

// 16-byte copies (and TMA) need the base and every stride that steps (extent > 1) to be a nonzero
// multiple of 16 bytes (8 elements).
bool aligned_16(const ak_tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.shape[i] > 1 && (t.strides[i] % 8 != 0 || t.strides[i] == 0)) return false;
  }
  return true;
}

}  // namespace

void attention_fwd(const AttnFwd& a) {
  const AttnProblem& pr = a.p;
  const ak_tensor& q = *a.q;
  const ak_tensor& k = *a.k;
  const ak_tensor& v = *a.v;
  const ak_tensor& o = *a.output;
  ::ak::cuda::DeviceGuard guard(pr.device_index);
  cudaStream_t stream = ::ak::cuda::stream(pr.device_index);

  FwdParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  const Strides3 qs = bshd_strides(q, pr.varlen), ks = bshd_strides(k, pr.varlen), vs = bshd_strides(v, pr.varlen),
                 os = bshd_strides(o, pr.varlen);
  p.q_batch = qs.batch, p.q_row = qs.row, p.q_head = qs.head;
  p.k_batch = ks.batch, p.k_row = ks.row, p.k_head = ks.head;
  p.v_batch = vs.batch, p.v_row = vs.row, p.v_head = vs.head;
  p.o_batch = os.batch, p.o_row = os.row, p.o_head = os.head;
  if (a.lse != nullptr) {
    const ak_tensor& l = *a.lse;
    if (pr.varlen) {
      p.lse_batch = 0, p.lse_head = l.strides[0], p.lse_row = l.strides[1];
    } else {
      p.lse_batch = l.strides[0], p.lse_head = l.strides[1], p.lse_row = l.strides[2];
    }
  }
  p.n_seq = static_cast<int>(pr.N);
  p.hq = static_cast<int>(pr.Hq);
  p.hkv = static_cast<int>(pr.Hkv);
  p.group = static_cast<int>(pr.group());
  p.d = static_cast<int>(pr.D);
  p.sq = static_cast<int>(pr.Sq);
  p.skv = static_cast<int>(pr.Skv);
  if (pr.varlen) {
    p.cu_q = static_cast<const int32_t*>(pr.cu_seqlens_q->data);
    p.cu_kv = static_cast<const int32_t*>(pr.cu_seqlens_kv->data);
    p.total_q = pr.q_start.back();
    p.total_kv = pr.kv_start.back();
  } else {
    p.total_q = pr.B * pr.Sq;
    p.total_kv = pr.B * pr.Skv;
  }
  p.sm_scale = pr.sm_scale;
  p.softcap = pr.softcap;
  constexpr float kLog2e = 1.4426950408889634f;
  if (pr.softcap > 0.0f) {
    p.softcap_mul = pr.sm_scale / pr.softcap;
    p.exp_scale = kLog2e;  // soft-capped scores are already scaled
  } else {
    p.exp_scale = pr.sm_scale * kLog2e;
  }
  auto window = [](int64_t w) { return w < 0 || w > kWindowUnlimited ? kWindowUnlimited : static_cast<int>(w); };
  p.window_left = window(pr.window_left);
  p.window_right = window(pr.window_right);

  planning::FwdShape shape;
  shape.dtype = pr.dtype;
  shape.d = p.d;
  shape.n_seq = p.n_seq;
  shape.hq = p.hq;
  shape.hkv = p.hkv;
  shape.sq = p.sq;
  shape.skv = p.skv;
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
