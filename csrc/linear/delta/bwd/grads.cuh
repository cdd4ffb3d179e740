// Fast backward, stage "grads": every chunk-local gradient in one block per chunk and value head, with
// nothing in between going through device memory. The block has 4 x WC warps (WC = 4 at D = 128: 16
// warps, one block per multiprocessor; WC = 2 at D = 64: 8 warps, two blocks): warp (wr, wc) =
// (warp % 4, warp / 4) owns rows 16 wr .. 16 wr + 15 and the column part wc of WC of each 64 x D
// product (and of each 64 x 64 one). Per-row sums (q.dq, k.dk, ...) are combined over the parts
// through shared memory in a fixed order, so results are deterministic. Steps (notation of bench/NOTES_linear_bwd.md):
//   dPs = scale (dO v_new^T) * D (lower incl.)      dq = scale diag(e^gc) dO h^T + dPs K
//   dk  = diag(e^(gl-gc)) v_new dh'^T + dPs^T Q       dw = -dv_new h^T
//   dk += diag(beta e^gc) A^T dw                      dv = diag(beta) A^T dv_new
//   dA  = (dv_new V^T) diag(beta) + (dw K^T) diag(beta e^gc)   (strictly lower)
//   dL  = -A^T (dA A^T)                               dk += (dM + dM^T) K, dM = diag(beta) dL * D
//   dbeta, dgc from the same products; dg = reverse cumsum of dgc within the chunk
#pragma once

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/delta/bwd/fast.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {
namespace grads_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 256;  // blocks of 8 warps (WC = 2): the two kernels of D = 256

// Sum of the WC column parts of a per-row partial sum stored as [WC][64].
template <int WC>
__device__ __forceinline__ float sum_parts(const float* r, int i) {
  float s = r[i];
#pragma unroll
  for (int c = 1; c < WC; ++c) s += r[c * kC + i];
  return s;
}

// Where element (r, c) of a 16-bit shared tile lies: rows `ld` elements apart (the mma.sync kernels'
// padded tiles). The wgmma kernel (grads_sm90.cuh) passes its swizzled tiles through the same `at`.
template <class T>
struct PaddedTile {
  T* p;
  int ld;
  __device__ __forceinline__ T* at(int r, int c) const { return p + r * ld + c; }
};

// The two 16-bit values at (r, c), (r, c + 1) of a tile (c even).
template <class Tile>
__device__ __forceinline__ uint32_t tile_pair(const Tile& s, int r, int c) {
  return *reinterpret_cast<const uint32_t*>(s.at(r, c));
}

// Stores a 1 x NT accumulator tile (rows m0.., columns n0..) as T into a tile.
template <class T, int NT, class Tile>
__device__ __forceinline__ void store_tile(const float (&acc)[1][NT][4], const Tile& s, int m0, int n0, int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
    *reinterpret_cast<uint32_t*>(s.at(r, c)) = pack2<T>(v[0], v[1]);
  });
}

// One item of the gradient stage (chunk g of value head h): the K / Q head, the chunk (batch, first token,
// length), its first row in the per-head workspaces, and the offset of its states ([H][NCt][D][D]).
struct GradItem {
  int g, h, hk;
  int4 ci;
  int64_t row, state;
};
__device__ __forceinline__ GradItem grad_item(const Problem& p, int item, int D) {
  const int g = item / p.H, h = item - g * p.H;
  return {g,
          h,
          h / p.group,
          p.map.chunk_of(g),
          static_cast<int64_t>(h) * p.padded() + static_cast<int64_t>(g) * kC,
          (static_cast<int64_t>(h) * p.NCt + g) * D * D};
}

// Lane q of each quad holds words v[0..3], word j from n8 tile j of one accumulator row; afterwards it
// holds tile q's four words (lanes 0..3 in order): 16 contiguous bytes of the row, so that a warp
// stores whole 32-byte sectors (the fragments' own 4-byte stores left half of each sector to a
// second instruction).
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int q) {
  auto pick = [&](int i) { return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3]; };
  const uint32_t own = pick(q);
  const uint32_t r1 = __shfl_xor_sync(0xffffffffu, pick(q ^ 1), 1);
  const uint32_t r2 = __shfl_xor_sync(0xffffffffu, pick(q ^ 2), 2);
  const uint32_t r3 = __shfl_xor_sync(0xffffffffu, pick(q ^ 3), 3);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int m = k ^ q;
    v[k] = m == 0 ? own : m == 1 ? r1 : m == 2 ? r2 : r3;
  }
}

