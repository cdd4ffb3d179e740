// Fast backward, the fused gradient stage for K = V = 128: launcher and instantiations (the kernel:
// cuda_bwd_fast_grads.cuh).
#include <algorithm>

#include "../cuda/runtime.cuh"
#include "cuda_bwd_fast_grads.cuh"

namespace ak::linear::cuda::bwd {

// The kernel of one variant (Pipe: cuda_bwd_fast_grads.cuh) in persistent blocks, as many as fit at
// once, each looping over chunk x head items (or, when not persistent, one block per item).
template <class T, int D, bool Pipe>
void launch_variant(const Problem& p, const FastWork<T>& w, bool persistent, cudaStream_t s) {
  constexpr size_t smem = fast_grads_smem<D, Pipe>();
  auto* kernel = grads_detail::fast_grads<T, D, Pipe>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0, dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  AK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128 * grads_wc<D>(), smem));
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * ak::cuda::props(dev).multiProcessorCount;
  const unsigned blocks = static_cast<unsigned>(persistent ? std::min(items, resident) : items);
  kernel<<<blocks, 128 * grads_wc<D>(), smem, s>>>(p, w);
  ak::cuda::check_launch("delta_bwd fast: grads");
}

template <class T, int D>
void launch_fast_grads(const Problem& p, const FastWork<T>& w, bool persistent, bool pipe, cudaStream_t s) {
  if (p.NCt == 0) return;
  int dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  // The pipelined kernel's second K buffer needs the 227 KB of sm_90; elsewhere the round-2 kernel.
  if (pipe && ak::cuda::props(dev).sharedMemPerBlockOptin >= fast_grads_smem<D, true>()) {
    launch_variant<T, D, true>(p, w, persistent, s);
  } else {
    launch_variant<T, D, false>(p, w, persistent, s);
  }
}

template void launch_fast_grads<__nv_bfloat16, 128>(const Problem&, const FastWork<__nv_bfloat16>&, bool, bool,
                                                         cudaStream_t);
template void launch_fast_grads<__half, 128>(const Problem&, const FastWork<__half>&, bool, bool, cudaStream_t);

}  // namespace ak::linear::cuda::bwd
