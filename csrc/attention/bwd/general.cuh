// The general attention backward (FlashAttention-2's algorithm) on mma.sync m16n8k16, for sm_80 and
// newer, any head dim that is a multiple of 8 up to 256 (zero-padded to a bucket of 64, 128 or 256),
// fp16 / bf16, dense or varlen, any window, softcap, GQA, and the deterministic dQ order.
//
// One block per (key tile of BN keys, KV head, sequence). It keeps K and V in shared memory and walks
// the query tiles (64 rows) of every query head of its KV group that meet its keys:
//   S  = Q K^T,  dP = dO V^T                    (scores recomputed; never stored beyond the tile)
//   P  = exp2(S * c - LSE_log2)                 (masked entries 0)
//   dS = P * (dP - D)  [* (1 - tanh^2) with a softcap]
//   dV += P^T dO,  dK += dS^T Q                 (registers, summed over the group's heads)
//   dQ_partial = dS K  -> added to dq_accum (fp32 atomics; in the deterministic order, key tile
//                         after key tile, behind a per-(head, query tile) counter)
// dK is multiplied by sm_scale at the end; dQ by the convert kernel.
#pragma once

#include <cmath>

#include "attention/bwd/launch.h"
#include "attention/bwd/mma.cuh"
#include "generated/attention_launchers.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda::bwd {

// Per head-dim bucket: key-tile size, warp grids of the three GEMM shapes, pipeline depth.
template <int Dpad>
struct GeneralConfig;

template <>
struct GeneralConfig<64> {
  static constexpr int BN = 128, STAGES = 2, DQ_PASSES = 1;
  static constexpr int WM_S = 2, WN_S = 4;    // S, dP: 64 x 128, warp tile 32 x 32
  static constexpr int WM_KV = 4, WN_KV = 2;  // dK, dV: 128 x 64, warp tile 32 x 32
  static constexpr int WM_Q = 4, WN_Q = 2;    // dQ: 64 x 64, warp tile 16 x 32
};
template <>
struct GeneralConfig<128> {
  static constexpr int BN = 64, STAGES = 2, DQ_PASSES = 1;
  static constexpr int WM_S = 4, WN_S = 2;    // 64 x 64 -> 16 x 32
  static constexpr int WM_KV = 2, WN_KV = 4;  // 64 x 128 -> 32 x 32
  static constexpr int WM_Q = 2, WN_Q = 4;    // 64 x 128 -> 32 x 32
};
template <>
struct GeneralConfig<256> {
  static constexpr int BN = 64, STAGES = 1, DQ_PASSES = 2;
  static constexpr int WM_S = 4, WN_S = 2;    // 64 x 64 -> 16 x 32
  static constexpr int WM_KV = 2, WN_KV = 4;  // 64 x 256 -> 32 x 64
  static constexpr int WM_Q = 2, WN_Q = 4;    // two passes of 64 x 128 -> 32 x 32
};

template <int Dpad>
struct GeneralShape {
  using C = GeneralConfig<Dpad>;
  static constexpr int BM = kBwdTileM, BN = C::BN, WARPS = 8, THREADS = WARPS * 32;
  static constexpr int LD = Dpad + 8;  // padded rows: ldmatrix rows land in distinct banks
  static constexpr int LDP = BN + 8;
  // Warp tiles, in 16 x 8 mma tiles.
  static constexpr int MT_S = BM / C::WM_S / 16, NT_S = BN / C::WN_S / 8;
  static constexpr int MT_KV = BN / C::WM_KV / 16, NT_KV = Dpad / C::WN_KV / 8;
  static constexpr int DQ_COLS = Dpad / C::DQ_PASSES;
  static constexpr int MT_Q = BM / C::WM_Q / 16, NT_Q = DQ_COLS / C::WN_Q / 8;
  static_assert(C::WM_S * C::WN_S == WARPS && C::WM_KV * C::WN_KV == WARPS && C::WM_Q * C::WN_Q == WARPS);
  static_assert(MT_S >= 1 && NT_S >= 2 && MT_KV >= 1 && NT_KV >= 2 && MT_Q >= 1 && NT_Q >= 2);
  // Shared memory, in elements of T then floats.
  static constexpr int K_ELEMS = BN * LD, Q_ELEMS = BM * LD, P_ELEMS = BM * LDP;
  static constexpr size_t SMEM_BYTES =
      2 * (2 * K_ELEMS + 2 * C::STAGES * Q_ELEMS + 2 * P_ELEMS) + sizeof(float) * 2 * C::STAGES * BM;
};

