// The Hopper attention backward, second version, head dim 64, fp16 /
// bf16. Same block decomposition as v1 (cuda_bwd_sm90.cuh): one block per (key tile of 128 keys,
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

// The softmax gradient of one 64-key x 64-query tile, with keys as rows (the S^T accumulator
// layout: register 4 j + 2 half + e holds key key0 + 8 half, query i0 + 8 j + 2 t + e). P^T and dS^T
// leave packed as the A fragments of the rs wgmmas: register 2 j + half holds keys key0 + 8 half,
// queries i0 + 8 j + 2 t + {0, 1} (k-steps of 16 queries).

// Whether (key, query) is admitted: inside both sequences and the window.
__device__ __forceinline__ bool admitted(const BwdParams& p, const BwdSeq& s, int key, int query) {
  const int dist = key - (query + s.kv_len - s.q_len);
  return query < s.q_len && key < s.kv_len && dist >= -p.window_left && dist <= p.window_right;
}

// Without softcap, in two halves, so that the exponentials overlap the dP^T product:
// probs_in_place turns S^T into P^T = exp2(S^T c - LSE) (0 where masked) in place, before dP^T is
// complete; grads_from_probs then forms dS^T = P^T (dP^T - D) and packs both.
__device__ __forceinline__ void probs_in_place(const BwdParams& p, const BwdSeq& s, float (&acc_s)[32],
                                               const float* lse_st, bool full, int key0, int i0, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 lse = *reinterpret_cast<const float2*>(lse_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int idx = 4 * j + 2 * half + e;
        float prob = fast_exp2(acc_s[idx] * p.exp_scale - (e ? lse.y : lse.x));
        if (!full && !admitted(p, s, key0 + 8 * half, i0 + 8 * j + 2 * t + e)) prob = 0.0f;
        acc_s[idx] = prob;
      }
    }
  }
}

template <class T>
__device__ __forceinline__ void grads_from_probs(const float (&prob)[32], const float (&acc_dp)[32],
                                                 const float* dsum_st, int t, uint32_t (&p_frag)[16],
                                                 uint32_t (&ds_frag)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 dsum = *reinterpret_cast<const float2*>(dsum_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int idx = 4 * j + 2 * half;
      p_frag[2 * j + half] = pack2<T>(prob[idx], prob[idx + 1]);
      ds_frag[2 * j + half] =
          pack2<T>(prob[idx] * (acc_dp[idx] - dsum.x), prob[idx + 1] * (acc_dp[idx + 1] - dsum.y));
    }
  }
}

