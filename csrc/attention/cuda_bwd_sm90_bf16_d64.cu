// The Hopper attention backward for bf16, head dim 64.
#include "cuda_bwd_sm90.cuh"

namespace ak::attention::cuda::bwd {
template void launch_sm90<__nv_bfloat16, 64>(const BwdParams&, cudaStream_t, int, bool);
}  // namespace ak::attention::cuda::bwd
