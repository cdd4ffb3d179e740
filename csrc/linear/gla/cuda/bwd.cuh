// The chunked backward of the gated linear family, three kernels after the states are recomputed
// (fwd.cuh, or for a scalar decay at K = V = 128 on Hopper the forward's split state kernel storing the
// states alone) or given (the op classes' chunk states):
//   dstates  a block per (sequence, value head, V tile) walks the chunks backwards with dS (the
//            gradient of the state after the chunk) in registers: dS <- diag(exp(gL)) dS + Qg^T dO,
//            storing each chunk's dS and finally d_initial_state;
//   grads    a block per (chunk, value head): with S (before) and dS (after) of its chunk,
//            dq = scale exp(gc) (dO S^T) + intra,  dk = exp(gL - gc) (V dS^T) + intra,
//            dv = P^T dO + Kd dS,  dP = dO V^T, and dG = q dq - k dk, the gradient of the decay
//            cumulated over the sequence (per key channel, or summed over it for a scalar decay);
//   dgates   dgk_t (or dg_t) = sum over u >= t of dG_u in the sequence, plus sum_v S_T dS_T.
// The intra terms: dq_i += scale sum_{j<=i} dP_ij k_j exp(gc_i - gc_j), dk_j += scale sum_{i>=j}
// dP_ij q_i exp(gc_i - gc_j): on tensor cores for a scalar decay, pair by pair in fp32 per channel.
#pragma once

#include "linear/gla/cuda/fwd.cuh"

namespace ak::linear::cuda::gla {

// ---- dstates ----

template <class T, int KD, bool kChannel>
__global__ void __launch_bounds__(kThreads, (FwdLayout<KD, kChannel>::kMinBlocks)) gla_dstates_kernel(const BwdParams<T> p) {
  using Lay = FwdLayout<KD, kChannel>;
  using ST = StateTiles<KD>;
  extern __shared__ __align__(128) unsigned char smem[];
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);
  const int tiles = (p.V + kVTile - 1) / kVTile;
  const int n = blockIdx.x / tiles, v0 = (blockIdx.x - n * tiles) * kVTile, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;
  const int sr0 = ST::row0(warp), sc0 = ST::col0(warp);
  float S[ST::MT][ST::NT][4];
  zero_acc(S);
  const StateTile<KD> st{S, sr0, sc0, lane, p.K, p.V, v0};
  if (p.d_final_state) st.load(p.d_final_state + (static_cast<int64_t>(n) * p.H + h) * KV);
  // The walk is backwards: chunk c, then c - 1.
  const ChunkRing<T, KD, kChannel> ring{smem, p.q, p.dout, p.d, gc, row, begin, end, hk, h, v0, p.K, p.V, tid};
  float token = 0.f, next = 0.f;
  ring.start(chunks - 1, next);
  for (int c = chunks - 1; c >= 0; --c) {
    st.store16(p.dstates.at(first, n, c, h));
    ring.step(c, c - 1, token, next);
    T* Qs = ring.rows(c);
    T* Os = ring.tile(c);
    gate_cumsum_of<KD, kChannel>(gc, gs, token, tid);
    for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
      const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
      uint32_t* qp = reinterpret_cast<uint32_t*>(Qs + r * pitch16(KD) + cc);
      const float2 qq = unpack2<T>(*qp);
      *qp = pack2<T>(p.scale * qq.x * __expf(gc_at<KD, kChannel>(gc, r, cc)),
                     p.scale * qq.y * __expf(gc_at<KD, kChannel>(gc, r, cc + 1)));
    }
    __syncthreads();
    for_acc_pairs(S, sr0, sc0, lane, [&](int r, int, float* v) {
      const float a = __expf(gc_at<KD, kChannel>(gc, kChunk - 1, r));
      v[0] *= a;
      v[1] *= a;
    });
    warp_mma<T, ST::MT, ST::NT, true, true>(S, Qs, pitch16(KD), sr0, Os, pitch16(kVTile), sc0, kChunk, lane);
    __syncthreads();
  }
  if (p.d_initial_state) st.store(p.d_initial_state + (static_cast<int64_t>(n) * p.H + h) * KV);
}

