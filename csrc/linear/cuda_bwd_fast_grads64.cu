// Fast backward, the fused gradient stage for K = V = 64: launcher and instantiations (the kernel:
// cuda_bwd_fast_grads.cuh).
#include <algorithm>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_grads.cuh"

namespace ak::linear::cuda::bwd {

template <class T, int D>
void launch_fast_grads(const Problem& p, const FastWork<T>& w, bool persistent, cudaStream_t s) {
  if (p.NCt == 0) return;
  constexpr size_t smem = fast_grads_smem<D>();
  AK_CUDA_CHECK(cudaFuncSetAttribute(grads_detail::fast_grads<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  // Persistent blocks: as many as fit at once, each looping over chunk x head items (or, when not
  // persistent, one block per item).
  int per_sm = 0, dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  AK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grads_detail::fast_grads<T, D>,
                                                              grads_detail::kThreads, smem));
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * ak::cuda::props(dev).multiProcessorCount;
  const unsigned blocks = static_cast<unsigned>(persistent ? std::min(items, resident) : items);
  grads_detail::fast_grads<T, D><<<blocks, grads_detail::kThreads, smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: grads");
}

template void launch_fast_grads<__nv_bfloat16, 64>(const Problem&, const FastWork<__nv_bfloat16>&, bool,
                                                         cudaStream_t);
template void launch_fast_grads<__half, 64>(const Problem&, const FastWork<__half>&, bool, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
