// Fast backward, the sequential stages: launchers and instantiations (kernels:
// cuda_bwd_fast_states.cuh).
#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_states.cuh"

namespace ak::linear::cuda::bwd {
using namespace states_detail;

template <class T, int D>
void launch_fast_states(const Problem& p, const FastWork<T>& w, cudaStream_t s) {
  if (p.NCt == 0) return;
  constexpr size_t smem = 2 * sizeof(StatesBuf<T, D>) + sizeof(T) * D * (kVS + 8);
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_states<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  fast_states<T, D><<<dim3(D / kVS, p.H, p.N), kThreads, smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: states");
}

template <class T, int D>
void launch_fast_dstates(const Problem& p, const FastWork<T>& w, cudaStream_t s) {
  constexpr size_t smem = sizeof(DStatesSmem<T, D>);
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_dstates<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  fast_dstates<T, D><<<dim3(D / kVS, p.H, p.N), kThreads, smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: dstates");
}

#define AK_INSTANTIATE(T, D)                                                                       \
  template void launch_fast_states<T, D>(const Problem&, const FastWork<T>&, cudaStream_t);       \
  template void launch_fast_dstates<T, D>(const Problem&, const FastWork<T>&, cudaStream_t);
AK_INSTANTIATE(__nv_bfloat16, 64)
AK_INSTANTIATE(__nv_bfloat16, 128)
AK_INSTANTIATE(__half, 64)
AK_INSTANTIATE(__half, 128)
#undef AK_INSTANTIATE

}  // namespace ak::linear::cuda::bwd
