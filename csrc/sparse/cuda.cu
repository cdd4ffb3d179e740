// The CUDA backend of the sparse-attention ops. NSA's compressed and selected branches, the latent decode
// (DSA, MLA), NSA's block selection and the indexer: the planner names the registry row (a tiled block or the
// per-item kernels), the plan is recorded and the row launched.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/backend.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"
#include "sparse/backend.h"
#include "sparse/dsa_source.h"
#include "sparse/launch.cuh"
#include "sparse/planner.h"
#include "sparse/rows.h"

namespace ak::sparse::cuda {

namespace {

// Launches registry row `row` of `stage` at the problem's dtype.
template <class Problem>
void launch_planned(int row, const char* stage, const Problem& p, cudaStream_t stream) {
  switch (p.dtype) {
    case AK_BFLOAT16: return ::ak::cuda::launch_row<__nv_bfloat16>(row, stage, p, stream);
    case AK_FLOAT16: return ::ak::cuda::launch_row<__half>(row, stage, p, stream);
    case AK_FLOAT8_E4M3: return ::ak::cuda::launch_row<__nv_fp8_e4m3>(row, stage, p, stream);
    default: return ::ak::cuda::launch_row<float>(row, stage, p, stream);
  }
}

// Plans an NSA branch, records the plan and launches its row.
template <class Problem>
void run_planned(const char* stage, const Problem& p, const void* const* data, int device) {
  ak::cuda::DeviceGuard guard(device);
  planning::NsaShape shape;
  shape.stage = stage, shape.dtype = p.dtype, shape.d = p.K, shape.dv = p.V, shape.hq = p.H, shape.hkv = p.Hkv;
  for (int i = 0; i < 3; i++) shape.aligned = shape.aligned && reinterpret_cast<uintptr_t>(data[i]) % 16 == 0;
  const plan::Plan plan = planning::plan_nsa(shape, ::ak::cuda::caps(device), tuning::current());
  plan::set_last(plan);
  launch_planned(plan.rows[0], stage, p, ak::cuda::stream(device));
}

}  // namespace

void nsa_compression(const NsaCompression& p, int device) {
  const void* data[3] = {p.q, p.k_cmp, p.v_cmp};
  run_planned("sparse.nsa.compression", p, data, device);
}

void nsa_topk(const NsaTopk& p, int device) {
  ak::cuda::DeviceGuard guard(device);
  const plan::Plan plan = planning::plan_topk(planning::shape_of(p), ::ak::cuda::caps(device), tuning::current());
  plan::set_last(plan);
  if (p.seq.T == 0 || p.Hkv == 0) return;
  launch_planned(plan.rows[0], planning::kTopkStage, p, ak::cuda::stream(device));
}

void nsa_selection(const NsaSelection& p, int device) {
  const void* data[3] = {p.q, p.k, p.v};
  run_planned("sparse.nsa.selection", p, data, device);
}

void dsa_decode(const DsaDecode& p, int device) {
  ak::cuda::DeviceGuard guard(device);
  const registry::Caps caps = ::ak::cuda::caps(device);
  const plan::Plan plan = planning::plan_dsa(planning::shape_of(p), caps, tuning::current());
  plan::set_last(plan);
  if (p.B * p.Sq * p.H == 0) return;
  DsaDecode split = p;  // the plan's split (plan_dsa records it)
  if (plan.path != "item") planning::split_lists(split, plan.path, caps.sms);
  launch_planned(plan.rows[0], "sparse.dsa.decode", split, ak::cuda::stream(device));
}

void indexer(const Indexer& p, int device) {
  ak::cuda::DeviceGuard guard(device);
  const plan::Plan plan = planning::plan_indexer(planning::shape_of(p), ::ak::cuda::caps(device), tuning::current());
  plan::set_last(plan);
  if (p.Sq == 0 || p.Sk == 0) return;
  launch_planned(plan.rows[0], planning::kIndexerStage, p, ak::cuda::stream(device));
}

}  // namespace ak::sparse::cuda
