// The general forward path (token-by-token recurrence, fp32 WY factors) instantiated for float inputs.
#include "cuda_fwd_recurrent.cuh"
#include "cuda_fwd_wy_general.cuh"

namespace ak::linear::cuda::fwd {

template void launch_recurrent_fwd<float>(const RecurrentParams<float>&, cudaStream_t);
template void launch_wy_general<float>(const WyParams<float>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
