// The general attention backward for bf16, head dims padded to 256.
#include "cuda_bwd_general.cuh"

namespace ak::attention::cuda::bwd {
template void launch_general<__nv_bfloat16, 256>(const BwdParams&, cudaStream_t, int);
}  // namespace ak::attention::cuda::bwd
