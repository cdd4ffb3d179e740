// Fast backward, stage "prep" (one block of 4 warps per chunk and value head): the gate cumsum gc,
// L = tril(diag(beta) K K^T * D, -1) and its inverse A = (I + L)^-1 in fp32 (16 x 16 diagonal blocks
// by forward substitution, then block rows), w = A diag(beta e^gc) K, u = A diag(beta) V and
// P = scale (Q K^T * D) on and below the diagonal, with D_ij = e^(gc_i - gc_j). Warp w owns rows
// 16w..16w+15 of every 64-row product.
#pragma once

#include "cuda_bwd_elem.cuh"
#include "cuda_bwd_fast.cuh"
#include "cuda_bwd_mma.cuh"

namespace ak::linear::cuda::bwd {
namespace prep_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 128;
constexpr int kLF = kC + 1;  // fp32 64 x 64 tiles

template <int D>
constexpr size_t prep_smem() {
  return sizeof(uint16_t) * (3 * kC * (D + 8) + kC * (kC + 8)) + sizeof(float) * (2 * kC * kLF + 3 * 16 * 17 + 3 * kC);
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) fast_prep(Problem p, FastWork<T> w) {
  constexpr int LD = D + 8, LC = kC + 8, NT = D / 8;
  extern __shared__ __align__(16) unsigned char smraw[];
  T* Ks = reinterpret_cast<T*>(smraw);
  T* Qs = Ks + kC * LD;
  T* Vs = Qs + kC * LD;
  T* As = Vs + kC * LD;
  float* Lf = reinterpret_cast<float*>(As + kC * LC);
  float* Af = Lf + kC * kLF;
  float* Tf = Af + kC * kLF;  // [3][16][17]
  float* gc = Tf + 3 * 16 * 17;
  float* bt = gc + kC;
  float* bg = bt + kC;

  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z;
  const int64_t row = static_cast<int64_t>(h) * p.padded() + static_cast<int64_t>(g) * kC;

  tile_load<T>(Ks, LD, static_cast<const T*>(p.k.p) + p.k.offset(ci.x, ci.y, hk), p.k.st, kC, len, D, tid, kThreads);
  tile_load<T>(Qs, LD, static_cast<const T*>(p.q.p) + p.q.offset(ci.x, ci.y, hk), p.q.st, kC, len, D, tid, kThreads);
  tile_load<T>(Vs, LD, static_cast<const T*>(p.v.p) + p.v.offset(ci.x, ci.y, h), p.v.st, kC, len, D, tid, kThreads);
  cp_async_commit();
  if (tid < kC) {
    float gv = 0.f, bv = 0.f;
    if (tid < len) {
      if (p.gated) gv = static_cast<const float*>(p.g.p)[p.g.offset(ci.x, ci.y + tid, h)];
      bv = static_cast<const float*>(p.beta.p)[p.beta.offset(ci.x, ci.y + tid, h)];
    }
    gc[tid] = gv;
    bt[tid] = bv;
  }
  __syncthreads();
  if (warp == 0) {  // inclusive scan of the gate, two entries per lane
    const float a = gc[2 * lane], b = gc[2 * lane + 1];
    const float before = warp_inclusive_scan(a + b, lane) - (a + b);
    gc[2 * lane] = before + a;
    gc[2 * lane + 1] = before + a + b;
  }
  // Af = I while the scan runs.
  for (int idx = tid; idx < kC * kC; idx += kThreads) {
    const int i = idx / kC, j = idx - i * kC;
    Af[i * kLF + j] = i == j ? 1.f : 0.f;
  }
  __syncthreads();
  if (tid < kC) {
    bg[tid] = bt[tid] * expf(gc[tid]);
    w.gc[row + tid] = gc[tid];
  }
  cp_async_wait<0>();
  __syncthreads();

  const int rA = 16 * warp + gq, rB = rA + 8;
  {  // L = beta_i (K K^T)_ij D_ij below the diagonal
    float acc[1][8][4];
    zero_acc(acc);
    warp_mma<T, 1, 8, false, false>(acc, Ks, LD, 16 * warp, Ks, LD, 0, D, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = r < 2 ? rA : rB, j = 8 * nt + 2 * q4 + (r & 1);
        Lf[i * kLF + j] = j < i ? bt[i] * acc[0][nt][r] * expf(gc[i] - gc[j]) : 0.f;
      }
  }
  {  // P = scale (Q K^T)_ij D_ij on and below the diagonal, staged in As
    float acc[1][8][4];
    zero_acc(acc);
    warp_mma<T, 1, 8, false, false>(acc, Qs, LD, 16 * warp, Ks, LD, 0, D, lane);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = r < 2 ? rA : rB, j = 8 * nt + 2 * q4 + (r & 1);
        acc[0][nt][r] = j <= i ? p.scale * acc[0][nt][r] * expf(gc[i] - gc[j]) : 0.f;
      }
    store_acc<T, 1, 8>(acc, As, LC, 16 * warp, 0, lane);
  }
  __syncthreads();
  tile_store<T>(w.P + row * kC, kC, As, LC, kC, kC, tid, kThreads);

