// The Hopper attention forward for head dim 128, bf16: 128 x 128 tiles, 2 stages of K and V.
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90<128, AK_BFLOAT16>(const FwdParams& p, int flags, cudaStream_t stream) {
  sm90::launch_fwd_sm90_impl<sm90::Sm90Tile<128, 128, 2>, __nv_bfloat16>(p, AK_BFLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
