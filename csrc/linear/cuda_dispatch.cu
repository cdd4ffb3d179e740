// CUDA backend of the delta-rule family: picks a kernel path for each call.
#include "../cuda/runtime.cuh"
#include "delta_rule.h"

namespace ak::linear::cuda {

void delta_fwd(const DeltaFwd& a) {
  (void)a;
  fail(AK_ERR_UNSUPPORTED, "delta_rule_fwd on CUDA: not implemented yet");
}

// delta_bwd: csrc/linear/cuda_bwd.cu

void delta_decode(const DeltaDecode& a) {
  (void)a;
  fail(AK_ERR_UNSUPPORTED, "delta_rule_decode on CUDA: not implemented yet");
}

}  // namespace ak::linear::cuda
