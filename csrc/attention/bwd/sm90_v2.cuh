// The Hopper attention backward, second version, head dim 64, fp16 /
// bf16. Same block decomposition as v1 (sm90.cuh): one block per (key tile of 128 keys,
// KV head, sequence), a producer warpgroup feeding Q, dO, LSE and D per query tile through a ring
// of TMA stages, two consumer warpgroups owning 64 keys each. What changes, and why (round 1 found
// v1 at ~5000 cycles per query tile against ~1300 of tensor work, i.e. latency-bound):
//   - each consumer computes the dQ of its own 64 keys over the full head dim, dQ_w = dS_w K_w
//     (64 x 64, K = 64 keys), so it never needs the other's dS. Consumer 0 leaves its dQ_0 in
//     shared memory (two buffers, mbarriers), consumer 1 adds it to its own dQ_1 and reduces the sum
//     with 16-byte vector reductions (v1's reduction bytes, without v1's named barrier between the
//     consumers and its bulk reduction); consumer 1 runs a little behind consumer 0, which staggers
//     their exponentials and products;
//   - K_w and V_w live in registers as wgmma A fragments (loaded once per block with ldmatrix), so
//     S^T = K_w Q^T and dP^T = V_w dO^T read only Q / dO from shared memory (half the bytes of v1's
//     ss products, which at N = 64 used all of shared memory's bandwidth);
//   - the products are ordered across query tiles: the next tile's S^T is issued right behind this
//     tile's dV, dK and dQ (the tensor pipe has it queued while this warpgroup waits), and dP^T is
//     issued only once S^T is complete, so the exponentials of P^T run while the tensor pipe
//     computes dP^T (softcap, which needs tanh for dS^T too, computes both after dP^T). Issuing
//     S^T and dP^T together a tile ahead would hold 224 registers of operands and accumulators
//     in flight, and spill;
//   - a four-stage ring (v1: two), so the loads of a tile start three tiles ahead;
//   - blocks in long-first order within L2 sections (decode_tile, as the forward): the key tiles
//     that meet the most query tiles (the first ones under a causal mask) start first and the
//     short ones fill the tail, while the (KV head, sequence) pairs of one section share their Q
//     and dO in L2 (v1's order, key tile fastest, ends on whatever was launched last).
// Per query tile, per consumer (keys as wgmma's M, as in v1):
//   S^T = K_w Q^T                             (rs, m64n64k16, B = Q K-major; issued a tile ahead)
//   dP^T = V_w dO^T                           (rs, B = dO K-major), meanwhile P^T = exp2(S^T c - LSE)
//   dS^T = P^T (dP^T - D) [* (1 - tanh^2)]    (registers)
//   dV_w += P^T dO, dK_w += dS^T Q            (rs, B = dO / Q MN-major)
//   dS^T -> shared memory (stmatrix .trans: the consumer's [query][key] panel)
//   dQ_w = dS_w K_w                           (ss, A = dS K-major, B = K MN-major)
//   dQ_w -> red.global.add.v4.f32 into dq_accum (DqLayout::kHopperFull: accumulator order)
#pragma once

#include "attention/bwd/sm90.cuh"