// Stores row pieces of a 1 x NT n8-tile accumulator row (two floats a tile and lane) as 16-byte
// pieces: words[j] = the lane's pair of tile j; o = the row (null: not stored, the shuffles still run).
template <int NT>
__device__ __forceinline__ void store_row16(uint32_t (&words)[NT], void* o_row, int n0, int q4) {
  static_assert(NT % 4 == 0, "n8 tiles in groups of four");
#pragma unroll
  for (int g = 0; g < NT / 4; ++g) {
    uint32_t v[4] = {words[4 * g], words[4 * g + 1], words[4 * g + 2], words[4 * g + 3]};
    quad_transpose(v, q4);
    if (o_row != nullptr) {
      *reinterpret_cast<uint4*>(static_cast<char*>(o_row) + 2 * (n0 + 32 * g + 8 * q4)) = make_uint4(v[0], v[1], v[2], v[3]);
    }
  }
}

// Writes a 64 x D accumulator slice (rows m0.., columns n0..) either as fp32 into the per-head
// scratch (row-major [64][D] at `scratch`) or, when scratch is null, in the dtype to the output view
// (valid rows only, 16-byte pieces: store_row16).
template <class T, int NT>
__device__ __forceinline__ void write_rows(const float (&acc)[1][NT][4], float* scratch, int D, OutView out,
                                           int4 ci, int head, int m0, int n0, int lane) {
  const int gq = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + gq + 8 * half;
    if (scratch != nullptr) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int c = n0 + 8 * nt + 2 * q4;
        *reinterpret_cast<float2*>(scratch + r * D + c) = make_float2(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
      }
    } else {
      uint32_t words[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) words[nt] = pack2<T>(acc[0][nt][2 * half], acc[0][nt][2 * half + 1]);
      T* o = r < ci.z ? static_cast<T*>(out.p) + out.offset(ci.x, ci.y + r, head) : nullptr;
      store_row16<NT>(words, o, n0, q4);
    }
  }
}

// Writes a 64 x D slice of dy (the gradient of y = x / |x|) as dx = (dy - y (y . dy)) / |x| to the
// output view (valid rows only): y from the shared tile ys, y . dy summed over the WC column parts
// in rdot[WC][64], 1 / |x| per row from rinv ([B, T, HK]).
template <class T, int NT, int WC, class Tile>
__device__ __forceinline__ void write_rows_l2(const float (&acc)[1][NT][4], const Tile& ys, const float* rdot,
                                              const float* rinv, int T_, int HK, OutView out, int4 ci, int head,
                                              int m0, int n0, int lane) {
  const int gq = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + gq + 8 * half;
    const bool valid = r < ci.z;
    const float s = sum_parts<WC>(rdot, r);
    const float ri = valid ? rinv[(static_cast<int64_t>(ci.x) * T_ + ci.y + r) * HK + head] : 0.f;
    uint32_t words[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int c = n0 + 8 * nt + 2 * q4;
      const float2 y = unpack2<T>(tile_pair(ys, r, c));
      words[nt] = pack2<T>(ri * (acc[0][nt][2 * half] - y.x * s), ri * (acc[0][nt][2 * half + 1] - y.y * s));
    }
    store_row16<NT>(words, valid ? static_cast<T*>(out.p) + out.offset(ci.x, ci.y + r, head) : nullptr, n0, q4);
  }
}

// Sum over this thread's columns of x * S[row][col] for both accumulator rows (S a T tile), reduced
// over the quad: every lane of the quad ends with the row sums.
template <class T, int NT, class Tile>
__device__ __forceinline__ float2 row_dots(const float (&acc)[1][NT][4], const Tile& s, int rA, int n0, int lane) {
  const int q4 = lane & 3;
  float a = 0.f, b = 0.f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int c = n0 + 8 * nt + 2 * q4;
    const float2 xa = unpack2<T>(tile_pair(s, rA, c));
    const float2 xb = unpack2<T>(tile_pair(s, rA + 8, c));
    a += xa.x * acc[0][nt][0] + xa.y * acc[0][nt][1];
    b += xb.x * acc[0][nt][2] + xb.y * acc[0][nt][3];
  }
  return make_float2(quad_sum(a), quad_sum(b));
}

// row_dots of both accumulator rows stored per column part, r[wc][row] (one lane of each quad writes).
template <class T, int NT, class Tile>
__device__ __forceinline__ void put_row_dots(const float (&acc)[1][NT][4], const Tile& s, float* r, int wc, int m0,
                                             int n0, int lane) {
  const int rA = m0 + (lane >> 2);
  const float2 d = row_dots<T, NT>(acc, s, rA, n0, lane);
  if ((lane & 3) == 0) {
    r[wc * kC + rA] = d.x;
    r[wc * kC + rA + 8] = d.y;
  }
}