// Rows [0, rows) of a [rows x d] strided tile -> shared [ROWS][LD] (16-byte cp.async; zero fill
// past the valid rows and past d).
template <int ROWS, int Dpad, int LD, int THREADS, class T>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int64_t row_stride, int valid_rows, int d) {
  constexpr int CHUNKS = Dpad / 8;
  for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) {
    const int r = idx / CHUNKS, c = (idx % CHUNKS) * 8;
    const bool ok = r < valid_rows && c < d;
    cp_async16(dst + r * LD + c, ok ? static_cast<const void*>(src + r * row_stride + c) : src, ok ? 16 : 0);
  }
}

template <class T, int Dpad>
__global__ void __launch_bounds__(GeneralShape<Dpad>::THREADS) bwd_general_kernel(const BwdParams p) {
  using Sh = GeneralShape<Dpad>;
  using C = GeneralConfig<Dpad>;
  constexpr int BM = Sh::BM, BN = Sh::BN, LD = Sh::LD, LDP = Sh::LDP, THREADS = Sh::THREADS;
  constexpr int STAGES = C::STAGES;

  const int n_tile = blockIdx.x, hk = blockIdx.y, seq = blockIdx.z;
  const BwdSeq s = bwd_seq(p, seq);
  const int j0 = n_tile * BN;
  if (j0 >= s.kv_len) return;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + Sh::K_ELEMS;
  T* sQ = sV + Sh::K_ELEMS;             // [STAGES][BM][LD]
  T* sdO = sQ + STAGES * Sh::Q_ELEMS;   // [STAGES][BM][LD]
  T* sP = sdO + STAGES * Sh::Q_ELEMS;   // [BM][LDP]
  T* sdS = sP + Sh::P_ELEMS;            // [BM][LDP]
  float* sLse = reinterpret_cast<float*>(sdS + Sh::P_ELEMS);  // [STAGES][BM]
  float* sDsum = sLse + STAGES * BM;                          // [STAGES][BM]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int kv_rows = min(BN, s.kv_len - j0);

  const T* k_base = static_cast<const T*>(p.k) + seq * p.k_batch + (int64_t)(s.kv_off + j0) * p.k_row + hk * p.k_head;
  const T* v_base = static_cast<const T*>(p.v) + seq * p.v_batch + (int64_t)(s.kv_off + j0) * p.v_row + hk * p.v_head;
  load_rows<BN, Dpad, LD, THREADS>(sK, k_base, p.k_row, kv_rows, p.d);
  load_rows<BN, Dpad, LD, THREADS>(sV, v_base, p.v_row, kv_rows, p.d);
  cp_async_commit();

  const TileRange mt = query_tiles(j0, BN, BM, s.q_len, s.kv_len, p.window_left, p.window_right);
  const int tiles_per_head = mt.hi - mt.lo + 1;  // <= 0 when no query row sees these keys
  const int n_iter = tiles_per_head > 0 ? tiles_per_head * p.group : 0;
  const int off = s.kv_len - s.q_len;

  // Issues the loads of iteration it (head h, query tile m) into stage st.
  auto load_q_tile = [&](int it, int st) {
    const int h = hk * p.group + it / tiles_per_head;
    const int i0 = (mt.lo + it % tiles_per_head) * BM;
    const int rows = min(BM, s.q_len - i0);
    const int64_t row = s.q_off + i0;
    load_rows<BM, Dpad, LD, THREADS>(sQ + st * Sh::Q_ELEMS,
                                     static_cast<const T*>(p.q) + seq * p.q_batch + row * p.q_row + h * p.q_head,
                                     p.q_row, rows, p.d);
    load_rows<BM, Dpad, LD, THREADS>(sdO + st * Sh::Q_ELEMS,
                                     static_cast<const T*>(p.dout) + seq * p.do_batch + row * p.do_row + h * p.do_head,
                                     p.do_row, rows, p.d);
    const int64_t acc = static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0;
    if (threadIdx.x < BM / 4) {
      cp_async16(sLse + st * BM + threadIdx.x * 4, p.lse_log2 + acc + threadIdx.x * 4, 16);
    } else if (threadIdx.x < BM / 2) {
      const int x = threadIdx.x - BM / 4;
      cp_async16(sDsum + st * BM + x * 4, p.dsum + acc + x * 4, 16);
    }
  };

  float acc_dv[Sh::MT_KV][Sh::NT_KV][4], acc_dk[Sh::MT_KV][Sh::NT_KV][4];
  zero_acc(acc_dv);
  zero_acc(acc_dk);

  const int wm_s = warp / C::WN_S, wn_s = warp % C::WN_S;
  const int wm_kv = warp / C::WN_KV, wn_kv = warp % C::WN_KV;
  const int wm_q = warp / C::WN_Q, wn_q = warp % C::WN_Q;
  const bool softcapped = p.softcap > 0.0f;

  if (n_iter > 0) load_q_tile(0, 0);
  cp_async_commit();

  for (int it = 0; it < n_iter; ++it) {
    const int st = STAGES == 2 ? (it & 1) : 0;
    if constexpr (STAGES == 2) {
      if (it + 1 < n_iter) {
        load_q_tile(it + 1, (it + 1) & 1);  // the stage iteration it - 1 read; freed by its last barrier
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      if (it > 0) {
        load_q_tile(it, 0);  // one stage: freed by the previous iteration's last barrier
        cp_async_commit();
      }
      cp_async_wait<0>();
    }
    __syncthreads();

    const int h = hk * p.group + it / tiles_per_head;
    const int m = mt.lo + it % tiles_per_head;
    const int i0 = m * BM;
    const T* q_s = sQ + st * Sh::Q_ELEMS;
    const T* do_s = sdO + st * Sh::Q_ELEMS;
    const float* lse_s = sLse + st * BM;
    const float* dsum_s = sDsum + st * BM;

    // S = Q K^T and dP = dO V^T for this warp's 16*MT_S x 8*NT_S piece.
    {
      float acc_s[Sh::MT_S][Sh::NT_S][4], acc_dp[Sh::MT_S][Sh::NT_S][4];
      zero_acc(acc_s);
      zero_acc(acc_dp);
      const int r0 = wm_s * (BM / C::WM_S), c0 = wn_s * (BN / C::WN_S);
      warp_mma<Sh::MT_S, Sh::NT_S, true, true>(acc_s, q_s, LD, r0, sK, LD, c0, Dpad);
      warp_mma<Sh::MT_S, Sh::NT_S, true, true>(acc_dp, do_s, LD, r0, sV, LD, c0, Dpad);

      const bool full = tile_fully_admitted(i0, BM, j0, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
#pragma unroll
      for (int mi = 0; mi < Sh::MT_S; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + mi * 16 + g + half * 8;
          const float lse = lse_s[r], dsum = dsum_s[r];
          const int pos = i0 + r + off;  // the row's key position
#pragma unroll
          for (int ni = 0; ni < Sh::NT_S; ++ni) {
            const int c = c0 + ni * 8 + 2 * t;
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float raw = acc_s[mi][ni][half * 2 + e];
              float prob, tanh_v = 0.0f;
              if (softcapped) {
                tanh_v = accurate_tanh(raw * p.softcap_mul);
                prob = fast_exp2(tanh_v * p.exp_scale - lse);  // exp_scale = softcap * log2(e)
              } else {
                prob = fast_exp2(raw * p.exp_scale - lse);  // exp_scale = sm_scale * log2(e)
              }
              if (!full) {
                const int j = j0 + c + e, dist = j - pos;
                const bool ok = i0 + r < s.q_len && j < s.kv_len && dist >= -p.window_left && dist <= p.window_right;
                prob = ok ? prob : 0.0f;
              }
              float ds = prob * (acc_dp[mi][ni][half * 2 + e] - dsum);
              if (softcapped) ds *= 1.0f - tanh_v * tanh_v;
              pv[e] = prob;
              dsv[e] = ds;
            }
            *reinterpret_cast<uint32_t*>(sP + r * LDP + c) = pack2<T>(pv[0], pv[1]);
            *reinterpret_cast<uint32_t*>(sdS + r * LDP + c) = pack2<T>(dsv[0], dsv[1]);
          }
        }
      }
    }
    __syncthreads();

    // dV += P^T dO, dK += dS^T Q: A is the transposed [BM][BN] tile, B the [BM][Dpad] tile.
    {
      const int r0 = wm_kv * (BN / C::WM_KV), c0 = wn_kv * (Dpad / C::WN_KV);
      warp_mma<Sh::MT_KV, Sh::NT_KV, false, false>(acc_dv, sP, LDP, r0, do_s, LD, c0, BM);
      warp_mma<Sh::MT_KV, Sh::NT_KV, false, false>(acc_dk, sdS, LDP, r0, q_s, LD, c0, BM);
    }

    // dQ_partial = dS K, added to the fp32 accumulator (in key-tile order when deterministic).
    int* sem = nullptr;
    int rank = 0;
    if (p.dq_semaphore != nullptr) {
      const TileRange nt = key_tiles(i0, BM, BN, s.q_len, s.kv_len, p.window_left, p.window_right);
      rank = n_tile - nt.lo;  // key tiles nt.lo .. n_tile - 1 add to this query tile first
      sem = p.dq_semaphore + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) / BM;
      if (threadIdx.x == 0) {
        while (ld_acquire_gpu(sem) != rank) __nanosleep(64);
      }
      __syncthreads();
    }
    float* dq_tile = p.dq_accum + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) * p.d;
