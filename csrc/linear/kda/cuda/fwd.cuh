// KDA's chunked forward, part 2 of 2: the family's state pass (gla/cuda/pass.cuh) with the delta
// rule's policy, the values corrected first (Vn = u - w S), on the operands of the prep kernel
// (prep.cuh).
#pragma once

#include "generated/linear_launchers.h"
#include "linear/gla/cuda/pass.cuh"
#include "linear/kda/cuda/params.h"

namespace ak::linear::cuda::kda {

template <class T, int KD>
__global__ void __launch_bounds__(gla_layout::kThreads, 1) kda_fwd_kernel(const FwdParams<T> kp) {
  gla::state_pass<T, KD, true>(kp.f, kp.ops);
}

}  // namespace ak::linear::cuda::kda

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void KdaFwdChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_pass<T, D, true>(kda::kda_fwd_kernel<T, D>, a, a.f, "kda_fwd_kernel", stream);
}

}  // namespace ak::linear::cuda