// Scales the two accumulator rows (rA, rA + 8) by fa and fb.
template <int NT>
__device__ __forceinline__ void scale_rows(float (&acc)[1][NT][4], float fa, float fb) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    acc[0][nt][0] *= fa;
    acc[0][nt][1] *= fa;
    acc[0][nt][2] *= fb;
    acc[0][nt][3] *= fb;
  }
}

// dPs = scale (dO v_new^T) * D on and below the diagonal, from the product dO v_new^T in acc
// (columns j0 .. of 64).
template <int NJ>
__device__ __forceinline__ void dps_mask(float (&acc)[1][NJ][4], const float* gc, float scale, int m0, int j0,
                                         int lane) {
  const int rA = m0 + (lane >> 2), q4 = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NJ; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r < 2 ? rA : rA + 8, j = j0 + 8 * nt + 2 * q4 + (r & 1);
      acc[0][nt][r] = j <= i ? scale * acc[0][nt][r] * expf(gc[i] - gc[j]) : 0.f;
    }
}

// dPs = scale (dO v_new^T) * D on and below the diagonal, as accumulators (columns j0 .. of 64).
template <class T, int NJ>
__device__ __forceinline__ void dps_tile(float (&acc)[1][NJ][4], const T* dOs, const T* Us, int ld, int kdim,
                                         const float* gc, float scale, int m0, int j0, int lane) {
  zero_acc(acc);
  warp_mma<T, 1, NJ, false, false>(acc, dOs, ld, m0, Us, ld, j0, kdim, lane);
  dps_mask(acc, gc, scale, m0, j0, lane);
}

// From t = A^T dv_new: dv = diag(beta) t to the output; t.v per row into r_tv.
template <class T, int NT, class Tile>
__device__ __forceinline__ void dv_from(float (&acc)[1][NT][4], const Tile& Vs, const float* bt, float* r_tv,
                                        const Problem& p, int4 ci, int h, int wc, int m0, int n0, int lane) {
  const int rA = m0 + (lane >> 2);
  put_row_dots<T, NT>(acc, Vs, r_tv, wc, m0, n0, lane);
  scale_rows(acc, bt[rA], bt[rA + 8]);
  write_rows<T, NT>(acc, nullptr, 0, p.dv, ci, h, m0, n0, lane);
}

// dv = diag(beta) A^T dv_new to the output; (A^T dv_new).v per row into r_tv.
template <class T, int NT>
__device__ __forceinline__ void write_dv(const T* As, const T* dUs, const T* Vs, int ld, const float* bt, float* r_tv,
                                         const Problem& p, int4 ci, int h, int wc, int m0, int n0, int lane) {
  float acc[1][NT][4];
  zero_acc(acc);
  warp_mma<T, 1, NT, true, true>(acc, As, kC + 8, m0, dUs, ld, n0, kC, lane);
  dv_from<T, NT>(acc, PaddedTile<const T>{Vs, ld}, bt, r_tv, p, ci, h, wc, m0, n0, lane);
}

// From t = A^T dw: dk += diag(beta e^gc) t; t.k per row into r_tk.
template <class T, int NT, class Tile>
__device__ __forceinline__ void add_at_dw_from(float (&dk)[1][NT][4], const float (&acc)[1][NT][4], const Tile& Ks,
                                               const float* bt, const float* gm, float* r_tk, int wc, int m0, int n0,
                                               int lane) {
  const int rA = m0 + (lane >> 2);
  put_row_dots<T, NT>(acc, Ks, r_tk, wc, m0, n0, lane);
  const float fa = bt[rA] * gm[rA], fb = bt[rA + 8] * gm[rA + 8];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    dk[0][nt][0] += fa * acc[0][nt][0];
    dk[0][nt][1] += fa * acc[0][nt][1];
    dk[0][nt][2] += fb * acc[0][nt][2];
    dk[0][nt][3] += fb * acc[0][nt][3];
  }
}

// dk += diag(beta e^gc) A^T dw; (A^T dw).k per row into r_tk.
template <class T, int NT>
__device__ __forceinline__ void add_at_dw(float (&dk)[1][NT][4], const T* As, const T* dWs, const T* Ks, int ld,
                                          const float* bt, const float* gm, float* r_tk, int wc, int m0, int n0,
                                          int lane) {
  float acc[1][NT][4];
  zero_acc(acc);
  warp_mma<T, 1, NT, true, true>(acc, As, kC + 8, m0, dWs, ld, n0, kC, lane);
  add_at_dw_from<T, NT>(dk, acc, PaddedTile<const T>{Ks, ld}, bt, gm, r_tk, wc, m0, n0, lane);
}

