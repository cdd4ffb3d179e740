// Stage 2 of the fast chunked forward with the warpgroups split by role (sm_90a), __half, D = 128.
#include "cuda_fwd_chunk_state_split.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_state_split<__half, 128, 64, 1>(const StateParams<__half>&, const SplitMaps*,
    const SaveMaps*, cudaStream_t);
template void launch_chunk_state_split<__half, 128, 64, 2>(const StateParams<__half>&, const SplitMaps*,
    const SaveMaps*, cudaStream_t);
template void launch_chunk_state_split<__half, 128, 128, 1>(const StateParams<__half>&, const SplitMaps*,
    const SaveMaps*, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