// With softcap (z = c tanh(S / c)), in one pass after dP^T: dS^T also needs 1 - tanh^2 of every
// element.
template <class T>
__device__ __forceinline__ void probs_and_grads_softcap(const BwdParams& p, const BwdSeq& s,
                                                        const float (&acc_s)[32], const float (&acc_dp)[32],
                                                        const float* lse_st, const float* dsum_st, bool full,
                                                        int key0, int i0, int t, uint32_t (&p_frag)[16],
                                                        uint32_t (&ds_frag)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 lse = *reinterpret_cast<const float2*>(lse_st + 8 * j + 2 * t);
    const float2 dsum = *reinterpret_cast<const float2*>(dsum_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float pr[2], ds[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int idx = 4 * j + 2 * half + e;
        const float tanh_v = accurate_tanh(acc_s[idx] * p.softcap_mul);
        float prob = fast_exp2(tanh_v * p.exp_scale - (e ? lse.y : lse.x));
        if (!full && !admitted(p, s, key0 + 8 * half, i0 + 8 * j + 2 * t + e)) prob = 0.0f;
        pr[e] = prob;
        ds[e] = prob * (acc_dp[idx] - (e ? dsum.y : dsum.x)) * (1.0f - tanh_v * tanh_v);
      }
      p_frag[2 * j + half] = pack2<T>(pr[0], pr[1]);
      ds_frag[2 * j + half] = pack2<T>(ds[0], ds[1]);
    }
  }
}

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

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const uint32_t bar_kv = sbase + Sh::OFF_BAR;
  auto bar_full = [&](int st) { return bar_kv + 8u * (1 + st); };
  auto bar_empty = [&](int st) { return bar_kv + 8u * (1 + STAGES + st); };
  auto bar_dq_full = [&](int b) { return bar_kv + 8u * (1 + 2 * STAGES + b); };
  auto bar_dq_empty = [&](int b) { return bar_kv + 8u * (3 + 2 * STAGES + b); };
  auto q_addr = [&](int st) { return sbase + Sh::OFF_Q + st * Sh::Q_BYTES; };
  auto do_addr = [&](int st) { return sbase + Sh::OFF_DO + st * Sh::Q_BYTES; };

  const TileRange mt = query_tiles(j0, BN, BM, s.q_len, s.kv_len, p.window_left, p.window_right);
  const int tiles_per_head = mt.hi - mt.lo + 1;
  const int n_iter = tiles_per_head > 0 ? tiles_per_head * p.group : 0;

  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(bar_full(st), 1);
      mbar_init(bar_empty(st), 8);  // one arrival per consumer warp
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(bar_dq_full(b), 128);  // one arrival per thread of the consumer that writes / reads
      mbar_init(bar_dq_empty(b), 128);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  const int batch_coord = p.cu_q != nullptr ? 0 : seq;  // varlen maps are [T, H, D] with batch 1

  if (wg == 0) {
    // ---- producer: K and V once, then Q, dO, LSE and D per query tile ----
    // 24 * 128 + 240 * 256 = 168 * 384, the block's allocation at launch: setmaxnreg only moves
    // registers within it (a producer at 32 would leave the consumers' increase waiting forever).
    regs_decrease<24>();
    if (threadIdx.x == 0 && n_iter > 0) {
      prefetch_tmap(&maps.q);
      prefetch_tmap(&maps.dout);
      mbar_arrive_expect_tx(bar_kv, 2 * Sh::K_BYTES);
      tma_load_4d(sbase + Sh::OFF_K, &maps.k, bar_kv, 0, s.kv_off + j0, hk, batch_coord);
      tma_load_4d(sbase + Sh::OFF_V, &maps.v, bar_kv, 0, s.kv_off + j0, hk, batch_coord);
      for (int it = 0; it < n_iter; ++it) {
        const int st = it % STAGES;
        mbar_wait(bar_empty(st), ((it / STAGES) & 1) ^ 1);  // a fresh barrier passes parity 1
        const int h = hk * p.group + it / tiles_per_head;
        const int i0 = (mt.lo + it % tiles_per_head) * BM;
        const uint32_t full = bar_full(st);
        mbar_arrive_expect_tx(full, 2 * Sh::Q_BYTES + 2 * BM * 4);
        tma_load_4d(q_addr(st), &maps.q, full, 0, s.q_off + i0, h, batch_coord);
        tma_load_4d(do_addr(st), &maps.dout, full, 0, s.q_off + i0, h, batch_coord);
        const int64_t acc = static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0;
        bulk_load(sbase + Sh::OFF_LSE + st * BM * 4, p.lse_log2 + acc, BM * 4, full);
        bulk_load(sbase + Sh::OFF_DSUM + st * BM * 4, p.dsum + acc, BM * 4, full);
      }
    }
    return;
  }

  // ---- consumers ----
  regs_increase<240>();
  const int cw = wg - 1;  // keys [64 cw, 64 cw + 64) of the tile
  const int tid = threadIdx.x - 128 * wg;
  const int wi = tid >> 5, lane = tid & 31, t = lane & 3;
  const int key0 = j0 + 64 * cw + 16 * wi + (lane >> 2);  // this thread's first key; the second is key0 + 8
  const uint32_t k_addr = sbase + Sh::OFF_K, v_addr = sbase + Sh::OFF_V;
  const float* lse_smem = reinterpret_cast<const float*>(smem + Sh::OFF_LSE);
  const float* dsum_smem = reinterpret_cast<const float*>(smem + Sh::OFF_DSUM);
  const bool softcapped = p.softcap > 0.0f;

  float acc_dk[D / 2], acc_dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc_dk[i] = acc_dv[i] = 0.0f;

  if (n_iter > 0) {
    float acc_s[32], acc_dp[32], acc_dq[32];
    uint32_t kf[16], vf[16];  // K_w and V_w as A fragments, four k-steps of 16 head-dim columns
    // P^T and dS^T as A fragments; they stay live (fence_regs) until the wait after their wgmmas,
    // which read them asynchronously.
    uint32_t p_frag[16], ds_frag[16];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc_dq[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) p_frag[i] = ds_frag[i] = 0u;

    // S^T = K_w Q^T and dP^T = V_w dO^T of the tile in stage st: B = Q / dO K-major (k-steps of 32 bytes).
    auto issue_s = [&](int st) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Wgmma<64, T>::template rs<0>(acc_s, &kf[4 * kk], desc_kmajor(q_addr(st) + kk * 32), kk > 0);
      }
      wgmma_commit();
    };
    auto issue_dp = [&](int st) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        Wgmma<64, T>::template rs<0>(acc_dp, &vf[4 * kk], desc_kmajor(do_addr(st) + kk * 32), kk > 0);
      }
      wgmma_commit();
    };
    // dq_accum += dQ of query tile number `tile_it` (in accumulator order, kHopperFull): consumer 0
    // hands dQ_0 over in shared memory buffer tile_it % 2, consumer 1 adds it to dQ_1 and reduces the
    // sum.
    auto reduce_dq = [&](int tile_row, int tile_it) {
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
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          const float4 o = buf[j * 128 + tid];
          red_add_v4(tile + 4 * (j * 128 + tid), acc_dq[4 * j] + o.x, acc_dq[4 * j + 1] + o.y,
                     acc_dq[4 * j + 2] + o.z, acc_dq[4 * j + 3] + o.w);
        }
        mbar_arrive(bar_dq_empty(tile_it & 1));
      }
    };

    mbar_wait(bar_kv, 0);
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
    mbar_wait(bar_full(0), 0);
    issue_s(0);

    // First scratch row of the previous tile (whose dQ is reduced once complete). Scratch rows fit
    // in 32 bits: 2^31 rows of 64 floats would be 512 GB.
    int dq_prev = 0;
    const int acc_row0 = static_cast<int>(s.acc_row0);
    for (int it = 0; it < n_iter; ++it) {
      const int st = it % STAGES;
      const int h = hk * p.group + it / tiles_per_head;
      const int i0 = (mt.lo + it % tiles_per_head) * BM;
      const uint32_t ds_addr = sbase + Sh::OFF_DS + (it & 1) * Sh::DS_BYTES + cw * Sh::PANEL_Q;

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
        if (lane == 0) mbar_arrive(bar_empty((it - 1) % STAGES));  // Q, dO, LSE, D of the previous tile
        reduce_dq(dq_prev, it - 1);
      }

      const bool full = tile_fully_admitted(i0, BM, j0, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
      const float* lse_st = lse_smem + st * BM;
      const float* dsum_st = dsum_smem + st * BM;
      if (!softcapped) {
        probs_in_place(p, s, acc_s, lse_st, full, key0, i0, t);
        wgmma_wait<0>();
        fence_regs(acc_s);
        fence_regs(acc_dp);
        grads_from_probs<T>(acc_s, acc_dp, dsum_st, t, p_frag, ds_frag);
      } else {
        wgmma_wait<0>();
        fence_regs(acc_dp);
        probs_and_grads_softcap<T>(p, s, acc_s, acc_dp, lse_st, dsum_st, full, key0, i0, t, p_frag, ds_frag);
      }

      // dS^T -> dS [query][key], this consumer's panel. Matrix i of step kk: queries 8 (2 kk + i / 2) ..,
      // keys 16 wi + 8 (i % 2) .. (one 16-byte chunk per row).
      {
        const int i = lane >> 3, r = lane & 7;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int query = 8 * (2 * kk + (i >> 1)) + r;
          const int chunk = 2 * wi + (i & 1);
          stmatrix_x4_trans(ds_addr + query * 128 + ((chunk ^ (query & 7)) << 4), ds_frag[4 * kk],
                            ds_frag[4 * kk + 1], ds_frag[4 * kk + 2], ds_frag[4 * kk + 3]);
        }
      }
      fence_proxy_async();                   // the generic-proxy dS stores, before wgmma reads them
      named_sync(kV2BarConsumer0 + cw, 128);  // all four warps' dS rows are in place

      // dV += P^T dO, dK += dS^T Q (A from registers, B MN-major, k-steps of 16 queries);
      // dQ_w = dS_w K_w (A = dS K-major, k-steps of 16 keys; B = K rows 64 cw .., MN-major, N = 64).
      fence_regs(p_frag);
      fence_regs(ds_frag);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        Wgmma<D, T>::template rs<1>(acc_dv, &p_frag[4 * kk], desc_mnmajor(do_addr(st) + kk * 16 * 128, Sh::PANEL_Q), 1);
      }
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        Wgmma<D, T>::template rs<1>(acc_dk, &ds_frag[4 * kk], desc_mnmajor(q_addr(st) + kk * 16 * 128, Sh::PANEL_Q), 1);
      }
