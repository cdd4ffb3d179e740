// The persistent Hopper forward of softmax attention (sm_90a): the structure of fwd/sm90.cuh
// (a TMA producer warp, consumer warpgroups with wgmma, ping-pong, intra-warpgroup overlap), with
//   - one block per multiprocessor that loops over work tiles taken from a queue (an atomic
//     counter in long-first order), so the block launch, the barrier set-up, the Q load and the
//     pipeline fill of a tile overlap the previous tile instead of leaving the SM idle; the short
//     causal tiles fill the tail;
//   - kConsumers consumer warpgroups of 64 query rows each (tile 64 * kConsumers rows): three at
//     D = 64, where the exponentials of a tile cost as much as its two GEMMs and a third warpgroup
//     keeps the tensor cores busy while two do softmax;
//   - two Q buffers (the next tile's Q lands while this one is computed; O is staged in the
//     consumer's own rows of the Q buffer on the way out);
//   - tiles aligned to the end of the sequence: a partial tile is the first one, which under a
//     causal mask is the shortest; its rows before the sequence start are computed but never
//     written;
//   - the O rescale of step j moved between the issue of S_{j+1} and of P_j V_j, where it overlaps
//     the tensor cores' work instead of lengthening the softmax;
//   - float8_e4m3 inputs (kInBytes = 1): both products on 8-bit tensor cores, V read transposed
//     ([batch, KV head, D, keys], made by fwd/fp8.cu), P rounded to e4m3 with a gain of 256 (in the
//     exponent, so the row sums carry it); the per-(batch, KV head) scales of q and k join the
//     softmax scale, v's the final 1 / row sum;
// The queue counter lives in device memory and is put back to 0 by the last block to finish, so
// the next launch on the stream finds it zeroed.
#pragma once

#include "attention/fwd/sm90.cuh"

namespace ak::attention::cuda::sm90 {

template <int kD_, int kBlockN_, int kStages_, int kConsumers_, int kInBytes_ = 2>
struct PersistentTile {
  static constexpr int kD = kD_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kInBytes = kInBytes_;  // 2: 16-bit inputs; 1: e4m3
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPanels = kD * kInBytes / 128;  // 128-byte swizzle rows of an input row
  static constexpr int kPanelCols = 128 / kInBytes;
  static constexpr bool kVTransposed = kInBytes == 1;  // 8-bit products take V K-major
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kPanels * kQPanelBytes;  // the Q tile
  static constexpr int kQSlotBytes = (kD / 64) * kQPanelBytes;  // a Q buffer: also holds O (16-bit) on its way out
  static constexpr int kKBytes = kPanels * kKPanelBytes;  // one stage of K (V is the same size)
  static constexpr int kQOffset = 0;                      // [2 buffers]
  static constexpr int kKOffset = kQOffset + 2 * kQSlotBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKBytes;
  static constexpr int kBarOffset = kVOffset + kStages * kKBytes;
  // q_full[2], q_empty[2], k_full, k_empty, v_full, v_empty [kStages each]
  static constexpr int kNumBars = 4 + 4 * kStages;
  static constexpr int kSlotOffset = kBarOffset + kNumBars * 8;  // tile index of each Q buffer
  static constexpr int kSmemBytes = kSlotOffset + 16 + 1024;      // + slack to align the base
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  // Named barriers: 1 + c ping-pong turn of consumer c; 1 + kConsumers + c its epilogue.
  static constexpr int kTurnBar = 1;
  static constexpr int kStageBar = 1 + kConsumers;