// ---- grads ----

template <class T, int KD, bool kChannel>
__global__ void __launch_bounds__(kThreads, (GradLayout<KD, kChannel>::kMinBlocks))
    gla_grads_kernel(const BwdParams<T> p) {
  using Lay = GradLayout<KD, kChannel>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + Lay::kQ);
  T* Ks = reinterpret_cast<T*>(smem + Lay::kK);
  T* Kd = reinterpret_cast<T*>(smem + Lay::kKd);  // per channel only
  T* Ps = reinterpret_cast<T*>(smem + Lay::kP);
  T* Vs = reinterpret_cast<T*>(smem + Lay::kV);
  T* Os = reinterpret_cast<T*>(smem + Lay::kO);
  T* Ss = reinterpret_cast<T*>(smem + Lay::kS);
  T* Ds = reinterpret_cast<T*>(smem + Lay::kD);
  float* dPs = reinterpret_cast<float*>(smem + Lay::kDP);  // per channel only
  float* gc = reinterpret_cast<float*>(smem + Lay::kGc);
  float* gs = reinterpret_cast<float*>(smem + Lay::kGs);
  float* rowsum = reinterpret_cast<float*>(smem + Lay::kRow);

  const int gidx = blockIdx.x, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int4 ci = p.map.chunk_of(gidx);
  const int row = ci.x, t0 = ci.y, len = ci.z, n = ci.w;
  if (len == 0) return;  // an empty chunk past a packed call's live ones
  int srow, sbegin, send, first;
  p.map.sequence(n, srow, sbegin, send, first);
  const int c = (t0 - sbegin) / kChunk;
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;
  const T* S_c = p.states.at(first, n, c, h);
  const T* dS_c = p.dstates.at(first, n, c, h);
  // Normalised: each row's dD (read after the barriers below; rowsum is free until the outputs).
  const bool normalised = !kChannel && p.norm_dd != nullptr;
  if (normalised && tid < kChunk) {
    rowsum[tid] = tid < len ? p.norm_dd[(static_cast<int64_t>(row) * p.map.T + t0 + tid) * p.H + h] : 0.f;
  }

  // The V tile's operands: v, dO and the S and dS tiles (rows K, columns v0 .. v0 + 63 of [K][V] 16-bit
  // slots; zero past K and V).
  auto load_vtiles = [&](int v0) {
    load_vtile<T>(Vs, p.v, row, t0, len, h, v0, p.V, tid);
    load_vtile<T>(Os, p.dout, row, t0, len, h, v0, p.V, tid);
    for (int e = tid; e < KD * (kVTile / 8); e += kThreads) {
      const int r = e / (kVTile / 8), cc = (e - r * (kVTile / 8)) * 8;
      T* s_dst = Ss + r * pitch16(kVTile) + cc;
      T* d_dst = Ds + r * pitch16(kVTile) + cc;
      if (r < p.K && v0 + cc < p.V) {
        const int64_t off = static_cast<int64_t>(r) * p.V + v0 + cc;
        cp_async16(s_dst, S_c + off);
        cp_async16(d_dst, dS_c + off);
      } else {
        *reinterpret_cast<uint4*>(s_dst) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(d_dst) = make_uint4(0, 0, 0, 0);
      }
    }
    cp_async_commit();
  };
  load_rows<T, KD>(Qs, p.q, row, t0, len, hk, p.K, tid);
  load_rows<T, KD>(Ks, p.k, row, t0, len, hk, p.K, tid);
  if constexpr (kChannel) load_gk<KD>(gc, p.d, row, t0, len, h, p.K, tid);
  cp_async_commit();
  if constexpr (!kChannel) {
    load_vtiles(0);  // in flight during the scores (a per-channel decay's scores use S, dS as scratch)
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  gate_cumsum<KD, kChannel>(gc, gs, p.d, row, t0, len, h, tid);
  intra_scores<T, KD, kChannel>(Ps, Qs, Ks, gc, Ss, p.scale, tid);  // Ss, Ds: the scores' scratch
  if constexpr (kChannel) {
    for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
      const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2;
      const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
      *reinterpret_cast<uint32_t*>(Kd + r * pitch16(KD) + cc) =
          pack2<T>(kk.x * __expf(gc[(kChunk - 1) * pitch_gc(KD) + cc] - gc[r * pitch_gc(KD) + cc]),
                   kk.y * __expf(gc[(kChunk - 1) * pitch_gc(KD) + cc + 1] - gc[r * pitch_gc(KD) + cc + 1]));
    }
    __syncthreads();
  }

  // Warp tiles: 64 x KD products rows 16 (w % 4), columns (w / 4) KD / 2; 64 x 64 ones columns 32 (w / 4).
  const int m0 = 16 * (warp & 3), nk0 = (warp >> 2) * (KD / 2), n64 = 32 * (warp >> 2);
  float aq[1][KD / 16][4], ak[1][KD / 16][4], dp[1][4][4];
  zero_acc(aq);
  zero_acc(ak);
  zero_acc(dp);
  for (int v0 = 0; v0 < p.V; v0 += kVTile) {
    if (kChannel || v0 > 0) load_vtiles(v0);
    cp_async_wait<0>();
    __syncthreads();
    warp_mma<T, 1, KD / 16, false, false>(aq, Os, pitch16(kVTile), m0, Ss, pitch16(kVTile), nk0, kVTile, lane);
    warp_mma<T, 1, KD / 16, false, false>(ak, Vs, pitch16(kVTile), m0, Ds, pitch16(kVTile), nk0, kVTile, lane);
    warp_mma<T, 1, 4, false, false>(dp, Os, pitch16(kVTile), m0, Vs, pitch16(kVTile), n64, kVTile, lane);
    {  // dv = P^T dO + Kd dS (a scalar decay: the rows of K dS times exp(gL - gc))
      float dv[1][4][4];
      zero_acc(dv);
      if constexpr (kChannel) {
        warp_mma<T, 1, 4, false, true>(dv, Kd, pitch16(KD), m0, Ds, pitch16(kVTile), n64, KD, lane);
      } else {
        warp_mma<T, 1, 4, false, true>(dv, Ks, pitch16(KD), m0, Ds, pitch16(kVTile), n64, KD, lane);
        for_acc_pairs(dv, m0, n64, lane, [&](int r, int, float* x) {
          const float f = __expf(gc[kChunk - 1] - gc[r]);
          x[0] *= f;
          x[1] *= f;
        });
      }
      warp_mma<T, 1, 4, true, true>(dv, Ps, pitch16(64), m0, Os, pitch16(kVTile), n64, kChunk, lane);
      for_acc_pairs(dv, m0, n64, lane, [&](int r, int cc, float* x) {
        if (r < len && v0 + cc < p.V) {
          *reinterpret_cast<uint32_t*>(p.dv.row(row, t0 + r, h) + v0 + cc) = pack2<T>(x[0], x[1]);
        }
      });
    }
    __syncthreads();
  }
  // State parts: dq = scale exp(gc) (dO S^T), dk = exp(gL - gc) (V dS^T).
  for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
    x[0] *= p.scale * __expf(gc_at<KD, kChannel>(gc, r, cc));
    x[1] *= p.scale * __expf(gc_at<KD, kChannel>(gc, r, cc + 1));
  });
  for_acc_pairs(ak, m0, nk0, lane, [&](int r, int cc, float* x) {
    x[0] *= __expf(gc_at<KD, kChannel>(gc, kChunk - 1, cc) - gc_at<KD, kChannel>(gc, r, cc));
    x[1] *= __expf(gc_at<KD, kChannel>(gc, kChunk - 1, cc + 1) - gc_at<KD, kChannel>(gc, r, cc + 1));
  });
  if constexpr (!kChannel) {
    if (normalised) {
      // The values' ones column (no decay): dq += scale dD z (the keys before the chunk), dk += the
      // later tokens' scale dD q; in fp32, where they cancel against the value columns' share.
      const float* z = p.norm_z + (static_cast<int64_t>(gidx) * (p.H / p.group) + hk) * p.K;
      const float* qs = p.norm_q + (static_cast<int64_t>(gidx) * p.H + h) * p.K;
      for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
        if (cc >= p.K) return;
        const float d = p.scale * rowsum[r];
        const float2 zz = __ldg(reinterpret_cast<const float2*>(z + cc));
        x[0] += d * zz.x;
        x[1] += d * zz.y;
      });
      for_acc_pairs(ak, m0, nk0, lane, [&](int, int cc, float* x) {
        if (cc >= p.K) return;
        const float2 s = __ldg(reinterpret_cast<const float2*>(qs + cc));
        x[0] += s.x;
        x[1] += s.y;
      });
    }
    // dPd = scale dP exp(gc_i - gc_j), causal, from registers to Ps (16-bit; P is done with);
    // dq += dPd K, dk += dPd^T Q. Normalised, dP_ij also has the ones column's dD_i.
    for_acc_pairs(dp, m0, n64, lane, [&](int r, int cc, float* x) {
      const float d = normalised ? rowsum[r] : 0.f;
      const float a = cc <= r ? p.scale * (x[0] + d) * __expf(gc[r] - gc[cc]) : 0.f;
      const float b = cc + 1 <= r ? p.scale * (x[1] + d) * __expf(gc[r] - gc[cc + 1]) : 0.f;
      *reinterpret_cast<uint32_t*>(Ps + r * pitch16(64) + cc) = pack2<T>(a, b);
    });
    __syncthreads();
    warp_mma<T, 1, KD / 16, false, true>(aq, Ps, pitch16(64), m0, Ks, pitch16(KD), nk0, kChunk, lane);
    warp_mma<T, 1, KD / 16, true, true>(ak, Ps, pitch16(64), m0, Qs, pitch16(KD), nk0, kChunk, lane);
  } else {
    // dP, causal, to shared memory (fp32).
    for_acc_pairs(dp, m0, n64, lane, [&](int r, int cc, float* x) {
      dPs[r * 65 + cc] = cc <= r ? x[0] : 0.f;
      dPs[r * 65 + cc + 1] = cc + 1 <= r ? x[1] : 0.f;
    });
    __syncthreads();
    float* DQ = reinterpret_cast<float*>(smem + Lay::kDQ);
    float* DK = reinterpret_cast<float*>(smem + Lay::kDK);
    // Diagonal 16 x 16 blocks pair by pair: thread (row, channel pair) sums over its block.
    for (int e = tid; e < kChunk * (KD / 2); e += kThreads) {
      const int r = e / (KD / 2), cc = (e - r * (KD / 2)) * 2, b0 = r & ~15;
      const float gr0 = gc[r * pitch_gc(KD) + cc], gr1 = gc[r * pitch_gc(KD) + cc + 1];
      float q0 = 0.f, q1 = 0.f, k0 = 0.f, k1 = 0.f;
      for (int j = b0; j <= r; ++j) {  // dq_r += dP_rj k_j exp(gc_r - gc_j)
        const float w = dPs[r * 65 + j];
        const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + j * pitch16(KD) + cc));
        q0 += w * kk.x * __expf(gr0 - gc[j * pitch_gc(KD) + cc]);
        q1 += w * kk.y * __expf(gr1 - gc[j * pitch_gc(KD) + cc + 1]);
      }
      for (int i = r; i < b0 + 16; ++i) {  // dk_r += dP_ir q_i exp(gc_i - gc_r)
        const float w = dPs[i * 65 + r];
        const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Qs + i * pitch16(KD) + cc));
        k0 += w * qq.x * __expf(gc[i * pitch_gc(KD) + cc] - gr0);
        k1 += w * qq.y * __expf(gc[i * pitch_gc(KD) + cc + 1] - gr1);
      }
      DQ[r * (KD + 4) + cc] = p.scale * q0;
      DQ[r * (KD + 4) + cc + 1] = p.scale * q1;
      DK[r * (KD + 4) + cc] = p.scale * k0;
      DK[r * (KD + 4) + cc + 1] = p.scale * k1;
    }
    // Off the diagonal on tensor cores, the decay taken relative to a block boundary r0 so that both
    // factors have exponents <= 0: X holds the decayed k (dq) or q (dk) rows, A the dP block (16-bit).
    T* X = Kd;  // dead after the V tiles
    T* A = Ps;  // 16 x 64 (pitch 72)
    const bool mma_warp = warp < KD / 16;
    const int c0 = 16 * warp;
    for (int step = 0; step < 6; ++step) {
      const bool for_dq = step < 3;
      const int I = step + 1;              // dq: block row I, r0 = 16 I, keys j < r0
      const int J = step - 3;              // dk: block column J, r0 = 16 (J + 1), queries i >= r0
      const int r0 = for_dq ? 16 * I : 16 * (J + 1);
      const int rows = for_dq ? r0 : kChunk - r0;  // X rows, the product's inner dimension
      const float* g0 = gc + r0 * pitch_gc(KD);
      __syncthreads();  // the previous step's X, A (and the diagonal pass) are done with
      for (int e = tid; e < rows * (KD / 2); e += kThreads) {
        const int x = e / (KD / 2), cc = (e - x * (KD / 2)) * 2;
        const int t = for_dq ? x : r0 + x;
        const T* src = (for_dq ? Ks : Qs) + t * pitch16(KD) + cc;
        const float2 v = unpack2<T>(*reinterpret_cast<const uint32_t*>(src));
        const float* gt = gc + t * pitch_gc(KD);
        const float e0 = for_dq ? g0[cc] - gt[cc] : gt[cc] - g0[cc];
        const float e1 = for_dq ? g0[cc + 1] - gt[cc + 1] : gt[cc + 1] - g0[cc + 1];
        *reinterpret_cast<uint32_t*>(X + x * pitch16(KD) + cc) = pack2<T>(v.x * __expf(e0), v.y * __expf(e1));
      }
      for (int e = tid; e < 16 * rows; e += kThreads) {
        const int a = e / rows, x = e - a * rows;
        // dq: A[a][x] = dP[r0 + a][x];  dk: A[a][x] = dP[r0 + x][16 J + a]
        const float w = for_dq ? dPs[(r0 + a) * 65 + x] : dPs[(r0 + x) * 65 + 16 * J + a];
        A[a * pitch16(64) + x] = from_float<T>(w);
      }
      __syncthreads();
      if (mma_warp) {
        float acc[1][2][4];
        zero_acc(acc);
        warp_mma<T, 1, 2, false, true>(acc, A, pitch16(64), 0, X, pitch16(KD), c0, rows, lane);
        for_acc_pairs(acc, 0, c0, lane, [&](int a, int cc, float* v) {
          if (for_dq) {
            const int i = r0 + a;
            const float* gi = gc + i * pitch_gc(KD);
            DQ[i * (KD + 4) + cc] += p.scale * v[0] * __expf(gi[cc] - g0[cc]);
            DQ[i * (KD + 4) + cc + 1] += p.scale * v[1] * __expf(gi[cc + 1] - g0[cc + 1]);
          } else {
            const int jj = 16 * J + a;
            const float* gj = gc + jj * pitch_gc(KD);
            DK[jj * (KD + 4) + cc] += p.scale * v[0] * __expf(g0[cc] - gj[cc]);
            DK[jj * (KD + 4) + cc + 1] += p.scale * v[1] * __expf(g0[cc + 1] - gj[cc + 1]);
          }
        });
      }
    }
    __syncthreads();
    for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
      x[0] += DQ[r * (KD + 4) + cc];
      x[1] += DQ[r * (KD + 4) + cc + 1];
    });
    for_acc_pairs(ak, m0, nk0, lane, [&](int r, int cc, float* x) {
      x[0] += DK[r * (KD + 4) + cc];
      x[1] += DK[r * (KD + 4) + cc + 1];
    });
  }
  // Outputs: dq, dk (directly, or accumulated over the group), dG = q dq - k dk.
  if (tid < kChunk) rowsum[tid] = 0.f;
  __syncthreads();
  auto out = [&](float(&acc)[1][KD / 16][4], Rows<T> dst, float* ws) {
    for_acc_pairs(acc, m0, nk0, lane, [&](int r, int cc, float* x) {
      if (r >= len || cc >= p.K) return;
      if (ws) {
        float* w = ws + ((static_cast<int64_t>(row) * p.map.T + t0 + r) * (p.H / p.group) + hk) * p.K + cc;
        atomicAdd(w, x[0]);
        atomicAdd(w + 1, x[1]);
      } else {
        *reinterpret_cast<uint32_t*>(dst.row(row, t0 + r, hk) + cc) = pack2<T>(x[0], x[1]);
      }
    });
  };
  out(aq, p.dq, p.ws_dq);
  out(ak, p.dk, p.ws_dk);
  // dG: q and k are 16-bit in shared memory, dq and dk fp32 in registers (same tiles).
  for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
    const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Qs + r * pitch16(KD) + cc));
    x[0] *= qq.x;
    x[1] *= qq.y;
  });
  for_acc_pairs(ak, m0, nk0, lane, [&](int r, int cc, float* x) {
    const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(Ks + r * pitch16(KD) + cc));
    x[0] *= kk.x;
    x[1] *= kk.y;
  });
