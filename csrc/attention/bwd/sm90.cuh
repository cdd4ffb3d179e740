// The Hopper attention backward (FlashAttention-3's structure) for D = 64 or 128, fp16 / bf16:
// wgmma from shared memory, TMA loads on an mbarrier pipeline, one producer warpgroup and two
// consumer warpgroups.
//
// One block per (key tile of BN = 128 keys, KV head, sequence); consumer warpgroup w owns keys
// [64 w, 64 w + 64) of the tile. The producer loads K and V once, then for every query tile (64 rows)
// of every query head in the KV group that meets the keys, Q, dO and the tile's LSE / D rows into a
// two-stage ring. Per query tile each consumer computes, with the key dimension as wgmma's M:
//   S^T  = K_w Q^T,  dP^T = V_w dO^T                 (ss wgmma, 64 x 64, K = D)
//   P^T  = exp2(S^T * c - LSE_log2),  dS^T = P^T * (dP^T - D)  [* (1 - tanh^2)]   (registers)
//   dV_w += P^T dO,  dK_w += dS^T Q                  (rs wgmma: P^T, dS^T straight from registers)
//   dS^T -> shared memory (stmatrix, transposed into the K-major [query][key] layout)
//   dQ[:, D/2 w ..] = dS K[:, D/2 w ..]               (ss wgmma over all 128 keys, after both halves
//                                                      of dS are in place: one named barrier)
//   dQ -> shared memory (accumulator order) -> one bulk fp32 reduction into dq_accum.
// dK (times sm_scale) and dV leave through shared memory in 16-byte rows at the end.
//
// Shared-memory operands use the 128-byte swizzle TMA writes: a "panel" is 64 columns (128 bytes)
// of every row, rows 128 bytes apart, 8-row atoms of 1024 bytes; a D = 128 tile is two panels.
#pragma once

#include <cuda.h>

#include <string>
#include <type_traits>

#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "attention/bwd/launch.h"
#include "attention/bwd/mma.cuh"
#include "attention/bwd/softmax_grad.cuh"
#include "generated/attention_launchers.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda::bwd {

// Tensor maps of the four tiled inputs, as one kernel parameter.
struct Sm90Maps {
  CUtensorMap q, k, v, dout;
};

template <int D>
struct Sm90Shape {
  static constexpr int BM = kBwdTileM, BN = 128, PANELS = D / 64;
  static constexpr int THREADS = 384;     // producer warpgroup + two consumers
  static constexpr int DQ_COLS = D / 2;   // dQ columns per consumer
  static constexpr int PANEL_K = BN * 128, PANEL_Q = BM * 128;  // bytes of one panel
  static constexpr int K_BYTES = PANELS * PANEL_K;
  static constexpr int Q_BYTES = PANELS * PANEL_Q;                // one stage
  static constexpr int DS_BYTES = 2 * PANEL_Q;                    // one buffer: [64 queries][128 keys]
  static constexpr int DQ_BYTES = BM * DQ_COLS * 4;               // one consumer's fp32 dQ piece
  static constexpr int OFF_K = 0;
  static constexpr int OFF_V = OFF_K + K_BYTES;
  static constexpr int OFF_Q = OFF_V + K_BYTES;       // [2 stages]
  static constexpr int OFF_DO = OFF_Q + 2 * Q_BYTES;  // [2 stages]
  static constexpr int OFF_DS = OFF_DO + 2 * Q_BYTES; // [2 buffers]
  static constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;  // [2 consumers]
  static constexpr int OFF_LSE = OFF_DQ + 2 * DQ_BYTES;  // [2 stages][64] floats
  static constexpr int OFF_DSUM = OFF_LSE + 2 * BM * 4;
  static constexpr int OFF_BAR = OFF_DSUM + 2 * BM * 4;  // kv_full, full[2], empty[2]
  static constexpr int SMEM_BYTES = OFF_BAR + 64 + 1024;  // + slack to align the base to 1024
  // The epilogue stages dK / dV ([64][D + 8] each, per consumer) over Q, dO and dS.
  static constexpr int EPI_LD = D + 8;
  static_assert(4 * BM * EPI_LD * 2 <= OFF_DQ - OFF_Q, "epilogue staging must fit over Q, dO and dS");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block");
};

