// Launchers of the CUDA attention forward kernels, one explicit instantiation per translation unit
// (cuda_fwd_general_d*.cu, cuda_fwd_sm90_d*.cu, cuda_fwd_sm90p_d*.cu) so the build compiles them in
// parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda_fwd_params.h"

namespace ak::attention::cuda {

// kD: the head-dim width the kernel is built for (64, 128, 192, 256); p.d <= kD is zero-padded.
// aligned: q, k, v and their strides allow 16-byte copies.
template <int kD, int kDtype>
void launch_fwd_general(const FwdParams& p, bool aligned, cudaStream_t stream);

// Hopper only (sm_90a): p.d == kD, bf16 or f16, 16-byte aligned pointers and strides.
// flags: sm90::Sm90Flags.
template <int kD, int kDtype>
void launch_fwd_sm90(const FwdParams& p, int flags, cudaStream_t stream);

// The persistent Hopper kernel (cuda_fwd_sm90_persistent.cuh) with kConsumers consumer warpgroups,
// tiles of 64 * kConsumers query rows; p.num_m_blocks counts such tiles. Built for (64, 3) and
// (128, 2) in both dtypes, and (64, 2) in bf16 for comparison.
template <int kD, int kDtype, int kConsumers>
void launch_fwd_sm90_persistent(const FwdParams& p, int flags, cudaStream_t stream);

// Variant p4 of the persistent kernel: three consumer warpgroups (192-row tiles) with key ranges per
// warpgroup (PersistentTile::kWgRanges). Built for D = 64 in both dtypes (cuda_fwd_sm90p4_d64_*.cu).
template <int kD, int kDtype>
void launch_fwd_sm90_persistent_p4(const FwdParams& p, int flags, cudaStream_t stream);

}  // namespace ak::attention::cuda
