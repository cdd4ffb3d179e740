// Stage 2 of the fast chunked forward on Hopper (sm_90a): the same recurrence as
// state_mma.cuh (one block per sequence, value head and V tile, S in fp32 registers),
// with every product on wgmma, whose operands are read straight from 128-byte swizzled shared tiles:
// one instruction does a 64 x VT x 16 step, so a chunk costs tens of instructions instead of hundreds
// of mma.sync + ldmatrix, and the tensor cores, not the issue slots, set the pace.
//
// Two warpgroups. Per chunk (C = 64, gc the gate cumsum, gL = gc[63], Sb the 16-bit copy of S):
//   warpgroup 0 (the W rows)                 warpgroup 1 (the Q rows)
//   (b) WS = W Sb                            (a) P = Q K^T;  (b) QS = Q Sb
//   (c) U = u - WS, Ud = U rk e^(gL - gc)        P *= scale rq_i rk_j e^(gc_i - gc_j) (causal), to
//       (16-bit, to shared memory)               16-bit A fragments; QS *= scale rq e^gc
//   ---------------------------------------- barrier ----------------------------------------
//   (e) S[rows 0 .. D/2) = e^gL S + K^T Ud    (e) S[rows D/2 .. D) likewise;  (d) O = QS + P U
//   Sb <- S (16-bit), the next chunk's (b) reads it after the loop-top barrier.
// Operand majors: W, Q (A) and K (B of P) K-major; Sb, U, Ud N-major (B); K^T (A of (e)) M-major.
// The 16-bit roundings are those of the mma.sync kernel (Sb, U, Ud, P), so the results agree with
// it to summation order. Loads: cp.async into the swizzled tiles, one chunk ahead (q, w, u double
// buffered for D = 128; for D = 256 they load after (c), k always double buffered).
#pragma once

#include "linear/delta/fwd/state_sm90_parts.cuh"

