// KDA's backward, the gradients of a chunk: one block per (chunk, value head), after the recompute
// (prep.cuh with A stored, the state pass with the states and Vn stored) and the reverse pass
// (dstates.cuh: dS after each chunk, dVn). With S the state before the chunk and dS the gradient after
// it, over the V dimension in tiles of 64:
//   dqd = dO S^T,  dw = -dVn S^T,  dkd = Vn dS^T,  dP = dO Vn^T (j <= i),
//   dA = dVn (beta V)^T,  dv = beta (A^T dVn),  dbeta += rowsum(V A^T dVn),  del = rowsum(S dS)
// then, in fp32:
//   dA += dw X^T,  dX = A^T dw  (X = diag(beta) K exp(gc)),  dL = -A^T dA A^T (strictly lower)
//   the score matrices' terms pair by pair (P = scale q k^T and Akk = k k^T, both with the decay;
//   dAkk = diag(beta) dL, the Akk term of dbeta is sum_c k r with r = dL k exp(..)), the elementwise
//   terms of qd, kd, X and el, and dg as the reverse cumsum within the chunk of
//   dgc = q dq + k (dk_X - dk_kd - dk_P + dk_row - dk_col), exp(gL)'s and kd's terms on the last row.
// The algorithm is checked in float64 by tools/kda_chunk_emulate.py.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/stages.cuh"
#include "linear/kda/cuda/params.h"
#include "linear/kda/layouts.h"

