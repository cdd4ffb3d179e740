// Fast backward, stage "prep" with the triangular inverse on tensor cores: one block of 8 warps per
// chunk and value head, 3 blocks per multiprocessor at D = 128 (72 KB of shared memory). Outputs: gc,
// A = (I + L)^-1, P, w, u (only gc and P when the forward saved A and w).
//
// The inverse keeps every intermediate as a pair of bf16 tiles, x = hi + lo (hi = bf16(x),
// lo = bf16(x - hi): 16 significant bits, relative error <= 2^-17, the range of fp32), and forms
// products on tensor cores as hi hi + hi lo + lo hi (fp32 accumulators):
//   1. diagonal 16 x 16 blocks a_b = (I + L_bb)^-1 by forward substitution in fp32 (a lane per column)
//   2. 32 x 32 diagonal blocks: A_(2b+1)(2b) = -a_(2b+1) (L_(2b+1)(2b) a_(2b))
//   3. A_21 (rows 32..63, columns 0..31) = -A_22 (L_21 A_11) with 32 x 32 blocks
// The L tiles' upper triangle is never read, so the intermediate products (Y) are kept there.
//
// Work per warp: L = K K^T (row block rb = warp % 4) and P = Q K^T (row block 3 - rb), each on the
// causal 16 x 8 tiles of parity warp / 4 only, so every warp computes five tiles. w = Aw K on warps
// 0-3 and u = Au V on warps 4-7, with k-blocks up to the diagonal (A is lower triangular). P, w, u
// and A go straight from registers (or, for A, 16-byte rows) to device memory.
#pragma once

#include "cuda/runtime.cuh"
#include "linear/common/gate.cuh"
#include "linear/common/solve.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {
namespace prep_tc_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 256;
constexpr int LC = kC + 8;  // 64 x 64 tiles of 16-bit elements
using B16 = __nv_bfloat16;

// Shared memory, bytes. Q is only read by the first products: it lives where the A pair goes later,
// when it fits there (D <= 128), else in a tile of its own.
template <int D>
struct PrepTcLayout {
  static constexpr int LD = D + 8;
  static constexpr int kTileD = kC * LD * 2;
  static constexpr int kTileC = kC * LC * 2;
  static constexpr bool kQInA = kTileD <= 2 * kTileC;
  static constexpr int kK = 0;
  static constexpr int kV = kK + kTileD;
  static constexpr int kLh = kV + kTileD;  // L (then Aw) hi
  static constexpr int kLl = kLh + kTileC;  // L (then Au) lo
  static constexpr int kAh = kLl + kTileC;
  static constexpr int kAl = kAh + kTileC;
  static constexpr int kQ = kQInA ? kAh : kAl + kTileC;
  static constexpr int kGc = kQInA ? kAl + kTileC : kQ + kTileD;
  static constexpr int kBt = kGc + kC * 4;
  static constexpr int kBg = kBt + kC * 4;
  static constexpr int kBytes = kBg + kC * 4;
};

