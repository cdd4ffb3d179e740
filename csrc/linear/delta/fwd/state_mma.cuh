// Stage 2 of the fast chunked forward: the chunk state recurrence fused with the output, one block
// per (sequence, value head, V tile of VT columns), walking that sequence's chunks in order with the
// state S (D x VT, fp32) in registers. Per chunk (C = 64 tokens, gc the gate cumsum, gL = gc[63]):
//   (a) P  = tril(scale rq_i Q K^T rk_j exp(gc_i - gc_j))     causal scores (state-independent)
//   (b) WS = W S,  QS = Q S                                     one 128-row product [W; Q] S
//   (c) U  = u - WS;   Ud = U * rk * exp(gL - gc);  QS *= scale rq exp(gc)
//   (d) O  = QS + P U
//   (e) S <- exp(gL) S + K^T Ud
// rq = 1/|q| and rk = 1/|k| with the in-kernel L2 norm (else 1): q and k are read raw and their norms
// scale rows and columns instead, so no pass rewrites them.
// Products run on tensor cores (mma.sync m16n8k16, 16-bit operands, fp32 accumulation); S feeds (b)
// as a 16-bit copy in shared memory. Two barriers a chunk. The next chunk's q, k, w, u tiles stream in
// with cp.async while this one computes (double buffered for D <= 128; for D = 256 only k is, and
// q, w, u load after (c) has consumed them).
//
// Warp roles (8 warps): (a) row block warp % 4, half of its causal tiles; (b) rows 32 (warp / 2) of
// [W; Q], columns (warp % 2) VT / 2; (c), (d) the same tiles (W rows: warps 0-3, Q rows: 4-7);
// (e) rows 32 (warp / CG) of S, columns (warp % CG) VT / CG with CG = 8 / (D / 32).
//
// FLOPs per chunk and V tile: (a) 2 C^2 D / 2, (b) 2 (2C) D VT, (d) 2 C^2 VT / 2, (e) 2 C D VT.
// Bytes per chunk: q, k, w (C D * 2 each, shared by the V tiles through L2), u and o (C VT * 2).
#pragma once

#include "cuda/runtime.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/delta/fwd/chunk_sources.cuh"
#include "linear/delta/fwd/prep.cuh"
#include "linear/delta/fwd/state_at.cuh"

namespace ak::linear::cuda::fwd {

constexpr int kStateThreads = 256;

// acc (2 m16 x NT n8 tiles, rows m0.., columns n0..) += A B over k-steps kb0..kb1-1, where A comes from
// a row-major tile (a_trans false) or the transpose of one, and B = Z[k][n] from a row-major tile.
template <class T, int NT, bool kATrans>
__device__ __forceinline__ void warp_mma_2xN(float (&acc)[2][NT][4], uint32_t a_tile, int a_pitch, int m0,
                                             uint32_t b_tile, int b_pitch, int n0, int ksteps, int lane) {
#pragma unroll
  for (int kb = 0; kb < ksteps; ++kb) {
    uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      if constexpr (kATrans) {
        load_a_trans(a[mi], a_tile, a_pitch, m0 + 16 * mi, 16 * kb, lane);
      } else {
        load_a(a[mi], a_tile, a_pitch, m0 + 16 * mi, 16 * kb, lane);
      }
    }
    if constexpr (NT == 1) {
      uint32_t b[2];
      load_b1_kn(b, b_tile, b_pitch, 16 * kb, n0, lane);
      mma16816<T>(acc[0][0], a[0], b);
      mma16816<T>(acc[1][0], a[1], b);
    } else {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[2][2];
        load_b2_kn(b, b_tile, b_pitch, 16 * kb, n0 + 16 * np, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16816<T>(acc[mi][2 * np], a[mi], b[0]);
          mma16816<T>(acc[mi][2 * np + 1], a[mi], b[1]);
        }
      }
    }
  }
}

