// The triangular-solve stage of the chunked delta-rule family: A = (I + L)^-1 for the strictly lower
// triangular 64 x 64 matrix L of a chunk (L = tril(diag(beta) K K^T * decay, -1)), from which the WY
// factors follow (w = A diag(beta e^gc) K, u = A diag(beta) V). Two implementations of the same stage:
//   invert_unit_lower64        fp32 on the CUDA cores, in place over an fp32 tile (the forward's stage 1)
//   invert_unit_lower64_split  every intermediate as a pair of bf16 tiles x = hi + lo (16 significant
//                              bits, relative error <= 2^-17), products on tensor cores as
//                              hi hi + hi lo + lo hi with fp32 accumulators (the backward's prep)
// Both by 16 x 16 blocks: the diagonal blocks by forward substitution, the off-diagonal ones by
// doubling (32 x 32 halves, then the lower-left 32 x 32 block). Every block of 8 warps (256 threads)
// calls them together; they end behind a barrier.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "linear/common/warp_tiles.cuh"

namespace ak::linear::cuda {

// In place over LA (64 x 64 fp32, row stride kLd floats): on entry L in the lower triangle (the upper
// triangle is scratch); on exit A in the lower triangle, the diagonal included.
template <int kLd, int kThreads>
__device__ __forceinline__ void invert_unit_lower64(float* LA, int tid) {
  static_assert(kThreads == 256, "eight warps");
  const int warp = tid >> 5, lane = tid & 31;
  //  4a. Diagonal blocks D_b = (I + L_bb)^-1: warps 0-1, lane l inverts block 2 warp + l / 16, its
  //      column l % 16, by forward substitution (two partial sums, rows of L read as float4s); the
  //      zeros above the diagonal are written too, so D_b can be read as a full 16x16 block.
  if (warp < 2) {
    const int b = 2 * warp + (lane >> 4), col = lane & 15;
    float* Lb = LA + 16 * b * kLd + 16 * b;
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s0 = i == col ? 1.f : 0.f, s1 = 0.f;
#pragma unroll
      for (int j4 = 0; j4 < i; j4 += 4) {
        const float4 l = *reinterpret_cast<const float4*>(Lb + i * kLd + j4);
        s0 = fmaf(-l.x, x[j4], s0);
        if (j4 + 1 < i) s1 = fmaf(-l.y, x[j4 + 1], s1);
        if (j4 + 2 < i) s0 = fmaf(-l.z, x[j4 + 2], s0);
        if (j4 + 3 < i) s1 = fmaf(-l.w, x[j4 + 3], s1);
      }
      x[i] = s0 + s1;
    }
    __syncwarp();  // every lane has read L_bb before any lane overwrites it
#pragma unroll
    for (int i = 0; i < 16; ++i) Lb[i * kLd + col] = x[i];
  }
  __syncthreads();
  //  4b. The off-diagonal blocks by doubling, all warps busy (D_b the diagonal inverses from 4a):
  //      round 1, the two 32 x 32 diagonal halves: T_b = L_{2b+1,2b} D_2b, then A_{2b+1,2b} = -D_{2b+1} T_b;
  //      round 2, X = L_hl A_lo (L_hl rows 32-63 x columns 0-31, A_lo the upper-left half's inverse);
  //      round 3, A_hl = -A_hi X (A_hi the lower-right half's inverse).
  //      The intermediates T and X go to the unused upper triangle of LA (T_b into block (2b, 2b+1), X
  //      into rows 0-31 x columns 32-63), so no round reads what it writes and one barrier a step
  //      suffices. Loops never touch the upper blocks of A_lo / A_hi: a warp's k range is uniform.
  //      Critical path 384 FMAs a thread (the block-row form took 1,152 on at most three warps).
  {
    // Round 1 (T and then A of blocks (1, 0) and (3, 2)): thread -> half b, row i, columns j0, j0 + 1.
    const int b = tid >> 7, i1 = (tid & 127) >> 3, j1 = 2 * (tid & 7);
    const int hb = 32 * b;  // first row and column of the half
    {
      float2 t = make_float2(0.f, 0.f);
      const float* lrow = LA + (hb + 16 + i1) * kLd + hb;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float l = lrow[k];
        const float2 d = *reinterpret_cast<const float2*>(LA + (hb + k) * kLd + hb + j1);
        t.x = fmaf(l, d.x, t.x);
        t.y = fmaf(l, d.y, t.y);
      }
      *reinterpret_cast<float2*>(LA + (hb + i1) * kLd + hb + 16 + j1) = t;
    }
    __syncthreads();
    {
      float2 a = make_float2(0.f, 0.f);
      const float* drow = LA + (hb + 16 + i1) * kLd + hb + 16;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float d = drow[k];
        const float2 t = *reinterpret_cast<const float2*>(LA + (hb + k) * kLd + hb + 16 + j1);
        a.x = fmaf(d, t.x, a.x);
        a.y = fmaf(d, t.y, a.y);
      }
      *reinterpret_cast<float2*>(LA + (hb + 16 + i1) * kLd + hb + j1) = make_float2(-a.x, -a.y);
    }
    __syncthreads();
    // acc[e] += x[k] Y[k][e] over k in [k0, k1), four columns (a float4 of each row of Y).
    auto row_times = [&](float (&acc)[4], const float* x, const float* y, int k0, int k1) {
#pragma unroll 4
      for (int k = k0; k < k1; k += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x + k);
        const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float4 yv = *reinterpret_cast<const float4*>(y + (k + e) * kLd);
          acc[0] = fmaf(xs[e], yv.x, acc[0]);
          acc[1] = fmaf(xs[e], yv.y, acc[1]);
          acc[2] = fmaf(xs[e], yv.z, acc[2]);
          acc[3] = fmaf(xs[e], yv.w, acc[3]);
        }
      }
    };
    // Round 2: warps 0-3 columns 0-15 (k over all 32 rows of A_lo), warps 4-7 columns 16-31 (k over
    // rows 16-31: D_1 alone); rows 8 (warp % 4) + lane / 4, columns 16 (warp / 4) + 4 (lane % 4).
    {
      const int i = 8 * (warp & 3) + (lane >> 2), j0 = 16 * (warp >> 2) + 4 * (lane & 3);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      row_times(acc, LA + (32 + i) * kLd, LA + j0, warp < 4 ? 0 : 16, 32);
      *reinterpret_cast<float4*>(LA + i * kLd + 32 + j0) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    __syncthreads();
    // Round 3: warps 0-3 rows 0-15 (k over D_2's 16 columns), warps 4-7 rows 16-31 (k over 32);
    // rows 4 warp + lane / 8, columns 4 (lane % 8).
    {
      const int i = 4 * warp + (lane >> 3), j0 = 4 * (lane & 7);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      row_times(acc, LA + (32 + i) * kLd + 32, LA + 32 + j0, 0, warp < 4 ? 16 : 32);
      *reinterpret_cast<float4*>(LA + (32 + i) * kLd + j0) = make_float4(-acc[0], -acc[1], -acc[2], -acc[3]);
    }
    __syncthreads();  // A is final (lower triangle; the upper one holds T and X)
  }

}

