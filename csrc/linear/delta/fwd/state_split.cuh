// Stage 2 on Hopper with the warpgroups split by role: the same recurrence and roundings as
// state_wgmma.cuh, but the state's dependency chain runs on one warpgroup that never waits for the
// output work (in the two-role kernel every chunk step has two full-block barriers, so the chain
// S -> W S -> U -> K^T Ud -> S also waits for P = Q K^T, its exponentials, Q S, P U and the stores):
//   warpgroup 0 (the chain, all D rows of S in its registers):
//     wait for chunk c's loads, publish them and Sb (FULL), WS = W Sb, U = u - WS and
//     Ud = U rk e^(gL - gc), then S <- e^gL S + K^T Ud while U goes to Ub for the output side (UB),
//     Sb <- S (the next slot).
//   warpgroups 1 .. kOut (the output; with two, they take the chunks in turn):
//     after FULL: P = Q K^T, QS = Q Sb (scaled), after UB: O = QS + P U, then frees the chunk's
//     buffers (EMPTY) and stores O through shared memory.
// Q, K, gc, rk, Sb and Ub have kSlots = kOut + 1 buffers, chunk c in slot c % kSlots (the output side
// may still read chunk c while the chain works on c + 1 .. c + kOut); W is double buffered, Ud single
// and u double where it fits (only the chain reads them).
//
// Loads: on fixed-length calls TMA boxes onto one mbarrier per slot, issued for chunk c + 1 by the
// output warpgroup that takes chunk c (see tma_issue), so the chain spends no time on them; varlen
// calls use cp.async from the chain (a chunk's rows past its sequence must read as zeros). The 16-bit
// tiles move between registers and shared memory with ldmatrix / stmatrix, and the loops carry no
// per-element branches (u of a zero-u job is zeros, rk holds ones without the L2 norm, P's mask is a
// select).
//
// The hand-offs are named barriers with arrive (producer) / sync (consumer) pairs, one id per buffer,
// so an id is never re-armed before its previous phase completed. Jobs without output
// (the summaries of a pass split into segments) run the chain alone.
#pragma once

#include "linear/delta/fwd/state_sm90_parts.cuh"

