// The CUDA attention backward for one validated call: stage misaligned tensors, fill BwdParams,
// allocate the fp32 scratch, ask the planner (planner.cpp) for the main kernel, then run prep -> main
// kernel -> dq conversion.
#include <cmath>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "attention/bwd/launch.h"
#include "attention/call_fields.h"
#include "generated/attention_launchers.h"
#include "attention/planner.h"
#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {
namespace {

using ak::cuda::Scratch;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kMaxLength = int64_t{1} << 30;  // int32 index arithmetic in the kernels

// Every row start 16-byte aligned: the base and each stride (of a dimension longer than 1).
bool rows_aligned16(const ak_tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype));
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.shape[i] > 1 && (t.strides[i] * esize) % 16 != 0) return false;
  }
  return true;
}

// Contiguous stand-ins for tensors whose rows are not 16-byte aligned (the kernels load and store
// 16 bytes at a time). Buffers are freed stream-ordered when the call returns.
class Staging {
 public:
  explicit Staging(int device) : device_(device) {}

  const ak_tensor* input(const ak_tensor* t) {
    if (rows_aligned16(*t)) return t;
    ak_tensor& c = make_contiguous(*t);
    ak::cuda::copy_strided(c, *t);
    return &c;
  }
  const ak_tensor* output(const ak_tensor* t) {
    if (rows_aligned16(*t)) return t;
    ak_tensor& c = make_contiguous(*t);
    pending_.push_back({&c, t});
    return &c;
  }
  // Copies the staged outputs to the caller's tensors.
  void finish() {
    for (const auto& p : pending_) ak::cuda::copy_strided(*p.second, *p.first);
  }

 private:
  ak_tensor& make_contiguous(const ak_tensor& t) {
    buffers_.push_back(std::make_unique<Scratch>(device_, static_cast<size_t>(numel(t)) * dtype_size(t.dtype)));
    ak_tensor c = t;
    c.data = buffers_.back()->get();
    set_contiguous_strides(c);
    tensors_.push_back(c);
    return tensors_.back();
  }

  int device_;
  std::vector<std::unique_ptr<Scratch>> buffers_;
  std::deque<ak_tensor> tensors_;
  std::vector<std::pair<const ak_tensor*, const ak_tensor*>> pending_;
};

// TMA steps along every dimension longer than 1 with a positive stride (no broadcast views).
bool positive_strides(const ak_tensor& t) {
  for (int i = 0; i < t.rank - 1; ++i) {
    if (t.shape[i] > 1 && t.strides[i] <= 0) return false;
  }
  return true;
}

}  // namespace