#pragma unroll
      for (int kk = 0; kk < 64 / 16; ++kk) {
        const uint32_t b = k_addr + (64 * cw + 16 * kk) * 128;
        Wgmma<D, T>::template ss<0, 1>(acc_dq, desc_kmajor(ds_addr + kk * 32), desc_mnmajor(b, Sh::PANEL_K), kk > 0);
      }
      wgmma_commit();

      // The next tile's S^T queues behind them.
      if (it + 1 < n_iter) {
        mbar_wait(bar_full((it + 1) % STAGES), ((it + 1) / STAGES) & 1);
        issue_s((it + 1) % STAGES);
      }
      dq_prev = h * static_cast<int>(p.acc_rows) + acc_row0 + i0;
    }
    wgmma_wait<0>();
    fence_regs(acc_dq);
    fence_regs(acc_dk);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    fence_regs(ds_frag);
    reduce_dq(dq_prev, n_iter - 1);
  }

  // ---- epilogue: dK (times sm_scale) and dV through shared memory, 16-byte rows ----
  named_sync(kV2BarEpilogue, 256);  // neither consumer reads Q or dO any more
  constexpr int LD = Sh::EPI_LD;
  T* stage_k = reinterpret_cast<T*>(smem + Sh::OFF_Q) + cw * 2 * BM * LD;
  T* stage_v = stage_k + BM * LD;
  const int g = lane >> 2;
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
  named_sync(kV2BarConsumer0 + cw, 128);
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
  const bwd::Sm90Maps maps = bwd::make_sm90_maps(p, std::is_same_v<T, __nv_bfloat16>, Sh::BM, Sh::BN);
  auto kernel = bwd::bwd_sm90_v2_kernel<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::SMEM_BYTES));
  kernel<<<static_cast<unsigned>(blocks), Sh::THREADS, Sh::SMEM_BYTES, stream>>>(p, maps, order);
  ak::cuda::check_launch("attention backward: bwd_sm90_v2_kernel");
}

}  // namespace ak::attention::cuda