// dA = (a1 + a2 diag(e^gc)) diag(beta), strictly lower, into a1 (a1 = dv_new V^T, a2 = dw K^T).
template <int NJ>
__device__ __forceinline__ void combine_da(float (&a1)[1][NJ][4], const float (&a2)[1][NJ][4], const float* bt,
                                           const float* gm, int m0, int j0, int lane) {
  const int rA = m0 + (lane >> 2), q4 = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NJ; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r < 2 ? rA : rA + 8, j = j0 + 8 * nt + 2 * q4 + (r & 1);
      a1[0][nt][r] = j < i ? bt[j] * (a1[0][nt][r] + gm[j] * a2[0][nt][r]) : 0.f;
    }
}

// X = dA A^T (dA in T1) -> T2, all 64 x 64 tiles of stride kC + 8.
template <class T, int NJ>
__device__ __forceinline__ void store_x(const T* T1, const T* As, T* T2, int m0, int j0, int lane) {
  float x[1][NJ][4];
  zero_acc(x);
  warp_mma<T, 1, NJ, false, false>(x, T1, kC + 8, m0, As, kC + 8, j0, kC, lane);
  store_acc<T, 1, NJ>(x, T2, kC + 8, m0, j0, lane);
}

// Per-row partial sums of the gradient stage, in shared memory: [WC][64] (per column part) unless said.
struct GradRows {
  float* qd;   // q.dq
  float* kt;   // k.dk~ (decay of the keys in the carried state)
  float* kk;   // k.dk (before the WY part)
  float* tk;   // (A^T dw).k
  float* tv;   // (A^T dv_new).v
  float* db;   // sum_j dL_ij (K K^T)_ij D_ij
  float* rl;   // row sums of dL * L
  float* cl;   // [4][64] column sums of dL * L per row block
  float* hd;   // [4 WC] <h, dh'> per warp
  float* dgs;  // [64] dgc
};

// From dl = -A^T X (X = dA A^T, strictly lower) and kk = K K^T (accumulators, columns j0 .. of 64),
// with L = diag(beta) (K K^T) * D: the row sums for dbeta and dgc, and S = dM + dM^T (dM = diag(beta)
// dL * D) into the 64 x 64 tile T1. Warp (wr, wc): rows 16 wr, columns 64 / WC wc.
template <class T, int WC, class Tile>
__device__ __forceinline__ void dl_rows(const float (&dl)[1][8 / WC][4], const float (&kk)[1][8 / WC][4],
                                        const Tile& T1, const float* gc, const float* bt, const GradRows& rs, int wr,
                                        int wc, int lane) {
  constexpr int NJ = 8 / WC;
  const int gq = lane >> 2, q4 = lane & 3, m0 = 16 * wr, rA = m0 + gq, rB = rA + 8, j0 = (kC / WC) * wc;
  float rdb[2] = {0.f, 0.f}, rl[2] = {0.f, 0.f};
  float cl[NJ][2];
#pragma unroll
  for (int nt = 0; nt < NJ; ++nt) {
    cl[nt][0] = 0.f;
    cl[nt][1] = 0.f;
  }
#pragma unroll
  for (int nt = 0; nt < NJ; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int half = r >> 1, i = half ? rB : rA, j = j0 + 8 * nt + 2 * q4 + (r & 1);
      float sv = 0.f;
      if (j < i) {
        const float dij = expf(gc[i] - gc[j]);
        const float kkd = kk[0][nt][r] * dij;
        const float d = dl[0][nt][r];
        const float ll = d * bt[i] * kkd;  // dL_ij L_ij
        rdb[half] += d * kkd;
        rl[half] += ll;
        cl[nt][r & 1] += ll;
        sv = d * bt[i] * dij;
        *T1.at(j, i) = from_float<T>(sv);
      }
      if (j <= i) *T1.at(i, j) = from_float<T>(sv);
    }
  const float db0 = quad_sum(rdb[0]), db1 = quad_sum(rdb[1]);
  const float rl0 = quad_sum(rl[0]), rl1 = quad_sum(rl[1]);
  if (q4 == 0) {
    rs.db[wc * kC + rA] = db0;
    rs.db[wc * kC + rB] = db1;
    rs.rl[wc * kC + rA] = rl0;
    rs.rl[wc * kC + rB] = rl1;
  }
#pragma unroll
  for (int nt = 0; nt < NJ; ++nt)
#pragma unroll
    for (int par = 0; par < 2; ++par) {
      float x = cl[nt][par];
      x += __shfl_xor_sync(0xffffffffu, x, 4);
      x += __shfl_xor_sync(0xffffffffu, x, 8);
      x += __shfl_xor_sync(0xffffffffu, x, 16);
      if (gq == 0) rs.cl[wr * kC + j0 + 8 * nt + 2 * q4 + par] = x;
    }
}