#pragma unroll
    for (int pass = 0; pass < C::DQ_PASSES; ++pass) {
      float acc_dq[Sh::MT_Q][Sh::NT_Q][4];
      zero_acc(acc_dq);
      const int r0 = wm_q * (BM / C::WM_Q), c0 = pass * Sh::DQ_COLS + wn_q * (Sh::DQ_COLS / C::WN_Q);
      warp_mma<Sh::MT_Q, Sh::NT_Q, true, false>(acc_dq, sdS, LDP, r0, sK, LD, c0, BN);
#pragma unroll
      for (int mi = 0; mi < Sh::MT_Q; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + mi * 16 + g + half * 8;
          if (i0 + r >= s.q_len) continue;
#pragma unroll
          for (int ni = 0; ni < Sh::NT_Q; ++ni) {
            const int c = c0 + ni * 8 + 2 * t;
            if (c >= p.d) continue;
            atomicAdd(dq_tile + r * p.d + c, acc_dq[mi][ni][half * 2]);
            atomicAdd(dq_tile + r * p.d + c + 1, acc_dq[mi][ni][half * 2 + 1]);
          }
        }
    }
    if (sem != nullptr) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) st_release_gpu(sem, rank + 1);
    }
    __syncthreads();  // the stage, P and dS are rewritten next
  }

  // Epilogue: dK (times sm_scale) and dV in the output dtype; rows past the sequence are dropped.
  T* dk = static_cast<T*>(p.dk) + seq * p.dk_batch + (int64_t)(s.kv_off + j0) * p.dk_row + hk * p.dk_head;
  T* dv = static_cast<T*>(p.dv) + seq * p.dv_batch + (int64_t)(s.kv_off + j0) * p.dv_row + hk * p.dv_head;
  const int r0 = wm_kv * (BN / C::WM_KV), c0 = wn_kv * (Dpad / C::WN_KV);
