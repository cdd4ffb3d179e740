// The CUDA attention backward's host interface: the whole call (dispatch.cu) and its small stages
// around the main kernel (prep.cu); the main kernels are the registry's (generated/attention_launchers.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attention/bwd/params.h"
#include "attention/problem.h"
#include "core/common.h"

namespace ak::attention::cuda {

// The whole backward for one call (validated by the entry): picks the path, runs the stages.
void attention_bwd_run(const AttnBwd& a);

namespace bwd {

// Stage 1: D_i = rowsum(dO * O), LSE in log2 units, and zeroed dq_accum tiles.
void launch_prep(const BwdParams& p, int32_t dtype, cudaStream_t stream);
// Stage 3: dq = sm_scale * dq_accum in q's dtype, in q's layout.
void launch_dq_convert(const BwdParams& p, int32_t dtype, cudaStream_t stream);

}  // namespace bwd
}  // namespace ak::attention::cuda
