// What KDA's chunked CUDA kernels read and hand each other: the gated linear family's views (the gate
// as its per-channel decay gk, natural log), the per-token beta, and the per-chunk operands the prep
// kernel writes for the state pass.
#pragma once

#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::kda {

using gla::ChunkOperands;

template <class T>
struct FwdParams {
  gla::FwdParams<T> f;  // q, k, v, o, gate (f.d.gk), sequences, initial and final states, sizes, scale
  Scalars beta;         // [B, T, H] fp32
  ChunkOperands<T> ops;
  int chunks = 0;  // of the whole call (the prep kernel's grid)
};

}  // namespace ak::linear::cuda::kda
