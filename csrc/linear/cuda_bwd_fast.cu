// The tensor-core path of the delta-rule backward (placeholder while it is written).
#include "../cuda/runtime.cuh"
#include "cuda_bwd.cuh"

namespace ak::linear::cuda::bwd {

bool fast_supported(const Problem& p, int device) {
  (void)p;
  (void)device;
  return false;
}

void run_fast(const Problem& p, cudaStream_t stream, int device) {
  (void)p;
  (void)stream;
  (void)device;
  fail(AK_ERR_INTERNAL, "delta_rule_bwd: the fast path is not built");
}

}  // namespace ak::linear::cuda::bwd