// OnlyP: with the forward's saved A and w, only gc and P (and the L2 norm of q and k).
template <class T, int D, bool OnlyP = false>
__global__ void __launch_bounds__(kThreads, D == 64 ? 4 : D == 128 ? 3 : 1) fast_prep_tc(Problem p, FastWork<T> w) {
  using Lay = PrepTcLayout<D>;
  constexpr int LD = Lay::LD;
  extern __shared__ __align__(16) unsigned char smraw[];
  T* Ks = reinterpret_cast<T*>(smraw + Lay::kK);
  T* Vs = reinterpret_cast<T*>(smraw + Lay::kV);
  T* Qs = reinterpret_cast<T*>(smraw + Lay::kQ);
  B16* Lh = reinterpret_cast<B16*>(smraw + Lay::kLh);
  B16* Ll = reinterpret_cast<B16*>(smraw + Lay::kLl);
  B16* Ah = reinterpret_cast<B16*>(smraw + Lay::kAh);
  B16* Al = reinterpret_cast<B16*>(smraw + Lay::kAl);
  T* Aw = reinterpret_cast<T*>(smraw + Lay::kLh);  // after the inverse
  T* Au = reinterpret_cast<T*>(smraw + Lay::kLl);
  float* gc = reinterpret_cast<float*>(smraw + Lay::kGc);
  float* bt = reinterpret_cast<float*>(smraw + Lay::kBt);
  float* bg = reinterpret_cast<float*>(smraw + Lay::kBg);

  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  const int64_t row = static_cast<int64_t>(h) * p.padded() + static_cast<int64_t>(g) * kC;

  tile_load<T>(Ks, LD, static_cast<const T*>(p.k.p) + p.k.offset(ci.x, ci.y, hk), p.k.st, kC, len, D, tid, kThreads);
  tile_load<T>(Qs, LD, static_cast<const T*>(p.q.p) + p.q.offset(ci.x, ci.y, hk), p.q.st, kC, len, D, tid, kThreads);
  cp_async_commit();
  // With the forward's saved states the backward needs no u (w.U null): V is not read.
  const bool only_w = w.U == nullptr;
  if (!only_w && !OnlyP) {
    tile_load<T>(Vs, LD, static_cast<const T*>(p.v.p) + p.v.offset(ci.x, ci.y, h), p.v.st, kC, len, D, tid,
                 kThreads);
  }
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
  if (warp == 0) chunk_cumsum64(gc, lane);
  cp_async_wait<1>();  // K and Q
  __syncthreads();
  if (tid < kC) {
    bg[tid] = bt[tid] * expf(gc[tid]);
    w.gc[row + tid] = gc[tid];
  }
  if (w.qn_out.p != nullptr) {
    // The L2 norm of the rows of q and k, in place (the same arithmetic as the separate normalising
    // kernel); the first value head of each q/k head writes the copies the later stages read.
    const bool writer = h % p.group == 0;
    constexpr int E = D / 32, R = 4;  // R rows at a time, so that their shuffles overlap
    const bool is_k = warp >= 4;      // warps 0-3: Q's rows, 4-7: K's, 16 each
    T* tile = is_k ? Ks : Qs;
    const OutView& dst = is_k ? w.kn_out : w.qn_out;
    float* rinv = is_k ? w.rk_out : w.rq_out;
#pragma unroll 1
    for (int i0 = 16 * (warp & 3); i0 < 16 * (warp & 3) + 16; i0 += R) {
      float v[R][E], rs[R];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
          v[j][e] = to_float(tile[(i0 + j) * LD + lane + 32 * e]);
          ss += v[j][e] * v[j][e];
        }
        rs[j] = ss;
      }
#pragma unroll
      for (int j = 0; j < R; ++j) rs[j] = rsqrtf(warp_sum(rs[j]) + kL2NormEps);
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int i = i0 + j;
        const bool out = writer && i < len;
        T* o = static_cast<T*>(dst.p) + dst.offset(ci.x, ci.y + i, hk);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const T y = from_float<T>(v[j][e] * rs[j]);
          tile[i * LD + lane + 32 * e] = y;
          if (out) o[lane + 32 * e] = y;
        }
        if (out && lane == 0 && rinv != nullptr) {
          rinv[(static_cast<int64_t>(ci.x) * p.map.T + ci.y + i) * p.HK + hk] = rs[j];
        }
      }
    }
    __syncthreads();
  }

  // L (row block rb) and P (row block 3 - rb) on the causal n8 tiles nt = par + 2x.
  const int rb = warp & 3, par = warp >> 2, pb = 3 - rb;
  {
    float la[4][4], pa[4][4];
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int r = 0; r < 4; ++r) la[x][r] = pa[x][r] = 0.f;
#pragma unroll(D == 64 ? 2 : 1)
    for (int k0 = 0; k0 < D; k0 += 32) {
      uint32_t ak[2][4], aq[2][4];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        load_a<T>(ak[s], Ks, LD, 16 * rb, k0 + 16 * s, lane);
        load_a<T>(aq[s], Qs, LD, 16 * pb, k0 + 16 * s, lane);
      }
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        if (x > rb && x > pb) continue;
        uint32_t b[4];
        load_b1_nk_k32<T>(b, Ks, LD, 8 * (par + 2 * x), k0, lane);
        if (!OnlyP && x <= rb) {
          mma16816<T>(la[x], ak[0], b[0], b[1]);
          mma16816<T>(la[x], ak[1], b[2], b[3]);
        }
        if (x <= pb) {
          mma16816<T>(pa[x], aq[0], b[0], b[1]);
          mma16816<T>(pa[x], aq[1], b[2], b[3]);
        }
      }
    }
    // L_ij = beta_i (k_i . k_j) e^(gc_i - gc_j), j < i, as a bf16 pair (its upper tiles stay unwritten).
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if (OnlyP || x > rb) continue;
      const int j = 8 * (par + 2 * x) + 2 * q4;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = 16 * rb + gq + 8 * hh;
        const float bi = bt[i], gi = gc[i];
        const float l0 = j < i ? bi * la[x][2 * hh] * __expf(gi - gc[j]) : 0.f;
        const float l1 = j + 1 < i ? bi * la[x][2 * hh + 1] * __expf(gi - gc[j + 1]) : 0.f;
        split_store(l0, l1, Lh, Ll, i * LC + j);
      }
    }
    // P_ij = scale (q_i . k_j) e^(gc_i - gc_j), j <= i, straight to device memory (zeros above).
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int j = 8 * (par + 2 * x) + 2 * q4;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = 16 * pb + gq + 8 * hh;
        float p0 = 0.f, p1 = 0.f;
        if (x <= pb) {
          const float gi = gc[i];
          p0 = j <= i ? p.scale * pa[x][2 * hh] * __expf(gi - gc[j]) : 0.f;
          p1 = j + 1 <= i ? p.scale * pa[x][2 * hh + 1] * __expf(gi - gc[j + 1]) : 0.f;
        }
        *reinterpret_cast<uint32_t*>(w.P + (row + i) * kC + j) = pack2<T>(p0, p1);
      }
    }
  }
  if constexpr (OnlyP) return;
  __syncthreads();  // L written; Q dead

  // A = (I + L)^-1 as hi/lo bf16 pairs on tensor cores (linear/common/solve.cuh).
  invert_unit_lower64_split<LC>(Lh, Ll, Ah, Al, tid);

  // A (zeros above the diagonal) to device memory; Aw = A diag(beta e^gc) and Au = A diag(beta), each
  // rounded once, into L's tiles, so that w = Aw K and u = Au V read K and V exactly.
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int idx = tid + kThreads * it, i = idx >> 3, c0 = (idx & 7) * 8;
    const uint4 hv = *reinterpret_cast<const uint4*>(Ah + i * LC + c0);
    const uint4 lv = *reinterpret_cast<const uint4*>(Al + i * LC + c0);
    const uint32_t hw[4] = {hv.x, hv.y, hv.z, hv.w}, lw[4] = {lv.x, lv.y, lv.z, lv.w};
    uint32_t ao[4], awo[4], auo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = c0 + 2 * e;
      const float2 a = unpack2<B16>(hw[e]), c = unpack2<B16>(lw[e]);
      const float a0 = j <= i ? a.x + c.x : 0.f, a1 = j + 1 <= i ? a.y + c.y : 0.f;
      ao[e] = pack2<T>(a0, a1);
      awo[e] = pack2<T>(a0 * bg[j], a1 * bg[j + 1]);
      auo[e] = pack2<T>(a0 * bt[j], a1 * bt[j + 1]);
    }
    *reinterpret_cast<uint4*>(w.A + (row + i) * kC + c0) = make_uint4(ao[0], ao[1], ao[2], ao[3]);
    *reinterpret_cast<uint4*>(Aw + i * LC + c0) = make_uint4(awo[0], awo[1], awo[2], awo[3]);
    *reinterpret_cast<uint4*>(Au + i * LC + c0) = make_uint4(auo[0], auo[1], auo[2], auo[3]);
  }
  cp_async_wait<0>();  // V
  __syncthreads();

  // w = Aw K (warps 0-3) and u = Au V (warps 4-7), 16 rows a warp, 64 columns at a time; without u,
  // w on all eight warps, parity par taking columns 32 par .. 32 par + 31 of each 64.
  {
    const bool is_u = par && !only_w;
    const T* F = is_u ? Au : Aw;
    const T* X = is_u ? Vs : Ks;
    T* out = (is_u ? w.U : w.W) + (row + 16 * rb) * D;
#pragma unroll
    for (int ng = 0; ng < D / 64; ++ng) {
      float acc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[nt][r] = 0.f;
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) {
        if (kb > rb) continue;
        uint32_t a[4];
        load_a<T>(a, F, LC, 16 * rb, 16 * kb, lane);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (only_w && (np >> 1) != par) continue;
          uint32_t b[4];
          load_b_kn<T>(b, X, LD, 64 * ng + 16 * np, 16 * kb, lane);
          mma16816<T>(acc[2 * np], a, b[0], b[1]);
          mma16816<T>(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (only_w && (nt >> 2) != par) continue;
        const int c = 64 * ng + 8 * nt + 2 * q4;
        *reinterpret_cast<uint32_t*>(out + gq * D + c) = pack2<T>(acc[nt][0], acc[nt][1]);
        *reinterpret_cast<uint32_t*>(out + (gq + 8) * D + c) = pack2<T>(acc[nt][2], acc[nt][3]);
      }
    }
  }
}

template <class T, int D, bool OnlyP>
void launch_prep(const StageArgs<T>& a, cudaStream_t s) {
  constexpr int smem = PrepTcLayout<D>::kBytes;
  auto kernel = fast_prep_tc<T, D, OnlyP>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // Three or four blocks per multiprocessor need the largest shared-memory carveout.
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  kernel<<<dim3(a.p.NCt, a.p.H), kThreads, smem, s>>>(a.p, a.w);
  ak::cuda::check_launch(OnlyP ? "delta_bwd fast: prep (P only)" : "delta_bwd fast: prep");
}

}  // namespace prep_tc_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void BwdPrep<T, D, Tile>::launch(const Args& a, cudaStream_t s) {
  if (a.p.NCt == 0) return;
  if (a.only_p) return bwd::prep_tc_detail::launch_prep<T, D, true>(a, s);
  bwd::prep_tc_detail::launch_prep<T, D, false>(a, s);
}

}  // namespace ak::linear::cuda