using B16 = __nv_bfloat16;

__device__ __forceinline__ void split_store(float x, float y, B16* hi, B16* lo, int off) {
  const uint32_t h = pack2<B16>(x, y);
  const float2 hf = unpack2<B16>(h);
  *reinterpret_cast<uint32_t*>(hi + off) = h;
  *reinterpret_cast<uint32_t*>(lo + off) = pack2<B16>(x - hf.x, y - hf.y);
}

// acc (16 x 16 at X rows xm, Y columns yn) += X[xm.., xk .. xk + kdim) Y[yk .. yk + kdim, yn..), both
// held as hi/lo pairs: X row-major [m][k], Y row-major [k][n]; the lo * lo term is dropped.
template <int LC>
__device__ __forceinline__ void split_mma(float (&acc)[2][4], const B16* xh, const B16* xl, int xm, int xk,
                                          const B16* yh, const B16* yl, int yk, int yn, int kdim, int lane) {
  for (int k = 0; k < kdim; k += 16) {
    uint32_t ah[4], al[4], bh[4], bl[4];
    load_a<B16>(ah, xh, LC, xm, xk + k, lane);
    load_a<B16>(al, xl, LC, xm, xk + k, lane);
    load_b_kn<B16>(bh, yh, LC, yn, yk + k, lane);
    load_b_kn<B16>(bl, yl, LC, yn, yk + k, lane);
    mma16816<B16>(acc[0], ah, bh[0], bh[1]);
    mma16816<B16>(acc[1], ah, bh[2], bh[3]);
    mma16816<B16>(acc[0], ah, bl[0], bl[1]);
    mma16816<B16>(acc[1], ah, bl[2], bl[3]);
    mma16816<B16>(acc[0], al, bh[0], bh[1]);
    mma16816<B16>(acc[1], al, bh[2], bh[3]);
  }
}

// Stores -acc (16 x 16 at rows m0, columns n0) as a hi/lo pair.
template <int LC>
__device__ __forceinline__ void split_store_neg(const float (&acc)[2][4], B16* hi, B16* lo, int m0, int n0,
                                                int lane, bool negate) {
  const int g = lane >> 2, q = lane & 3;
  const float s = negate ? -1.f : 1.f;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int c = n0 + 8 * nt + 2 * q;
    split_store(s * acc[nt][0], s * acc[nt][1], hi, lo, (m0 + g) * LC + c);
    split_store(s * acc[nt][2], s * acc[nt][3], hi, lo, (m0 + g + 8) * LC + c);
  }
}