// dL = -A^T X (X = dA A^T in T2) and K K^T by mma.sync, then dl_rows. Ks: the chunk's keys (row
// stride ldk, kdim columns); T1, T2, As: 64 x 64 tiles of stride kC + 8.
template <class T, int WC>
__device__ __forceinline__ void dl_products(const T* As, const T* T2, const T* Ks, int ldk, int kdim, T* T1,
                                            const float* gc, const float* bt, const GradRows& rs, int wr, int wc,
                                            int lane) {
  constexpr int LC = kC + 8, NJ = 8 / WC;
  const int m0 = 16 * wr, j0 = (kC / WC) * wc;
  float dl[1][NJ][4], kk[1][NJ][4];
  zero_acc(dl);
  zero_acc(kk);
  warp_mma<T, 1, NJ, true, true, true>(dl, As, LC, m0, T2, LC, j0, kC, lane);
  warp_mma<T, 1, NJ, false, false>(kk, Ks, ldk, m0, Ks, ldk, j0, kdim, lane);
  dl_rows<T, WC>(dl, kk, PaddedTile<T>{T1, LC}, gc, bt, rs, wr, wc, lane);
}

// dbeta and dgc per row from the row sums (threads 0..63), a barrier every thread reaches, then dg =
// reverse cumsum of dgc within the chunk, the last row also taking the decay terms (warp 0). gm = e^gc,
// gl = gc of the last row.
template <int WC>
__device__ __forceinline__ void write_dbeta_dg(const Problem& p, int4 ci, int h, const float* gm, const float* bt,
                                               float gl, const GradRows& rs, int tid, int lane) {
  const int len = ci.z;
  if (tid < kC) {
    const int i = tid;
    const float tk = sum_parts<WC>(rs.tk, i);
    rs.dgs[i] = sum_parts<WC>(rs.qd, i) - sum_parts<WC>(rs.kk, i) + bt[i] * gm[i] * tk + sum_parts<WC>(rs.rl, i) -
                sum_parts<4>(rs.cl, i);
    if (i < len) {
      static_cast<float*>(p.dbeta.p)[p.dbeta.offset(ci.x, ci.y + i, h)] =
          gm[i] * tk + sum_parts<WC>(rs.tv, i) + sum_parts<WC>(rs.db, i);
    }
  }
  __syncthreads();
  if (p.gated && tid < 32) {
    float last = sum_parts<WC>(rs.kt, lane) + sum_parts<WC>(rs.kt, lane + 32);
    last = warp_sum(last);
    float hd = lane < 4 * WC ? rs.hd[lane] : 0.f;
    hd = warp_sum(hd);
    // x_k = dgc_(63 - k); lane owns k = 2 lane, 2 lane + 1; inclusive scan over k.
    float a = rs.dgs[kC - 1 - 2 * lane], b = rs.dgs[kC - 2 - 2 * lane];
    if (lane == 0) a += last + expf(gl) * hd;
    const float before = warp_inclusive_scan(a + b, lane) - (a + b);
    const int i0 = kC - 1 - 2 * lane, i1 = i0 - 1;
    float* dgo = static_cast<float*>(p.dg.p);
    if (i0 < len) dgo[p.dg.offset(ci.x, ci.y + i0, h)] = before + a;
    if (i1 < len) dgo[p.dg.offset(ci.x, ci.y + i1, h)] = before + a + b;
  }
}

// The item's last steps, once dk is complete: dk to the output (or the fp32 scratch), through the L2 norm's
// backward when it is fused (k.dk summed over the column parts in r_kf first), then dbeta and dg.
template <class T, int NT, int WC, class Tile>
__device__ __forceinline__ void finish_item(const float (&dk)[1][NT][4], const Tile& tK, float* r_kf,
                                            const Problem& p, const FastWork<T>& w, const GradItem& it,
                                            const float* gm, const float* bt, float gl, const GradRows& rows, int wc,
                                            int m0, int n0, int tid, int lane) {
  constexpr int D = 8 * NT * WC;
  const bool fused_l2 = w.rq != nullptr;
  if (fused_l2) {
    put_row_dots<T, NT>(dk, tK, r_kf, wc, m0, n0, lane);
  } else {
    write_rows<T, NT>(dk, w.dKh != nullptr ? w.dKh + it.row * D : nullptr, D, p.dk, it.ci, it.hk, m0, n0, lane);
  }
  write_dbeta_dg<WC>(p, it.ci, it.h, gm, bt, gl, rows, tid, lane);
  if (fused_l2) write_rows_l2<T, NT, WC>(dk, tK, r_kf, w.rk, p.map.T, p.HK, p.dk, it.ci, it.hk, m0, n0, lane);
}

