// Host-side interface between the CUDA backward's launcher (cuda_bwd.cu) and its kernels, each in
// its own translation unit per (path, dtype, head-dim bucket) so the build parallelises.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../core/common.h"
#include "attention.h"
#include "cuda_bwd_params.h"

namespace ak::attention::cuda {

// The whole backward for one call (validated by the entry): picks the path, runs the stages.
void attention_bwd_run(const AttnBwd& a);

namespace bwd {

// Stage 1: D_i = rowsum(dO * O), LSE in log2 units, and zeroed dq_accum tiles.
void launch_prep(const BwdParams& p, int32_t dtype, cudaStream_t stream);
// Stage 3: dq = sm_scale * dq_accum in q's dtype, in q's layout.
void launch_dq_convert(const BwdParams& p, int32_t dtype, cudaStream_t stream);

// Stage 2, general path (mma.sync, sm_80+): head dims padded to a bucket of 64, 128 or 256.
template <class T, int Dpad>
void launch_general(const BwdParams& p, cudaStream_t stream, int device);

// Stage 2, Hopper path (wgmma + TMA, sm_90a): D = 64 or 128, fp16 / bf16, not deterministic.
// red: dQ pieces reduced from registers (v1r) instead of through shared memory and bulk reductions.
template <class T, int D>
void launch_sm90(const BwdParams& p, cudaStream_t stream, int device, bool red);

// Stage 2, Hopper path v2 (consumers decoupled, K and V in registers, dQ by vector reductions):
// D = 64. Leaves dq_accum in DqLayout::kHopperFull. pair: consumer 1 reduces both consumers' dQ
// (half the reduction bytes) instead of each its own. linear: v1's block order instead of long key
// tiles first in L2 sections.
template <class T, int D>
void launch_sm90_v2(const BwdParams& p, cudaStream_t stream, int device, bool pair, bool linear);

// Whether the Hopper kernel that runs on `device` is sm_90a machine code (builds without the
// sm_90a target carry an empty stand-in that must not be launched).
bool sm90_compiled(int device);

}  // namespace bwd
}  // namespace ak::attention::cuda
