// The K K^T stage of the chunked linear-attention family: the causal products of two 64-row tiles,
// X Y^T restricted to the tiles on and below the diagonal (K K^T for L, Q K^T for the intra-chunk
// scores P), on mma.sync. The decay factors exp(gc_i - gc_j) of a scalar decay are applied to the
// accumulators by the caller, together with its own row and column scales (beta, 1 / |k|, scale).
#pragma once

#include "linear/common/tiles.cuh"

namespace ak::linear::cuda {

// The causal 16x8 tiles of a 64x64 product X Y^T that warp `warp` of 8 computes: row block
// rb = warp % 4, n-tiles nt = parity + 2x for x = 0..rb (parity = warp / 4), so each row block's
// tiles 0 .. 2 rb + 1 (columns up to its diagonal) are split between two warps. acc[x] gets tile x.
// X and Y are padded 64 x DK tiles of 16-bit elements.
template <class T, int DK>
__device__ __forceinline__ void causal_tiles(float (&acc)[4][4], uint32_t x_tile, uint32_t y_tile, int warp,
                                             int lane) {
  constexpr int kPitch = tile_pitch(DK);
  const int rb = warp & 3, parity = warp >> 2;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[x][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < DK / 16; ++kk) {
    uint32_t a[4];
    load_a(a, x_tile, kPitch, 16 * rb, 16 * kk, lane);
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if (x <= rb) {
        uint32_t b[2];
        load_b1_nk(b, y_tile, kPitch, 16 * kk, 8 * (parity + 2 * x), lane);
        mma16816<T>(acc[x], a, b);
      }
    }
  }
}

// acc += A[16 rb .., 0 .. 16 (rb + 1)) X[0 .. 16 (rb + 1), n0 .. n0 + 8 NT): row block rb of a causal
// (lower-triangular) 64 x 64 tile A times a dense tile X, skipping the k-blocks above the diagonal;
// both 16-bit, pitches in bytes. The products after the causal ones: the chunk's output P U, the WY
// factors A [K | V].
template <class T, int NT>
__device__ __forceinline__ void causal_rows_times(float (&acc)[NT][4], uint32_t a_tile, int a_pitch, int rb,
                                                  uint32_t x_tile, int x_pitch, int n0, int lane) {
  static_assert(NT % 2 == 0, "n-tiles in pairs");
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) {
    if (kb > rb) continue;
    uint32_t a[4];
    load_a(a, a_tile, a_pitch, 16 * rb, 16 * kb, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[2][2];
      load_b2_kn(b, x_tile, x_pitch, 16 * kb, n0 + 16 * np, lane);
      mma16816<T>(acc[2 * np], a, b[0]);
      mma16816<T>(acc[2 * np + 1], a, b[1]);
    }
  }
}

// Calls f(i, j, a0, a1) for every accumulator pair of causal_tiles' result: rows i, columns j and
// j + 1 of the 64x64 product, a0 and a1 their values (pairs above the diagonal included: the caller
// masks them, so that every lane takes the same path).
template <class F>
__device__ __forceinline__ void for_causal_pairs(const float (&acc)[4][4], int warp, int lane, F&& f) {
  const int rb = warp & 3, parity = warp >> 2, g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    if (x > rb) continue;
    const int j = 8 * (parity + 2 * x) + 2 * t4;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) f(16 * rb + g8 + 8 * hh, j, acc[x][2 * hh], acc[x][2 * hh + 1]);
  }
}

}  // namespace ak::linear::cuda