namespace ak::linear::cuda::fwd {

// kSave: an instance with the stores for the backward (StateParams::save_chunks > 0), so that the
// plain forward's instance carries none of their code (with it, D = 256 measured 7% slower).
template <class T, int D, int VT, bool kSave>
__global__ void __launch_bounds__(kSm90StateThreads, 1)
    chunk_state_sm90_kernel(const StateParams<T> p, const __grid_constant__ CUtensorMap tm_hs,
                            const __grid_constant__ CUtensorMap tm_vs) {
#if AK_ARCH_SM90A
  using Lay = Sm90StateLayout<D, VT>;
  constexpr int kMS = D / 128;  // m64 tiles of S rows per warpgroup
  constexpr int kNA = VT / 2;   // accumulator floats per thread of a 64 x VT tile
  const SwizzledSmem dyn = swizzled_smem();
  const uint32_t sbase = dyn.addr;
  unsigned char* const base = dyn.ptr;

  const int vtiles = D / VT;
  const int n = blockIdx.x / vtiles, vt0 = (blockIdx.x - n * vtiles) * VT;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g8 = lane >> 2, t4 = lane & 3;
  const StateJob job = state_job(p, n, h, D);
  const int row = job.row, begin = job.begin, end = job.end, first = job.first;
  const int chunks = (end - begin + 63) / 64;
  const int64_t DD = static_cast<int64_t>(D) * D;
  // Saved for the backward (StateParams::save_chunks): chunk c's Sb (after S1) and Ub (after S2),
  // stored by thread 0 with TMA from the swizzled panels, which are the maps' boxes; thread 0 waits
  // for the reads before the barrier after which they are overwritten (S2 for Sb, the next S1 for Ub).
  const bool save = kSave && job.output && tid == 0;
  static_assert(Lay::kSb % 1024 == 0 && Lay::kUb % 1024 == 0, "swizzled panels for the stores");
  auto save_chunk = [&](int c, bool states) {
    const int gch = static_cast<int>(static_cast<int64_t>(h) * p.save_chunks + first + c);
    if (states) {
      store_panels<VT>(&tm_hs, sbase + Lay::kSb, D, vt0, gch * D);
    } else {
      store_panels<VT>(&tm_vs, sbase + Lay::kUb, 64, vt0, gch * 64);
    }
  };
  // This warpgroup's S rows: 64 wg kMS ...
  const StateCoords at{D, 64 * wg * kMS, vt0, warp, g8, t4};
  float S[kMS][kNA];
  load_start_state(S, job, at);
  float* const chunk_states = chunk_states_of(p, job, n, h, D);
  auto store_sb = [&]() { store_state16<T>(S, sbase + Lay::kSb, at, lane); };

  // ---- loads of chunk c ----
  const ChunkSources<T, D> src{p, row, begin, end, first, h, hk, vt0};
  auto issue_k = [&](int c, int buf) {
    async_rows_sw128<D>(sbase + Lay::kK + buf * Lay::kTileD, src.len(c), src.k(c), p.k.st, tid);
    src.load_vectors(c, sbase + Lay::kGate + buf * 256, sbase + Lay::kRk + buf * 256, tid);
  };
  auto issue_qwu = [&](int c, int buf) {
    async_rows_sw128<D>(sbase + Lay::kQ + buf * Lay::kTileD, src.len(c), src.q(c), p.q.st, tid);
    async_rows_sw128<D>(sbase + Lay::kW + buf * Lay::kTileD, 64, src.w(c), D, tid);
    if (!job.zero_u) async_rows_sw128<VT>(sbase + Lay::kU + buf * Lay::kTileV, 64, src.u(c), D, tid);
  };
  // Single-buffered q, w, u (kSQ == 1): warpgroup `wg` reloads one of them for chunk c + 1 once all
  // of its threads are past their reads (named barrier 1 + wg over its 128 threads).
  auto reload = [&](int c, int which) {
    if constexpr (Lay::kSQ == 1) {
      if (c + 1 >= chunks) return;
      named_sync(1 + wg, 128);
      const int wtid = tid & 127;
      if (which == 0) {
        async_rows_sw128<D, 128>(sbase + Lay::kW, 64, src.w(c + 1), D, wtid);
      } else if (which == 1) {
        if (job.zero_u) return;
        async_rows_sw128<VT, 128>(sbase + Lay::kU, 64, src.u(c + 1), D, wtid);
      } else {
        async_rows_sw128<D, 128>(sbase + Lay::kQ, src.len(c + 1), src.q(c + 1), p.q.st, wtid);
      }
    }
  };

  // Without the L2 norm 1/|k| is 1: both rk slots hold ones, so every reader multiplies without a
  // branch (the loads never write them); published by the first barrier.
  if (!p.l2norm && tid < 128) reinterpret_cast<float*>(base + Lay::kRk)[tid] = 1.f;
  store_sb();
  if (chunk_states) store_state(S, dense_state(chunk_states, D), at);
  issue_first_chunk(chunks, issue_k, issue_qwu);

  const uint64_t desc_sb = make_desc_sw128(sbase + Lay::kSb, D * 128, 1024);
  const uint64_t desc_ub = make_desc_sw128(sbase + Lay::kUb, 64 * 128, 1024);
  const uint64_t desc_ud = make_desc_sw128(sbase + Lay::kUd, 64 * 128, 1024);

  for (int c = 0; c < chunks; ++c) {
    cp_async_wait_all();
    fence_proxy_async();
    if (save) bulk_wait_read_all();  // chunk c - 1's Ub, overwritten after S1
    __syncthreads();  // S1: chunk c's tiles and Sb are visible to every wgmma; chunk c - 1 is done
    if (save) save_chunk(c, true);
    issue_next_chunk<Lay::kSQ>(c, chunks, issue_k, issue_qwu);
    const int t0 = src.t0(c), len = src.len(c);
    const ChunkTiles tl = chunk_tiles<Lay, Lay::kSQ>(base, sbase, c);
    const float* gc = tl.gc;
    const float* rk = tl.rk;
    const float gL = gc[63];

    float acc[kNA];       // warpgroup 0: W S; warpgroup 1: Q S, then O
    uint32_t pf[16];      // warpgroup 1: P as 16-bit A fragments (four k16 steps of four registers)
    if (wg == 0) {
      // (b) WS = W Sb.
      wgmma_fence();
      const uint64_t dw = make_desc_sw128(tl.w, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Wgmma<VT, T>::template ss<0, 1>(acc, dw + kmajor_step(64, kk), desc_sb + mnmajor_step(kk), kk > 0);
      }
      wgmma_commit();
      float di[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 16 * warp + g8 + 8 * r;
        di[r] = rk[i] * __expf(gL - gc[i]);
      }
      wgmma_wait<0>();
      fence_regs(acc);
      reload(c, 0);
      // (c) U = u - WS and Ud = U rk e^(gL - gc), both 16-bit, to shared memory.
      //     Four accumulator pairs per ldmatrix / stmatrix, no per-element branches.
      {
        uint32_t uf[VT / 16][4] = {};
        if (!job.zero_u) {
#pragma unroll
          for (int x = 0; x < VT / 16; ++x) {
            ldsm_x4(uf[x], frag_x4_addr(smem_addr(tl.u), 64, 16 * warp, 2 * x, lane));
          }
        }
#pragma unroll
        for (int x = 0; x < VT / 16; ++x) {
          uint32_t ub[4], ud[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const float2 uv = unpack2<T>(uf[x][m]);
            const float x0 = uv.x - acc[8 * x + 2 * m], x1 = uv.y - acc[8 * x + 2 * m + 1];
            const float d = di[m & 1];
            ub[m] = pack2<T>(x0, x1);
            ud[m] = pack2<T>(x0 * d, x1 * d);
          }
          const uint32_t off = frag_x4_addr(0, 64, 16 * warp, 2 * x, lane);
          stmatrix_x4(sbase + Lay::kUb + off, ub[0], ub[1], ub[2], ub[3]);
          stmatrix_x4(sbase + Lay::kUd + off, ud[0], ud[1], ud[2], ud[3]);
        }
      }
      reload(c, 1);
    } else {
      // (a) P = Q K^T, then (b) QS = Q Sb, as two groups so P's scaling overlaps QS.
      float pacc[32];
      issue_p_and_qs<T, D, VT>(pacc, acc, tl.q, tl.k, desc_sb);
      float rq[2];
      q_row_factors<T, D>(rq, base + (tl.q - sbase), p.l2norm, p.scale, warp, g8, t4);
      wgmma_wait<1>();
      fence_regs(pacc);
      scale_p<T>(pf, pacc, gc, rk, rq, warp, g8, t4);
      wgmma_wait<0>();
      fence_regs(acc);
      reload(c, 2);
      scale_qs(acc, rq, gc, warp, g8);
    }
    fence_proxy_async();
    if (save) bulk_wait_read_all();  // Sb, overwritten after S2
    __syncthreads();  // S2: U and Ud are visible; q, w and u of chunk c are consumed
    if (save) save_chunk(c, false);
    if constexpr (Lay::kSQ == 1) cp_async_commit();

    // (e) S <- e^gL S + K^T Ud (this warpgroup's rows), then (d) O = QS + P U on warpgroup 1.
    {
      const float decay = __expf(gL);
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
        for (int i = 0; i < kNA; ++i) S[ms][i] *= decay;
      }
    }
    // Each warpgroup issues, commits and waits inside its own branch: a wgmma under a condition
    // after common code makes ptxas serialize all of them (C7520).
    auto issue_e = [&]() {
      wgmma_fence();
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
        const uint64_t dkt = make_desc_sw128(tl.k + (wg * kMS + ms) * 64 * 128, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          Wgmma<VT, T>::template ss<1, 1>(S[ms], dkt + mnmajor_step(kk), desc_ud + mnmajor_step(kk), 1);
        }
      }
    };
    if (wg == 0) {
      issue_e();
      wgmma_commit();
      wgmma_wait<0>();
    } else {
      issue_e();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) Wgmma<VT, T>::template rs<1>(acc, pf + 4 * kk, desc_ub + mnmajor_step(kk), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) fence_regs(S[ms]);
    fence_regs(acc);
    fence_regs(pf);