// Named barriers (0 is __syncthreads).
constexpr int kBarDsReady = 1;  // both consumers: dS halves written
constexpr int kBarConsumer0 = 2;  // + w: one consumer warpgroup
constexpr int kBarEpilogue = 4;   // both consumers: the loop is over

// 64-bit descriptor of a 128-byte-swizzled operand at shared address addr (arch/sm90.cuh).
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t addr) { return make_desc_sw128(addr, 16, 1024); }
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t addr, uint32_t panel_bytes) {
  return make_desc_sw128(addr, panel_bytes, 1024);
}

// The epilogue of both Hopper kernels: this consumer's dK (times sm_scale) and dV, m64nD accumulators
// of its 64 keys (thread (wi, g, t) of the warpgroup: rows 16 wi + g (+ 8), columns 8 j + 2 t), staged
// through shared memory ([64][D + 8] each, from `stage`) and written as 16-byte rows, once both
// consumers are past their last reads (`epilogue_bar`); `bar` is the consumer warpgroup's named barrier.
template <class T, int D>
__device__ __forceinline__ void store_dk_dv(const float (&acc_dk)[D / 2], const float (&acc_dv)[D / 2], T* stage,
                                            int epilogue_bar, int bar, const BwdParams& p, const BwdSeq& s, int seq,
                                            int hk, int j0, int BN, int cw, int tid) {
  named_sync(epilogue_bar, 256);  // neither consumer reads Q, dO or dS any more
  constexpr int BM = kBwdTileM, LD = D + 8;
  const int wi = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  T* stage_k = stage + cw * 2 * BM * LD;
  T* stage_v = stage_k + BM * LD;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 16 * wi + g + 8 * half, col = 8 * j + 2 * t;
      const int idx = 4 * j + 2 * half;
      *reinterpret_cast<uint32_t*>(stage_k + row * LD + col) =
          pack2<T>(acc_dk[idx] * p.sm_scale, acc_dk[idx + 1] * p.sm_scale);
      *reinterpret_cast<uint32_t*>(stage_v + row * LD + col) = pack2<T>(acc_dv[idx], acc_dv[idx + 1]);
    }
  }
  named_sync(bar, 128);
  const int kv_rows = min(BN, s.kv_len - j0);
  T* dk = static_cast<T*>(p.dk) + seq * p.dk_batch + static_cast<int64_t>(s.kv_off + j0) * p.dk_row + hk * p.dk_head;
  T* dv = static_cast<T*>(p.dv) + seq * p.dv_batch + static_cast<int64_t>(s.kv_off + j0) * p.dv_row + hk * p.dv_head;
  constexpr int CHUNKS = D / 8;
  for (int idx = tid; idx < BM * CHUNKS; idx += 128) {
    const int r = idx / CHUNKS, c = (idx % CHUNKS) * 8;
    const int key = 64 * cw + r;
    if (key >= kv_rows) continue;
    *reinterpret_cast<uint4*>(dk + key * p.dk_row + c) = *reinterpret_cast<const uint4*>(stage_k + r * LD + c);
    *reinterpret_cast<uint4*>(dv + key * p.dv_row + c) = *reinterpret_cast<const uint4*>(stage_v + r * LD + c);
  }
}

// dS^T (the A fragments ds_frag of one consumer warpgroup) -> dS [query][key] in its 64-key panel
// (128-byte swizzle rows of queries), K-major for dQ = dS K. Matrix i of step kk: queries
// 8 (2 kk + i / 2) .., keys 16 wi + 8 (i % 2) .. (one 16-byte chunk per row).
__device__ __forceinline__ void store_ds_panel(uint32_t panel, const uint32_t (&ds_frag)[16], int wi, int lane) {
  const int i = lane >> 3, r = lane & 7;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int query = 8 * (2 * kk + (i >> 1)) + r;
    const int chunk = 2 * wi + (i & 1);
    stmatrix_x4_trans(panel + query * 128 + ((chunk ^ (query & 7)) << 4), ds_frag[4 * kk], ds_frag[4 * kk + 1],
                      ds_frag[4 * kk + 2], ds_frag[4 * kk + 3]);
  }
}