void attention_bwd_run(const AttnBwd& a) {
  const AttnProblem& pr = a.p;
  const int device = pr.device_index;
  ak::cuda::DeviceGuard guard(device);
  cudaStream_t stream = ak::cuda::stream(device);

  const int64_t total_q = pr.varlen ? pr.q_start.back() : pr.N * pr.Sq;
  const int64_t total_kv = pr.varlen ? pr.kv_start.back() : pr.N * pr.Skv;
  if (total_q >= kMaxLength || total_kv >= kMaxLength) {
    fail(AK_ERR_UNSUPPORTED, "attention backward on CUDA: at most 2^30 query and key rows in all");
  }
  require(pr.N <= 65535 && pr.Hq <= 65535, "attention backward on CUDA: at most 65535 sequences and 65535 heads");

  Staging staging(device);
  const ak_tensor* q = staging.input(a.q);
  const ak_tensor* k = staging.input(a.k);
  const ak_tensor* v = staging.input(a.v);
  const ak_tensor* o = staging.input(a.output);
  const ak_tensor* dout = staging.input(a.d_output);
  const ak_tensor* dq = staging.output(a.dq);
  const ak_tensor* dk = staging.output(a.dk);
  const ak_tensor* dv = staging.output(a.dv);

  BwdParams p;
  p.q = q->data;
  p.k = k->data;
  p.v = v->data;
  p.o = o->data;
  p.dout = dout->data;
  p.lse = static_cast<const float*>(a.lse->data);
  p.dq = dq->data;
  p.dk = dk->data;
  p.dv = dv->data;
  bshd_strides(*q, pr.varlen, p.q_batch, p.q_row, p.q_head);
  bshd_strides(*k, pr.varlen, p.k_batch, p.k_row, p.k_head);
  bshd_strides(*v, pr.varlen, p.v_batch, p.v_row, p.v_head);
  bshd_strides(*o, pr.varlen, p.o_batch, p.o_row, p.o_head);
  bshd_strides(*dout, pr.varlen, p.do_batch, p.do_row, p.do_head);
  bshd_strides(*dq, pr.varlen, p.dq_batch, p.dq_row, p.dq_head);
  bshd_strides(*dk, pr.varlen, p.dk_batch, p.dk_row, p.dk_head);
  bshd_strides(*dv, pr.varlen, p.dv_batch, p.dv_row, p.dv_head);
  // The LSE is contiguous: [B, Hq, Sq], or [Hq, Tq] for varlen.
  p.lse_batch = pr.varlen ? 0 : pr.Hq * pr.Sq;
  p.lse_head = pr.varlen ? total_q : pr.Sq;

  fill_call(p, pr);
  p.tq = static_cast<int>(total_q);
  p.tkv = static_cast<int>(total_kv);
  p.softcap_mul = pr.softcap > 0 ? pr.sm_scale / pr.softcap : 0.0f;
  p.exp_scale = (pr.softcap > 0 ? pr.softcap : pr.sm_scale) * kLog2e;

  planning::BwdShape shape;
  static_cast<planning::CallShape&>(shape) = call_shape(pr);
  shape.deterministic = pr.deterministic;
  shape.tma_ok = positive_strides(*q) && positive_strides(*k) && positive_strides(*v) && positive_strides(*dout);
  const planning::BwdChoice choice = planning::plan_bwd(shape, ak::cuda::caps(device), tuning::current());
  plan::set_last(choice.plan);
  p.dq_layout = static_cast<DqLayout>(static_cast<int>(choice.dq_order));
  p.acc_rows = bwd_acc_rows(pr.varlen, pr.N, pr.Sq, total_q);
  p.sq_pad = static_cast<int>((pr.Sq + kBwdTileM - 1) / kBwdTileM * kBwdTileM);
  const size_t rows = static_cast<size_t>(pr.Hq * p.acc_rows);
  Scratch lse_log2(device, rows * sizeof(float));
  Scratch dsum(device, rows * sizeof(float));
  Scratch dq_accum(device, rows * static_cast<size_t>(pr.D) * sizeof(float));
  p.lse_log2 = lse_log2.as<float>();
  p.dsum = dsum.as<float>();
  p.dq_accum = dq_accum.as<float>();
  std::unique_ptr<Scratch> semaphores;
  if (pr.deterministic) {
    const size_t count = rows / kBwdTileM;
    semaphores = std::make_unique<Scratch>(device, count * sizeof(int));
    p.dq_semaphore = semaphores->as<int>();
    if (count > 0) AK_CUDA_CHECK(cudaMemsetAsync(p.dq_semaphore, 0, count * sizeof(int), stream));
  }

  bwd::launch_prep(p, pr.dtype, stream);
  const BwdArgs args{p, device};
  if (pr.dtype == AK_BFLOAT16) {
    ak::cuda::launch_row<__nv_bfloat16>(choice.plan.rows[0], "attention.bwd", args, stream);
  } else {
    ak::cuda::launch_row<__half>(choice.plan.rows[0], "attention.bwd", args, stream);
  }
  bwd::launch_dq_convert(p, pr.dtype, stream);
  staging.finish();
}

}  // namespace ak::attention::cuda
