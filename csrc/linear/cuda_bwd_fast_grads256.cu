// Fast backward, the gradient stage at K = V = 256: launcher and instantiations (the two kernels:
// cuda_bwd_fast_grads256.cuh).
#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_grads256.cuh"

namespace ak::linear::cuda::bwd {

template <class T>
void launch_fast_grads256(const Problem& p, const FastWork<T>& w, cudaStream_t s) {
  if (p.NCt == 0) return;
  using namespace grads256_detail;
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  require(items < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many chunks x heads for one call");
  constexpr int smem_v = static_cast<int>(fast_grads256_smem_v());
  constexpr int smem_k = static_cast<int>(fast_grads256_smem_k());
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads256_v<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_v));
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads256_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_k));
  grads256_v<T><<<static_cast<unsigned>(items), kThreads, smem_v, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: grads (D 256, over V)");
  grads256_k<T><<<static_cast<unsigned>(items), kThreads, smem_k, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: grads (D 256, over K)");
}

template void launch_fast_grads256<__nv_bfloat16>(const Problem&, const FastWork<__nv_bfloat16>&, cudaStream_t);
template void launch_fast_grads256<__half>(const Problem&, const FastWork<__half>&, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