#pragma unroll
  for (int mi = 0; mi < Sh::MT_KV; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + mi * 16 + g + half * 8;
      if (r >= kv_rows) continue;
#pragma unroll
      for (int ni = 0; ni < Sh::NT_KV; ++ni) {
        const int c = c0 + ni * 8 + 2 * t;
        if (c >= p.d) continue;
        *reinterpret_cast<uint32_t*>(dk + r * p.dk_row + c) =
            pack2<T>(acc_dk[mi][ni][half * 2] * p.sm_scale, acc_dk[mi][ni][half * 2 + 1] * p.sm_scale);
        *reinterpret_cast<uint32_t*>(dv + r * p.dv_row + c) =
            pack2<T>(acc_dv[mi][ni][half * 2], acc_dv[mi][ni][half * 2 + 1]);
      }
    }
}

}  // namespace ak::attention::cuda::bwd

namespace ak::attention::cuda {

// D: the head-dim bucket (64, 128 or 256) the kernel is built for; p.d <= D is zero-padded.
template <class T, int D, int Tile>
void BwdGeneral<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  using Sh = bwd::GeneralShape<D>;
  const BwdParams& p = a.p;
  const dim3 grid(ak::cuda::ceil_div(p.skv, Sh::BN), static_cast<unsigned>(p.hkv), static_cast<unsigned>(p.n_seq));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  const size_t limit = ak::cuda::props(a.device).sharedMemPerBlockOptin;
  if (Sh::SMEM_BYTES > limit) {
    fail(AK_ERR_UNSUPPORTED, "attention backward: head dim " + std::to_string(p.d) + " needs " +
                                 std::to_string(Sh::SMEM_BYTES) + " bytes of shared memory per block; this GPU has " +
                                 std::to_string(limit));
  }
  auto kernel = bwd::bwd_general_kernel<T, D>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(Sh::SMEM_BYTES)));
  kernel<<<grid, Sh::THREADS, Sh::SMEM_BYTES, stream>>>(p);
  ak::cuda::check_launch("attention backward: bwd_general_kernel");
}

}  // namespace ak::attention::cuda
