// The Hopper forward of softmax attention (sm_90a), after FlashAttention-3.
//
// One block of three warpgroups owns 128 query rows of one (sequence, head):
//   warpgroup 0, the producer: one thread issues bulk tensor copies (TMA) of the Q tile and of the
//     K and V tiles into a ring of kStages shared-memory stages, each with a "full" mbarrier (the
//     copy engine completes it by bytes) and an "empty" mbarrier (the 8 consumer warps release it);
//     the warpgroup gives most of its registers away (setmaxnreg).
//   warpgroups 1 and 2, the consumers: 64 rows each. S = Q K^T with wgmma from shared memory (both
//     operands K-major, 128-byte swizzle), the online softmax in fp32 registers with exp2 and the
//     scale folded in, then O += P V with P from registers and V read transposed from shared
//     memory.
// Overlap: within a warpgroup, the S product of tile j + 1 is issued before the P V product of
// tile j, so the softmax of tile j + 1 runs while the tensor cores do P V (intra-warpgroup
// pipelining); across warpgroups, named barriers make the two consumers take turns issuing their
// products (ping-pong), so one's softmax overlaps the other's matrix products.
// Key tiles run from the last to the first: the tiles cut by a causal or window edge come first and
// only they pay for the mask; tiles outside the window are never loaded. The epilogue stages O
// through the consumer's slice of the Q buffer and writes it with 16-byte stores.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "attention/fwd/params.h"
#include "attention/fwd/softmax.cuh"
#include "attention/launchers.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda::sm90 {

using namespace ::ak::arch;

template <int kD_, int kBlockN_, int kStages_>
struct Sm90Tile {
  static constexpr int kD = kD_;
  static constexpr int kBlockM = 128;  // two consumer warpgroups of 64 rows
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 384;
  static constexpr int kPanels = kD / 64;  // 64 elements = one 128-byte swizzle row
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKBytes = kPanels * kKPanelBytes;  // one stage of K (V is the same)
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKBytes;
  static constexpr int kBarOffset = kVOffset + kStages * kKBytes;
  static constexpr int kNumBars = 1 + 4 * kStages;  // q_full, k_full, k_empty, v_full, v_empty
  // 1024 bytes of slack to align the base to the swizzle pattern.
  static constexpr int kSmemBytes = kBarOffset + kNumBars * 8 + 1024;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;

  static_assert(kD % 64 == 0 && kD <= 256, "head dim: 64, 128, 192 or 256");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key tile");
  static_assert(kKPanelBytes % 1024 == 0, "stages must start on a 1024-byte boundary");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file");
};

struct Sm90Maps {
  CUtensorMap q, k, v;
};

