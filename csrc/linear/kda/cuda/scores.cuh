// KDA's two causal score matrices of a chunk in one stage, sharing what they have in common:
//   Akk_ij = sum_c k_ic k_jc exp(gc_ic - gc_jc)            (j < i; fp32, the triangular solve's input)
//   P_ij   = scale sum_c q_ic k_jc exp(gc_ic - gc_jc)      (j <= i; 16-bit, zero above the diagonal)
// As in the gated linear family's intra_scores (gla/cuda/stages.cuh): the diagonal 16 x 16 blocks pair
// by pair in fp32 (one exponential serves both sums), the blocks below them on tensor cores with the
// decay taken relative to the first row of their block row (every exponent <= 0), the decayed k rows
// of that block row shared by both products.
#pragma once

#include "linear/gla/cuda/stages.cuh"

namespace ak::linear::cuda::kda {

using gla_layout::kChunk;
using gla_layout::kThreads;
using gla_layout::pitch16;
using gla_layout::pitch_gc;

// LA: fp32 [64][kLd] (only its lower triangle below the diagonal is written); P: [64][pitch16(64)].
// Q, K: raw tiles [64][pitch16(KD)]; X: a scratch tile [64][pitch16(KD)]. Ends with a barrier.
template <class T, int KD, int kLd>
__device__ __forceinline__ void pair_scores(float* LA, T* P, const T* Q, const T* K, const float* gc, T* X,
                                            float scale, int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  // Diagonal blocks, pair by pair.
  for (int e = tid; e < gla::kDiagonalPairs; e += kThreads) {
    int ri, rj;
    gla::diagonal_pair(e, ri, rj);
    const T* qi = Q + ri * pitch16(KD);
    const T* ki = K + ri * pitch16(KD);
    const T* kj = K + rj * pitch16(KD);
    const float* gi = gc + ri * pitch_gc(KD);
    const float* gj = gc + rj * pitch_gc(KD);
    float sq = 0.f, sk = 0.f;
#pragma unroll 4
    for (int c = 0; c < KD; c += 2) {
      const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(qi + c));
      const float2 b = unpack2<T>(*reinterpret_cast<const uint32_t*>(ki + c));
      const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(kj + c));
      const float2 g0 = *reinterpret_cast<const float2*>(gi + c);
      const float2 g1 = *reinterpret_cast<const float2*>(gj + c);
      const float e0 = __expf(g0.x - g1.x) * kk.x, e1 = __expf(g0.y - g1.y) * kk.y;
      sq = fmaf(a.x, e0, fmaf(a.y, e1, sq));
      sk = fmaf(b.x, e0, fmaf(b.y, e1, sk));
    }
    P[ri * pitch16(64) + rj] = from_float<T>(scale * sq);
    if (ri != rj) {
      P[rj * pitch16(64) + ri] = from_float<T>(0.f);
      LA[ri * kLd + rj] = sk;
    }
  }
  // P above the diagonal blocks: zero.
  for (int e = tid; e < 64 * 64; e += kThreads) {
    const int r = e >> 6, c = e & 63;
    if ((c >> 4) > (r >> 4)) P[r * pitch16(64) + c] = from_float<T>(0.f);
  }
  // Block rows I = 1..3 (r = 16 I): X rows [0, r) = k_j exp(gc_r - gc_j); X rows [48, 64) = q_i
  // exp(gc_i - gc_r) for P's tiles, then k_i exp(gc_i - gc_r) for Akk's.
  auto decayed = [&](const T* src, int dst_row, int src_row, const float* gr, bool ahead) {
    // ahead: row src_row is after the reference row (exponent gc_src - gc_r), else before it.
    const float* gs = gc + src_row * pitch_gc(KD);
    for (int c = 2 * (tid & 63); c < KD; c += 128) {
      const float2 v = unpack2<T>(*reinterpret_cast<const uint32_t*>(src + src_row * pitch16(KD) + c));
      const float d0 = ahead ? gs[c] - gr[c] : gr[c] - gs[c];
      const float d1 = ahead ? gs[c + 1] - gr[c + 1] : gr[c + 1] - gs[c + 1];
      *reinterpret_cast<uint32_t*>(X + dst_row * pitch16(KD) + c) = pack2<T>(v.x * __expf(d0), v.y * __expf(d1));
    }
  };
  for (int I = 1; I < 4; ++I) {
    const int r = 16 * I;
    const float* gr = gc + r * pitch_gc(KD);
    // 4 rows at a time per pass (64 threads a row, two channels each).
    for (int row = tid >> 6; row < r + 16; row += kThreads / 64) {
      if (row < r) decayed(K, row, row, gr, false);
      else decayed(Q, 48 + row - r, row, gr, true);
    }
    __syncthreads();
    if (warp < I) {  // P tiles (I, J), J = warp
      float acc[1][2][4];
      zero_acc(acc);
      warp_mma<T, 1, 2, false, false>(acc, X, pitch16(KD), 48, X, pitch16(KD), 16 * warp, KD, lane);
      for_acc_pairs(acc, 0, 0, lane, [&](int rr, int cc, float* v) {
        *reinterpret_cast<uint32_t*>(P + (r + rr) * pitch16(64) + 16 * warp + cc) = pack2<T>(scale * v[0], scale * v[1]);
      });
    }
    __syncthreads();
    for (int row = r + (tid >> 6); row < r + 16; row += kThreads / 64) decayed(K, 48 + row - r, row, gr, true);
    __syncthreads();
    if (warp < I) {  // Akk tiles (I, J), J = warp
      float acc[1][2][4];
      zero_acc(acc);
      warp_mma<T, 1, 2, false, false>(acc, X, pitch16(KD), 48, X, pitch16(KD), 16 * warp, KD, lane);
      for_acc_pairs(acc, 0, 0, lane, [&](int rr, int cc, float* v) {
        *reinterpret_cast<float2*>(LA + (r + rr) * kLd + 16 * warp + cc) = make_float2(v[0], v[1]);
      });
    }
    __syncthreads();
  }
}

}  // namespace ak::linear::cuda::kda
