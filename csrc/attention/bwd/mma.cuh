// Warp-level building blocks of the attention backward kernels (the sm_80 primitives are
// arch/sm80.cuh): the tiled warp product over shared-memory operands, and an accurate tanh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "arch/sm80.cuh"

namespace ak::attention::cuda::bwd {

using namespace ::ak::arch;

// acc (MT x NT tiles of 16 x 8) += A[rows a_row0 .., k] * B[k, cols b_col0 ..] for k in [0, K).
// Shared-memory operands, rows padded so ldmatrix is conflict-free:
//   A_K_CONTIGUOUS: A stored sA[row * lda + k]; else transposed, sA[k * lda + row].
//   B_K_CONTIGUOUS: B stored sB[col * ldb + k] (e.g. K for Q K^T); else sB[k * ldb + col].
// Fragments follow mma.m16n8k16: lane (g = lane / 4, t = lane % 4) holds acc[mi][ni][e] at row
// a_row0 + 16 mi + g + 8 (e / 2), col b_col0 + 8 ni + 2 t + (e % 2).
template <int MT, int NT, bool A_K_CONTIGUOUS, bool B_K_CONTIGUOUS, class T>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const T* sA, int lda, int a_row0, const T* sB,
                                         int ldb, int b_col0, int K) {
  static_assert(NT % 2 == 0, "B fragments load two 8-column tiles at a time");
  const int lane = threadIdx.x & 31;
  const int quad = lane >> 3, r8 = lane & 7;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      if constexpr (A_K_CONTIGUOUS) {
        const int row = a_row0 + mi * 16 + (lane & 15);
        ldsm_x4(a[mi], sA + row * lda + k0 + (lane >> 4) * 8);
      } else {
        // Matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
        const int k = k0 + (quad >> 1) * 8 + r8;
        ldsm_x4_trans(a[mi], sA + k * lda + a_row0 + mi * 16 + (quad & 1) * 8);
      }
    }
#pragma unroll
    for (int ni = 0; ni < NT; ni += 2) {
      uint32_t b[4];  // b0, b1 of tile ni, then of tile ni + 1
      if constexpr (B_K_CONTIGUOUS) {
        // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        const int n = b_col0 + ni * 8 + (quad >> 1) * 8 + r8;
        ldsm_x4(b, sB + n * ldb + k0 + (quad & 1) * 8);
      } else {
        // Matrices: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), transposed.
        const int k = k0 + (quad & 1) * 8 + r8;
        ldsm_x4_trans(b, sB + k * ldb + b_col0 + ni * 8 + (quad >> 1) * 8);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        mma16816<T>(acc[mi][ni], a[mi], b[0], b[1]);
        mma16816<T>(acc[mi][ni + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// tanh(x) from exp2, accurate to a few ulp of 1 (tanh.approx is too coarse for the recomputed
// probabilities): 1 - 2 / (e^{2x} + 1), with the sign folded so the exponent never overflows.
__device__ __forceinline__ float accurate_tanh(float x) {
  const float e = fast_exp2(-2.8853900817779268f * fabsf(x));  // e^{-2|x|}
  const float t = __fdividef(1.0f - e, 1.0f + e);
  return copysignf(t, x);
}

}  // namespace ak::attention::cuda::bwd
