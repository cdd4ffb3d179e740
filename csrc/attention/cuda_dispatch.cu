// CUDA backend of the softmax-attention family: picks a kernel path for each call.
#include "../cuda/runtime.cuh"
#include "attention.h"

namespace ak::attention::cuda {

void attention_fwd(const AttnFwd& a) {
  (void)a;
  fail(AK_ERR_UNSUPPORTED, "attention_fwd on CUDA: not implemented yet");
}

void attention_bwd(const AttnBwd& a) {
  (void)a;
  fail(AK_ERR_UNSUPPORTED, "attention_bwd on CUDA: not implemented yet");
}

}  // namespace ak::attention::cuda
