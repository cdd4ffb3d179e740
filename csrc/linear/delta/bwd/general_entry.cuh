// The general (fp32 SIMT) path of the delta-rule backward as a registry launcher: the stages live in
// general.cu, compiled once for every dtype; this header holds no kernel code.
#pragma once

#include <cuda_runtime.h>

#include "linear/delta/bwd/problem.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {

// Every stage of the general path for one call (any K, V <= 256, chunks of 32, 64 or 128).
template <class T>
void run_general(const Problem& p, cudaStream_t stream, int device);

}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void BwdGeneral<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  bwd::run_general<T>(a.p, stream, a.device);
}

}  // namespace ak::linear::cuda