namespace ak::linear::cuda::kda {

using namespace ::ak::linear::kda_layout;

// Rows [0, KD) x columns [v0, v0 + 64) of a 16-bit [K][V] state slot into a shared tile (zero past K, V).
template <class T, int KD>
__device__ __forceinline__ void load_state_tile(T* dst, const T* src, int K, int V, int v0, int tid) {
  for (int e = tid; e < KD * (kVTile / 8); e += kThreads) {
    const int r = e / (kVTile / 8), cc = (e - r * (kVTile / 8)) * 8;
    T* d = dst + r * pitch16(kVTile) + cc;
    if (r < K && v0 + cc < V) {
      cp_async16(d, src + static_cast<int64_t>(r) * V + v0 + cc);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
}

// Columns [v0, v0 + 64) of a per-chunk [64][Vp] operand (always in range: Vp is padded).
template <class T>
__device__ __forceinline__ void load_operand_tile(T* dst, const T* src, int Vp, int v0, int tid) {
  for (int e = tid; e < kChunk * 8; e += kThreads) {
    const int r = e >> 3, cc = (e & 7) * 8;
    cp_async16(dst + r * pitch16(kVTile) + cc, src + static_cast<int64_t>(r) * Vp + v0 + cc);
  }
}

// (x, y) as two 16-bit pairs hi + lo at hi[off], lo[off]: about twice the significant bits of one.
template <class T>
__device__ __forceinline__ void split2(float x, float y, T* hi, T* lo, int off) {
  const uint32_t h = pack2<T>(x, y);
  const float2 hf = unpack2<T>(h);
  *reinterpret_cast<uint32_t*>(hi + off) = h;
  *reinterpret_cast<uint32_t*>(lo + off) = pack2<T>(x - hf.x, y - hf.y);
}

template <class T, int KD>
__global__ void __launch_bounds__(kThreads, 1) kda_grads_kernel(const BwdParams<T> bp) {
  using Lay = GradsLayout<KD>;
  constexpr int kF = Lay::kF;
  constexpr int NTK = KD / 16;  // n tiles of a warp's KD / 2 columns
  const gla::FwdParams<T>& p = bp.f.f;
  const ChunkOperands<T>& ops = bp.f.ops;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + Lay::kQ);
  T* Ks = reinterpret_cast<T*>(smem + Lay::kK);
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);
  float* bs = reinterpret_cast<float*>(smem + Lay::kBeta);
  float* dbs = reinterpret_cast<float*>(smem + Lay::kDBeta);
  float* del = reinterpret_cast<float*>(smem + Lay::kDel);
  float* dgl = reinterpret_cast<float*>(smem + Lay::kDgl);
  float* A = reinterpret_cast<float*>(smem + Lay::kA);
  float* dP = reinterpret_cast<float*>(smem + Lay::kDP);
  float* dL = reinterpret_cast<float*>(smem + Lay::kDL);
  T* Ss = reinterpret_cast<T*>(smem + Lay::kS);
  T* DSs = reinterpret_cast<T*>(smem + Lay::kDS);
  T* Os = reinterpret_cast<T*>(smem + Lay::kO);
  T* Vns = reinterpret_cast<T*>(smem + Lay::kVn);
  T* DVn = reinterpret_cast<T*>(smem + Lay::kDVn);
  T* Vs = reinterpret_cast<T*>(smem + Lay::kVb);
  T* Ahi = reinterpret_cast<T*>(smem + Lay::kA);  // A's 16-bit halves (A = Ahi + Alo) in place of A
  T* Alo = Ahi + kChunk * pitch16(64);
  T* Hhi = reinterpret_cast<T*>(smem + Lay::kSplit);  // dA's, then T1's halves
  T* Hlo = Hhi + kChunk * pitch16(64);
  float* Dqd = reinterpret_cast<float*>(smem + Lay::kDqd);
  float* Dkd = reinterpret_cast<float*>(smem + Lay::kDkd);
  float* DX = reinterpret_cast<float*>(smem + Lay::kDX);
  T* DW16 = reinterpret_cast<T*>(smem + Lay::kDX);
  T* X16 = reinterpret_cast<T*>(smem + Lay::kX16);

  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int4 ci = p.map.chunk_of(g);
  const int row = ci.x, t0 = ci.y, len = ci.z, n = ci.w;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  int srow, sbegin, send, first;
  p.map.sequence(n, srow, sbegin, send, first);
  const int c = (t0 - sbegin) / kChunk;
  const int64_t slot = ops.slot(g, h);
  const float scale = p.scale;
  const int m0 = 16 * (warp & 3), nk0 = (warp >> 2) * (KD / 2), n64 = 32 * (warp >> 2);

  // ---- the chunk's rows, its decay and A ----
  gla::load_rows<T, KD>(Qs, p.q, row, t0, len, hk, p.K, tid);
  gla::load_rows<T, KD>(Ks, p.k, row, t0, len, hk, p.K, tid);
  gla::load_gk<KD>(gc, p.d, row, t0, len, h, p.K, tid);
  for (int e = tid; e < kChunk * 16; e += kThreads) {
    const int r = e >> 4, cc = (e & 15) * 4;
    cp_async16(A + r * kLd + cc, ops.a32 + slot * Operands<KD>::kScores + r * kChunk + cc);
  }
  cp_async_commit();
  if (tid < kChunk) {
    bs[tid] = tid < len ? bp.f.beta.at(row, t0 + tid, h) : 0.f;
    dbs[tid] = 0.f;
  }
  if (tid < KD) del[tid] = 0.f, dgl[tid] = 0.f;
  cp_async_wait<0>();
  gla::gate_cumsum<KD, true>(gc, gs, p.d, row, t0, len, h, tid);  // barrier inside
  {  // A to its halves, through registers: the halves overwrite the fp32 rows
    constexpr int kEach = kChunk * kChunk / 2 / kThreads;
    float2 a[kEach];
#pragma unroll
    for (int m = 0; m < kEach; ++m) {
      const int e = tid + m * kThreads, i = e >> 5, j = (e & 31) * 2;
      a[m] = *reinterpret_cast<const float2*>(A + i * kLd + j);
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kEach; ++m) {
      const int e = tid + m * kThreads, i = e >> 5, j = (e & 31) * 2;
      split2<T>(a[m].x, a[m].y, Ahi, Alo, i * pitch16(64) + j);
    }
  }

  // ---- over the V tiles ----
  float aq[1][NTK][4], aw[1][NTK][4], ak[1][NTK][4], dp[1][4][4], da[1][4][4];
  zero_acc(aq);
  zero_acc(aw);
  zero_acc(ak);
  zero_acc(dp);
  zero_acc(da);
  const T* S_c = bp.states.at(first, n, c, h);
  const T* dS_c = bp.dstates.at(first, n, c, h);
  for (int v0 = 0; v0 < ops.Vp; v0 += kVTile) {
    __syncthreads();  // the previous tile's operands (and A's halves) are done
    load_state_tile<T, KD>(Ss, S_c, p.K, p.V, v0, tid);
    load_state_tile<T, KD>(DSs, dS_c, p.K, p.V, v0, tid);
    load_operand_tile<T>(Vns, ops.vn + slot * (int64_t{kChunk} * ops.Vp), ops.Vp, v0, tid);
    load_operand_tile<T>(DVn, ops.dvn + slot * (int64_t{kChunk} * ops.Vp), ops.Vp, v0, tid);
    gla::load_vtile<T>(Os, bp.dout, row, t0, len, h, v0, p.V, tid);
    gla::load_vtile<T>(Vs, p.v, row, t0, len, h, v0, p.V, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    warp_mma<T, 1, NTK, false, false>(aq, Os, pitch16(kVTile), m0, Ss, pitch16(kVTile), nk0, kVTile, lane);
    warp_mma<T, 1, NTK, false, false>(aw, DVn, pitch16(kVTile), m0, Ss, pitch16(kVTile), nk0, kVTile, lane);
    warp_mma<T, 1, NTK, false, false>(ak, Vns, pitch16(kVTile), m0, DSs, pitch16(kVTile), nk0, kVTile, lane);
    warp_mma<T, 1, 4, false, false>(dp, Os, pitch16(kVTile), m0, Vns, pitch16(kVTile), n64, kVTile, lane);
    warp_mma<T, 1, 4, false, false>(da, DVn, pitch16(kVTile), m0, Vs, pitch16(kVTile), n64, kVTile, lane);
    {  // A^T dVn: dv = beta (A^T dVn), dbeta += rowsum(V A^T dVn)
      float t[1][4][4];
      zero_acc(t);
      warp_mma<T, 1, 4, true, true>(t, Ahi, pitch16(64), m0, DVn, pitch16(kVTile), n64, kChunk, lane);
      warp_mma<T, 1, 4, true, true>(t, Alo, pitch16(64), m0, DVn, pitch16(kVTile), n64, kChunk, lane);
      float part[2] = {0.f, 0.f};  // the two rows a lane's pairs touch
      for_acc_pairs(t, m0, n64, lane, [&](int r, int cc, float* x) {
        const float2 vv = unpack2<T>(*reinterpret_cast<const uint32_t*>(Vs + r * pitch16(kVTile) + cc));
        const float s = vv.x * x[0] + vv.y * x[1];
        if (((r - m0) >> 3) == 0) part[0] += s;
        else part[1] += s;
        if (r < len && v0 + cc < p.V) {
          *reinterpret_cast<uint32_t*>(bp.dv.row(row, t0 + r, h) + v0 + cc) = pack2<T>(bs[r] * x[0], bs[r] * x[1]);
        }
      });
      // The quad's four lanes share the rows: one atomic per row and quad.
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        part[0] += __shfl_xor_sync(0xffffffffu, part[0], x);
        part[1] += __shfl_xor_sync(0xffffffffu, part[1], x);
      }
      if ((lane & 3) == 0) {
        atomicAdd(dbs + m0 + (lane >> 2), part[0]);
        atomicAdd(dbs + m0 + 8 + (lane >> 2), part[1]);
      }
    }
    if (tid < KD) {  // del += rowsum(S dS) over this tile
      float s = 0.f;
      for (int cc = 0; cc < kVTile; cc += 2) {
        const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ss + tid * pitch16(kVTile) + cc));
        const float2 b = unpack2<T>(*reinterpret_cast<const uint32_t*>(DSs + tid * pitch16(kVTile) + cc));
        s += a.x * b.x + a.y * b.y;
      }
      del[tid] += s;
    }
  }
  __syncthreads();  // region R changes tenants

  // ---- the products' results to shared memory; dw and X (16-bit) for dA and dX ----
  for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
    Dqd[r * kF + cc] = x[0];
    Dqd[r * kF + cc + 1] = x[1];
  });
  for_acc_pairs(ak, m0, nk0, lane, [&](int r, int cc, float* x) {
    Dkd[r * kF + cc] = x[0];
    Dkd[r * kF + cc + 1] = x[1];
  });
  for_acc_pairs(aw, m0, nk0, lane, [&](int r, int cc, float* x) {
    *reinterpret_cast<uint32_t*>(DW16 + r * pitch16(KD) + cc) = pack2<T>(-x[0], -x[1]);
  });
  for_acc_pairs(dp, m0, n64, lane, [&](int r, int cc, float* x) {
    dP[r * 65 + cc] = cc <= r ? x[0] : 0.f;
    dP[r * 65 + cc + 1] = cc + 1 <= r ? x[1] : 0.f;
  });
  for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
    const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
    const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
    const float* gr = gc + r * pitch_gc(KD) + cc;
    *reinterpret_cast<uint32_t*>(X16 + r * pitch16(KD) + cc) =
        pack2<T>(bs[r] * kk.x * __expf(gr[0]), bs[r] * kk.y * __expf(gr[1]));
  }
  __syncthreads();
  // dA = (dVn V^T) diag(beta) + dw X^T, to its halves once every warp has read X.
  {
    float dw_x[1][4][4];
    zero_acc(dw_x);
    warp_mma<T, 1, 4, false, false>(dw_x, DW16, pitch16(KD), m0, X16, pitch16(KD), n64, KD, lane);
    __syncthreads();
    for_acc_pairs(da, m0, n64, lane, [&](int r, int cc, float* x) {
      x[0] *= bs[cc];
      x[1] *= bs[cc + 1];
    });
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int x = 0; x < 4; ++x) da[0][nt][x] += dw_x[0][nt][x];
    }
    for_acc_pairs(da, m0, n64, lane,
                  [&](int r, int cc, float* x) { split2<T>(x[0], x[1], Hhi, Hlo, r * pitch16(64) + cc); });
  }
  // dX = A^T dw (held until dL is formed: dX's rows take dw's and the halves' space).
  float dx[1][NTK][4];
  zero_acc(dx);
  warp_mma<T, 1, NTK, true, true>(dx, Ahi, pitch16(64), m0, DW16, pitch16(KD), nk0, kChunk, lane);
  warp_mma<T, 1, NTK, true, true>(dx, Alo, pitch16(64), m0, DW16, pitch16(KD), nk0, kChunk, lane);
  __syncthreads();  // dA's halves are written
  // dL = -A^T dA A^T, strictly lower: T1 = dA A^T, then -A^T T1; each product from the halves, the lo lo
  // term dropped.
  {
    float t1[1][4][4];
    zero_acc(t1);
    warp_mma<T, 1, 4, false, false>(t1, Hhi, pitch16(64), m0, Ahi, pitch16(64), n64, kChunk, lane);
    warp_mma<T, 1, 4, false, false>(t1, Hhi, pitch16(64), m0, Alo, pitch16(64), n64, kChunk, lane);
    warp_mma<T, 1, 4, false, false>(t1, Hlo, pitch16(64), m0, Ahi, pitch16(64), n64, kChunk, lane);
    __syncthreads();
    for_acc_pairs(t1, m0, n64, lane,
                  [&](int r, int cc, float* x) { split2<T>(x[0], x[1], Hhi, Hlo, r * pitch16(64) + cc); });
    __syncthreads();
    float l[1][4][4];
    zero_acc(l);
    warp_mma<T, 1, 4, true, true>(l, Ahi, pitch16(64), m0, Hhi, pitch16(64), n64, kChunk, lane);
    warp_mma<T, 1, 4, true, true>(l, Ahi, pitch16(64), m0, Hlo, pitch16(64), n64, kChunk, lane);
    warp_mma<T, 1, 4, true, true>(l, Alo, pitch16(64), m0, Hhi, pitch16(64), n64, kChunk, lane);
    for_acc_pairs(l, m0, n64, lane, [&](int r, int cc, float* x) {
      dL[r * 65 + cc] = cc < r ? -x[0] : 0.f;
      dL[r * 65 + cc + 1] = cc + 1 < r ? -x[1] : 0.f;
    });
  }
  __syncthreads();  // the halves are read
  for_acc_pairs(dx, m0, nk0, lane, [&](int r, int cc, float* x) {
    DX[r * kF + cc] = x[0];
    DX[r * kF + cc + 1] = x[1];
  });
  __syncthreads();

  // ---- the score matrices' terms ----
  // Per (row, channel pair), in place: Dqd becomes dq, DX becomes U = exp(gc) dX + r, Dkd becomes the
  // terms that enter dk and dg with opposite signs (kd's, P's column side, Akk's column side); the
  // pairs inside the diagonal 16 x 16 blocks are added here, element by element.
  constexpr int kPairsPerRow = KD / 2;
  constexpr int pg = pitch_gc(KD);
  {
    const int cc = (tid % kPairsPerRow) * 2;  // a thread's channel pair is the same on every row
    const float gl0 = gc[(kChunk - 1) * pg + cc], gl1 = gc[(kChunk - 1) * pg + cc + 1];
    float dgl0 = 0.f, dgl1 = 0.f;
    for (int e = tid; e < kChunk * kPairsPerRow; e += kThreads) {
      const int r = e / kPairsPerRow, b0 = r & ~15;
      const float gr0 = gc[r * pg + cc], gr1 = gc[r * pg + cc + 1];
      float dq0 = 0.f, dq1 = 0.f, rr0 = 0.f, rr1 = 0.f;  // P's dq, and r = dL k exp(..) (row side)
      for (int j = b0; j <= r; ++j) {
        const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + j * pitch16(KD) + cc));
        const float e0 = __expf(gr0 - gc[j * pg + cc]) * kk.x, e1 = __expf(gr1 - gc[j * pg + cc + 1]) * kk.y;
        const float wp = dP[r * 65 + j], wl = j < r ? dL[r * 65 + j] : 0.f;
        dq0 += wp * e0, dq1 += wp * e1;
        rr0 += wl * e0, rr1 += wl * e1;
      }
      float dkp0 = 0.f, dkp1 = 0.f, dkc0 = 0.f, dkc1 = 0.f;  // P's dk, Akk's dk (column side)
      for (int i = r; i < b0 + 16; ++i) {
        const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Qs + i * pitch16(KD) + cc));
        const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + i * pitch16(KD) + cc));
        const float x0 = __expf(gc[i * pg + cc] - gr0), x1 = __expf(gc[i * pg + cc + 1] - gr1);
        const float wp = dP[i * 65 + r], wl = i > r ? bs[i] * dL[i * 65 + r] : 0.f;
        dkp0 += wp * qq.x * x0, dkp1 += wp * qq.y * x1;
        dkc0 += wl * kk.x * x0, dkc1 += wl * kk.y * x1;
      }
      const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
      const float eg0 = __expf(gr0), eg1 = __expf(gr1), ed0 = __expf(gl0 - gr0), ed1 = __expf(gl1 - gr1);
      float* q_ = Dqd + r * kF + cc;
      float* u_ = DX + r * kF + cc;
      float* m_ = Dkd + r * kF + cc;
      const float kd0 = ed0 * m_[0], kd1 = ed1 * m_[1];
      q_[0] = scale * (eg0 * q_[0] + dq0), q_[1] = scale * (eg1 * q_[1] + dq1);
      u_[0] = eg0 * u_[0] + rr0, u_[1] = eg1 * u_[1] + rr1;
      m_[0] = kd0 + scale * dkp0 + dkc0, m_[1] = kd1 + scale * dkp1 + dkc1;
      dgl0 += kk.x * kd0, dgl1 += kk.y * kd1;  // dkd kd: the state's k exp(gL - gc) term of gL's gradient
    }
    atomicAdd(dgl + cc, dgl0);
    atomicAdd(dgl + cc + 1, dgl1);
  }
  // dP and dL to 16 bits in the space of A (no longer read), for the tensor cores.
  T* dP16 = reinterpret_cast<T*>(smem + Lay::kA);
  T* dL16 = dP16 + kChunk * pitch16(64);
  {
    constexpr int kEach = kChunk * kChunk / 2 / kThreads;
    uint32_t p16[kEach], l16[kEach];
#pragma unroll
    for (int m = 0; m < kEach; ++m) {
      const int e = tid + m * kThreads, i = e >> 5, j = (e & 31) * 2;
      p16[m] = pack2<T>(dP[i * 65 + j], dP[i * 65 + j + 1]);
      l16[m] = pack2<T>(dL[i * 65 + j], dL[i * 65 + j + 1]);
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kEach; ++m) {
      const int e = tid + m * kThreads, i = e >> 5, j = (e & 31) * 2;
      *reinterpret_cast<uint32_t*>(dP16 + i * pitch16(64) + j) = p16[m];
      *reinterpret_cast<uint32_t*>(dL16 + i * pitch16(64) + j) = l16[m];
    }
  }
  // The pairs across blocks on the tensor cores, a row block I at a time. With gn = gc on the row
  // before block I, exp(gc_i - gc_j) = exp(gc_i - gn) exp(gn - gc_j) for i in I and j before it,
  // both factors at most 1: KB = k exp(gn - gc) over the earlier rows, QA = q exp(gc - gn) and
  // KA = beta k exp(gc - gn) over block I.
  T* KB = dL16 + kChunk * pitch16(64);
  T* QA = KB + 3 * 16 * pitch16(KD);
  T* KA = QA + 16 * pitch16(KD);
  constexpr int kSlab = KD / 4, kNT = kSlab / 8;  // a warp's columns
  const int slab = kSlab * (warp & 3), half = warp >> 2;
  for (int I = 1; I < kChunk / 16; ++I) {
    const int r0 = 16 * I;
    const float* gn = gc + (r0 - 1) * pg;
    __syncthreads();  // the previous block's operands are read (the first time: dP16, dL16 written)
    for (int e = tid; e < (r0 + 16) * kPairsPerRow; e += kThreads) {
      const int r = e / kPairsPerRow, cc = (e - r * kPairsPerRow) * 2;
      const float g0 = gc[r * pg + cc], g1 = gc[r * pg + cc + 1];
      const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
      if (r < r0) {
        *reinterpret_cast<uint32_t*>(KB + r * pitch16(KD) + cc) =
            pack2<T>(kk.x * __expf(gn[cc] - g0), kk.y * __expf(gn[cc + 1] - g1));
      } else {
        const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Qs + r * pitch16(KD) + cc));
        const float a0 = __expf(g0 - gn[cc]), a1 = __expf(g1 - gn[cc + 1]), b = bs[r];
        *reinterpret_cast<uint32_t*>(QA + (r - r0) * pitch16(KD) + cc) = pack2<T>(qq.x * a0, qq.y * a1);
        *reinterpret_cast<uint32_t*>(KA + (r - r0) * pitch16(KD) + cc) = pack2<T>(b * kk.x * a0, b * kk.y * a1);
      }
    }
    __syncthreads();
    {  // row side, block I's rows against every earlier row: dq (half 0) and r (half 1)
      float acc[1][kNT][4];
      zero_acc(acc);
      warp_mma<T, 1, kNT, false, true>(acc, half ? dL16 : dP16, pitch16(64), r0, KB, pitch16(KD), slab, r0, lane);
      float* dst = half ? DX : Dqd;
      const float mul = half ? 1.f : scale;
      for_acc_pairs(acc, r0, slab, lane, [&](int r, int c, float* x) {
        dst[r * kF + c] += mul * __expf(gc[r * pg + c] - gn[c]) * x[0];
        dst[r * kF + c + 1] += mul * __expf(gc[r * pg + c + 1] - gn[c + 1]) * x[1];
      });
    }
    for (int J = half; J < I; J += 2) {  // column side, block J's columns against block I's rows
      float ap[1][kNT][4], ac[1][kNT][4];
      zero_acc(ap);
      zero_acc(ac);
      warp_mma<T, 1, kNT, true, true>(ap, dP16 + r0 * pitch16(64), pitch16(64), 16 * J, QA, pitch16(KD), slab, 16,
                                      lane);
      warp_mma<T, 1, kNT, true, true>(ac, dL16 + r0 * pitch16(64), pitch16(64), 16 * J, KA, pitch16(KD), slab, 16,
                                      lane);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int x = 0; x < 4; ++x) ap[0][nt][x] = scale * ap[0][nt][x] + ac[0][nt][x];
      }
      for_acc_pairs(ap, 16 * J, slab, lane, [&](int r, int c, float* x) {
        Dkd[r * kF + c] += __expf(gn[c] - gc[r * pg + c]) * x[0];
        Dkd[r * kF + c + 1] += __expf(gn[c + 1] - gc[r * pg + c + 1]) * x[1];
      });
    }
  }
  __syncthreads();

  // ---- per (row, channel pair): dq, dk, dgc (in Dqd's place) and dbeta's k U term ----
  for (int e = tid; e < kChunk * kPairsPerRow; e += kThreads) {
    const int r = e / kPairsPerRow, cc = (e - r * kPairsPerRow) * 2;
    const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Qs + r * pitch16(KD) + cc));
    const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
    const float b = bs[r];
    float* q_ = Dqd + r * kF + cc;
    const float q0 = q_[0], q1 = q_[1];
    const float u0 = DX[r * kF + cc], u1 = DX[r * kF + cc + 1];
    const float n0 = Dkd[r * kF + cc], n1 = Dkd[r * kF + cc + 1];
    const float k0 = b * u0 + n0, k1 = b * u1 + n1;
    // A warp's 32 items share the row: one atomic per warp.
    float part = kk.x * u0 + kk.y * u1;