namespace ak::attention::cuda::bwd {

template <int D>
struct Sm90V2Shape {
  static_assert(D == 64, "v2 holds K and V in registers: head dim 64 only");
  static constexpr int BM = kBwdTileM, BN = 128, STAGES = 4;
  static constexpr int THREADS = 384;  // producer warpgroup + two consumers
  static constexpr int PANELS = 1;
  static constexpr int PANEL_K = BN * 128, PANEL_Q = BM * 128;  // bytes of one 64-column panel
  static constexpr int K_BYTES = PANEL_K;
  static constexpr int Q_BYTES = PANEL_Q;      // one stage
  static constexpr int DS_BYTES = 2 * PANEL_Q;  // one buffer: [64 queries][128 keys], a panel per consumer
  static constexpr int OFF_K = 0;
  static constexpr int OFF_V = OFF_K + K_BYTES;
  static constexpr int OFF_Q = OFF_V + K_BYTES;             // [STAGES]
  static constexpr int OFF_DO = OFF_Q + STAGES * Q_BYTES;   // [STAGES]
  static constexpr int OFF_DS = OFF_DO + STAGES * Q_BYTES;  // [2 buffers]
  static constexpr int DQ_BYTES = BM * D * 4;             // one fp32 dQ tile
  static constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;     // [2 buffers] consumer 0's dQ
  static constexpr int OFF_LSE = OFF_DQ + 2 * DQ_BYTES;    // [STAGES][64] floats
  static constexpr int OFF_DSUM = OFF_LSE + STAGES * BM * 4;
  // kv_full, full[STAGES], empty[STAGES], dq_full[2], dq_empty[2]
  static constexpr int OFF_BAR = OFF_DSUM + STAGES * BM * 4;
  static constexpr int SMEM_BYTES = OFF_BAR + 8 * (5 + 2 * STAGES) + 1024;  // + slack to align the base
  // The epilogue stages dK / dV ([64][D + 8] each, per consumer) over the Q and dO stages.
  static constexpr int EPI_LD = D + 8;
  static_assert(4 * BM * EPI_LD * 2 <= OFF_DS - OFF_Q, "epilogue staging must fit over Q and dO");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block");
};

// How a v2 launch is ordered.
struct V2Launch {
  int n_tiles;   // key tiles per sequence (of the longest)
  int section;   // (KV head, sequence) pairs per L2 section
  int reverse;   // 1: the last key tile meets the most query tiles, so it goes first
};

// Named barriers of v2 (0 is __syncthreads): one per consumer warpgroup, and the epilogue.
constexpr int kV2BarConsumer0 = 1;  // + w
constexpr int kV2BarEpilogue = 3;

template <class T, int D>
__global__ void __launch_bounds__(384, 1) bwd_sm90_v2_kernel(const __grid_constant__ BwdParams p,
                                                             const __grid_constant__ Sm90Maps maps,
                                                             const V2Launch launch) {
#if AK_ARCH_SM90A
  using Sh = Sm90V2Shape<D>;
  constexpr int BM = Sh::BM, BN = Sh::BN, STAGES = Sh::STAGES;

  // (key tile, KV head, sequence) of this block.
  const TileCoord tc = decode_tile(blockIdx.x, launch.n_tiles, p.hkv, p.n_seq, launch.section);
  const int n_tile = launch.reverse ? tc.m_block : launch.n_tiles - 1 - tc.m_block;
  const int hk = tc.h, seq = tc.b;
  const BwdSeq s = bwd_seq(p, seq);
  const int j0 = n_tile * BN;
  if (j0 >= s.kv_len) return;  // whole block: a shorter varlen sequence

  // The base rounded up to the swizzle pattern, computed in the kernel rather than by swizzled_smem()
  // (bench/NOTES_architecture.md says why).
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const QueryRing<STAGES> ring{sbase + Sh::OFF_BAR};
  auto bar_dq_full = [&](int b) { return ring.next(b); };
  auto bar_dq_empty = [&](int b) { return ring.next(2 + b); };
  auto q_addr = [&](int st) { return sbase + Sh::OFF_Q + st * Sh::Q_BYTES; };
  auto do_addr = [&](int st) { return sbase + Sh::OFF_DO + st * Sh::Q_BYTES; };

  // Deterministic calls add dQ in key-tile order (dq_semaphore): ranked in the launch's order of key
  // tiles (decode_tile puts a pair's key tile n after n - 1, or with `reverse` after n + 1), so a block
  // waits only for blocks launched before it. Query tiles then go from the end its predecessor reaches
  // first: from the last in ascending launches (as in sm90.cuh), from the first in reversed ones.
  const bool ordered = p.dq_semaphore != nullptr;
  const QueryTiles qt(p, s, j0, BN, BM, ordered && !launch.reverse);
  const int n_iter = qt.n;

  if (threadIdx.x == 0) {
    ring.init();
    for (int b = 0; b < 2; ++b) {
      mbar_init(bar_dq_full(b), 128);  // one arrival per thread of the consumer that writes / reads
      mbar_init(bar_dq_empty(b), 128);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    produce_query_tiles<Sh, STAGES>(p, s, maps, sbase, j0, hk, seq, qt);
    return;
  }

  // ---- consumers ----
  regs_increase<240>();
  const KeyThread me(wg, j0);
  const int cw = me.cw, tid = me.tid, wi = me.wi, lane = me.lane, t = me.t, key0 = me.key0;
  const uint32_t k_addr = sbase + Sh::OFF_K, v_addr = sbase + Sh::OFF_V;
  const float* lse_smem = reinterpret_cast<const float*>(smem + Sh::OFF_LSE);
  const float* dsum_smem = reinterpret_cast<const float*>(smem + Sh::OFF_DSUM);
  const bool softcapped = p.softcap > 0.0f;

  float acc_dk[D / 2], acc_dv[D / 2];
  zero_regs(acc_dk);
  zero_regs(acc_dv);

  if (n_iter > 0) {
    float acc_s[32], acc_dp[32], acc_dq[32];
    uint32_t kf[16], vf[16];  // K_w and V_w as A fragments, four k-steps of 16 head-dim columns
    // P^T and dS^T as A fragments; they stay live (fence_regs) until the wait after their wgmmas,
    // which read them asynchronously.
    uint32_t p_frag[16], ds_frag[16];
    zero_regs(acc_dq);
#pragma unroll
    for (int i = 0; i < 16; ++i) p_frag[i] = ds_frag[i] = 0u;

    // S^T = K_w Q^T and dP^T = V_w dO^T of the tile in stage st: B = Q / dO K-major (k-steps of 32 bytes).
    auto issue_rows = [&](float(&acc)[32], const uint32_t(&frags)[16], uint32_t rows) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Wgmma<64, T>::template rs<0>(acc, &frags[4 * kk], desc_kmajor(rows + kk * 32), kk > 0);
      }
      wgmma_commit();
    };
    auto issue_s = [&](int st) { issue_rows(acc_s, kf, q_addr(st)); };
    auto issue_dp = [&](int st) { issue_rows(acc_dp, vf, do_addr(st)); };
    // dq_accum += dQ of query tile number `tile_it` (in accumulator order, kHopperFull): consumer 0
    // hands dQ_0 over in shared memory buffer tile_it % 2, consumer 1 adds it to dQ_1 and reduces the
    // sum.
    auto reduce_dq = [&](int tile_row, int tile_it, int tile_i0) {
      float* tile = p.dq_accum + static_cast<int64_t>(tile_row) * D;
      float4* buf = reinterpret_cast<float4*>(smem + Sh::OFF_DQ + (tile_it & 1) * Sh::DQ_BYTES);
      const uint32_t use = (tile_it >> 1) & 1;  // how many times buffer tile_it % 2 was used before, mod 2
      if (cw == 0) {
        mbar_wait(bar_dq_empty(tile_it & 1), use ^ 1);  // consumer 1 has read the buffer's last tile
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          buf[j * 128 + tid] = make_float4(acc_dq[4 * j], acc_dq[4 * j + 1], acc_dq[4 * j + 2], acc_dq[4 * j + 3]);
        }
        mbar_arrive(bar_dq_full(tile_it & 1));
      } else {
        mbar_wait(bar_dq_full(tile_it & 1), use);
        int* sem = nullptr;
        if (ordered) {  // after every key tile ranked before this one that meets the query tile
          const TileRange nt = key_tiles(tile_i0, BM, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
          const int rank = launch.reverse ? nt.hi - n_tile : n_tile - nt.lo;
          sem = p.dq_semaphore + tile_row / BM;
          if (tid == 0) {
            while (ld_acquire_gpu(sem) < rank) __nanosleep(32);
          }
          named_sync(kV2BarConsumer0 + 1, 128);
        }
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          const float4 o = buf[j * 128 + tid];
          red_add_v4(tile + 4 * (j * 128 + tid), acc_dq[4 * j] + o.x, acc_dq[4 * j + 1] + o.y,
                     acc_dq[4 * j + 2] + o.z, acc_dq[4 * j + 3] + o.w);
        }
        mbar_arrive(bar_dq_empty(tile_it & 1));
        if (ordered) {
          __threadfence();
          named_sync(kV2BarConsumer0 + 1, 128);
          if (tid == 0) red_release_add_gpu(sem, 1);
        }
      }
    };