// Two blocks an SM for D = 64 (the shared memory allows it; registers are capped at 128), else one.
template <class T, int D, int VT>
__global__ void __launch_bounds__(kStateThreads, D == 64 ? 2 : 1) chunk_state_kernel(const StateParams<T> p) {
  using Lay = StateLayout<D, VT>;
  constexpr int kNT1 = Lay::kNT1, kNT3 = Lay::kNT3, kCG3 = Lay::kCG3;
  extern __shared__ __align__(16) unsigned char state_smem[];
  unsigned char* const base = state_smem;
  const uint32_t sbase = smem_addr(base);

  const int vtiles = D / VT;
  const int n = blockIdx.x / vtiles, vt0 = (blockIdx.x - n * vtiles) * VT;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + 63) / 64;
  const int64_t DD = static_cast<int64_t>(D) * D;

  // Warp tile of (e): rows r3.., columns c3.. of S.
  const int r3 = 32 * (warp / kCG3), c3 = (warp % kCG3) * (VT / kCG3);
  // Warp tile of (b): rows 32 * (warp / 2) of [W; Q], columns c1...
  const int R1 = warp >> 1, c1 = (warp & 1) * (VT / 2);
  const bool w_rows = R1 < 2;
  const int m1 = 32 * (R1 & 1);  // first row within W or Q

  // ---- the state, fp32 in registers ----
  float S[2][kNT3][4];
  if (const StateIn init = sequence_state<true>(p, n, h, D); init.ptr) {
    load_acc_state(S, init, r3, vt0 + c3, lane);
  } else {
    zero_acc(S);
  }
  float* const chunk_states =
      p.chunk_states ? p.chunk_states + (static_cast<int64_t>(n) * p.H + h) * (p.map.NC + 1) * DD : nullptr;
  // Writes S (fp32) to dst at this warp's tile.
  auto store_state = [&](const StateOut& dst) { store_acc_state(S, dst, r3, vt0 + c3, lane); };
  // The 16-bit copy of S that (b) reads.
  auto store_sb = [&]() {
    for_acc_pairs(S, r3, c3, lane, [&](int r, int c, const float* v) {
      st_pair(base + Lay::kSb, Lay::kPitchV, r, c, pack2<T>(v[0], v[1]));
    });
  };

  // ---- loads of chunk c ----
  const ChunkSources<T, D> src{p, row, begin, end, first, h, hk, vt0};
  auto issue_k = [&](int c, int buf) {
    const int t0 = src.t0(c);
    async_tile<64, D, kStateThreads>(base + Lay::kK + buf * Lay::kTileD, src.len(c),
                                     [&](int r) { return p.k.row(row, t0 + r, hk); }, tid);
    src.load_vectors(c, sbase + Lay::kGate + buf * 256, sbase + Lay::kRk + buf * 256, tid);
  };
  auto issue_qwu = [&](int c, int buf) {
    const int t0 = src.t0(c);
    async_tile<64, D, kStateThreads>(base + Lay::kQ + buf * Lay::kTileD, src.len(c),
                                     [&](int r) { return p.q.row(row, t0 + r, hk); }, tid);
    const T* wsrc = src.w(c);
    const T* usrc = src.u(c);
    async_tile<64, D, kStateThreads>(base + Lay::kW + buf * Lay::kTileD, 64,
                                     [&](int r) { return wsrc + static_cast<int64_t>(r) * D; }, tid);
    async_tile<64, VT, kStateThreads>(base + Lay::kU + buf * Lay::kTileV, 64,
                                      [&](int r) { return usrc + static_cast<int64_t>(r) * D; }, tid);
  };

  store_sb();
  if (chunk_states) store_state(dense_state(chunk_states, D));
  issue_first_chunk(chunks, issue_k, issue_qwu);

  for (int c = 0; c < chunks; ++c) {
    cp_async_wait_all();
    __syncthreads();  // S1: chunk c's tiles and the 16-bit S are visible; chunk c-1 is done with everything
    issue_next_chunk<Lay::kStages>(c, chunks, issue_k, issue_qwu);
    const int t0 = src.t0(c), len = src.len(c);
    const ChunkTiles tl = chunk_tiles<Lay, Lay::kStages>(base, sbase, c);
    const float* gc = tl.gc;
    const float* rk = tl.rk;
    const float gL = gc[63];

    // (b) [W; Q] S for this warp's 32 rows and VT / 2 columns.
    float acc[2][kNT1][4];
    zero_acc(acc);
    warp_mma_2xN<T, kNT1, false>(acc, w_rows ? tl.w : tl.q, Lay::kPitchD, m1, sbase + Lay::kSb, Lay::kPitchV, c1,
                                 D / 16, lane);

    // (a) P = tril(scale rq_i Q K^T rk_j exp(gc_i - gc_j)) -> shared, 16-bit. Independent of (b):
    //     placed here its products overlap the tail of (b) before (c) needs (b)'s results.
    {
      float acc[4][4];
      causal_tiles<T, D>(acc, tl.q, tl.k, warp, lane);
      const unsigned char* q_tile = base + (tl.q - sbase);
      const float rq16 = p.l2norm ? inv_row_norm16<T, D>(q_tile, 16 * (warp & 3), lane) : 1.f;
      for_causal_pairs(acc, warp, lane, [&](int i, int j, float a0, float a1) {
        // Lane i % 16 holds row i's 1 / |q_i| (inv_row_norm16).
        const float si = p.scale * __shfl_sync(0xffffffffu, rq16, i & 15), gi = gc[i];
        const float rk0 = p.l2norm ? rk[j] : 1.f, rk1 = p.l2norm ? rk[j + 1] : 1.f;
        const float p0 = j <= i ? si * rk0 * expf(gi - gc[j]) * a0 : 0.f;
        const float p1 = j + 1 <= i ? si * rk1 * expf(gi - gc[j + 1]) * a1 : 0.f;
        st_pair(base + Lay::kP, Lay::kPitchC, i, j, pack2<T>(p0, p1));
      });
    }

    // (c) U = u - W S (and its decayed, normalised copy Ud); Q S rows get scale rq exp(gc).
    if (w_rows) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = m1 + 16 * mi + g8 + 8 * hh;
          const float di = (p.l2norm ? rk[i] : 1.f) * expf(gL - gc[i]);
#pragma unroll
          for (int nt = 0; nt < kNT1; ++nt) {
            const int col = c1 + 8 * nt + 2 * t4;
            const float2 uv = unpack2<T>(ld_pair(tl.u, Lay::kPitchV, i, col));
            const float x0 = uv.x - acc[mi][nt][2 * hh], x1 = uv.y - acc[mi][nt][2 * hh + 1];
            st_pair(base + Lay::kUb, Lay::kPitchV, i, col, pack2<T>(x0, x1));
            st_pair(base + Lay::kUd, Lay::kPitchV, i, col, pack2<T>(x0 * di, x1 * di));
          }
        }
      }
    } else {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const float rq16 =
            p.l2norm ? inv_row_norm16<T, D>(base + (tl.q - sbase), m1 + 16 * mi, lane) : 1.f;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = m1 + 16 * mi + g8 + 8 * hh;
          const float si = p.scale * __shfl_sync(0xffffffffu, rq16, g8 + 8 * hh) * expf(gc[i]);
#pragma unroll
          for (int nt = 0; nt < kNT1; ++nt) {
            acc[mi][nt][2 * hh] *= si;
            acc[mi][nt][2 * hh + 1] *= si;
          }
        }
      }
    }
    __syncthreads();  // S2: P, U and Ud are visible; q, w and u of chunk c are consumed
    if constexpr (Lay::kStages == 1) {
      if (c + 1 < chunks) issue_qwu(c + 1, 0);
      cp_async_commit();
    }

    // (d) O = QS + P U for the Q rows; P is causal, so row block r16 needs k-blocks 0..r16.
    if (!w_rows) {
      const uint32_t pT = sbase + Lay::kP, ubT = sbase + Lay::kUb;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int r16 = (m1 >> 4) + mi;
        causal_rows_times<T, kNT1>(acc[mi], pT, Lay::kPitchC, r16, ubT, Lay::kPitchV, c1, lane);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = m1 + 16 * mi + g8 + 8 * hh;
          if (i >= len) continue;
          T* orow = p.o.row(row, t0 + i, h) + vt0 + c1 + 2 * t4;
#pragma unroll
          for (int nt = 0; nt < kNT1; ++nt) {
            *reinterpret_cast<uint32_t*>(orow + 8 * nt) =
                pack2<T>(acc[mi][nt][2 * hh], acc[mi][nt][2 * hh + 1]);
          }
        }
      }
    }

    // (e) S <- exp(gL) S + K^T Ud.
    {
      const float decay = expf(gL);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int nt = 0; nt < kNT3; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) S[mi][nt][e] *= decay;
        }
      }
      warp_mma_2xN<T, kNT3, true>(S, tl.k, Lay::kPitchD, r3, sbase + Lay::kUd, Lay::kPitchV, c3, 4, lane);
    }
    store_sb();  // read by (b) of the next chunk, after its S1
    if (chunk_states) store_state(dense_state(chunk_states + static_cast<int64_t>(c + 1) * DD, D));
  }
  if (const StateOut fin = sequence_state<false>(p, n, h, D); fin.ptr) store_state(fin);
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int VT>
void FwdStateMma<T, D, VT>::launch(const Args& a, cudaStream_t stream) {
  const fwd::StateParams<T>& p = a.p;
  if (p.N == 0 || p.H == 0) return;
  constexpr int kSmem = fwd::StateLayout<D, VT>::kBytes;
  auto kernel = fwd::chunk_state_kernel<T, D, VT>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(p.N * (D / VT)), static_cast<unsigned>(p.H));
  kernel<<<grid, fwd::kStateThreads, kSmem, stream>>>(p);
  ak::cuda::check_launch("chunk_state_kernel");
}

}  // namespace ak::linear::cuda