template <class Tile, class T>
__global__ void __launch_bounds__(384, 1)
    attention_fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v, const FwdParams p) {
#if AK_ARCH_SM90A
  constexpr int kD = Tile::kD, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
  constexpr int kPanels = Tile::kPanels;

  const TileCoord tc = decode_tile(blockIdx.x, p.num_m_blocks, p.hq, p.n_seq, p.heads_per_section);
  const SeqBounds sb = seq_bounds(p, tc.b);
  const int m0 = tc.m_block * kBlockM;
  if (m0 >= sb.q_len) return;  // uniform across the block, before any barrier
  const int m1 = min(m0 + kBlockM, sb.q_len);
  const KeyRange kr = key_range(m0, m1, sb.q_len, sb.kv_len, p.window_left, p.window_right, kBlockN);
  const int n = kr.n_hi > kr.n_lo ? kr.n_hi - kr.n_lo : 0;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sQ = base + Tile::kQOffset;
  const uint32_t sK = base + Tile::kKOffset;
  const uint32_t sV = base + Tile::kVOffset;
  const uint32_t bars = base + Tile::kBarOffset;
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8u * (1 + s); };
  auto k_empty = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto v_full = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8u * (1 + 3 * kStages + s); };

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 8);  // every consumer warp releases a stage
      mbar_init(v_empty(s), 8);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---------------- producer ----------------
    regs_decrease<Tile::kProducerRegs>();
    if (threadIdx.x == 0 && n > 0) {
      prefetch_tmap(&tm_q);
      prefetch_tmap(&tm_k);
      prefetch_tmap(&tm_v);
      const int hk = tc.h / p.group;
      const int batch = p.cu_q != nullptr ? 0 : tc.b;  // varlen maps have a batch extent of 1
      mbar_arrive_expect_tx(q_full, Tile::kQBytes);
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn) {
        tma_load_4d(sQ + pn * Tile::kQPanelBytes, &tm_q, q_full, pn * 64, sb.q_off + m0, tc.h, batch);
      }
      for (int it = 0; it < n; ++it) {
        const int s = it % kStages;
        const uint32_t phase = (it / kStages) & 1;
        const int key0 = sb.kv_off + (kr.n_hi - 1 - it) * kBlockN;
        mbar_wait(k_empty(s), phase ^ 1);
        mbar_arrive_expect_tx(k_full(s), Tile::kKBytes);
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn) {
          tma_load_4d(sK + s * Tile::kKBytes + pn * Tile::kKPanelBytes, &tm_k, k_full(s), pn * 64, key0, hk, batch);
        }
        mbar_wait(v_empty(s), phase ^ 1);
        mbar_arrive_expect_tx(v_full(s), Tile::kKBytes);
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn) {
          tma_load_4d(sV + s * Tile::kKBytes + pn * Tile::kKPanelBytes, &tm_v, v_full(s), pn * 64, key0, hk, batch);
        }
      }
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<Tile::kConsumerRegs>();
    const int c = wg - 1;  // which consumer: rows 64c .. 64c + 63 of the tile
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int my_turn = 1 + c, other_turn = 2 - c;  // named barrier ids 1 and 2

    // This thread's two rows (sequence positions) and the keys each admits.
    const int off = sb.kv_len - sb.q_len;
    int row[2], lo[2], hi[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row[r] = m0 + 64 * c + 16 * warp + lane / 4 + 8 * r;
      lo[r] = row[r] + off - p.window_left;
      hi[r] = min(sb.kv_len - 1, row[r] + off + p.window_right);
    }

    RowState st;
    st.init();
    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;

    if (n > 0) {
      float s_acc[kBlockN / 2];
      uint32_t pw[kBlockN / 4];
      // K-major operands: LBO unused, SBO = 8 rows of 128 bytes.
      const uint64_t q_desc = make_desc_sw128(sQ + c * 64 * 128, 16, 1024);
      // V is read MN-major (transposed): LBO = one 64-column panel, SBO = 8 key rows.
      auto k_desc = [&](int s) { return make_desc_sw128(sK + s * Tile::kKBytes, 16, 1024); };
      auto v_desc = [&](int s) { return make_desc_sw128(sV + s * Tile::kKBytes, Tile::kKPanelBytes, 1024); };

      // S = Q K^T: one wgmma per 16 columns of D; a 16-column step is 32 bytes inside a 128-byte
      // swizzle row, and every 4 steps move to the next panel.
      auto issue_s = [&](int s) {
        wgmma_fence();
        const uint64_t kd = k_desc(s);
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const uint32_t q_step = ((kk / 4) * Tile::kQPanelBytes + (kk % 4) * 32) >> 4;
          const uint32_t k_step = ((kk / 4) * Tile::kKPanelBytes + (kk % 4) * 32) >> 4;
          Wgmma<kBlockN, T>::template ss<0, 0>(s_acc, q_desc + q_step, kd + k_step, kk > 0 ? 1 : 0);
        }
        wgmma_commit();
      };
      // O += P V: one wgmma per 16 keys (16 rows of 128 bytes in every panel).
      auto issue_pv = [&](int s) {
        wgmma_fence();
        const uint64_t vd = v_desc(s);
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          Wgmma<kD, T>::template rs<1>(o, pw + 4 * kk, vd + ((kk * 16 * 128) >> 4), 1);
        }
        wgmma_commit();
      };
      auto release = [&](uint32_t bar) {
        if (lane == 0) mbar_arrive(bar);
      };
      auto mask_and_cap = [&](int it) {
        const int nb = kr.n_hi - 1 - it;
        if (p.softcap > 0.0f) apply_softcap(s_acc, p.softcap_mul, p.softcap);
        if (tile_needs_mask(kr, nb * kBlockN, kBlockN)) apply_mask(s_acc, nb * kBlockN + 2 * (lane & 3), lo, hi);
      };
      // Ping-pong turns: n + 1 issue points per consumer (S of tile 0, then S of j + 1 with P V of
      // j, then the last P V). Consumer 0 goes first; consumer 1 hands it the first turn and skips
      // its final hand-over, so every bar.sync has exactly one matching bar.arrive.
      const int turns = n + 1;
      int turn = 0;
      auto take_turn = [&]() { named_sync(my_turn, 256); };
      auto end_turn = [&]() {
        if (!(c == 1 && turn == turns - 1)) named_arrive(other_turn, 256);
        ++turn;
      };
      if (c == 1) named_arrive(other_turn, 256);

      mbar_wait(q_full, 0);

      // Tile 0.
      mbar_wait(k_full(0), 0);
      take_turn();
      issue_s(0);
      end_turn();
      wgmma_wait<0>();
      fence_regs(s_acc);
      release(k_empty(0));
      mask_and_cap(0);
      softmax_first(s_acc, st, p.exp_scale);
      pack_pairs<T>(s_acc, pw);

      for (int it = 1; it < n; ++it) {
        const int s = it % kStages, sp = (it - 1) % kStages;
        mbar_wait(k_full(s), (it / kStages) & 1);
        mbar_wait(v_full(sp), ((it - 1) / kStages) & 1);
        take_turn();
        issue_s(s);
        issue_pv(sp);
        end_turn();
        wgmma_wait<1>();  // S of tile it is done; P V of tile it - 1 may still run
        fence_regs(s_acc);
        release(k_empty(s));
        mask_and_cap(it);
        float corr[2];
        softmax_step(s_acc, st, p.exp_scale, corr);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pw);
        release(v_empty(sp));