    mbar_wait(ring.kv, 0);
    {
      // Matrix i of k-step kk: keys 16 wi + 8 (i % 2) .., head-dim chunk 2 kk + i / 2 (16 bytes per row),
      // i.e. registers a0..a3 of the m64k16 A fragment. Rows are 128 bytes, 128-byte swizzle.
      const int i = lane >> 3, r = lane & 7;
      const int row = 64 * cw + 16 * wi + 8 * (i & 1) + r;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t o = row * 128 + (((2 * kk + (i >> 1)) ^ r) << 4);
        ldsm_x4(&kf[4 * kk], k_addr + o);
        ldsm_x4(&vf[4 * kk], v_addr + o);
      }
    }

    // First scratch row of the previous tile (whose dQ is reduced once complete). Scratch rows fit
    // in 32 bits: 2^31 rows of 64 floats would be 512 GB.
    int dq_prev = 0, i0_prev = 0;
    const int acc_row0 = static_cast<int>(s.acc_row0);
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % STAGES;
      const int h = qt.head(p, hk, it);
      const int i0 = qt.row0(it, BM);
      const uint32_t ds_addr = sbase + Sh::OFF_DS + (it & 1) * Sh::DS_BYTES + cw * Sh::PANEL_Q;

      // The first tile's S^T here, not before the loop: the loop's zeroed accumulators are set up there,
      // and writes to any wgmma's accumulators while one is in flight make ptxas serialise them all.
      // Later tiles' S^T are issued a tile ahead, below.
      if (it == 0) {
        mbar_wait(ring.full(0), 0);
        issue_s(0);
      }
      // S^T of this tile, and dV, dK, dQ of the previous one, are complete.
      wgmma_wait<0>();
      fence_regs(acc_s);
      fence_regs(acc_dq);
      fence_regs(acc_dk);
      fence_regs(acc_dv);
      fence_regs(p_frag);
      fence_regs(ds_frag);
      issue_dp(st);  // dP^T runs while the exponentials are computed
      if (it > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(ring.empty((it - 1) % STAGES));  // Q, dO, LSE, D of the previous tile
        reduce_dq(dq_prev, it - 1, i0_prev);
      }

      const bool full = tile_fully_admitted(i0, BM, j0, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
      const float* lse_st = lse_smem + st * BM;
      const float* dsum_st = dsum_smem + st * BM;
      if (!softcapped) {
        float prob[32];
        probs_of(p, s, acc_s, prob, lse_st, full, key0, i0, t);
        wgmma_wait<0>();
        fence_regs(acc_dp);
        grads_from_probs<T>(prob, acc_dp, dsum_st, t, p_frag, ds_frag);
      } else {
        wgmma_wait<0>();
        fence_regs(acc_dp);
        probs_and_grads<T>(p, s, true, acc_s, acc_dp, lse_st, dsum_st, full, key0, i0, t, p_frag, ds_frag);
      }

      store_ds_panel(ds_addr, ds_frag, wi, lane);
      fence_proxy_async();                   // the generic-proxy dS stores, before wgmma reads them
      named_sync(kV2BarConsumer0 + cw, 128);  // all four warps' dS rows are in place

      // dV += P^T dO, dK += dS^T Q (A from registers, B MN-major, k-steps of 16 queries);
      // dQ_w = dS_w K_w (A = dS K-major, k-steps of 16 keys; B = K rows 64 cw .., MN-major, N = 64).
      fence_regs(p_frag);
      fence_regs(ds_frag);
      wgmma_fence();
      issue_dv_dk<T, D, BM>(acc_dv, acc_dk, p_frag, ds_frag, do_addr(st), q_addr(st), Sh::PANEL_Q);
#pragma unroll
      for (int kk = 0; kk < 64 / 16; ++kk) {
        const uint32_t b = k_addr + (64 * cw + 16 * kk) * 128;
        Wgmma<D, T>::template ss<0, 1>(acc_dq, desc_kmajor(ds_addr + kk * 32), desc_mnmajor(b, Sh::PANEL_K), kk > 0);
      }
      wgmma_commit();

      // The next tile's S^T queues behind them.
      if (it + 1 < n_iter) {
        mbar_wait(ring.full((it + 1) % STAGES), ((it + 1) / STAGES) & 1);
        issue_s((it + 1) % STAGES);
      }
      dq_prev = h * static_cast<int>(p.acc_rows) + acc_row0 + i0;
      i0_prev = i0;
    }
    wgmma_wait<0>();
    fence_regs(acc_dq);
    fence_regs(acc_dk);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    fence_regs(ds_frag);
    reduce_dq(dq_prev, n_iter - 1, i0_prev);
  }

  // ---- epilogue: dK (times sm_scale) and dV through shared memory, 16-byte rows ----
  store_dk_dv<T, D>(acc_dk, acc_dv, reinterpret_cast<T*>(smem + Sh::OFF_Q), kV2BarEpilogue, kV2BarConsumer0 + cw, p,
                    s, seq, hk, j0, BN, cw, tid);
