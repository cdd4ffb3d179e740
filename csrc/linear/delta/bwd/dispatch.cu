// The CUDA backward of the delta rule (ak::linear::cuda::delta_bwd): turns the validated call into the
// stages' Problem, builds the varlen chunk tables on the device, asks the planner
// (linear/planner.cpp) for the path and its kernels, and runs it: the tensor-core stages (fast.cu)
// or the general fp32 path (a registry row of its own).
#include <string>

#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"
#include "linear/common/packed_tables.h"
#include "linear/planner.h"
#include "linear/problem.h"

namespace ak::linear::cuda {
namespace {

using bwd::OutView;
using bwd::Problem;
using bwd::RowView;

RowView row_view(const ak_tensor* t) {
  if (t == nullptr) return RowView{};
  return RowView{t->data, t->strides[0], t->strides[1], t->strides[2]};
}

OutView out_view(const ak_tensor* t) {
  if (t == nullptr) return OutView{};
  return OutView{t->data, t->strides[0], t->strides[1], t->strides[2]};
}

// 16-byte rows: pointer and every stride a multiple of 16 bytes (8 elements).
template <class View>
bool rows16(const View& v) {
  return reinterpret_cast<uintptr_t>(v.p) % 16 == 0 && v.sb % 8 == 0 && v.st % 8 == 0 && v.sh % 8 == 0;
}

}  // namespace

void delta_bwd(const DeltaBwd& a) {
  const DeltaProblem& dp = a.p;
  const int device = dp.device_index;
  ak::cuda::DeviceGuard guard(device);
  cudaStream_t stream = ak::cuda::stream(device);

  Problem p;
  p.N = static_cast<int>(dp.N);
  p.H = static_cast<int>(dp.H);
  p.HK = static_cast<int>(dp.HK);
  p.group = static_cast<int>(dp.group());
  p.K = static_cast<int>(dp.K);
  p.V = static_cast<int>(dp.V);
  p.scale = static_cast<float>(dp.scale);
  p.gated = dp.gated;
  p.l2norm = dp.l2norm;
  p.dtype = dp.dtype;
  p.q = row_view(a.q);
  p.k = row_view(a.k);
  p.v = row_view(a.v);
  p.dout = row_view(a.d_output);
  p.g = dp.gated ? row_view(a.g) : RowView{};
  p.beta = row_view(a.beta);
  p.initial_state = a.initial_state ? static_cast<const float*>(a.initial_state->data) : nullptr;
  p.d_final_state = a.d_final_state ? static_cast<const float*>(a.d_final_state->data) : nullptr;
  p.dq = out_view(a.dq);
  p.dk = out_view(a.dk);
  p.dv = out_view(a.dv);
  p.dbeta = out_view(a.dbeta);
  p.dg = dp.gated ? out_view(a.dg) : OutView{};
  p.d_initial_state = a.d_initial_state ? static_cast<float*>(a.d_initial_state->data) : nullptr;
  p.saved = a.saved ? a.saved->data : nullptr;

  planning::BwdShape shape;
  shape.dtype = dp.dtype;
  shape.K = p.K;
  shape.V = p.V;
  shape.N = dp.N;
  shape.H = dp.H;
  shape.HK = dp.HK;
  // The recurrent flag changes the forward's algorithm, not the gradients: the default chunk.
  shape.chunk_size = dp.recurrent ? 64 : dp.chunk_size;
  shape.l2norm = dp.l2norm;
  shape.saved = p.saved != nullptr;
  shape.aligned_qk = rows16(p.q) && rows16(p.k);
  shape.aligned_rest = rows16(p.v) && rows16(p.dout) && rows16(p.dq) && rows16(p.dk) && rows16(p.dv);
  const planning::BwdChoice plan = planning::plan_bwd(shape, ak::cuda::caps(device), tuning::current());
  plan::set_last(plan.plan);
  p.C = plan.chunk;

  // The chunks of the whole call (a packed call's capacity: chunk_map.cuh) and their tables.
  require(dp.chunk_capacity(p.C) * p.C < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many tokens for one call");
  const ChunkTables tables(dp, p.C, stream, "delta_rule_bwd");
  p.map = tables.map;
  p.NCt = tables.chunks;

  if (p.H > 0 && p.N > 0) {
    if (plan.fast) {
      bwd::run_fast(p, plan, stream, device);
    } else {
      const bwd::GeneralArgs args{p, device};
      switch (p.dtype) {
        case AK_FLOAT32: ak::cuda::launch_row<float>(plan.general_row, "linear.bwd.general", args, stream); break;
        case AK_FLOAT16: ak::cuda::launch_row<__half>(plan.general_row, "linear.bwd.general", args, stream); break;
        default: ak::cuda::launch_row<__nv_bfloat16>(plan.general_row, "linear.bwd.general", args, stream);
      }
    }
  }
  const UncoveredTail tail = uncovered_tail(dp);
  if (tail.any && (p.H > 0 || p.HK > 0)) bwd::launch_zero_uncovered(p, tail.first, tail.first_at, stream);
}

}  // namespace ak::linear::cuda
