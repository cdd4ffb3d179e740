// The Hopper attention forward for head dim 64, f16: 128 x 128 tiles, 3 stages of K and V.
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90<64, AK_FLOAT16>(const FwdParams& p, int flags, cudaStream_t stream) {
  sm90::launch_fwd_sm90_impl<sm90::Sm90Tile<64, 128, 3>, __half>(p, AK_FLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
