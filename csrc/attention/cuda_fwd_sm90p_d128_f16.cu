// The persistent Hopper attention forward for head dim 128, f16: two consumer warpgroups, 128 x 128
// tiles, 2 stages of K and V.
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90_persistent.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90_persistent<128, AK_FLOAT16, 2>(const FwdParams& p, int flags, cudaStream_t stream) {
  using Tile = sm90::PersistentTile<128, 128, 2, 2>;
  sm90::launch_fwd_sm90_persistent_impl<Tile, __half>(p, AK_FLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