// One product of the blocked inverse, on the warps that take part (active), then a block barrier:
// the 16 x 16 block at (om, on) of O <- X[xm.., xk..) Y[yk.., yn..) over kdim, negated when asked.
// X, Y and O are hi/lo pairs ({hi, lo}) of row stride LC.
template <int LC>
__device__ __forceinline__ void split_step(bool active, const B16* const (&x)[2], int xm, int xk,
                                           const B16* const (&y)[2], int yk, int yn, int kdim, B16* const (&o)[2],
                                           int om, int on, bool negate, int lane) {
  if (active) {
    float acc[2][4] = {};
    split_mma<LC>(acc, x[0], x[1], xm, xk, y[0], y[1], yk, yn, kdim, lane);
    split_store_neg<LC>(acc, o[0], o[1], om, on, lane, negate);
  }
  __syncthreads();
}

// L (hi Lh + lo Ll, row stride LC) -> A (hi Ah + lo Al); the upper triangles of Lh, Ll hold the
// intermediate products afterwards.
template <int LC>
__device__ __forceinline__ void invert_unit_lower64_split(B16* Lh, B16* Ll, B16* Ah, B16* Al, int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  // 1. Diagonal blocks: lane j of warp b < 4 solves column j of (I + L_bb) x = e_j.
  if (warp < 4) {
    if (lane < 16) {
      const int b0 = 16 * warp;
      float x[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float s = i == lane ? 1.f : 0.f;
        if (i > 0) {
          const B16* hr = Lh + (b0 + i) * LC + b0;
          const B16* lr = Ll + (b0 + i) * LC + b0;
#pragma unroll
          for (int m8 = 0; m8 < 2; ++m8) {
            if (8 * m8 >= i) continue;
            const uint4 hv = *reinterpret_cast<const uint4*>(hr + 8 * m8);
            const uint4 lv = *reinterpret_cast<const uint4*>(lr + 8 * m8);
            const uint32_t hw[4] = {hv.x, hv.y, hv.z, hv.w}, lw[4] = {lv.x, lv.y, lv.z, lv.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 a = unpack2<B16>(hw[e]), c = unpack2<B16>(lw[e]);
              const int m = 8 * m8 + 2 * e;
              if (m < i) s = fmaf(-(a.x + c.x), x[m], s);
              if (m + 1 < i) s = fmaf(-(a.y + c.y), x[m + 1], s);
            }
          }
        }
        x[i] = s;
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const B16 hi = __float2bfloat16_rn(x[i]);
        Ah[(b0 + i) * LC + b0 + lane] = hi;
        Al[(b0 + i) * LC + b0 + lane] = __float2bfloat16_rn(x[i] - __bfloat162float(hi));
      }
    }
  } else {
    // Blocks (0, 1) and (2, 3) of A are read by step 3 as parts of lower-triangular 32 x 32 blocks.
    const int t = tid - 128;  // 128 threads, 2 blocks x 2 tiles x 16 rows x 2 halves of 16 bytes
    const int blk = t >> 6, tile = (t >> 5) & 1, r = (t >> 1) & 15, half = t & 1;
    B16* base = (tile ? Al : Ah) + (32 * blk + r) * LC + 32 * blk + 16 + 8 * half;
    *reinterpret_cast<uint4*>(base) = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();

  B16* const L[2] = {Lh, Ll};
  B16* const A[2] = {Ah, Al};
  const B16* const Lc[2] = {Lh, Ll};
  const B16* const Ac[2] = {Ah, Al};
  // 2. A_(2b+1)(2b) = -a_(2b+1) (L_(2b+1)(2b) a_(2b)), b = warp in {0, 1}; Y kept in L's block (2b, 2b+1).
  {
    const int d0 = 32 * (warp & 1), d1 = d0 + 16;
    split_step<LC>(warp < 2, Lc, d1, d0, Ac, d0, d0, 16, L, d0, d1, false, lane);
    split_step<LC>(warp < 2, Ac, d1, d1, Lc, d0, d1, 16, A, d1, d0, true, lane);
  }
  // 3. A_21 = -A_22 (L_21 A_11): warp (mt, nt) < 4 owns 16 x 16 tile (mt, nt); Y kept in L's rows 0..31,
  //    columns 32..63.
  {
    const int mt = warp & 1, nt = (warp >> 1) & 1;
    split_step<LC>(warp < 4, Lc, 32 + 16 * mt, 0, Ac, 0, 16 * nt, 32, L, 16 * mt, 32 + 16 * nt, false, lane);
    split_step<LC>(warp < 4, Ac, 32 + 16 * mt, 32, Lc, 0, 32 + 16 * nt, 32, A, 32 + 16 * mt, 16 * nt, true, lane);
  }
}

}  // namespace ak::linear::cuda