  // Diagonal 16 x 16 blocks of A by forward substitution: lane j of warp b owns column 16b + j, and
  // X_ij = -sum_{m=j}^{i-1} L_im X_mj only reads its own column.
  if (lane < 16) {
    const int b0 = 16 * warp, j = b0 + lane;
    for (int i = j + 1; i < b0 + 16; ++i) {
      float s = 0.f;
      for (int m = j; m < i; ++m) s += Lf[i * kLF + m] * Af[m * kLF + j];
      Af[i * kLF + j] = -s;
    }
  }
  __syncthreads();
  // Block rows: A_{bi,bj} = -A_{bi,bi} sum_{bm=bj}^{bi-1} L_{bi,bm} A_{bm,bj}.
  for (int bi = 1; bi < 4; ++bi) {
    for (int idx = tid; idx < bi * 256; idx += kThreads) {
      const int bj = idx >> 8, r = (idx >> 4) & 15, c = idx & 15;
      const int i = 16 * bi + r, j = 16 * bj + c;
      float s = 0.f;
      for (int m = 16 * bj; m < 16 * bi; ++m) s += Lf[i * kLF + m] * Af[m * kLF + j];
      Tf[bj * 272 + r * 17 + c] = s;
    }
    __syncthreads();
    for (int idx = tid; idx < bi * 256; idx += kThreads) {
      const int bj = idx >> 8, r = (idx >> 4) & 15, c = idx & 15;
      const int i = 16 * bi + r;
      float s = 0.f;
      for (int m = 0; m <= r; ++m) s += Af[i * kLF + 16 * bi + m] * Tf[bj * 272 + m * 17 + c];
      Af[i * kLF + 16 * bj + c] = -s;
    }
    __syncthreads();
  }
  // A in the operand type for the gradient stage; then Aw = A diag(beta e^gc) and Au = A diag(beta),
  // each rounded once, so that w = Aw K and u = Au V read K and V exactly (scaling K and V instead
  // would round them too).
  auto stage_a = [&](const float* col) {
    for (int idx = tid; idx < kC * kC; idx += kThreads) {
      const int i = idx / kC, j = idx - i * kC;
      As[i * LC + j] = from_f<T>(col != nullptr ? Af[i * kLF + j] * col[j] : Af[i * kLF + j]);
    }
  };
  stage_a(nullptr);
  __syncthreads();
  tile_store<T>(w.A + row * kC, kC, As, LC, kC, kC, tid, kThreads);
  __syncthreads();
  stage_a(bg);
  __syncthreads();
  {
    float acc[1][NT][4];
    zero_acc(acc);
    warp_mma<T, 1, NT, false, true>(acc, As, LC, 16 * warp, Ks, LD, 0, kC, lane);
    store_acc<T, 1, NT>(acc, Qs, LD, 16 * warp, 0, lane);  // w, staged where Q was
  }
  __syncthreads();  // every warp is done reading Aw and K
  stage_a(bt);
  __syncthreads();
  {
    float acc[1][NT][4];
    zero_acc(acc);
    warp_mma<T, 1, NT, false, true>(acc, As, LC, 16 * warp, Vs, LD, 0, kC, lane);
    store_acc<T, 1, NT>(acc, Ks, LD, 16 * warp, 0, lane);  // u, staged where K was
  }
  __syncthreads();
  tile_store<T>(w.W + row * D, D, Qs, LD, kC, D, tid, kThreads);
  tile_store<T>(w.U + row * D, D, Ks, LD, kC, D, tid, kThreads);
}

}  // namespace prep_detail
}  // namespace ak::linear::cuda::bwd
