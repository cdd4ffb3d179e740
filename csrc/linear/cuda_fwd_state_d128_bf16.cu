// Stage 2 of the fast chunked forward (chunk state recurrence + output), __nv_bfloat16, D = 128.
#include "cuda_fwd_chunk_state.cuh"
#include "cuda_fwd_chunk_state_sm90.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_state<__nv_bfloat16, 128, 32>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 128, 64>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 128, 128>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state_sm90<__nv_bfloat16, 128, 64>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state_sm90<__nv_bfloat16, 128, 128>(const StateParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
