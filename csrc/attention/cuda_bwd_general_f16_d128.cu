// The general attention backward for f16, head dims padded to 128.
#include "cuda_bwd_general.cuh"

namespace ak::attention::cuda::bwd {
template void launch_general<__half, 128>(const BwdParams&, cudaStream_t, int);
}  // namespace ak::attention::cuda::bwd