#pragma unroll
  for (int nt = 0; nt < KD / 16; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) aq[0][nt][e] -= ak[0][nt][e];
  }
  if (p.dG.p == nullptr) return;  // no decay: nothing to differentiate
  if constexpr (kChannel) {
    for_acc_pairs(aq, m0, nk0, lane, [&](int r, int cc, float* x) {
      if (r >= len || cc >= p.K) return;
      float* g = p.dG.row(row, t0 + r, h) + cc;
      g[0] = x[0];
      g[1] = x[1];
    });
  } else {
    // Row sums: a thread's two rows over its tiles, then over the row's four lanes, then one shared add
    // from each of the row's two warps (two adds onto zero: the same sum in either order). Columns past
    // K hold zeros (q and k are zero-filled there).
    float lo = 0.f, hi = 0.f;
#pragma unroll
    for (int nt = 0; nt < KD / 16; ++nt) {
      lo += aq[0][nt][0] + aq[0][nt][1];
      hi += aq[0][nt][2] + aq[0][nt][3];
    }
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
      lo += __shfl_xor_sync(0xffffffffu, lo, m);
      hi += __shfl_xor_sync(0xffffffffu, hi, m);
    }
    if ((lane & 3) == 0) {
      atomicAdd(&rowsum[m0 + (lane >> 2)], lo);
      atomicAdd(&rowsum[m0 + (lane >> 2) + 8], hi);
    }
    __syncthreads();
    if (tid < len) *p.dG.row(row, t0 + tid, h) = rowsum[tid];
  }
}