    if (wg == 1 && job.output && !kSave) {
      // O through shared memory: stmatrix into Ub once its one reader, P U, is done in all four warps (a
      // warp's wait covers its own rows; every warp's slice reads all of Ub; the next chunk's (c) writes
      // Ub only after S1), then whole 16-byte pieces of rows, so a warp stores 128 contiguous bytes of a
      // row an instruction instead of 4 bytes of 8 rows. (With kSave thread 0's store of Ub may still be
      // reading it.)
      named_sync(3, 128);
      const uint32_t so = sbase + Lay::kUb;
#pragma unroll
      for (int cb = 0; cb < VT / 8; cb += 2) {
        const float* a = &acc[4 * cb];
        stmatrix_x4(frag_x4_addr(so, 64, 16 * warp, cb, lane), pack2<T>(a[0], a[1]), pack2<T>(a[2], a[3]),
                    pack2<T>(a[4], a[5]), pack2<T>(a[6], a[7]));
      }
      named_sync(3, 128);  // warpgroup 1's O tile is complete
      constexpr int kPieces = VT / 8;              // 16-byte pieces a row
      constexpr int kPasses = 64 * kPieces / 128;  // of the 128 threads
      const int wtid = tid & 127;
#pragma unroll
      for (int x = 0; x < kPasses; ++x) {
        const int e = wtid + 128 * x, r = e / kPieces, j = e % kPieces;
        if (r < len) {
          *reinterpret_cast<uint4*>(p.o.row(row, t0 + r, h) + vt0 + 8 * j) =
              *reinterpret_cast<const uint4*>(base + Lay::kUb + sw128_offset(64, r, 8 * j));
        }
      }
    } else if (wg == 1 && job.output) {
      // Two output rows per thread: their pointers once, then a predicated store per pair.
      T* orow[2];
      bool live[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int ti = 16 * warp + g8 + 8 * r;
        live[r] = ti < len;
        orow[r] = p.o.row(row, t0 + (live[r] ? ti : 0), h) + vt0 + 2 * t4;
      }
#pragma unroll
      for (int i = 0; i < kNA; i += 2) {
        const int r = (i >> 1) & 1;
        if (live[r]) *reinterpret_cast<uint32_t*>(orow[r] + 8 * (i >> 2)) = pack2<T>(acc[i], acc[i + 1]);
      }
    }
    store_sb();  // read by (b) of the next chunk, after its S1 (this chunk's (b) finished before S2)
    if (chunk_states) store_state(S, dense_state(chunk_states + static_cast<int64_t>(c + 1) * DD, D), at);
  }
  if (job.fin.ptr) store_state(S, job.fin, at);
  if (save) bulk_wait_all();
#else
  (void)p;
#endif
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int VT>
void FwdStateWgmma<T, D, VT>::launch(const Args& a, cudaStream_t stream) {
  auto kernel = a.p.save_chunks > 0 ? fwd::chunk_state_sm90_kernel<T, D, VT, true>
                                    : fwd::chunk_state_sm90_kernel<T, D, VT, false>;
  fwd::launch_state_kernel<D, VT, fwd::Sm90StateLayout<D, VT>::kAlloc>(kernel, "chunk_state_sm90_kernel",
                                                                       fwd::kSm90StateThreads, a, stream);
}

}  // namespace ak::linear::cuda