// dV += P^T dO and dK += dS^T Q for one 64-query tile: A from registers, B = dO / Q MN-major (k-steps
// of 16 queries, panels panel_q bytes apart). Issued, not committed.
template <class T, int D, int BM>
__device__ __forceinline__ void issue_dv_dk(float (&acc_dv)[D / 2], float (&acc_dk)[D / 2], const uint32_t (&p_frag)[16],
                                            const uint32_t (&ds_frag)[16], uint32_t do_rows, uint32_t q_rows,
                                            uint32_t panel_q) {
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    Wgmma<D, T>::template rs<1>(acc_dv, &p_frag[4 * kk], desc_mnmajor(do_rows + kk * 16 * 128, panel_q), 1);
  }
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    Wgmma<D, T>::template rs<1>(acc_dk, &ds_frag[4 * kk], desc_mnmajor(q_rows + kk * 16 * 128, panel_q), 1);
  }
}

// The barriers of the Hopper backward kernels, 8 bytes apart from `kv`: K and V (once), then kStages
// "full" (a stage's Q, dO, LSE and D have landed) and kStages "empty" (every consumer warp has
// released the stage); a kernel's own barriers follow at next().
template <int kStages>
struct QueryRing {
  uint32_t kv;
  __device__ __forceinline__ uint32_t full(int st) const { return kv + 8u * (1 + st); }
  __device__ __forceinline__ uint32_t empty(int st) const { return kv + 8u * (1 + kStages + st); }
  __device__ __forceinline__ uint32_t next(int i) const { return kv + 8u * (1 + 2 * kStages + i); }
  __device__ __forceinline__ void init() const {
    mbar_init(kv, 1);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(full(st), 1);
      mbar_init(empty(st), 8);  // one arrival per consumer warp
    }
  }
};

// The query tiles a block of keys meets: tiles mt.lo .. mt.hi of each head of its group, n in all,
// visited in that order or (reverse) from the last.
struct QueryTiles {
  TileRange mt;
  int per_head, n;
  bool reverse;
  __device__ __forceinline__ QueryTiles(const BwdParams& p, const BwdSeq& s, int j0, int BN, int BM,
                                        bool reverse_order = false)
      : mt(query_tiles(j0, BN, BM, s.q_len, s.kv_len, p.window_left, p.window_right)),
        per_head(mt.hi - mt.lo + 1),
        n(per_head > 0 ? per_head * p.group : 0),
        reverse(reverse_order) {}
  __device__ __forceinline__ int at(int it) const { return reverse ? n - 1 - it : it; }
  __device__ __forceinline__ int head(const BwdParams& p, int hk, int it) const {
    return hk * p.group + at(it) / per_head;
  }
  __device__ __forceinline__ int row0(int it, int BM) const { return (mt.lo + at(it) % per_head) * BM; }
};

// A consumer thread of the Hopper backward kernels: warpgroup cw of two owns keys [64 cw, 64 cw + 64)
// of the block's key tile; the thread's rows of its m64 tiles are keys key0 and key0 + 8.
struct KeyThread {
  int cw, tid, wi, lane, t, key0;
  __device__ __forceinline__ KeyThread(int wg, int j0)
      : cw(wg - 1), tid(threadIdx.x - 128 * wg), wi(tid >> 5), lane(tid & 31), t(lane & 3),
        key0(j0 + 64 * cw + 16 * wi + (lane >> 2)) {}
};

