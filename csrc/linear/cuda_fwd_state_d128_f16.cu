// Stage 2 of the fast chunked forward (chunk state recurrence + output), __half, D = 128.
#include "cuda_fwd_chunk_state.cuh"
#include "cuda_fwd_chunk_state_sm90.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_state<__half, 128, 32>(const StateParams<__half>&, cudaStream_t);
template void launch_chunk_state<__half, 128, 64>(const StateParams<__half>&, cudaStream_t);
template void launch_chunk_state<__half, 128, 128>(const StateParams<__half>&, cudaStream_t);
template void launch_chunk_state_sm90<__half, 128, 64>(const StateParams<__half>&, const SaveMaps*, cudaStream_t);
template void launch_chunk_state_sm90<__half, 128, 128>(const StateParams<__half>&, const SaveMaps*, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