namespace ak::linear::cuda::fwd {

// Named-barrier ids (s the slot, o the output warpgroup): 1 the chain's own, then per slot FULL, UB and
// EMPTY, then one per output warpgroup.
template <int kSlots>
struct SplitBarriers {
  static constexpr int kChain = 1;
  __device__ static constexpr int full(int s) { return 2 + s; }
  __device__ static constexpr int ub(int s) { return 2 + kSlots + s; }
  __device__ static constexpr int empty(int s) { return 2 + 2 * kSlots + s; }
  __device__ static constexpr int output(int o) { return 2 + 3 * kSlots + o; }
  static_assert(2 + 3 * kSlots + kSlots - 1 <= 15, "16 named barriers");
};

// kOut output warpgroups: warpgroup 1 + o takes the chunks c with c % kOut == o. Without the delta rule
// (SplitPolicy, params.h) the same recurrence serves the scalar-decay linear family: no w, U = v read from
// its rows (tm_u maps v as [B, T, H, V]), the chain S <- e^gL S + K^T Ud; normalised, the chain also
// carries z = the keys' decayed sum (a column a thread, in the unused W region) and the output side
// divides each row by its normaliser, the row sum of P plus the inter-chunk q . z, plus eps.
template <class T, int D, int VT, int kOut, SplitPolicy kPolicy>
__global__ void __launch_bounds__(128 * (1 + kOut), 1)
    chunk_state_split_kernel(const StateParams<T> p, const __grid_constant__ CUtensorMap tm_q,
                             const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_w,
                             const __grid_constant__ CUtensorMap tm_u, const bool tma,
                             const __grid_constant__ CUtensorMap tm_hs, const __grid_constant__ CUtensorMap tm_vs) {
#if AK_ARCH_SM90A
  constexpr int kSlots = kOut + 1;
  constexpr bool kDelta = kPolicy == SplitPolicy::kDelta, kNorm = kPolicy == SplitPolicy::kNormalized;
  using Lay = Sm90SplitLayout<D, VT, kSlots>;
  using Bar = SplitBarriers<kSlots>;
  constexpr int kMS = D / 64;  // m64 tiles of S rows (all on the chain warpgroup)
  constexpr int kNA = VT / 2;
  const SwizzledSmem dyn = swizzled_smem();
  const uint32_t sbase = dyn.addr;
  unsigned char* const base = dyn.ptr;
  // The normaliser's shared memory, in the W region (no w without the delta rule): z before each slot's
  // chunk (fp32 [kSlots][D]) and the chain's row factors rk e^(gL - gc) of the chunk (fp32 [64]).
  static_assert(kSlots * D * 4 + 256 <= 2 * Lay::kTileD, "z and the row factors fit the W region");
  auto z_slot = [&](int slot) { return reinterpret_cast<float*>(base + Lay::kW) + slot * D; };
  float* const row_factor = reinterpret_cast<float*>(base + Lay::kW) + kSlots * D;

  const int vtiles = D / VT;
  const int n = blockIdx.x / vtiles, vt0 = (blockIdx.x - n * vtiles) * VT;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g8 = lane >> 2, t4 = lane & 3;
  const StateJob job = state_job(p, n, h, D);
  const int row = job.row, begin = job.begin, end = job.end, first = job.first;
  const ChunkSources<T, D> src{p, row, begin, end, first, h, hk, vt0};
  const int chunks = (end - begin + 63) / 64;
  const int64_t DD = static_cast<int64_t>(D) * D;
  const bool duo = job.output;  // the output warpgroup takes part
  const bool save = duo && p.save_chunks > 0;  // chunks with output store their Sb and U for the backward
  // The loads of a chunk complete on the mbarrier of its slot (TMA path), two arrivals a phase: the
  // chain's thread 0 announces each of its two load windows.
  // TMA path (fixed-length calls; rows past T load as zeros): chunk c's copies complete on the
  // mbarrier of its slot, one arrival a phase that announces all of the chunk's bytes. With output,
  // the output warpgroup that takes chunk c issues chunk c + 1's copies as soon as it sees FULL[c]:
  // its slot held chunk c + 1 - kSlots, which that same warpgroup finished, and FULL[c] means the
  // chain is past chunk c - 1 (w and u of chunk c + 1 go to chunk c - 1's buffers). So the chain
  // never spends its own time issuing copies (a copy costs its issuing warp ~100 cycles); only a
  // single u buffer (VT 128) is loaded by the chain, after it has read chunk c's u.
  auto load_bar = [&](int slot) { return sbase + Lay::kLoadBar + 8 * slot; };
  // With one u buffer its copy has its own mbarrier (phase c & 1), waited just before u is read.
  const uint32_t u_bar = sbase + Lay::kLoadBar + 8 * kSlots;
  auto load_parity = [&](int c) { return static_cast<uint32_t>((c / kSlots) & 1); };
  constexpr int kAnnounce = 1, kKWG = 2, kQ = 4, kU = 8;  // parts of a chunk's copies
  auto tma_issue = [&](int c, int parts) {
    const int slot = c % kSlots, t0 = src.t0(c);
    const bool q = duo && (parts & kQ), u = !job.zero_u && (parts & kU);
    const uint32_t bar = load_bar(slot);
    const int wrow = static_cast<int>(src.prep_row(c));
    if (parts & kAnnounce) {
      const uint32_t bytes = (kDelta ? 2 : 1) * Lay::kTileD + 256 + (p.l2norm ? 256 : 0) + (duo ? Lay::kTileD : 0) +
                             (job.zero_u || Lay::kUSlots == 1 ? 0 : Lay::kTileV);
      mbar_arrive_expect_tx(bar, bytes);
    }
    if (parts & kKWG) {
      for (int pn = 0; pn < D / 64; ++pn) {
        tma_load_4d(sbase + Lay::kK + slot * Lay::kTileD + pn * 8192, &tm_k, bar, 64 * pn, t0, hk, row);
        if constexpr (kDelta) {
          tma_load_4d(sbase + Lay::kW + (c & 1) * Lay::kTileD + pn * 8192, &tm_w, bar, 64 * pn, wrow, 0, 0);
        }
      }
      bulk_load(sbase + Lay::kGate + slot * 256, p.gc + src.prep_row(c), 256, bar);
      if (p.l2norm) bulk_load(sbase + Lay::kRk + slot * 256, p.rk + src.prep_row(c), 256, bar);
    }
    if (q) {
      for (int pn = 0; pn < D / 64; ++pn) {
        tma_load_4d(sbase + Lay::kQ + slot * Lay::kTileD + pn * 8192, &tm_q, bar, 64 * pn, t0, hk, row);
      }
    }
    if (u) {
      const uint32_t ub = Lay::kUSlots == 1 ? u_bar : bar;
      if (Lay::kUSlots == 1) mbar_arrive_expect_tx(ub, Lay::kTileV);
      for (int pn = 0; pn < Lay::kPanelCols / 64; ++pn) {  // a VT 32 tile loads a whole panel
        const uint32_t dst = sbase + Lay::kU + (c % Lay::kUSlots) * Lay::kTileV + pn * 8192;
        if constexpr (kDelta) {
          tma_load_4d(dst, &tm_u, ub, vt0 + 64 * pn, wrow, 0, 0);
        } else {
          tma_load_4d(dst, &tm_u, ub, vt0 + 64 * pn, t0, h, row);
        }
      }
    }
  };
  // Everything of chunk c + 1 but a single-buffered u (which waits until the chain has read chunk c's).
  constexpr int kNextParts = kAnnounce | kKWG | kQ | (Lay::kUSlots == 2 ? kU : 0);
  if (tma && tid == 0) {
    for (int i = 0; i < kSlots; ++i) mbar_init(load_bar(i), 1);
    mbar_init(u_bar, 1);
    fence_barrier_init();
  }
  __syncthreads();


  if (wg == 0) {
    // ---------------- the chain ----------------
    const StateCoords at{D, 0, vt0, warp, g8, t4};
    float S[kMS][kNA];
    load_start_state(S, job, at);
    float* const chunk_states = chunk_states_of(p, job, n, h, D);
    auto store_sb = [&](int slot) { store_state16<T>(S, sbase + Lay::kSb + slot * Lay::kTileS, at, lane); };
    // cp.async path (varlen calls: a chunk's rows past its sequence must load as zeros), 128 threads.
    auto issue_chunk_async = [&](int c, int slot) {  // k, w, gc, rk of chunk c (128 threads)
      async_rows_sw128<D, 128>(sbase + Lay::kK + slot * Lay::kTileD, src.len(c), src.k(c), p.k.st, wtid);
      if constexpr (kDelta) async_rows_sw128<D, 128>(sbase + Lay::kW + (c & 1) * Lay::kTileD, 64, src.w(c), D, wtid);
      src.load_vectors(c, sbase + Lay::kGate + slot * 256, sbase + Lay::kRk + slot * 256, wtid);
    };
    auto issue_u_async = [&](int c, int slot) {
      const uint32_t dst = sbase + Lay::kU + slot * Lay::kTileV;
      if constexpr (kDelta) {
        if (!job.zero_u) async_rows_sw128<VT, 128>(dst, 64, src.u(c), D, wtid);
      } else {
        async_rows_sw128<VT, 128>(dst, src.len(c), p.v.row(row, src.t0(c), h) + vt0, p.v.st, wtid);
      }
    };
    auto issue_q_async = [&](int c, int slot) {
      if (duo) async_rows_sw128<D, 128>(sbase + Lay::kQ + slot * Lay::kTileD, src.len(c), src.q(c), p.q.st, wtid);
    };

    // The loads of chunk c + 1 are issued in the two windows where this warpgroup waits for its own
    // products anyway: k, w, gc, rk (and q, u where u has two buffers) while W S runs, else q and u
    // while K^T Ud runs.
    auto load_first = [&](int c, int slot) {
      if (tma) {
        // With output, the output warpgroup issues these (see above).
        if (!duo && wtid == 0) tma_issue(c, kNextParts);
        return;
      }
      issue_chunk_async(c, slot);
      if (Lay::kUSlots == 2) {
        issue_q_async(c, slot);
        issue_u_async(c, c & 1);
      }
    };
    auto load_second = [&](int c, int slot) {
      if (tma) {
        if (Lay::kUSlots == 1 && wtid == 0) tma_issue(c, kU);
        return;
      }
      if (Lay::kUSlots == 1) {
        issue_q_async(c, slot);
        issue_u_async(c, 0);
      }
    };
    // Without the L2 norm 1/|k| is 1: the rk slots hold ones, so every reader multiplies without a
    // branch (the loads below never write them).
    if (!p.l2norm) {
      for (int i = wtid; i < kSlots * 64; i += 128) reinterpret_cast<float*>(base + Lay::kRk)[i] = 1.f;
    }
    store_sb(0);
    float z = 0.f;  // kNorm: column wtid of the keys' decayed sum before the current chunk
    if constexpr (kNorm) z_slot(0)[wtid] = 0.f;
    if (chunk_states) store_state(S, dense_state(chunk_states, D), at);
    if (chunks > 0) {
      if (tma) {
        if (wtid == 0) tma_issue(0, kAnnounce | kKWG | kQ | kU);
      } else {
        load_first(0, 0);
        load_second(0, 0);
      }
    }
    cp_async_commit();
    const uint64_t desc_ud = make_desc_sw128(sbase + Lay::kUd, 64 * 128, 1024);
    // Phases: 0 wait for loads (+ own barrier), 1 issue of WS, 2 EMPTY wait + next k, w, gc, rk, 3 WS
    // wait, 4 U, Ud, 5 fence + barrier, 6 (e) issue, next q, u, (e) wait, 7 Sb (+ chunk state).
    for (int c = 0; c < chunks; ++c) {
      const int s = c % kSlots, s1 = (c + 1) % kSlots;  // this chunk's slot and the next one's
      if (tma) {
        mbar_wait(load_bar(s), load_parity(c));
      } else {
        cp_async_wait_all();
      }
      fence_proxy_async();
      named_sync(Bar::kChain, 128);  // chunk c's tiles, u and Sb[s] are visible to this warpgroup's wgmma
      if (duo) named_arrive(Bar::full(s), 256);  // FULL[s]: the output side may read them too
      const float* gc = reinterpret_cast<const float*>(base + Lay::kGate + s * 256);
      const float* rk = reinterpret_cast<const float*>(base + Lay::kRk + s * 256);
      const float gL = gc[63];
      float acc[kNA];  // W S (zero without the delta rule)
      if constexpr (!kDelta) {
#pragma unroll
        for (int i = 0; i < kNA; ++i) acc[i] = 0.f;
      } else {
        wgmma_fence();
        const uint64_t dw = make_desc_sw128(sbase + Lay::kW + (c & 1) * Lay::kTileD, 16, 1024);
        const uint64_t dsb = make_desc_sw128(sbase + Lay::kSb + s * Lay::kTileS, D * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          Wgmma<VT, T>::template ss<0, 1>(acc, dw + kmajor_step(64, kk), dsb + mnmajor_step(kk), kk > 0);
        }
        wgmma_commit();
      }
      if (c + 1 < chunks) {
        // Slot s1 held chunk c + 1 - kSlots: the output side must be done with its q, k, Sb and Ub.
        // W and u slot (c + 1) & 1 held chunk c - 1, read before this warpgroup's barriers.
        if (!tma && duo && c + 1 >= kSlots) named_sync(Bar::empty(s1), 256);
        load_first(c + 1, s1);
      }
      cp_async_commit();
      float di[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 16 * warp + g8 + 8 * r;
        di[r] = rk[i] * __expf(gL - gc[i]);
      }
      const float decay = __expf(gL);
      if constexpr (kNorm) {
        if (t4 == 0) row_factor[16 * warp + g8] = di[0], row_factor[16 * warp + g8 + 8] = di[1];
      }
      if constexpr (kDelta) {
        wgmma_wait<0>();
        fence_regs(acc);
      }
      // U = u - W S and Ud = U rk e^(gL - gc), four accumulator pairs per ldmatrix / stmatrix. Ud (the
      // chain's next product) is stored first; U stays packed in registers until (e) is issued.
      uint32_t uf[VT / 16][4] = {};
      {
        if (!job.zero_u) {
          if (tma && Lay::kUSlots == 1) mbar_wait(u_bar, static_cast<uint32_t>(c & 1));
          const uint32_t u_tile = sbase + Lay::kU + (c % Lay::kUSlots) * Lay::kTileV;
#pragma unroll
          for (int x = 0; x < VT / 16; ++x) ldsm_x4(uf[x], frag_x4_addr(u_tile, 64, 16 * warp, 2 * x, lane));
        }
#pragma unroll
        for (int x = 0; x < VT / 16; ++x) {
          uint32_t ud[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const float2 uv = unpack2<T>(uf[x][m]);
            const float x0 = uv.x - acc[8 * x + 2 * m], x1 = uv.y - acc[8 * x + 2 * m + 1];
            const float d = di[m & 1];
            uf[x][m] = pack2<T>(x0, x1);  // U, for Ub
            ud[m] = pack2<T>(x0 * d, x1 * d);
          }
          stmatrix_x4(sbase + Lay::kUd + frag_x4_addr(0, 64, 16 * warp, 2 * x, lane), ud[0], ud[1], ud[2], ud[3]);
        }
      }
      fence_proxy_async();
      named_sync(Bar::kChain, 128);  // Ud visible; every thread is past its reads of u
      if constexpr (kNorm) {
        // z <- e^gL z + sum_r K_r rk_r e^(gL - gc_r), this thread's column of the chunk's K tile.
        // Four partial sums, so that the 64 products are not one dependent chain.
        const unsigned char* k_tile = base + Lay::kK + s * Lay::kTileD;
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 64; r += 4) {
          const float4 f = *reinterpret_cast<const float4*>(row_factor + r);
          const float fr[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            part[u] += fr[u] * to_float(*reinterpret_cast<const T*>(k_tile + sw128_offset(64, r + u, wtid)));
          }
        }
        z = decay * z + ((part[0] + part[1]) + (part[2] + part[3]));
      }
      // (e) S <- e^gL S + K^T Ud, all D rows; while it runs, U goes to Ub for the output side (UB).
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
        for (int i = 0; i < kNA; ++i) S[ms][i] *= decay;
      }
      wgmma_fence();
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
        const uint64_t dkt = make_desc_sw128(sbase + Lay::kK + s * Lay::kTileD + ms * 64 * 128, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          Wgmma<VT, T>::template ss<1, 1>(S[ms], dkt + mnmajor_step(kk), desc_ud + mnmajor_step(kk), 1);
        }
      }
      wgmma_commit();
      if (duo) {
#pragma unroll
        for (int x = 0; x < VT / 16; ++x) {
          stmatrix_x4(sbase + Lay::kUb + s * Lay::kTileV + frag_x4_addr(0, 64, 16 * warp, 2 * x, lane), uf[x][0], uf[x][1],
                  uf[x][2], uf[x][3]);
        }
        fence_proxy_async();
        named_arrive(Bar::ub(s), 256);  // UB[s]
      }
      // Slot s1 was freed before the first window; with one u buffer every thread is past its reads of
      // u (the barrier above).
      if (c + 1 < chunks) load_second(c + 1, s1);
      cp_async_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) fence_regs(S[ms]);
      // Sb for chunk c + 1 goes to slot s1, whose previous reader was waited for above.
      if (c + 1 < chunks) {
        // TMA path: the output side must be done with chunk c + 1 - kSlots's Sb (and Ub, written next
        // step) before they are overwritten (the cp.async path waited before its loads).
        if (tma && duo && c + 1 >= kSlots) named_sync(Bar::empty(s1), 256);
        store_sb(s1);
        if constexpr (kNorm) z_slot(s1)[wtid] = z;
      }
      if (chunk_states) store_state(S, dense_state(chunk_states + static_cast<int64_t>(c + 1) * DD, D), at);
    }
    if (job.fin.ptr) store_state(S, job.fin, at);
  } else if (duo) {
    const int ow = wg - 1;  // this output warpgroup takes chunks ow, ow + kOut, ...
    // The plain policy without an output (the backward's recompute of the states) forms no output.
    const bool states_only = kPolicy == SplitPolicy::kPlain && p.o.p == nullptr;
    // Saved for the backward: chunk c's 16-bit start state (Sb, published with FULL) and U, stored from
    // slot s by one thread (the swizzled panels are the maps' boxes); a VT 32 tile fills half a box,
    // so the warpgroup copies its rows in 16-byte pieces instead.
    auto store_saved = [&](int c, int s) {
      if (!save) return;
      const int64_t gch = static_cast<int64_t>(h) * p.save_chunks + first + c;
      if constexpr (VT < 64) {
        static_assert(kDelta, "the narrow tile's saved stores write the delta rule's layout");
        store_rows16<VT>(p.save_hs + gch * D * D + vt0, D, base + Lay::kSb + s * Lay::kTileS, D, wtid);
        store_rows16<VT>(p.save_vs + gch * 64 * D + vt0, D, base + Lay::kUb + s * Lay::kTileV, 64, wtid);
      } else {
        if (wtid != 0) return;
        store_panels<VT>(&tm_hs, sbase + Lay::kSb + s * Lay::kTileS, D, vt0, static_cast<int>(gch) * D);
        if constexpr (kDelta) {
          store_panels<VT>(&tm_vs, sbase + Lay::kUb + s * Lay::kTileV, 64, vt0, static_cast<int>(gch) * 64);
        }
      }
    };
    // Chunk c's q, k, Sb and Ub are no longer read: slot s may take chunk c + kSlots (not before the
    // saved stores have read it).
    auto release_slot = [&](int c, int s) {
      if (VT >= 64 && save && wtid == 0) bulk_wait_read_all();
      fence_proxy_async();  // the generic reads of the slot come before the next copies into it
      if (c + kSlots < chunks) named_arrive(Bar::empty(s), 256);
    };
    // ---------------- the output ----------------
    // Phases: 0 FULL wait, 1 issue of P and QS, 2 row factors, 3 P wait, 4 P scaling, QS wait and
    // scaling, 5 UB wait, 6 P U issue and wait + O to shared memory, 7 output stores.
    for (int c = ow; c < chunks; c += kOut) {
      const int s = c % kSlots;
      const int t0 = src.t0(c), len = src.len(c);
      named_sync(Bar::full(s), 256);  // FULL[s]
      if (tma) {
        mbar_wait(load_bar(s), load_parity(c));  // q (done; makes it visible here)
        if (c + 1 < chunks && wtid == 0) tma_issue(c + 1, kNextParts);
      }
      if (states_only) {  // the chunk's start state stored, the slot handed back
        named_sync(Bar::ub(s), 256);
        store_saved(c, s);
        release_slot(c, s);
        continue;
      }
      const uint32_t sQ = sbase + Lay::kQ + s * Lay::kTileD;
      const uint32_t sK = sbase + Lay::kK + s * Lay::kTileD;
      const float* gc = reinterpret_cast<const float*>(base + Lay::kGate + s * 256);
      const float* rk = reinterpret_cast<const float*>(base + Lay::kRk + s * 256);
      float acc[kNA];
      float pacc[32];
      uint32_t pf[16];
      issue_p_and_qs<T, D, VT>(pacc, acc, sQ, sK, make_desc_sw128(sbase + Lay::kSb + s * Lay::kTileS, D * 128, 1024));
      float rq[2];
      q_row_factors<T, D>(rq, base + (sQ - sbase), p.l2norm, p.scale, warp, g8, t4);
      wgmma_wait<1>();
      fence_regs(pacc);
      scale_p<T>(pf, pacc, gc, rk, rq, warp, g8, t4);
      wgmma_wait<0>();
      fence_regs(acc);
      scale_qs(acc, rq, gc, warp, g8);
      float inv_den[2] = {1.f, 1.f};
      if constexpr (kNorm) {
        normaliser_rows<T, D>(inv_den, pf, base + (sQ - sbase), z_slot(s), rq, gc, p.norm_eps, warp, g8, t4);
        if (p.inv_den != nullptr && t4 == 0 && vt0 == 0) {  // for the normalised backward
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = 16 * warp + g8 + 8 * r;
            if (i < len) p.inv_den[(static_cast<int64_t>(row) * p.map.T + t0 + i) * p.H + h] = inv_den[r];
          }
        }
      }
      named_sync(Bar::ub(s), 256);  // UB[s]
      store_saved(c, s);
      {
        const uint64_t dub = make_desc_sw128(sbase + Lay::kUb + s * Lay::kTileV, 64 * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) Wgmma<VT, T>::template rs<1>(acc, pf + 4 * kk, dub + mnmajor_step(kk), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(acc);
        fence_regs(pf);
      }
      if constexpr (kNorm) {
#pragma unroll
        for (int i = 0; i < VT / 2; ++i) acc[i] *= inv_den[(i >> 1) & 1];
      }
      // O goes out through shared memory: stmatrix into this chunk's Q slot (its products are done;
      // the chain refills it only after EMPTY below), then whole 16-byte pieces of rows, so a warp
      // stores 128 contiguous bytes of a row per instruction instead of 4 bytes of 8 rows.
      const uint32_t so = sbase + Lay::kQ + s * Lay::kTileD;
#pragma unroll
      for (int cb = 0; cb < VT / 8; cb += 2) {
        const float* a = &acc[4 * cb];
        stmatrix_x4(frag_x4_addr(so, 64, 16 * warp, cb, lane), pack2<T>(a[0], a[1]), pack2<T>(a[2], a[3]),
                pack2<T>(a[4], a[5]), pack2<T>(a[6], a[7]));
      }
      named_sync(Bar::output(ow), 128);  // this output warpgroup's O tile is complete
      constexpr int kPieces = VT / 8;                  // 16-byte pieces a row
      constexpr int kPasses = 64 * kPieces / 128;      // of the 128 threads
      uint4 piece[kPasses];
#pragma unroll
      for (int x = 0; x < kPasses; ++x) {
        const int e = wtid + 128 * x, r = e / kPieces, j = e % kPieces;
        piece[x] = *reinterpret_cast<const uint4*>(base + (so - sbase) + sw128_offset(64, r, 8 * j));
      }
      release_slot(c, s);
#pragma unroll
      for (int x = 0; x < kPasses; ++x) {
        const int e = wtid + 128 * x, r = e / kPieces, j = e % kPieces;
        if (r < len) *reinterpret_cast<uint4*>(p.o.row(row, t0 + r, h) + vt0 + 8 * j) = piece[x];
      }
    }
    if (VT >= 64 && save && wtid == 0) bulk_wait_all();
  }