#pragma unroll
        for (int i = 0; i < kD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
        pack_pairs<T>(s_acc, pw);
      }

      {
        const int sp = (n - 1) % kStages;
        mbar_wait(v_full(sp), ((n - 1) / kStages) & 1);
        take_turn();
        issue_pv(sp);
        end_turn();
        wgmma_wait<0>();
        fence_regs(o);
        release(v_empty(sp));
      }
    }

    // ---------------- epilogue ----------------
    float inv[2], lse[2];
    softmax_finish(st, p.exp_scale, inv, lse);
    // Stage O in this consumer's rows of the Q buffer, in the same 128-byte swizzled panels (so
    // the 4-byte writes of a warp hit 32 different banks), then copy out 16 bytes per thread.
    fence_proxy_async();
    const uint32_t my_rows = sQ + c * 64 * 128;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int rl = 16 * warp + lane / 4 + 8 * r;  // row within this consumer's 64
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const uint32_t addr =
            my_rows + (j / 8) * Tile::kQPanelBytes + rl * 128 + (((j % 8) ^ (rl & 7)) * 16) + (lane & 3) * 4;
        st_shared_u32(addr, pack2<T>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]));
      }
    }
    named_sync(3 + c, 128);
    T* out = static_cast<T*>(p.o) + tc.b * p.o_batch + int64_t(sb.q_off) * p.o_row + tc.h * p.o_head;
    constexpr int kChunks = kD / 8;
#pragma unroll 4
    for (int idx = tid; idx < 64 * kChunks; idx += 128) {
      const int rl = idx / kChunks, cc = idx % kChunks;
      const int grow = m0 + 64 * c + rl;
      const uint32_t addr = my_rows + (cc / 8) * Tile::kQPanelBytes + rl * 128 + (((cc % 8) ^ (rl & 7)) * 16);
      const uint4 v = ld_shared_v4(addr);
      if (grow < sb.q_len) *reinterpret_cast<uint4*>(out + int64_t(grow) * p.o_row + cc * 8) = v;
    }
    if (p.lse != nullptr && (lane & 3) == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (row[r] < sb.q_len) {
          p.lse[tc.b * p.lse_batch + tc.h * p.lse_head + int64_t(sb.q_off + row[r]) * p.lse_row] = lse[r];
        }
      }
    }
  }
#else
  (void)tm_q;
  (void)tm_k;
  (void)tm_v;
  (void)p;
#endif
}

// Host side: the tensor maps (sm90_tmap.cu) and the launch.
void encode_attention_maps(const FwdParams& p, int block_m, int block_n, int dtype, Sm90Maps& maps);

template <class Tile, class T>
void launch_fwd_sm90_impl(const FwdParams& p, int dtype, cudaStream_t stream) {
  Sm90Maps maps;
  encode_attention_maps(p, Tile::kBlockM, Tile::kBlockN, dtype, maps);
  auto kernel = attention_fwd_sm90_kernel<Tile, T>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  const int64_t tiles = int64_t(p.num_m_blocks) * p.hq * p.n_seq;
  kernel<<<static_cast<unsigned>(tiles), Tile::kThreads, Tile::kSmemBytes, stream>>>(maps.q, maps.k, maps.v, p);
  ::ak::cuda::check_launch("attention_fwd_sm90_kernel");
}

}  // namespace ak::attention::cuda::sm90

namespace ak::attention::cuda {

// 128 x 64 tiles, two stages of K and V (the registry builds it at D = 256).
template <class T, int D, int Tile>
void FwdWgmma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  constexpr int kDtype = std::is_same_v<T, __half> ? AK_FLOAT16 : AK_BFLOAT16;
  sm90::launch_fwd_sm90_impl<sm90::Sm90Tile<D, 64, 2>, T>(p, kDtype, stream);
}

}  // namespace ak::attention::cuda
