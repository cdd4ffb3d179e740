// The general forward path (token-by-token recurrence, fp32 WY factors) instantiated for __nv_bfloat16 inputs.
#include "cuda_fwd_recurrent.cuh"
#include "cuda_fwd_wy_general.cuh"

namespace ak::linear::cuda::fwd {

template void launch_recurrent_fwd<__nv_bfloat16>(const RecurrentParams<__nv_bfloat16>&, cudaStream_t);
template void launch_wy_general<__nv_bfloat16>(const WyParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
