// The general attention forward instantiated for head dims up to 64 (f16 and bf16).
#include "cuda_fwd_general.cuh"
#include "cuda_fwd_launch.h"

namespace ak::attention::cuda {

template <>
void launch_fwd_general<64, AK_BFLOAT16>(const FwdParams& p, bool aligned, cudaStream_t stream) {
  launch_fwd_general_impl<64, __nv_bfloat16>(p, aligned, stream);
}

template <>
void launch_fwd_general<64, AK_FLOAT16>(const FwdParams& p, bool aligned, cudaStream_t stream) {
  launch_fwd_general_impl<64, __half>(p, aligned, stream);
}

}  // namespace ak::attention::cuda