// The producer warpgroup of the Hopper backward kernels gives its registers to the consumers
// (24 * 128 + 240 * 256 = 168 * 384, the block's allocation at launch: setmaxnreg only moves registers
// within it), and one thread of it loads: the block's K and V once, then for each of its query tiles
// Q and dO by TMA and the rows' LSE and D by bulk copies, into the QueryRing's kStages stages, each
// once the consumer warps have released it.
template <class Sh, int kStages>
__device__ __forceinline__ void produce_query_tiles(const BwdParams& p, const BwdSeq& s, const Sm90Maps& maps,
                                                    uint32_t sbase, int j0, int hk, int seq, const QueryTiles& qt) {
  regs_decrease<24>();
  if (threadIdx.x != 0 || qt.n == 0) return;
  const int batch = p.cu_q != nullptr ? 0 : seq;  // varlen maps are [T, H, D] with batch 1
  constexpr int BM = Sh::BM;
  const QueryRing<kStages> ring{sbase + Sh::OFF_BAR};
  const uint32_t bar_kv = ring.kv;
  prefetch_tmap(&maps.q);
  prefetch_tmap(&maps.dout);
  mbar_arrive_expect_tx(bar_kv, 2 * Sh::K_BYTES);
#pragma unroll
  for (int c = 0; c < Sh::PANELS; ++c) {
    tma_load_4d(sbase + Sh::OFF_K + c * Sh::PANEL_K, &maps.k, bar_kv, c * 64, s.kv_off + j0, hk, batch);
    tma_load_4d(sbase + Sh::OFF_V + c * Sh::PANEL_K, &maps.v, bar_kv, c * 64, s.kv_off + j0, hk, batch);
  }
  for (int it = 0; it < qt.n; ++it) {
    const int st = it % kStages;
    mbar_wait(ring.empty(st), ((it / kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
    const int h = qt.head(p, hk, it);
    const int i0 = qt.row0(it, BM);
    const uint32_t full = ring.full(st);
    mbar_arrive_expect_tx(full, 2 * Sh::Q_BYTES + 2 * BM * 4);
#pragma unroll
    for (int c = 0; c < Sh::PANELS; ++c) {
      const uint32_t panel = st * Sh::Q_BYTES + c * Sh::PANEL_Q;
      tma_load_4d(sbase + Sh::OFF_Q + panel, &maps.q, full, c * 64, s.q_off + i0, h, batch);
      tma_load_4d(sbase + Sh::OFF_DO + panel, &maps.dout, full, c * 64, s.q_off + i0, h, batch);
    }
    const int64_t acc = static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0;
    // racecheck reports these two copies as WAR hazards against the consumers' LSE / D reads
    // (softmax_grad.cuh): it does not model mbarriers. Every consumer warp reads stage st, then
    // __syncwarp, then its lane 0 arrives on empty(st) (8 arrivals complete the phase); this thread
    // waited on that phase above before overwriting the stage. tests/attention_race.test.ts checks it.
    bulk_load(sbase + Sh::OFF_LSE + st * BM * 4, p.lse_log2 + acc, BM * 4, full);
    bulk_load(sbase + Sh::OFF_DSUM + st * BM * 4, p.dsum + acc, BM * 4, full);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(384, 1) bwd_sm90_kernel(const __grid_constant__ BwdParams p,
                                                          const __grid_constant__ Sm90Maps maps) {
#if AK_ARCH_SM90A
  using Sh = Sm90Shape<D>;
  constexpr int BM = Sh::BM, BN = Sh::BN;

  const int n_tile = blockIdx.x, hk = blockIdx.y, seq = blockIdx.z;
  const BwdSeq s = bwd_seq(p, seq);
  const int j0 = n_tile * BN;
  if (j0 >= s.kv_len) return;  // whole block: a shorter varlen sequence

  // The base rounded up to the swizzle pattern, computed in the kernel rather than by swizzled_smem()
  // (bench/NOTES_architecture.md says why).
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const QueryRing<2> ring{sbase + Sh::OFF_BAR};
  // Deterministic calls add dQ pieces in key-tile order (dq_semaphore): the last query tiles first, where
  // a causal mask lets every key tile wait for its predecessor one iteration behind instead of two.
  const bool ordered = p.dq_semaphore != nullptr;
  const QueryTiles qt(p, s, j0, BN, BM, ordered);
  const int n_iter = qt.n;
  if (threadIdx.x == 0) {
    ring.init();
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    produce_query_tiles<Sh, 2>(p, s, maps, sbase, j0, hk, seq, qt);
    return;
  }

  // ---- consumers ----
  regs_increase<240>();
  const KeyThread me(wg, j0);
  const int cw = me.cw, tid = me.tid, wi = me.wi, lane = me.lane, t = me.t, key0 = me.key0;
  const bool softcapped = p.softcap > 0.0f;
  const uint32_t k_addr = sbase + Sh::OFF_K, v_addr = sbase + Sh::OFF_V;
  const float* lse_smem = reinterpret_cast<const float*>(smem + Sh::OFF_LSE);
  const float* dsum_smem = reinterpret_cast<const float*>(smem + Sh::OFF_DSUM);

  float acc_dk[D / 2], acc_dv[D / 2];
  zero_regs(acc_dk);
  zero_regs(acc_dv);

  if (n_iter > 0) mbar_wait(ring.kv, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int st = it & 1;
    const int h = qt.head(p, hk, it);
    const int i0 = qt.row0(it, BM);
    const uint32_t q_addr = sbase + Sh::OFF_Q + st * Sh::Q_BYTES;
    const uint32_t do_addr = sbase + Sh::OFF_DO + st * Sh::Q_BYTES;
    const uint32_t ds_addr = sbase + Sh::OFF_DS + st * Sh::DS_BYTES;
    mbar_wait(ring.full(st), (it >> 1) & 1);

    // S^T = K_w Q^T and dP^T = V_w dO^T: both operands K-major, k-steps of 16 along D.
    float acc_s[32], acc_dp[32];
    // acc = A_w B^T over D: A = this consumer's 64 rows of K or V, B = the Q or dO stage.
    auto issue_kmajor = [&](float(&acc)[32], uint32_t a_rows, uint32_t b_rows) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a = a_rows + (kk / 4) * Sh::PANEL_K + cw * 64 * 128 + (kk % 4) * 32;
        const uint32_t b = b_rows + (kk / 4) * Sh::PANEL_Q + (kk % 4) * 32;
        Wgmma<64, T>::template ss<0, 0>(acc, desc_kmajor(a), desc_kmajor(b), kk > 0);
      }
      wgmma_commit();
    };
    wgmma_fence();
    issue_kmajor(acc_s, k_addr, q_addr);
    issue_kmajor(acc_dp, v_addr, do_addr);

    // P^T and dS^T, packed as the A fragments of the next wgmmas: register 2 j + half holds keys
    // key0 + 8 half, queries i0 + 8 j + 2 t + {0, 1}. Without softcap the exponentials of P^T run
    // while dP^T is still on the tensor pipe.
    const bool full = tile_fully_admitted(i0, BM, j0, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
    const float* lse_st = lse_smem + st * BM;
    const float* dsum_st = dsum_smem + st * BM;
    uint32_t p_frag[16], ds_frag[16];
    if (!softcapped) {
      wgmma_wait<1>();
      fence_regs(acc_s);
      probs_of(p, s, acc_s, acc_s, lse_st, full, key0, i0, t);  // in place: no S^T wgmma is in flight here
      wgmma_wait<0>();
      fence_regs(acc_dp);
      grads_from_probs<T>(acc_s, acc_dp, dsum_st, t, p_frag, ds_frag);
    } else {
      wgmma_wait<0>();
      fence_regs(acc_s);
      fence_regs(acc_dp);
      probs_and_grads<T>(p, s, true, acc_s, acc_dp, lse_st, dsum_st, full, key0, i0, t, p_frag, ds_frag);
    }

    store_ds_panel(ds_addr + cw * Sh::PANEL_Q, ds_frag, wi, lane);
    fence_proxy_async();  // the generic-proxy dS stores, before wgmma reads them

    fence_regs(p_frag);  // the fragments are complete before the fence that orders them for wgmma
    fence_regs(ds_frag);
    wgmma_fence();
    issue_dv_dk<T, D, BM>(acc_dv, acc_dk, p_frag, ds_frag, do_addr, q_addr, Sh::PANEL_Q);
    wgmma_commit();

    if (tid == 0) bulk_wait_read_all();  // the previous dQ reduction has left this consumer's buffer
    named_sync(kBarDsReady, 256);

    // dQ[:, DQ_COLS cw ..] = dS K[:, DQ_COLS cw ..]: A = dS K-major (k-steps of 16 keys), B = K MN-major.
    float acc_dq[D / 4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a = ds_addr + (kk / 4) * Sh::PANEL_Q + (kk % 4) * 32;
      const uint32_t b = k_addr + (D == 128 ? cw * Sh::PANEL_K : cw * Sh::DQ_COLS * 2) + kk * 16 * 128;
      Wgmma<D / 2, T>::template ss<0, 1>(acc_dq, desc_kmajor(a), desc_mnmajor(b, Sh::PANEL_K), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_dq);
    fence_regs(acc_dk);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    fence_regs(ds_frag);
    __syncwarp();
    if (lane == 0) mbar_arrive(ring.empty(st));  // Q, dO, LSE and D of this stage are consumed

    float* dq_dst = p.dq_accum + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) * D + cw * (BM * Sh::DQ_COLS);
    if (ordered) {
      // This query tile's dQ takes the key tiles' pieces in key-tile order: a consumer adds its half
      // (in accumulator order, 16-byte vector reductions) once both halves of every lower key tile
      // that meets the tile are in (two arrivals a key tile), then arrives. A block waits only for
      // blocks of lower index, which the launch starts first, so it cannot deadlock.
      int* sem = p.dq_semaphore + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) / BM;
      const int rank = n_tile - key_tiles(i0, BM, BN, s.q_len, s.kv_len, p.window_left, p.window_right).lo;
      if (tid == 0) {
        while (ld_acquire_gpu(sem) < 2 * rank) __nanosleep(32);
      }
      named_sync(kBarConsumer0 + cw, 128);
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        red_add_v4(dq_dst + 4 * (j * 128 + tid), acc_dq[4 * j], acc_dq[4 * j + 1], acc_dq[4 * j + 2],
                   acc_dq[4 * j + 3]);
      }
      __threadfence();
      named_sync(kBarConsumer0 + cw, 128);
      if (tid == 0) red_release_add_gpu(sem, 1);
    } else {
      // dQ piece -> shared memory in accumulator order (conflict-free 16-byte stores) -> bulk add.
      float4* dq_smem = reinterpret_cast<float4*>(smem + Sh::OFF_DQ + cw * Sh::DQ_BYTES);
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        dq_smem[j * 128 + tid] = make_float4(acc_dq[4 * j], acc_dq[4 * j + 1], acc_dq[4 * j + 2], acc_dq[4 * j + 3]);
      }
      fence_proxy_async();
      named_sync(kBarConsumer0 + cw, 128);
      if (tid == 0) {
        bulk_reduce_add_f32(dq_dst, smem_u32(dq_smem), Sh::DQ_BYTES);
        bulk_commit();
      }
    }
  }

  // ---- epilogue: dK (times sm_scale) and dV through shared memory, 16-byte rows ----
  store_dk_dv<T, D>(acc_dk, acc_dv, reinterpret_cast<T*>(smem + Sh::OFF_Q), kBarEpilogue, kBarConsumer0 + cw, p, s,
                    seq, hk, j0, BN, cw, tid);
  if (tid == 0) bulk_wait_all();  // shared memory must outlive the last reduction
#else
  (void)p;
  (void)maps;
#endif
}

// ---- host side ----

// Tensor maps of q, k, v and dO (boxes of 64 columns x 64 query rows or 128 key rows, 128-byte
// swizzle), through the forward's encoder.
Sm90Maps make_sm90_maps(const BwdParams& p, bool bf16, int box_q, int box_kv);

// What both Hopper backward launches do first: the tensor maps for Sh's tiles and the kernel's
// shared-memory allowance.
template <class Sh, class T, class Kernel>
Sm90Maps prepare_launch(const BwdParams& p, Kernel kernel) {
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::SMEM_BYTES));
  return make_sm90_maps(p, std::is_same_v<T, __nv_bfloat16>, Sh::BM, Sh::BN);
}

}  // namespace ak::attention::cuda::bwd

namespace ak::attention::cuda {

template <class T, int D, int Tile>
void BwdWgmma<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  using Sh = bwd::Sm90Shape<D>;
  const BwdParams& p = a.p;
  const dim3 grid(ak::cuda::ceil_div(p.skv, Sh::BN), static_cast<unsigned>(p.hkv), static_cast<unsigned>(p.n_seq));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  auto kernel = bwd::bwd_sm90_kernel<T, D>;
  const bwd::Sm90Maps maps = bwd::prepare_launch<Sh, T>(p, kernel);
  kernel<<<grid, Sh::THREADS, Sh::SMEM_BYTES, stream>>>(p, maps);
  ak::cuda::check_launch("attention backward: bwd_sm90_kernel");
}

}  // namespace ak::attention::cuda
