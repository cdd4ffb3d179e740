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
#include <cuda_fp8.h>

#include <type_traits>

#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "attention/fwd/params.h"
#include "attention/fwd/softmax.cuh"
#include "generated/attention_launchers.h"
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
  static constexpr int kPanelCols = 64;
  static constexpr bool kVTransposed = false;  // V tiles as stored: key rows of D columns
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

// The epilogue of the Hopper forward kernels: a consumer's 64 rows of O (the m64nD accumulator o
// times 1 / row sum), staged through its own rows of the Q buffer (`rows`, panels kQPanelBytes apart)
// in the 128-byte swizzle, so that a warp's 4-byte writes hit 32 different banks, then written as
// 16-byte rows; then the LSE of its rows. row0: the sequence row of the consumer's first row (rows
// outside [0, q_len) are not written); bar: the consumer's named barrier.
template <class T, int kD, int kQPanelBytes>
__device__ __forceinline__ void store_o_rows(const float (&o)[kD / 2], const float (&inv)[2], const float (&lse)[2],
                                             uint32_t rows, int bar, const FwdParams& p, int b, int h,
                                             const SeqBounds& sb, int row0, int tid) {
  const int warp = tid / 32, lane = tid % 32;
  fence_proxy_async();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rl = 16 * warp + lane / 4 + 8 * r;  // row within this consumer's 64
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const uint32_t addr = rows + (j / 8) * kQPanelBytes + rl * 128 + (((j % 8) ^ (rl & 7)) * 16) + (lane & 3) * 4;
      st_shared_u32(addr, pack2<T>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]));
    }
  }
  named_sync(bar, 128);
  T* out = static_cast<T*>(p.o) + b * p.o_batch + int64_t(sb.q_off) * p.o_row + h * p.o_head;
  constexpr int kChunks = kD / 8;
#pragma unroll 4
  for (int idx = tid; idx < 64 * kChunks; idx += 128) {
    const int rl = idx / kChunks, cc = idx % kChunks;
    const int grow = row0 + rl;
    const uint32_t addr = rows + (cc / 8) * kQPanelBytes + rl * 128 + (((cc % 8) ^ (rl & 7)) * 16);
    const uint4 v = ld_shared_v4(addr);
    if (grow >= 0 && grow < sb.q_len) *reinterpret_cast<uint4*>(out + int64_t(grow) * p.o_row + cc * 8) = v;
  }
  if (p.lse != nullptr && (lane & 3) == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * warp + lane / 4 + 8 * r;
      if (row >= 0 && row < sb.q_len) p.lse[b * p.lse_batch + h * p.lse_head + int64_t(sb.q_off + row) * p.lse_row] = lse[r];
    }
  }
}

// One tile of rows [row, row + rows) of a [batch, rows, heads, D] tensor map into kPanels panels of
// kPanelCols columns (128-byte swizzle rows: 64 16-bit or 128 8-bit elements), kPanelBytes apart,
// completing on bar.
template <int kPanels, int kPanelBytes, int kPanelCols = 64>
__device__ __forceinline__ void load_panels(uint32_t dst, const CUtensorMap* map, uint32_t bar, int row, int head,
                                            int batch) {
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn) {
    tma_load_4d(dst + pn * kPanelBytes, map, bar, pn * kPanelCols, row, head, batch);
  }
}

// The K / V ring of the Hopper forward kernels: kStages stages of K and of V in shared memory, each
// with a "full" mbarrier (the copy engine completes it by bytes) and an "empty" one (every consumer
// warp releases it). bars: the first of the ring's 4 kStages barriers.
template <class Tile>
struct KvRing {
  uint32_t k, v, bars;
  __device__ __forceinline__ uint32_t k_stage(int s) const { return k + s * Tile::kKBytes; }
  __device__ __forceinline__ uint32_t v_stage(int s) const { return v + s * Tile::kKBytes; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return bars + 8u * s; }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bars + 8u * (Tile::kStages + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return bars + 8u * (2 * Tile::kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return bars + 8u * (3 * Tile::kStages + s); }

  __device__ __forceinline__ void init(uint32_t releases) const {
    for (int s = 0; s < Tile::kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), releases);
      mbar_init(v_empty(s), releases);
    }
  }

  // Producer: K, then V, of the key block at row key0 into stage s, each once the consumers have
  // released the stage's previous use (phase: how often the ring went round, mod 2). A transposed V
  // ([batch, heads, D, keys]) comes in panels of 128 keys by D rows.
  __device__ __forceinline__ void load(const CUtensorMap* tm_k, const CUtensorMap* tm_v, int s, uint32_t phase,
                                       int key0, int hk, int batch) const {
    mbar_wait(k_empty(s), phase ^ 1);  // a fresh barrier passes parity 1
    mbar_arrive_expect_tx(k_full(s), Tile::kKBytes);
    load_panels<Tile::kPanels, Tile::kKPanelBytes, Tile::kPanelCols>(k_stage(s), tm_k, k_full(s), key0, hk, batch);
    mbar_wait(v_empty(s), phase ^ 1);
    mbar_arrive_expect_tx(v_full(s), Tile::kKBytes);
    if constexpr (Tile::kVTransposed) {
#pragma unroll
      for (int pn = 0; pn < Tile::kBlockN / 128; ++pn) {
        tma_load_4d(v_stage(s) + pn * Tile::kD * 128, tm_v, v_full(s), key0 + 128 * pn, 0, hk, batch);
      }
    } else {
      load_panels<Tile::kPanels, Tile::kKPanelBytes>(v_stage(s), tm_v, v_full(s), key0, hk, batch);
    }
  }
};

