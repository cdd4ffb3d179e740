// Instantiations of the fast backward's fused gradient stage for K = V = 64 (bf16 and f16).
#include "cuda_bwd_fast_grads.cuh"

namespace ak::linear::cuda::bwd {

template void launch_fast_grads<__nv_bfloat16, 64>(const Problem&, const FastWork<__nv_bfloat16>&, cudaStream_t);
template void launch_fast_grads<__half, 64>(const Problem&, const FastWork<__half>&, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
