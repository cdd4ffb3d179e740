// Fast backward, stage "prep": launcher and instantiations (the kernel: cuda_bwd_fast_prep.cuh).
#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_prep.cuh"

namespace ak::linear::cuda::bwd {
using namespace prep_detail;

template <class T, int D>
void launch_fast_prep(const Problem& p, const FastWork<T>& w, cudaStream_t s) {
  if (p.NCt == 0) return;
  constexpr size_t smem = prep_smem<D>();
  AK_CUDA_CHECK(cudaFuncSetAttribute(fast_prep<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  fast_prep<T, D><<<dim3(p.NCt, p.H), kThreads, smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: prep");
}

template void launch_fast_prep<__nv_bfloat16, 64>(const Problem&, const FastWork<__nv_bfloat16>&, cudaStream_t);
template void launch_fast_prep<__nv_bfloat16, 128>(const Problem&, const FastWork<__nv_bfloat16>&, cudaStream_t);
template void launch_fast_prep<__half, 64>(const Problem&, const FastWork<__half>&, cudaStream_t);
template void launch_fast_prep<__half, 128>(const Problem&, const FastWork<__half>&, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