#pragma unroll
    for (int x = 16; x >= 1; x >>= 1) part += __shfl_xor_sync(0xffffffffu, part, x);
    if (lane == 0) atomicAdd(dbs + r, part);
    if (r < len && cc < p.K) {
      if (p.group == 1) {
        *reinterpret_cast<uint32_t*>(bp.dq.row(row, t0 + r, hk) + cc) = pack2<T>(q0, q1);
        *reinterpret_cast<uint32_t*>(bp.dk.row(row, t0 + r, hk) + cc) = pack2<T>(k0, k1);
      } else {
        const int HK = p.H / p.group;
        const int64_t at = ((static_cast<int64_t>(row) * p.map.T + t0 + r) * HK + hk) * p.K + cc;
        atomicAdd(bp.ws_dq + at, q0);
        atomicAdd(bp.ws_dq + at + 1, q1);
        atomicAdd(bp.ws_dk + at, k0);
        atomicAdd(bp.ws_dk + at + 1, k1);
      }
    }
    q_[0] = qq.x * q0 + kk.x * (b * u0 - n0);  // dgc, in place (this thread's item only)
    q_[1] = qq.y * q1 + kk.y * (b * u1 - n1);
  }
  __syncthreads();

  // ---- dg: the reverse cumsum of dgc in the chunk, gL's gradient on the last row; dbeta ----
  if (tid < KD) {
    float acc = dgl[tid] + del[tid] * __expf(gc[(kChunk - 1) * pitch_gc(KD) + tid]);
    for (int r = kChunk - 1; r >= 0; --r) {
      acc += Dqd[r * kF + tid];
      if (r < len && tid < p.K) bp.dgate.row(row, t0 + r, h)[tid] = acc;
    }
  }
  if (tid < len) bp.dbeta.row(row, t0 + tid, h)[0] = dbs[tid];
}

template <class T, int KD>
void launch_grads_kd(const BwdParams<T>& bp, cudaStream_t stream) {
  if (bp.f.chunks == 0 || bp.f.f.H == 0) return;
  constexpr int kSmem = GradsLayout<KD>::kBytes;
  auto kernel = kda_grads_kernel<T, KD>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(bp.f.chunks), static_cast<unsigned>(bp.f.f.H));
  kernel<<<grid, kThreads, kSmem, stream>>>(bp);
  ak::cuda::check_launch("kda_grads_kernel");
}

}  // namespace ak::linear::cuda::kda

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void KdaGradsChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  kda::launch_grads_kd<T, D>(a, stream);
}

}  // namespace ak::linear::cuda