  static_assert(kD % 64 == 0 && kD <= 256, "head dim: 64, 128, 192 or 256");
  static_assert(kInBytes == 2 || (kD % 128 == 0 && kBlockN % 128 == 0), "e4m3: whole 128-byte rows of D and keys");
  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key tile");
  static_assert(kQPanelBytes % 1024 == 0 && kKPanelBytes % 1024 == 0, "panels start on 1024-byte boundaries");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");
};

// What one work tile covers. Tiles are numbered in decode_tile's order; a tile's m_block counts
// from the end of its sequence (e = num_m - 1 - m_block blocks before the last row), so query rows
// [m0, m0 + kBlockM) with m0 = q_len - (e + 1) kBlockM, possibly negative for the first block.
struct PersistentWork {
  int b, h;
  SeqBounds sb;
  int m0;
  KeyRange kr;
  int n;      // key tiles to visit
  bool rows;  // whether the tile holds rows of its sequence at all
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ PersistentWork persistent_work(const FwdParams& p, int t) {
  const TileCoord tc = decode_tile(t, p.num_m_blocks, p.hq, p.n_seq, p.heads_per_section);
  PersistentWork w;
  w.b = tc.b;
  w.h = tc.h;
  w.sb = seq_bounds(p, tc.b);
  const int e = p.num_m_blocks - 1 - tc.m_block;
  w.m0 = w.sb.q_len - (e + 1) * kBlockM;
  w.rows = w.m0 + kBlockM > 0;
  w.kr = {0, 0, 0, 0};
  w.n = 0;
  if (w.rows) {
    // Rows before the sequence start are ignored when choosing the key tiles and masks.
    w.kr = key_range(max(w.m0, 0), w.m0 + kBlockM, w.sb.q_len, w.sb.kv_len, p.window_left, p.window_right, kBlockN);
    w.n = w.kr.n_hi > w.kr.n_lo ? w.kr.n_hi - w.kr.n_lo : 0;
  }
  return w;
}

// The e4m3 scales of a work tile: what multiplies the softmax scale (q's times k's) and the output
// (v's), and the log2 of the probabilities' gain (8: P times 256); 1, 1 and 0 for 16-bit inputs.
struct TileScales {
  float qk = 1.0f, out = 1.0f, log2_gain = 0.0f;
  // The exponent's scale: q's and k's scales join the softmax scale unless a soft cap took it.
  __device__ __forceinline__ float exp_scale(const FwdParams& p) const {
    return p.softcap > 0.0f ? p.exp_scale : p.exp_scale * qk;
  }
};
template <class T>
__device__ __forceinline__ TileScales tile_scales(const FwdParams& p, int b, int h) {
  TileScales t;
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    const int i = b * p.hkv + h / p.group;
    t.qk = p.q_scale[i] * p.k_scale[i];
    t.out = p.v_scale[i];
    t.log2_gain = 8.0f;
  }
  return t;
}

// T: the inputs' element type; TOut: the output's (T, or a 16-bit type for e4m3 inputs). sched[0]: tiles
// taken beyond the first gridDim.x (each block starts on blockIdx.x); sched[1]: blocks that have found the
// queue empty. Both are zero at launch.
template <class Tile, class T, class TOut = T>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    attention_fwd_sm90_persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                                         const __grid_constant__ CUtensorMap tm_k,
                                         const __grid_constant__ CUtensorMap tm_v, const FwdParams p,
                                         int total_tiles, int* sched) {
#if AK_ARCH_SM90A
  constexpr int kD = Tile::kD, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
  constexpr int kPanels = Tile::kPanels, kConsumers = Tile::kConsumers;
  constexpr uint32_t kReleases = 4 * kConsumers;  // one arrival per consumer warp

  const uint32_t base = swizzled_smem().addr;
  auto sQ = [&](int b) { return base + Tile::kQOffset + b * Tile::kQSlotBytes; };
  const uint32_t bars = base + Tile::kBarOffset;
  auto q_full = [&](int b) { return bars + 8u * b; };
  auto q_empty = [&](int b) { return bars + 8u * (2 + b); };
  const KvRing<Tile> ring{base + Tile::kKOffset, base + Tile::kVOffset, bars + 8u * 4};
  auto slot = [&](int b) { return base + Tile::kSlotOffset + 4u * b; };

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), kReleases);
    }
    ring.init(kReleases);
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---------------- producer ----------------
    regs_decrease<Tile::kProducerRegs>();
    if (threadIdx.x == 0) {
      prefetch_tmap(&tm_q);
      prefetch_tmap(&tm_k);
      prefetch_tmap(&tm_v);
      int tile = blockIdx.x;
      int s = 0;
      uint32_t phase = 0;  // K/V ring position, walked identically by the consumers
      for (int local = 0;; ++local) {
        PersistentWork w = persistent_work<kBlockM, kBlockN>(p, tile < total_tiles ? tile : 0);
        while (tile < total_tiles && !w.rows) {  // tiles past the end of a shorter sequence
          tile = gridDim.x + atomicAdd(sched, 1);
          if (tile < total_tiles) w = persistent_work<kBlockM, kBlockN>(p, tile);
        }
        const int qb = local & 1;
        mbar_wait(q_empty(qb), ((local >> 1) & 1) ^ 1);  // a fresh barrier passes parity 1
        st_shared_s32(slot(qb), tile);
        if (tile >= total_tiles) {
          mbar_arrive(q_full(qb));  // tells the consumers to stop
          break;
        }
        const int next = gridDim.x + atomicAdd(sched, 1);  // its latency hides behind the loads
        const int hk = w.h / p.group;
        const int batch = p.cu_q != nullptr ? 0 : w.b;  // varlen maps have a batch extent of 1
        if (w.n > 0) {
          mbar_arrive_expect_tx(q_full(qb), Tile::kQBytes);
          load_panels<kPanels, Tile::kQPanelBytes, Tile::kPanelCols>(sQ(qb), &tm_q, q_full(qb), w.sb.q_off + w.m0,
                                                                    w.h, batch);
        } else {
          mbar_arrive(q_full(qb));  // no keys: the consumers only write O = 0 and LSE = -inf
        }
        for (int j = 0; j < w.n; ++j) {
          const int key0 = w.sb.kv_off + (w.kr.n_hi - 1 - j) * kBlockN;
          ring.load(&tm_k, &tm_v, s, phase, key0, hk, batch);
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        }
        tile = next;
      }
      // Every block has taken its last index once all have counted themselves here: the last
      // one puts the queue back for the next launch.
      __threadfence();
      if (atomicAdd(sched + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        atomicExch(sched, 0);
        atomicExch(sched + 1, 0);
      }
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<Tile::kConsumerRegs>();
    const int c = wg - 1;  // rows 64c .. 64c + 63 of each tile
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    // Ping-pong: consumer c waits on barrier kTurnBar + c before issuing its products and then
    // hands the turn to c + 1 (round robin). The last consumer opens the first turn of consumer 0,
    // and consumer 0 absorbs the last hand-over at the end, so every barrier use is balanced.
    const int my_turn = Tile::kTurnBar + c, next_turn = Tile::kTurnBar + (c + 1) % kConsumers;
    auto take_turn = [&]() { named_sync(my_turn, 256); };
    auto end_turn = [&]() { named_arrive(next_turn, 256); };
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    if (c == kConsumers - 1) named_arrive(next_turn, 256);

    int s = 0;
    uint32_t phase = 0;
    for (int local = 0;; ++local) {
      const int qb = local & 1;
      mbar_wait(q_full(qb), (local >> 1) & 1);
      const int tile = ld_shared_s32(slot(qb));
      if (tile >= total_tiles) break;
      const PersistentWork w = persistent_work<kBlockM, kBlockN>(p, tile);
      const int n = w.n;
      const int row0 = w.m0 + 64 * c + 16 * warp + lane / 4;  // this thread's rows: row0, row0 + 8
      RowState st;
      float o[kD / 2];
      st.start(o);

      if (n > 0) {
        constexpr bool kE4m3 = std::is_same_v<T, __nv_fp8_e4m3>;
        float s_acc[kBlockN / 2];
        uint32_t pw[kE4m3 ? kBlockN / 8 : kBlockN / 4];
        float corr[2];
        // The e4m3 scales of q and k multiply the raw scores: the soft cap's argument or the exponent.
        const TileScales ts = tile_scales<T>(p, w.b, w.h);
        const float gain = ts.log2_gain;
        const float cap_mul = p.softcap_mul * ts.qk;
        const float exp_scale = ts.exp_scale(p);
        const uint64_t q_desc = make_desc_sw128(sQ(qb) + c * 64 * 128, 16, 1024);
        auto issue_s = [&](int stage) { issue_qk<Tile, T>(s_acc, q_desc, ring.k_stage(stage)); };
        auto issue_o = [&](int stage) {
          if constexpr (kE4m3) {
            issue_pv_e4m3<Tile>(o, pw, ring.v_stage(stage));
          } else {
            issue_pv<Tile, T>(o, pw, ring.v_stage(stage));
          }
        };
        auto pack = [&]() {
          if constexpr (kE4m3) {
            pack_e4m3(s_acc, pw);
          } else {
            pack_pairs<T>(s_acc, pw);
          }
        };
        auto mask_and_cap = [&](int j) {
          if (p.softcap > 0.0f) apply_softcap(s_acc, cap_mul, p.softcap);
          if (tile_needs_mask(w.kr, (w.kr.n_hi - 1 - j) * kBlockN, kBlockN)) {
            // The keys each of this thread's rows admits, computed here (few tiles need them).
            apply_mask(s_acc, (w.kr.n_hi - 1 - j) * kBlockN + 2 * (lane & 3), row_window(p, w.sb, row0));
          }
        };
        auto advance = [&]() {
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        };
        // The stage before the current one: where the pending P V product reads V.
        auto prev_stage = [&]() { return s == 0 ? kStages - 1 : s - 1; };
        auto prev_phase = [&]() { return s == 0 ? phase ^ 1u : phase; };

        {
          // Key tile 0: S alone.
          mbar_wait(ring.k_full(s), phase);
          take_turn();
          issue_s(s);
          end_turn();
          wgmma_wait<0>();
          fence_regs(s_acc);
          release(ring.k_empty(s));
          mask_and_cap(0);
          softmax_step(s_acc, st, exp_scale, corr, gain);
          pack();
          advance();

          for (int j = 1; j < n; ++j) {
            const int sp = prev_stage();
            mbar_wait(ring.k_full(s), phase);
            mbar_wait(ring.v_full(sp), prev_phase());
            take_turn();
            issue_s(s);
            // O so far, in the max of step j - 2, moves to that of step j - 1 while S_j runs.
#pragma unroll
            for (int i = 0; i < kD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
            issue_o(sp);
            end_turn();
            wgmma_wait<1>();  // S_j is done; P_{j-1} V_{j-1} may still run
            fence_regs(s_acc);
            release(ring.k_empty(s));
            mask_and_cap(j);
            softmax_step(s_acc, st, exp_scale, corr, gain);
            wgmma_wait<0>();
            fence_regs(o);
            fence_regs(pw);
            release(ring.v_empty(sp));
            pack();
            advance();
          }

          const int sp = prev_stage();
          mbar_wait(ring.v_full(sp), prev_phase());
          take_turn();
#pragma unroll
          for (int i = 0; i < kD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
          issue_o(sp);
          end_turn();
          wgmma_wait<0>();
          fence_regs(o);
          release(ring.v_empty(sp));
        }
      }

      // ---------------- epilogue ----------------
      // The tile's coordinates again, from the slot (a fresh load: nothing of them stays live in
      // registers through the loop above).
      const PersistentWork we = persistent_work<kBlockM, kBlockN>(p, ld_shared_s32(slot(qb)));
      const TileScales ts = tile_scales<T>(p, we.b, we.h);
      float inv[2], lse[2];
      softmax_finish(st, ts.exp_scale(p), inv, lse, ts.log2_gain);
      inv[0] *= ts.out;
      inv[1] *= ts.out;
      // O goes through this consumer's rows of the Q buffer (its own S products are complete).
      store_o_rows<TOut, kD, Tile::kQPanelBytes>(o, inv, lse, sQ(qb) + c * 64 * 128, Tile::kStageBar + c, p, we.b, we.h,
                                              we.sb, we.m0 + 64 * c, tid);
      __syncwarp();
      release(q_empty(qb));  // this warp has read its O rows out of the buffer
    }
    if (c == 0) named_sync(my_turn, 256);  // the last hand-over of consumer kConsumers - 1
  }
#else
  (void)tm_q;
  (void)tm_k;
  (void)tm_v;
  (void)p;
  (void)total_tiles;
  (void)sched;
#endif
}

// The queue counters of `device` (two ints, zero between launches), allocated and zeroed (on
// `stream`, ahead of the first launch) on first use.
int* persistent_queue(int device, cudaStream_t stream);

}  // namespace ak::attention::cuda::sm90

namespace ak::attention::cuda {

// One launch of the persistent kernel at tile shape Shape (the output type from p.out_dtype for e4m3).
template <class Shape, class T>
void launch_shape(const FwdParams& p, cudaStream_t stream) {
  constexpr bool kE4m3 = std::is_same_v<T, __nv_fp8_e4m3>;
  using Half = std::conditional_t<kE4m3, __half, T>;
  using Bf16 = std::conditional_t<kE4m3, __nv_bfloat16, T>;
  auto kernel = kE4m3 && p.out_dtype == AK_FLOAT16 ? sm90::attention_fwd_sm90_persistent_kernel<Shape, T, Half>
                                                   : sm90::attention_fwd_sm90_persistent_kernel<Shape, T, Bf16>;
  const sm90::Sm90Maps maps = sm90::prepare_launch<Shape, T>(p, kernel);
  int device = 0;
  AK_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t tiles = int64_t(p.num_m_blocks) * p.hq * p.n_seq;
  if (tiles <= 0) return;
  if (tiles >= (int64_t{1} << 30)) fail(AK_ERR_UNSUPPORTED, "attention_fwd: too many work tiles for one launch");
  const int sms = ::ak::cuda::props(device).multiProcessorCount;
  const unsigned grid = static_cast<unsigned>(tiles < sms ? tiles : sms);
  int* queue = sm90::persistent_queue(device, stream);
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(maps.q, maps.k, maps.v, p, static_cast<int>(tiles), queue);
  ::ak::cuda::check_launch("attention_fwd_sm90_persistent_kernel");
}

// D = 64: three consumer warpgroups (192 x 128 tiles, three stages), where a tile's exponentials cost
// as much as its two products; D = 128: two (128 x 128 tiles, two stages); e4m3 at D = 128: two, 128 x
// 128 tiles, three stages (16 KB each of K and of V). A block per multiprocessor.
template <class T, int D, int Tile>
void FwdWgmmaPersistent<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  constexpr bool kE4m3 = std::is_same_v<T, __nv_fp8_e4m3>;
  using Shape = std::conditional_t<
      kE4m3, sm90::PersistentTile<D, 128, 3, 2, 1>,
      std::conditional_t<D == 64, sm90::PersistentTile<64, 128, 3, 3>, sm90::PersistentTile<D, 128, 2, 2>>>;
  launch_shape<Shape, T>(p, stream);
}


}  // namespace ak::attention::cuda