#else
  (void)p;
#endif
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

// One output warpgroup at VT 128, two (taking the chunks in turn) at VT 64 and 32.
namespace fwd {
template <class T, int D, int VT, SplitPolicy kPolicy>
void launch_split(const StateArgs<T>& a, cudaStream_t stream) {
  constexpr int kOut = VT == 128 ? 1 : 2;
  static const SplitMaps none{};  // the cp.async path never reads them
  const SplitMaps& m = a.maps != nullptr ? *a.maps : none;
  launch_state_kernel<D, VT, Sm90SplitLayout<D, VT, kOut + 1>::kAlloc>(
      chunk_state_split_kernel<T, D, VT, kOut, kPolicy>, "chunk_state_split_kernel", 128 * (1 + kOut), a, stream, m.q,
      m.k, m.w, m.u, a.maps != nullptr);
}
}  // namespace fwd

template <class T, int D, int VT>
void FwdStateSplit<T, D, VT>::launch(const Args& a, cudaStream_t stream) {
  fwd::launch_split<T, D, VT, fwd::SplitPolicy::kDelta>(a, stream);
}

template <class T, int D, int VT>
void GlaPassSplit<T, D, VT>::launch(const Args& a, cudaStream_t stream) {
  fwd::launch_split<T, D, VT, fwd::SplitPolicy::kPlain>(a, stream);
}

template <class T, int D, int VT>
void GlaPassSplitNormalized<T, D, VT>::launch(const Args& a, cudaStream_t stream) {
  fwd::launch_split<T, D, VT, fwd::SplitPolicy::kNormalized>(a, stream);
}

}  // namespace ak::linear::cuda
