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
#include "attention/launchers.h"
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

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);
  const uint32_t bar_kv = sbase + Sh::OFF_BAR;
  const uint32_t bar_full0 = bar_kv + 8, bar_empty0 = bar_kv + 24;  // [stage] at + 8 * stage

  const TileRange mt = query_tiles(j0, BN, BM, s.q_len, s.kv_len, p.window_left, p.window_right);
  const int tiles_per_head = mt.hi - mt.lo + 1;
  const int n_iter = tiles_per_head > 0 ? tiles_per_head * p.group : 0;

  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    mbar_init(bar_full0, 1);
    mbar_init(bar_full0 + 8, 1);
    mbar_init(bar_empty0, 8);  // one arrival per consumer warp
    mbar_init(bar_empty0 + 8, 8);
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  const int batch_coord = p.cu_q != nullptr ? 0 : seq;  // varlen maps are [T, H, D] with batch 1

  if (wg == 0) {
    // ---- producer ----
    regs_decrease<24>();
    if (threadIdx.x == 0 && n_iter > 0) {
      prefetch_tmap(&maps.q);
      prefetch_tmap(&maps.dout);
      mbar_arrive_expect_tx(bar_kv, 2 * Sh::K_BYTES);
#pragma unroll
      for (int c = 0; c < Sh::PANELS; ++c) {
        tma_load_4d(sbase + Sh::OFF_K + c * Sh::PANEL_K, &maps.k, bar_kv, c * 64, s.kv_off + j0, hk, batch_coord);
        tma_load_4d(sbase + Sh::OFF_V + c * Sh::PANEL_K, &maps.v, bar_kv, c * 64, s.kv_off + j0, hk, batch_coord);
      }
      for (int it = 0; it < n_iter; ++it) {
        const int st = it & 1;
        mbar_wait(bar_empty0 + 8 * st, ((it >> 1) & 1) ^ 1);  // a fresh barrier passes parity 1
        const int h = hk * p.group + it / tiles_per_head;
        const int i0 = (mt.lo + it % tiles_per_head) * BM;
        const uint32_t full = bar_full0 + 8 * st;
        mbar_arrive_expect_tx(full, 2 * Sh::Q_BYTES + 2 * BM * 4);
#pragma unroll
        for (int c = 0; c < Sh::PANELS; ++c) {
          tma_load_4d(sbase + Sh::OFF_Q + st * Sh::Q_BYTES + c * Sh::PANEL_Q, &maps.q, full, c * 64, s.q_off + i0, h,
                      batch_coord);
          tma_load_4d(sbase + Sh::OFF_DO + st * Sh::Q_BYTES + c * Sh::PANEL_Q, &maps.dout, full, c * 64,
                      s.q_off + i0, h, batch_coord);
        }
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
  const int wi = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int off = s.kv_len - s.q_len;
  const int key0 = j0 + 64 * cw + 16 * wi + g;  // this thread's first key; the second is key0 + 8
  const bool softcapped = p.softcap > 0.0f;
  const uint32_t k_addr = sbase + Sh::OFF_K, v_addr = sbase + Sh::OFF_V;
  const float* lse_smem = reinterpret_cast<const float*>(smem + Sh::OFF_LSE);
  const float* dsum_smem = reinterpret_cast<const float*>(smem + Sh::OFF_DSUM);

  float acc_dk[D / 2], acc_dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc_dk[i] = acc_dv[i] = 0.0f;

  if (n_iter > 0) mbar_wait(bar_kv, 0);

  for (int it = 0; it < n_iter; ++it) {
    const int st = it & 1;
    const int h = hk * p.group + it / tiles_per_head;
    const int i0 = (mt.lo + it % tiles_per_head) * BM;
    const uint32_t q_addr = sbase + Sh::OFF_Q + st * Sh::Q_BYTES;
    const uint32_t do_addr = sbase + Sh::OFF_DO + st * Sh::Q_BYTES;
    const uint32_t ds_addr = sbase + Sh::OFF_DS + st * Sh::DS_BYTES;
    mbar_wait(bar_full0 + 8 * st, (it >> 1) & 1);

    // S^T = K_w Q^T and dP^T = V_w dO^T: both operands K-major, k-steps of 16 along D.
    float acc_s[32], acc_dp[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t a = k_addr + (kk / 4) * Sh::PANEL_K + cw * 64 * 128 + (kk % 4) * 32;
      const uint32_t b = q_addr + (kk / 4) * Sh::PANEL_Q + (kk % 4) * 32;
      Wgmma<64, T>::template ss<0, 0>(acc_s, desc_kmajor(a), desc_kmajor(b), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t a = v_addr + (kk / 4) * Sh::PANEL_K + cw * 64 * 128 + (kk % 4) * 32;
      const uint32_t b = do_addr + (kk / 4) * Sh::PANEL_Q + (kk % 4) * 32;
      Wgmma<64, T>::template ss<0, 0>(acc_dp, desc_kmajor(a), desc_kmajor(b), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_s);
    fence_regs(acc_dp);

    // P^T and dS^T, packed as the A fragments of the next wgmmas: register 2 j + half holds keys
    // key0 + 8 half, queries i0 + 8 j + 2 t + {0, 1}.
    const bool full = tile_fully_admitted(i0, BM, j0, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
    const float* lse_st = lse_smem + st * BM;
    const float* dsum_st = dsum_smem + st * BM;
    uint32_t p_frag[16], ds_frag[16];
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
          const float raw = acc_s[idx];
          const float lse_e = e ? lse.y : lse.x;
          float tanh_v = 0.0f, prob;
          if (softcapped) {
            tanh_v = accurate_tanh(raw * p.softcap_mul);
            prob = fast_exp2(tanh_v * p.exp_scale - lse_e);
          } else {
            prob = fast_exp2(raw * p.exp_scale - lse_e);
          }
          if (!full) {
            const int key = key0 + 8 * half, query = i0 + 8 * j + 2 * t + e;
            const int dist = key - (query + off);
            const bool ok = query < s.q_len && key < s.kv_len && dist >= -p.window_left && dist <= p.window_right;
            prob = ok ? prob : 0.0f;
          }
          float d = prob * (acc_dp[idx] - (e ? dsum.y : dsum.x));
          if (softcapped) d *= 1.0f - tanh_v * tanh_v;
          pr[e] = prob;
          ds[e] = d;
        }
        p_frag[2 * j + half] = pack2<T>(pr[0], pr[1]);
        ds_frag[2 * j + half] = pack2<T>(ds[0], ds[1]);
      }
    }

    // dS^T -> dS [query][key] (K-major for dQ = dS K), this consumer's panel of 64 keys. Matrix i of
    // step kk: queries 8 (2 kk + i / 2) .., keys 16 wi + 8 (i % 2) .. (one 16-byte chunk per row).
    {
      const int i = lane >> 3, r = lane & 7;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int query = 8 * (2 * kk + (i >> 1)) + r;
        const int chunk = 2 * wi + (i & 1);
        const uint32_t addr = ds_addr + cw * Sh::PANEL_Q + query * 128 + ((chunk ^ (query & 7)) << 4);
        stmatrix_x4_trans(addr, ds_frag[4 * kk], ds_frag[4 * kk + 1], ds_frag[4 * kk + 2], ds_frag[4 * kk + 3]);
      }
    }
    fence_proxy_async();  // the generic-proxy dS stores, before wgmma reads them

    // dV += P^T dO, dK += dS^T Q: A from registers, B = dO / Q MN-major (k-steps of 16 queries).
    fence_regs(p_frag);  // the fragments are complete before the fence that orders them for wgmma
    fence_regs(ds_frag);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      Wgmma<D, T>::template rs<1>(acc_dv, &p_frag[4 * kk], desc_mnmajor(do_addr + kk * 16 * 128, Sh::PANEL_Q), 1);
    }
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      Wgmma<D, T>::template rs<1>(acc_dk, &ds_frag[4 * kk], desc_mnmajor(q_addr + kk * 16 * 128, Sh::PANEL_Q), 1);
    }
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
    if (lane == 0) mbar_arrive(bar_empty0 + 8 * st);  // Q, dO, LSE and D of this stage are consumed

    float* dq_dst = p.dq_accum + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) * D + cw * (BM * Sh::DQ_COLS);
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

  // ---- epilogue: dK (times sm_scale) and dV through shared memory, 16-byte rows ----
  named_sync(kBarEpilogue, 256);  // neither consumer reads Q, dO or dS any more
  constexpr int LD = Sh::EPI_LD;
  T* stage_k = reinterpret_cast<T*>(smem + Sh::OFF_Q) + cw * 2 * BM * LD;
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
  named_sync(kBarConsumer0 + cw, 128);
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

}  // namespace ak::attention::cuda::bwd

namespace ak::attention::cuda {

template <class T, int D, int Tile>
void BwdWgmma<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  using Sh = bwd::Sm90Shape<D>;
  const BwdParams& p = a.p;
  const dim3 grid(ak::cuda::ceil_div(p.skv, Sh::BN), static_cast<unsigned>(p.hkv), static_cast<unsigned>(p.n_seq));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  const bwd::Sm90Maps maps = bwd::make_sm90_maps(p, std::is_same_v<T, __nv_bfloat16>, Sh::BM, Sh::BN);
  auto kernel = bwd::bwd_sm90_kernel<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::SMEM_BYTES));
  kernel<<<grid, Sh::THREADS, Sh::SMEM_BYTES, stream>>>(p, maps);
  ak::cuda::check_launch("attention backward: bwd_sm90_kernel");
}

}  // namespace ak::attention::cuda
