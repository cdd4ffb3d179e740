// The Hopper attention backward for bf16, head dim 128.
#include "cuda_bwd_sm90.cuh"

namespace ak::attention::cuda::bwd {
template void launch_sm90<__nv_bfloat16, 128>(const BwdParams&, cudaStream_t, int, bool);
}  // namespace ak::attention::cuda::bwd

namespace ak::attention::cuda::bwd {

bool sm90_compiled(int device) {
  (void)device;  // the caller's DeviceGuard has made it current
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, bwd_sm90_kernel<__nv_bfloat16, 128>) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion >= 90;
}

}  // namespace ak::attention::cuda::bwd
