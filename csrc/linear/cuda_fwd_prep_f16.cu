// Stage 1 of the fast chunked forward (gate cumsum, K K^T, triangular solve, WY vectors), __half.
#include "cuda_fwd_chunk_prep.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_prep<__half, 64>(const PrepParams<__half>&, cudaStream_t);
template void launch_chunk_prep<__half, 128>(const PrepParams<__half>&, cudaStream_t);
template void launch_chunk_prep<__half, 256>(const PrepParams<__half>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