#else
  (void)p;
  (void)maps;
#endif
}

// The order of a launch (see V2Launch): sections of (KV head, sequence) pairs whose Q and dO take at
// most half of the L2, long key tiles first.
V2Launch v2_launch_order(const BwdParams& p, int block_n, int device);

}  // namespace ak::attention::cuda::bwd

namespace ak::attention::cuda {

template <class T, int D, int Tile>
void BwdWgmmaV2<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  using Sh = bwd::Sm90V2Shape<D>;
  const BwdParams& p = a.p;
  const bwd::V2Launch order = bwd::v2_launch_order(p, Sh::BN, a.device);
  const int64_t blocks = static_cast<int64_t>(order.n_tiles) * p.hkv * p.n_seq;
  if (blocks == 0) return;
  require(blocks < (int64_t{1} << 31), "attention backward: too many key tiles for one launch");
  auto kernel = bwd::bwd_sm90_v2_kernel<T, D>;
  const bwd::Sm90Maps maps = bwd::prepare_launch<Sh, T>(p, kernel);
  kernel<<<static_cast<unsigned>(blocks), Sh::THREADS, Sh::SMEM_BYTES, stream>>>(p, maps, order);
  ak::cuda::check_launch("attention backward: bwd_sm90_v2_kernel");
}

}  // namespace ak::attention::cuda
