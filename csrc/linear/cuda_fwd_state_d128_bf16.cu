// Stage 2 of the fast chunked forward (chunk state recurrence + output), __nv_bfloat16, D = 128.
#include "cuda_fwd_chunk_state.cuh"
#include "cuda_fwd_chunk_state_sm90.cuh"

namespace ak::linear::cuda::fwd {

template void launch_chunk_state<__nv_bfloat16, 128, 32>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 128, 64>(const StateParams<__nv_bfloat16>&, cudaStream_t);
template void launch_chunk_state<__nv_bfloat16, 128, 128>(const StateParams<__nv_bfloat16>&, cudaStream_t);
bool chunk_state_sm90_built() {
  // The machine code the runtime picks is the same for every device of one compute capability, and
  // the caller has checked for 9.0, so one answer serves the process.
  static const bool built = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, chunk_state_sm90_kernel<__nv_bfloat16, 128, 128, false>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90 && attr.ptxVersion >= 90;  // not PTX of compute_80 run through the JIT
  }();
  return built;
}

template void launch_chunk_state_sm90<__nv_bfloat16, 128, 64>(const StateParams<__nv_bfloat16>&, const SaveMaps*, cudaStream_t);
template void launch_chunk_state_sm90<__nv_bfloat16, 128, 128>(const StateParams<__nv_bfloat16>&, const SaveMaps*, cudaStream_t);

}  // namespace ak::linear::cuda::fwd