// S = Q K^T of a consumer's 64 rows and the K block of one stage: one wgmma per 32 bytes of a row
// (16 columns of D in 16 bits, 32 in e4m3), both operands K-major (LBO unused, SBO = 8 rows of 128
// bytes); a step is 32 bytes inside a 128-byte swizzle row, and every 4 steps move to the next panel.
template <class Tile, class T>
__device__ __forceinline__ void issue_qk(float (&s_acc)[Tile::kBlockN / 2], uint64_t q_desc, uint32_t k_stage) {
  wgmma_fence();
  const uint64_t kd = make_desc_sw128(k_stage, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < Tile::kPanels * 4; ++kk) {
    const uint32_t q_step = ((kk / 4) * Tile::kQPanelBytes + (kk % 4) * 32) >> 4;
    const uint32_t k_step = ((kk / 4) * Tile::kKPanelBytes + (kk % 4) * 32) >> 4;
    Wgmma<Tile::kBlockN, T>::template ss<0, 0>(s_acc, q_desc + q_step, kd + k_step, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

// O += P V with P from registers and V read MN-major (transposed: LBO = one 64-column panel, SBO = 8
// key rows): one wgmma per 16 keys (16 rows of 128 bytes in every panel).
template <class Tile, class T>
__device__ __forceinline__ void issue_pv(float (&o)[Tile::kD / 2], const uint32_t (&pw)[Tile::kBlockN / 4],
                                         uint32_t v_stage) {
  wgmma_fence();
  const uint64_t vd = make_desc_sw128(v_stage, Tile::kKPanelBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 16; ++kk) {
    Wgmma<Tile::kD, T>::template rs<1>(o, pw + 4 * kk, vd + ((kk * 16 * 128) >> 4), 1);
  }
  wgmma_commit();
}

// O += P V in e4m3: P (kBlockN / 8 words a thread, pack_e4m3) from registers, V transposed in the stage
// (D rows of 128 keys a panel, K-major like K): one wgmma per 32 keys, 32 bytes along the rows.
template <class Tile>
__device__ __forceinline__ void issue_pv_e4m3(float (&o)[Tile::kD / 2], const uint32_t (&pw)[Tile::kBlockN / 8],
                                              uint32_t v_stage) {
  wgmma_fence();
  const uint64_t vd = make_desc_sw128(v_stage, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 32; ++kk) {
    const uint32_t step = ((kk / 4) * Tile::kD * 128 + (kk % 4) * 32) >> 4;
    Wgmma<Tile::kD, __nv_fp8_e4m3>::template rs<0>(o, pw + 4 * kk, vd + step, 1);
  }
  wgmma_commit();
}

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

  const uint32_t base = swizzled_smem().addr;
  const uint32_t sQ = base + Tile::kQOffset;
  const KvRing<Tile> ring{base + Tile::kKOffset, base + Tile::kVOffset, base + Tile::kBarOffset + 8};
  const uint32_t q_full = base + Tile::kBarOffset;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    ring.init(8);  // every consumer warp releases a stage
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
      load_panels<kPanels, Tile::kQPanelBytes>(sQ, &tm_q, q_full, sb.q_off + m0, tc.h, batch);
      for (int it = 0; it < n; ++it) {
        const int key0 = sb.kv_off + (kr.n_hi - 1 - it) * kBlockN;
        ring.load(&tm_k, &tm_v, it % kStages, (it / kStages) & 1, key0, hk, batch);
      }
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<Tile::kConsumerRegs>();
    const int c = wg - 1;  // which consumer: rows 64c .. 64c + 63 of the tile
    const int tid = threadIdx.x % 128;
    const int warp = tid / 32, lane = tid % 32;
    const int my_turn = 1 + c, other_turn = 2 - c;  // named barrier ids 1 and 2

    // The keys this thread's two rows admit.
    const RowWindow window = row_window(p, sb, m0 + 64 * c + 16 * warp + lane / 4);

    RowState st;
    float o[kD / 2];
    st.start(o);

    if (n > 0) {
      float s_acc[kBlockN / 2];
      uint32_t pw[kBlockN / 4];
      const uint64_t q_desc = make_desc_sw128(sQ + c * 64 * 128, 16, 1024);
      auto issue_s = [&](int s) { issue_qk<Tile, T>(s_acc, q_desc, ring.k_stage(s)); };
      auto issue_o = [&](int s) { issue_pv<Tile, T>(o, pw, ring.v_stage(s)); };
      auto release = [&](uint32_t bar) {
        if (lane == 0) mbar_arrive(bar);
      };
      auto mask_and_cap = [&](int it) {
        const int nb = kr.n_hi - 1 - it;
        if (p.softcap > 0.0f) apply_softcap(s_acc, p.softcap_mul, p.softcap);
        if (tile_needs_mask(kr, nb * kBlockN, kBlockN)) apply_mask(s_acc, nb * kBlockN + 2 * (lane & 3), window);
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
      mbar_wait(ring.k_full(0), 0);
      take_turn();
      issue_s(0);
      end_turn();
      wgmma_wait<0>();
      fence_regs(s_acc);
      release(ring.k_empty(0));
      mask_and_cap(0);
      softmax_first(s_acc, st, p.exp_scale);
      pack_pairs<T>(s_acc, pw);

      for (int it = 1; it < n; ++it) {
        const int s = it % kStages, sp = (it - 1) % kStages;
        mbar_wait(ring.k_full(s), (it / kStages) & 1);
        mbar_wait(ring.v_full(sp), ((it - 1) / kStages) & 1);
        take_turn();
        issue_s(s);
        issue_o(sp);
        end_turn();
        wgmma_wait<1>();  // S of tile it is done; P V of tile it - 1 may still run
        fence_regs(s_acc);
        release(ring.k_empty(s));
        mask_and_cap(it);
        float corr[2];
        softmax_step(s_acc, st, p.exp_scale, corr);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(pw);
        release(ring.v_empty(sp));
#pragma unroll
        for (int i = 0; i < kD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
        pack_pairs<T>(s_acc, pw);
      }

      {
        const int sp = (n - 1) % kStages;
        mbar_wait(ring.v_full(sp), ((n - 1) / kStages) & 1);
        take_turn();
        issue_o(sp);
        end_turn();
        wgmma_wait<0>();
        fence_regs(o);
        release(ring.v_empty(sp));
      }
    }

    // ---------------- epilogue ----------------
    float inv[2], lse[2];
    softmax_finish(st, p.exp_scale, inv, lse);
    store_o_rows<T, kD, Tile::kQPanelBytes>(o, inv, lse, sQ + c * 64 * 128, 3 + c, p, tc.b, tc.h, sb, m0 + 64 * c,
                                            tid);
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

// What every Hopper forward launch does first: Q, K and V tensor maps for Tile's blocks, and the
// kernel's shared-memory allowance.
template <class Tile, class T, class Kernel>
Sm90Maps prepare_launch(const FwdParams& p, Kernel kernel) {
  Sm90Maps maps;
  const int dtype = std::is_same_v<T, __half>          ? AK_FLOAT16
                    : std::is_same_v<T, __nv_fp8_e4m3> ? AK_FLOAT8_E4M3
                                                       : AK_BFLOAT16;
  encode_attention_maps(p, Tile::kBlockM, Tile::kBlockN, dtype, maps);
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  return maps;
}

}  // namespace ak::attention::cuda::sm90

namespace ak::attention::cuda {

// 128 x 64 tiles, two stages of K and V (the registry builds it at D = 256); a block per tile.
template <class T, int D, int Tile>
void FwdWgmma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  using Shape = sm90::Sm90Tile<D, 64, 2>;
  auto kernel = sm90::attention_fwd_sm90_kernel<Shape, T>;
  const sm90::Sm90Maps maps = sm90::prepare_launch<Shape, T>(p, kernel);
  const int64_t tiles = int64_t(p.num_m_blocks) * p.hq * p.n_seq;
  kernel<<<static_cast<unsigned>(tiles), Shape::kThreads, Shape::kSmemBytes, stream>>>(maps.q, maps.k, maps.v, p);
  ::ak::cuda::check_launch("attention_fwd_sm90_kernel");
}

}  // namespace ak::attention::cuda