template <class T, int KD, bool kChannel>
void launch_dstates_kd(const BwdParams<T>& bp, cudaStream_t stream) {
  if (bp.N == 0 || bp.H == 0) return;
  const int tiles = (bp.V + kVTile - 1) / kVTile;
  constexpr int kSmem = FwdLayout<KD, kChannel>::kBytes;
  auto kernel = gla_dstates_kernel<T, KD, kChannel>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<dim3(static_cast<unsigned>(bp.N * tiles), static_cast<unsigned>(bp.H)), kThreads, kSmem, stream>>>(bp);
  ak::cuda::check_launch("gla_dstates_kernel");
}

template <class T, int KD, bool kChannel>
void launch_grads_kd(const BwdParams<T>& bp, cudaStream_t stream) {
  if (bp.chunks == 0 || bp.H == 0) return;
  constexpr int kSmem = GradLayout<KD, kChannel>::kBytes;
  auto kernel = gla_grads_kernel<T, KD, kChannel>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<dim3(static_cast<unsigned>(bp.chunks), static_cast<unsigned>(bp.H)), kThreads, kSmem, stream>>>(bp);
  ak::cuda::check_launch("gla_grads_kernel");
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaDStatesChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_dstates_kd<T, D, true>(a, stream);
}
template <class T, int D, int Tile>
void GlaDStatesScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_dstates_kd<T, D, false>(a, stream);
}
template <class T, int D, int Tile>
void GlaGradsChannel<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_grads_kd<T, D, true>(a, stream);
}
template <class T, int D, int Tile>
void GlaGradsScalar<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  gla::launch_grads_kd<T, D, false>(a, stream);
}

}  // namespace ak::linear::cuda