// Every tile of the next item is fetched as soon as its buffer is dead, so an item never starts with a
// wait on device memory: dO, v_new, h, dh' (and K into a second buffer at D = 128) after dw is stored,
// Q, V, dv_new after the dA product, A after the dL product (needed only at A^T dw). At D = 64 a
// second K buffer would cost the second block per multiprocessor, so K is fetched at the end of the
// item.
template <class T, int D>
__global__ void __launch_bounds__(128 * grads_wc<D>(), D == 64 ? 2 : 1) fast_grads(Problem p, FastWork<T> w) {
  // NT: n8 tiles of a warp's part of a 64 x D product; NJ: of a 64 x 64 one.
  constexpr int WC = grads_wc<D>(), kThreads = 128 * WC, NT = D / (8 * WC), NJ = 8 / WC;
  constexpr int LD = D + 8, LC = kC + 8;
  constexpr bool kTwoK = grads_two_k<D>();
  extern __shared__ __align__(16) unsigned char smraw[];
  T* Qs = reinterpret_cast<T*>(smraw);
  T* Kb = Qs + kC * LD;  // K, or with kTwoK K of even iterations
  T* Vs = Kb + kC * LD;
  T* dOs = Vs + kC * LD;
  T* Us = dOs + kC * LD;
  T* dUs = Us + kC * LD;
  T* Hs = dUs + kC * LD;  // [D][LD]: h[d][v]
  T* dHs = Hs + D * LD;
  T* As = dHs + D * LD;  // [64][LC]
  T* T1 = As + kC * LC;
  T* T2 = T1 + kC * LC;
  T* Kb2 = T2 + kC * LC;  // kTwoK: K of odd iterations
  float* gc = reinterpret_cast<float*>(Kb2 + (kTwoK ? kC * LD : 0));
  float* gm = gc + kC;   // e^gc
  float* dec = gm + kC;  // e^(gl - gc)
  float* bt = dec + kC;  // beta
  float* r_qd = bt + kC;         // [WC][64] per column part: q.dq
  float* r_kt = r_qd + WC * kC;  // k.dk~ (decay of the keys in the carried state)
  float* r_kk = r_kt + WC * kC;  // k.dk (before the WY part)
  float* r_tk = r_kk + WC * kC;  // (A^T dw).k
  float* r_tv = r_tk + WC * kC;  // (A^T dv_new).v
  float* r_db = r_tv + WC * kC;  // sum_j dL_ij (K K^T)_ij D_ij
  float* r_rl = r_db + WC * kC;  // row sums of dL * L
  float* r_cl = r_rl + WC * kC;  // [4][64] column sums of dL * L per row block
  float* r_h = r_cl + 4 * kC;    // [4 WC] <h, dh'> per warp
  float* dgs = r_h + 4 * WC;     // [64]
  float* r_kf = dgs + kC;        // [WC][64] k.dk at the end (the L2-norm backward of dk)
  const GradRows rows{r_qd, r_kt, r_kk, r_tk, r_tv, r_db, r_rl, r_cl, r_h, dgs};
  const bool fused_l2 = w.rq != nullptr;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wr = warp & 3, wc = warp >> 2;
  const int m0 = 16 * wr, rA = m0 + (lane >> 2), rB = rA + 8;
  const int n0 = wc * (D / WC);   // columns of 64 x D products
  const int j0 = wc * (kC / WC);  // columns of 64 x 64 products

  // Persistent blocks: item = chunk * H + head. Workspace rows past a chunk's length (v_new, dv_new, A)
  // are zero-filled, not read: the forward's saved parts leave them unwritten, and 0 * NaN would reach
  // the gradients.
  const int items = p.map.live_chunks(p.NCt) * p.H;  // a packed call's empty chunks are skipped
  auto issue_first = [&](int item) {
    const auto [g, h, hk, ci, row, state] = grad_item(p, item, D);
    tile_load<T>(dOs, LD, static_cast<const T*>(p.dout.p) + p.dout.offset(ci.x, ci.y, h), p.dout.st, kC, ci.z, D,
                 tid, kThreads);
    tile_load<T>(Us, LD, w.U + row * D, D, kC, ci.z, D, tid, kThreads);
    tile_load<T>(Hs, LD, w.Hs + state, D, D, D, D, tid, kThreads);
  };
  // The cp.async groups, one commit each per item in this order: first (dO, v_new, h, dh', K when
  // kTwoK), qvdu (Q, V, dv_new), a (A), and without kTwoK k (K).
  auto issue_k = [&](int item, T* dst) {
    const auto [g, h, hk, ci, row, state] = grad_item(p, item, D);
    tile_load<T>(dst, LD, static_cast<const T*>(p.k.p) + p.k.offset(ci.x, ci.y, hk), p.k.st, kC, ci.z, D, tid,
                 kThreads);
  };
  auto issue_first_pipe = [&](int item, T* kdst) {
    issue_first(item);
    tile_load<T>(dHs, LD, w.dHs + grad_item(p, item, D).state, D, D, D, D, tid, kThreads);
    if constexpr (kTwoK) issue_k(item, kdst);
  };
  auto issue_qvdu = [&](int item) {
    const auto [g, h, hk, ci, row, state] = grad_item(p, item, D);
    tile_load<T>(Qs, LD, static_cast<const T*>(p.q.p) + p.q.offset(ci.x, ci.y, hk), p.q.st, kC, ci.z, D, tid,
                 kThreads);
    tile_load<T>(Vs, LD, static_cast<const T*>(p.v.p) + p.v.offset(ci.x, ci.y, h), p.v.st, kC, ci.z, D, tid,
                 kThreads);
    tile_load<T>(dUs, LD, w.dU + row * D, D, kC, ci.z, D, tid, kThreads);
  };
  auto issue_a = [&](int item) {
    const GradItem it = grad_item(p, item, D);
    tile_load<T>(As, LC, w.A + it.row * kC, kC, kC, it.ci.z, kC, tid, kThreads);
  };
  int item = blockIdx.x;
  if (item < items) {
    issue_first_pipe(item, Kb);
    if constexpr (!kTwoK) issue_k(item, Kb);
  }
  cp_async_commit();
  if (item < items) issue_qvdu(item);
  cp_async_commit();
  if (item < items) issue_a(item);
  cp_async_commit();
  for (int iter = 0; item < items; item += gridDim.x, ++iter) {
    const GradItem cur = grad_item(p, item, D);
    const auto [g, h, hk, ci, row, state] = cur;
    const int len = ci.z;
    const int next = item + static_cast<int>(gridDim.x);
    T* Ks = kTwoK && (iter & 1) ? Kb2 : Kb;
    const PaddedTile<const T> tQ{Qs, LD}, tK{Ks, LD};

    if (tid < kC) {
      gc[tid] = w.gc[row + tid];
      bt[tid] = tid < len ? static_cast<const float*>(p.beta.p)[p.beta.offset(ci.x, ci.y + tid, h)] : 0.f;
    }
    if constexpr (kTwoK) {
      cp_async_wait<1>();  // everything but A
    } else {
      cp_async_wait<0>();  // K came last
    }
    __syncthreads();
    const float gl = gc[kC - 1];
    if (tid < kC) {
      gm[tid] = expf(gc[tid]);
      dec[tid] = expf(gl - gc[tid]);
    }
    {  // dPs = scale (dO v_new^T) * D, lower incl. -> T1
      float acc[1][NJ][4];
      dps_tile<T, NJ>(acc, dOs, Us, LD, D, gc, p.scale, m0, j0, lane);
      store_acc<T, 1, NJ>(acc, T1, LC, m0, j0, lane);
    }
    __syncthreads();
    float dqa[1][NT][4];  // dq, written at once or (fused L2 norm) once q.dq is complete
    {  // dq = scale diag(e^gc) dO h^T + dPs K
      zero_acc(dqa);
      warp_mma<T, 1, NT, false, false>(dqa, dOs, LD, m0, Hs, LD, n0, D, lane);
      scale_rows(dqa, p.scale * gm[rA], p.scale * gm[rB]);
      warp_mma<T, 1, NT, false, true>(dqa, T1, LC, m0, Ks, LD, n0, kC, lane);
      put_row_dots<T, NT>(dqa, tQ, r_qd, wc, m0, n0, lane);
      if (!fused_l2) {
        write_rows<T, NT>(dqa, w.dQh != nullptr ? w.dQh + row * D : nullptr, D, p.dq, ci, hk, m0, n0, lane);
      }
    }
    {  // <h, dh'>
      float s = 0.f;
      for (int idx = tid; idx < D * D / 2; idx += kThreads) {
        const int r = (2 * idx) / D, c = 2 * idx - r * D;
        const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(Hs + r * LD + c));
        const float2 b = unpack2<T>(*reinterpret_cast<const uint32_t*>(dHs + r * LD + c));
        s += a.x * b.x + a.y * b.y;
      }
      s = warp_sum(s);
      if (lane == 0) r_h[warp] = s;
    }
    // dk = diag(e^(gl-gc)) v_new dh'^T + dPs^T Q, kept in registers to the end
    float dk[1][NT][4];
    zero_acc(dk);
    warp_mma<T, 1, NT, false, false>(dk, Us, LD, m0, dHs, LD, n0, D, lane);
    scale_rows(dk, dec[rA], dec[rB]);
    put_row_dots<T, NT>(dk, tK, r_kt, wc, m0, n0, lane);
    warp_mma<T, 1, NT, true, true>(dk, T1, LC, m0, Qs, LD, n0, kC, lane);
    put_row_dots<T, NT>(dk, tK, r_kk, wc, m0, n0, lane);
    T* dWs = Qs;  // dw takes Q's place once every warp is done with Q
    {
      float dw[1][NT][4];
      zero_acc(dw);
      warp_mma<T, 1, NT, false, false, true>(dw, dUs, LD, m0, Hs, LD, n0, D, lane);  // -dv_new h^T
      __syncthreads();
      // q.dq of both halves is in r_qd, Q not yet overwritten.
      if (fused_l2) write_rows_l2<T, NT, WC>(dqa, tQ, r_qd, w.rq, p.map.T, p.HK, p.dq, ci, hk, m0, n0, lane);
      store_acc<T, 1, NT>(dw, dWs, LD, m0, n0, lane);
    }
    __syncthreads();
    // dO, v_new and h (and dh', the other K buffer) are dead for this item: fetch the next item's.
    if (next < items) issue_first_pipe(next, (iter & 1) ? Kb : Kb2);
    cp_async_commit();
    if constexpr (kTwoK) {
      cp_async_wait<1>();  // this item's A (committed before the group above)
      __syncthreads();
    }
    // A^T dw: dk += diag(beta e^gc) A^T dw; (A^T dw).k
    add_at_dw<T, NT>(dk, As, dWs, Ks, LD, bt, gm, r_tk, wc, m0, n0, lane);
    // A^T dv_new: dv = diag(beta) A^T dv_new; (A^T dv_new).v
    write_dv<T, NT>(As, dUs, Vs, LD, bt, r_tv, p, ci, h, wc, m0, n0, lane);
    {  // dA = (dv_new V^T) diag(beta) + (dw K^T) diag(beta e^gc), strictly lower -> T1
      float a1[1][NJ][4], a2[1][NJ][4];
      zero_acc(a1);
      zero_acc(a2);
      warp_mma<T, 1, NJ, false, false>(a1, dUs, LD, m0, Vs, LD, j0, D, lane);
      warp_mma<T, 1, NJ, false, false>(a2, dWs, LD, m0, Ks, LD, j0, D, lane);
      combine_da(a1, a2, bt, gm, m0, j0, lane);
      store_acc<T, 1, NJ>(a1, T1, LC, m0, j0, lane);
    }
    __syncthreads();
    // Q (as dw), V, dv_new are dead.
    if (next < items) issue_qvdu(next);
    cp_async_commit();
    store_x<T, NJ>(T1, As, T2, m0, j0, lane);  // X = dA A^T -> T2
    __syncthreads();
    // dL = -A^T X: dbeta, dgc row sums, S = dM + dM^T -> T1
    dl_products<T, WC>(As, T2, Ks, LD, D, T1, gc, bt, rows, wr, wc, lane);
    __syncthreads();
    // A is dead.
    if (next < items) issue_a(next);
    cp_async_commit();
    warp_mma<T, 1, NT, false, true>(dk, T1, LC, m0, Ks, LD, n0, kC, lane);  // dk += S K
    finish_item<T, NT, WC>(dk, tK, r_kf, p, w, cur, gm, bt, gl, rows, wc, m0, n0, tid, lane);
    __syncthreads();  // the next item overwrites every tile and row sum
    if constexpr (!kTwoK) {
      if (next < items) issue_k(next, Kb);
      cp_async_commit();
    }
  }
}

}  // namespace grads_detail

}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

// Persistent blocks, as many as fit at once, each looping over chunk x head items.
template <class T, int D, int Tile>
void BwdGrads<T, D, Tile>::launch(const Args& a, cudaStream_t s) {
  const bwd::Problem& p = a.p;
  if (p.NCt == 0) return;
  constexpr size_t smem = bwd::fast_grads_smem<D>();
  auto* kernel = bwd::grads_detail::fast_grads<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0, dev = 0;
  AK_CUDA_CHECK(cudaGetDevice(&dev));
  AK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128 * bwd::grads_wc<D>(), smem));
  const int64_t items = static_cast<int64_t>(p.NCt) * p.H;
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * ak::cuda::props(dev).multiProcessorCount;
  kernel<<<static_cast<unsigned>(std::min(items, resident)), 128 * bwd::grads_wc<D>(), smem, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: grads");
}

}  // namespace ak::linear::cuda
