// The persistent Hopper attention forward for head dim 64, bf16: three consumer warpgroups, 192 x 128
// tiles, 3 stages of K and V (and, for comparison, two consumers with 128 x 128 tiles).
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90_persistent.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90_persistent<64, AK_BFLOAT16, 3>(const FwdParams& p, int flags, cudaStream_t stream) {
  using Tile = sm90::PersistentTile<64, 128, 3, 3>;
  sm90::launch_fwd_sm90_persistent_impl<Tile, __nv_bfloat16>(p, AK_BFLOAT16, flags, stream);
}

// Two consumers (128 x 128 tiles), for comparison (ATTNKIT_ATTN_FWD_KERNEL=p2); bf16 only.
template <>
void launch_fwd_sm90_persistent<64, AK_BFLOAT16, 2>(const FwdParams& p, int flags, cudaStream_t stream) {
  using Tile = sm90::PersistentTile<64, 128, 3, 2>;
  sm90::launch_fwd_sm90_persistent_impl<Tile, __nv_bfloat16>(p, AK_BFLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
