// The CUDA side of ak_attention_decode: the planner names the registry row (attention.decode.split at the
// call's dtype and head dim) and the split, the plan is recorded, and the row is launched.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/decode/backend.h"
#include "attention/planner.h"
#include "cuda/backend.h"
#include "core/plan.h"
#include "core/tuning.h"
#include "cuda/registry_launch.h"
#include "cuda/runtime.cuh"

namespace ak::attention::decode::cuda {

void run(const Problem& problem, int device) {
  ak::cuda::DeviceGuard guard(device);
  Problem p = problem;
  p.device = device;
  planning::DecodeShape shape;
  shape.dtype = p.dtype, shape.d = static_cast<int>(p.D), shape.n_seq = static_cast<int>(p.B);
  shape.hq = static_cast<int>(p.H), shape.hkv = static_cast<int>(p.Hkv), shape.sq = static_cast<int>(p.Sq);
  shape.capacity = p.capacity;
  const planning::DecodeChoice choice = planning::plan_decode(shape, ::ak::cuda::caps(device), tuning::current());
  plan::set_last(choice.plan);
  if (choice.plan.rows.empty()) return;
  p.splits = choice.splits, p.chunk = choice.chunk;
  const cudaStream_t stream = ak::cuda::stream(device);
  const int row = choice.plan.rows[0];
  p.dtype == AK_BFLOAT16 ? ::ak::cuda::launch_row<__nv_bfloat16>(row, "attention.decode", p, stream)
                         : ::ak::cuda::launch_row<__half>(row, "attention.decode", p, stream);
}

}  // namespace ak::attention::decode::cuda
