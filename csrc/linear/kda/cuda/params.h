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

// The chunked backward (dstates.cuh, grads.cuh): the forward's views and the operands of its
// recompute (f.ops with a32, vn and dvn), the gradients, and the 16-bit states before each chunk and
// state gradients after it (gla::Slots, one more slot per sequence than it has chunks).
template <class T>
struct BwdParams {
  FwdParams<T> f;
  Rows<const T> dout;
  Rows<T> dq, dk, dv;                        // group == 1: written directly
  float *ws_dq = nullptr, *ws_dk = nullptr;  // group > 1: fp32 [B, T, HK, K], accumulated
  Rows<float> dgate;                         // [B, T, H, K]
  Rows<float> dbeta;                         // [B, T, H] as a view with one column
  gla::Slots<T> states, dstates;
  const float* d_final_state = nullptr;  // [N, H, K, V]
  float* d_initial_state = nullptr;      // [N, H, K, V]
};

}  // namespace ak::linear::cuda::kda
