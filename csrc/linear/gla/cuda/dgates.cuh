// The small kernels around the gated linear family's chunked backward: the decay's gradient as a
// reverse cumsum over each sequence (per chunk: column sums, then each chunk adds the later chunks'
// sums and the final state's term sum_v S_T dS_T), the fp32 sums of grouped heads' dq and dk
// converted into the outputs, and zero gradients for the tokens past the last packed sequence.
#pragma once

#include "arch/sm80.cuh"
#include "linear/gla/cuda/params.h"
#include "linear/gla/cuda/rows.cuh"

namespace ak::linear::cuda::gla {

using namespace ::ak::arch;

// ---- dgates: reverse cumsum of dG over each sequence, plus the final state's term ----

// Per chunk and head: column sums of a token-major view of W columns, as fp32 (dG, W = K channels or 1;
// the normaliser's keys, normaliser.cuh).
template <class E>
__global__ void gla_chunk_sums_kernel(Rows<E> x, ChunkMap map, float* sums, int H, int W) {
  const int gidx = blockIdx.x, h = blockIdx.y;
  const int4 ci = map.chunk_of(gidx);
  if (ci.z == 0) return;  // an empty chunk past a packed call's live ones
  for (int c = threadIdx.x; c < W; c += blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < ci.z; ++r) s += to_float(x.row(ci.x, ci.y + r, h)[c]);
    sums[(static_cast<int64_t>(gidx) * H + h) * W + c] = s;
  }
}

// Per chunk and head: dG_t <- sum_{u >= t} dG_u (this chunk) + later chunks' sums + final term, where
// the final term is sum_v S_T dS_T per channel (summed over channels for W = 1).
__global__ void gla_dgates_kernel(Rows<float> dG, ChunkMap map, const float* sums, FinalStates final_states,
                                  const float* d_final_state, int H, int W, int K, int V) {
  const int gidx = blockIdx.x, h = blockIdx.y;
  const int4 ci = map.chunk_of(gidx);
  if (ci.z == 0) return;  // an empty chunk past a packed call's live ones
  int row, begin, end, first;
  map.sequence(ci.w, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  const int c = (ci.y - begin) / kChunk;
  for (int col = threadIdx.x; col < W; col += blockDim.x) {
    float acc = 0.f;
    for (int later = first + c + 1; later < first + chunks; ++later) acc += sums[(static_cast<int64_t>(later) * H + h) * W + col];
    if (d_final_state) {
      const float* S = final_states.at(ci.w, h, K, V);
      const float* dS = d_final_state + (static_cast<int64_t>(ci.w) * H + h) * K * V;
      const int k0 = W == 1 ? 0 : col, k1 = W == 1 ? K : col + 1;
      for (int kk = k0; kk < k1; ++kk) {
        for (int v = 0; v < V; ++v) acc += S[static_cast<int64_t>(kk) * V + v] * dS[static_cast<int64_t>(kk) * V + v];
      }
    }
    for (int r = ci.z - 1; r >= 0; --r) {
      float* g = dG.row(ci.x, ci.y + r, h) + col;
      acc += *g;
      *g = acc;
    }
  }
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda::gla {

// The forward's fp32 chunk states cast to the backward's 16-bit slots (the same layout).
template <class T>
__global__ void gla_cast_states_kernel(const float* src, T* dst, int64_t count) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[e] = from_float<T>(src[e]);
  }
}

}  // namespace ak::linear::cuda::gla
