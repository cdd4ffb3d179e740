// The Hopper attention backward for f16, head dim 128.
#include "cuda_bwd_sm90.cuh"

namespace ak::attention::cuda::bwd {
template void launch_sm90<__half, 128>(const BwdParams&, cudaStream_t, int, bool);
}  // namespace ak::attention::cuda::bwd
