// Fast backward, stage "prep": launchers and instantiations of both versions (kernels:
// cuda_bwd_fast_prep_tc.cuh, the default, and cuda_bwd_fast_prep.cuh).
#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_prep.cuh"
#include "cuda_bwd_fast_prep_tc.cuh"

namespace ak::linear::cuda::bwd {

template <class T, int D>
void launch_fast_prep(const Problem& p, const FastWork<T>& w, bool tensor_core_inverse, bool only_p, cudaStream_t s) {
  if (p.NCt == 0) return;
  const dim3 grid(p.NCt, p.H);
  if (only_p) {  // A and w come from the forward
    using namespace prep_tc_detail;
    constexpr int smem = PrepTcLayout<D>::kBytes;
    AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep_tc<T, D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep_tc<T, D, true>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    fast_prep_tc<T, D, true><<<grid, prep_tc_detail::kThreads, smem, s>>>(p, w);
    ak::cuda::check_launch("delta_bwd fast: prep (P only)");
    return;
  }
  // D = 256: the tensor-core version only (the SIMT one is kept for D <= 128 as a variant).
  if (tensor_core_inverse || D == 256) {
    using namespace prep_tc_detail;
    constexpr int smem = PrepTcLayout<D>::kBytes;
    AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep_tc<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Three or four blocks per multiprocessor need the largest shared-memory carveout.
    AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep_tc<T, D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    fast_prep_tc<T, D><<<grid, prep_tc_detail::kThreads, smem, s>>>(p, w);
  } else if constexpr (D <= 128) {
    using namespace prep_detail;
    constexpr size_t smem = prep_smem<D>();
    AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    fast_prep<T, D><<<grid, prep_detail::kThreads, smem, s>>>(p, w);
  }
  ak::cuda::check_launch("delta_bwd fast: prep");
}

#define AK_INSTANTIATE(T, D) \
  template void launch_fast_prep<T, D>(const Problem&, const FastWork<T>&, bool, bool, cudaStream_t);
AK_INSTANTIATE(__nv_bfloat16, 64)
AK_INSTANTIATE(__nv_bfloat16, 128)
AK_INSTANTIATE(__half, 64)
AK_INSTANTIATE(__half, 128)
AK_INSTANTIATE(__nv_bfloat16, 256)
AK_INSTANTIATE(__half, 256)
#undef AK_INSTANTIATE

}  // namespace ak::linear::cuda::bwd
