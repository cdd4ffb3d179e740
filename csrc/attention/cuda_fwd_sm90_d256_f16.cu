// The Hopper attention forward for head dim 256, f16: 128 x 64 tiles, 2 stages of K and V.
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90<256, AK_FLOAT16>(const FwdParams& p, int flags, cudaStream_t stream) {
  sm90::launch_fwd_sm90_impl<sm90::Sm90Tile<256, 64, 2>, __half>(p, AK_FLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
