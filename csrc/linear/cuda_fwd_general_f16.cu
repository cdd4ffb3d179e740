// The general forward path (token-by-token recurrence, fp32 WY factors) instantiated for __half inputs.
#include "cuda_fwd_recurrent.cuh"
#include "cuda_fwd_wy_general.cuh"

namespace ak::linear::cuda::fwd {

template void launch_recurrent_fwd<__half>(const RecurrentParams<__half>&, cudaStream_t);
template void launch_wy_general<__half>(const WyParams<__half>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
