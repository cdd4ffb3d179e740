// The Hopper attention backward, v2 (cuda_bwd_sm90_v2.cuh), for f16, head dim 64.
#include "cuda_bwd_sm90_v2.cuh"

namespace ak::attention::cuda::bwd {
template void launch_sm90_v2<__half, 64>(const BwdParams&, cudaStream_t, int, bool, bool);
}  // namespace ak::attention::cuda::bwd
