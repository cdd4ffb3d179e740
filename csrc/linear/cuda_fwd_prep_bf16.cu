// Stage 1 of the fast chunked forward (gate cumsum, K K^T, triangular solve, WY vectors), __nv_bfloat16.
#include "cuda_fwd_chunk_prep.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_prep<__nv_bfloat16, 64>(const PrepParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_prep<__nv_bfloat16, 128>(const PrepParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_prep<__nv_bfloat16, 256>(const PrepParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
