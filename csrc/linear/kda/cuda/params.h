// What KDA's chunked CUDA kernels read and hand each other: the gated linear family's views (the gate
// as its per-channel decay gk, natural log), the per-token beta, and the per-chunk operands the prep
// kernel writes for the state pass.
#pragma once

#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::kda {

// Per (chunk, value head) slot g * H + h, 16-bit unless said: w = A diag(beta) K exp(gc), kd =
// K exp(gL - gc), qd = scale Q exp(gc) (each [64][KD]), u = A diag(beta) V ([64][Vp]), the causal
// scores p ([64][64]) and el = exp(gL) (fp32 [KD]). KD: K padded; Vp: V padded to the 64-column tile.
template <class T>
struct ChunkOperands {
  T *w = nullptr, *kd = nullptr, *qd = nullptr, *u = nullptr, *p = nullptr;
  float* el = nullptr;
  int H = 0, KD = 0, Vp = 0;
  __host__ __device__ int64_t slot(int g, int h) const { return static_cast<int64_t>(g) * H + h; }
};

template <class T>
struct FwdParams {
  gla::FwdParams<T> f;  // q, k, v, o, gate (f.d.gk), sequences, initial and final states, sizes, scale
  Scalars beta;         // [B, T, H] fp32
  ChunkOperands<T> ops;
  int chunks = 0;  // of the whole call (the prep kernel's grid)
};

}  // namespace ak::linear::cuda::kda
