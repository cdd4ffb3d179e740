// Variant p4 of the persistent Hopper attention forward for head dim 64, bf16: three consumer
// warpgroups, 192 x 128 tiles, 3 stages of K and V, key ranges per warpgroup (a warpgroup skips the
// key tiles that admit none of its rows and masks only those that cut them).
#include "cuda_fwd_launch.h"
#include "cuda_fwd_sm90_persistent.cuh"

namespace ak::attention::cuda {

template <>
void launch_fwd_sm90_persistent_p4<64, AK_BFLOAT16>(const FwdParams& p, int flags, cudaStream_t stream) {
  using Tile = sm90::PersistentTile<64, 128, 3, 3, true>;
  sm90::launch_fwd_sm90_persistent_impl<Tile, __nv_bfloat16>(p, AK_BFLOAT16, flags, stream);
}

}  // namespace ak::attention::cuda
