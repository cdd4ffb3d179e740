// The scalar-decay forward's per-chunk gates for the delta rule's state kernels (StateParams::gc): for
// chunk g and value head h, gc[(g H + h) 64 + i] = the cumsum over the chunk's tokens 0..i of g + gamma
// (0 past the chunk's end), formed as the delta rule's prep forms its own (chunk_cumsum64).
#pragma once

#include "linear/common/chunk_map.cuh"
#include "linear/common/gate.cuh"
#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::gla {

// A warp per (chunk, value head): grid [chunks, H], 32 threads.
__global__ void __launch_bounds__(32) gla_chunk_gates_kernel(const Decays d, const ChunkMap map, float* gc, int H) {
  __shared__ float g[64];
  const int chunk = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int4 ci = map.chunk_of(chunk);
  const float gamma = d.gamma ? d.gamma[h] : 0.f;
  for (int i = lane; i < 64; i += 32) g[i] = i < ci.z ? d.g.at(ci.x, ci.y + i, h) + gamma : 0.f;
  __syncwarp();
  chunk_cumsum64(g, lane);
  __syncwarp();
  float* out = gc + (static_cast<int64_t>(chunk) * H + h) * 64;
  out[lane] = g[lane];
  out[lane + 32] = g[lane + 32];
}

}  // namespace ak::linear::cuda::gla
