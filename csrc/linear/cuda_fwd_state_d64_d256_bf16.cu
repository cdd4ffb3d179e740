// Stage 2 of the fast chunked forward (chunk state recurrence + output), __nv_bfloat16, D = 64 and 256.
#include "cuda_fwd_chunk_state.cuh"
#include "cuda_fwd_chunk_state_sm90.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_state<__nv_bfloat16, 64, 32>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 64, 64>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 256, 32>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 256, 64>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state_sm90<__nv_bfloat16, 256, 64>(const StateParams<__nv_bfloat16>&, const SaveMaps*, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
