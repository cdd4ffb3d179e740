// Stage 2 of the fast chunked forward on Hopper (sm_90a): the same recurrence as
// cuda_fwd_chunk_state.cuh (one block per sequence, value head and V tile, S in fp32 registers),
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

#include "../cuda/runtime.cuh"
#include "cuda_fwd_kernels.h"
#include "cuda_fwd_layouts.h"
#include "cuda_fwd_mma.cuh"
#include "cuda_fwd_segments.cuh"
#include "cuda_fwd_sm90.cuh"
#include "cuda_fwd_wgmma.cuh"

namespace ak::linear::cuda::fwd {

constexpr int kSm90StateThreads = 256;

__device__ __forceinline__ void st_pair_at(unsigned char* addr, uint32_t v) { *reinterpret_cast<uint32_t*>(addr) = v; }

// Step profile (StateParams::profile): thread 0 of each warpgroup of a profiled block adds the cycles
// since its previous stamp to the phase's slot; off (prof == nullptr) it costs one uniform branch.
struct StepClock {
  unsigned long long* prof = nullptr;
  long long last = 0;
  __device__ __forceinline__ void start() {
    if (prof) last = clock64();
  }
  __device__ __forceinline__ void stamp(int phase) {
    if (prof) {
      const long long now = clock64();
      atomicAdd(prof + phase, static_cast<unsigned long long>(now - last));
      last = now;
    }
  }
  __device__ __forceinline__ void step() {
    if (prof) atomicAdd(prof + kProfileSlots - 1, 1ull);
  }
};
__device__ __forceinline__ unsigned long long* profile_slots(unsigned long long* profile, int wg) {
  const int block = blockIdx.y * gridDim.x + blockIdx.x;
  if (profile == nullptr || block >= kProfileBlocks || (threadIdx.x & 127) != 0) return nullptr;
  return profile + (block * 2 + wg) * kProfileSlots;
}

// Stores the VT / 64 swizzled panels of a 16-bit [rows, VT] tile (panel stride rows x 128 bytes) to
// rows row0 .. row0 + rows - 1, columns vt0 .. vt0 + VT - 1 of a map whose boxes are 64 x rows, as one
// bulk group of the calling thread (the backward's saved states: Sb, rows = D; U, rows = 64).
template <int VT>
__device__ __forceinline__ void store_panels(const CUtensorMap* map, uint32_t tile, int rows, int vt0, int row0) {
#pragma unroll
  for (int pn = 0; pn < VT / 64; ++pn) {
    attention::cuda::sm90::tma_store_4d(map, tile + pn * rows * 128, vt0 + 64 * pn, row0, 0, 0);
  }
  attention::cuda::sm90::bulk_commit();
}

// Named barrier over `threads` threads (id 0 is __syncthreads).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Copies a 64 x COLS tile of 16-bit rows (`stride` elements apart from `src`; rows >= valid are zero
// filled, nothing read for them) into 128-byte swizzled panels with THREADS threads. A thread's 16-byte
// column chunk is the same on all its rows, so only the row pointer advances.
template <int COLS, int THREADS = kSm90StateThreads, class T>
__device__ __forceinline__ void async_rows_sw128(uint32_t dst, int valid, const T* src, int64_t stride, int tid) {
  constexpr int kChunks = COLS / 8;
  constexpr int kRowsPerPass = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && 64 % kRowsPerPass == 0, "tile shape");
  const int c = tid % kChunks, r0 = tid / kChunks;
  const T* s0 = src + r0 * stride + c * 8;
#pragma unroll
  for (int j = 0; j < 64 / kRowsPerPass; ++j) {
    const int r = r0 + j * kRowsPerPass;
    const bool ok = r < valid;
    cp_async16(dst + (c >> 3) * 64 * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4),
               ok ? s0 + j * kRowsPerPass * stride : src, ok ? 16 : 0);
  }
}

// This lane's row address for an x4 ldmatrix / stmatrix of accumulator pairs 2 cb .. 2 cb + 3 of a
// warp's 16 rows (row0 .. row0 + 15) in a tile of `rows` rows of 128-byte swizzled panels: matrix m
// is rows row0 + 8 (m & 1) .. + 7 of columns 8 (cb + m / 2) .. + 7, the order of the pairs in
// the accumulator (even pairs the upper 8 rows, odd the lower, two 8-column blocks).
__device__ __forceinline__ uint32_t frag_x4_addr(uint32_t tile, int rows, int row0, int cb, int lane) {
  const int m = lane >> 3;
  return tile + sm90::sw128_offset(rows, row0 + 8 * (m & 1) + (lane & 7), 8 * (cb + (m >> 1)));
}

// ---- the output side, shared by the two-role and split kernels ----
// A thread (warp, g8 = lane / 4, t4 = lane % 4) of a warpgroup holds rows 16 warp + g8 and + 8 of a 64-row
// accumulator; pair i of it is at row + 8 ((i / 2) % 2), columns 8 (i / 4) + 2 t4 and + 1.

// (a) P = Q K^T and (b) QS = Q Sb (Sb an N-major D x VT tile), two commit groups so that P's scaling
// can start while QS runs. Q and K are 64 x D tiles of 128-byte swizzled panels.
template <class T, int D, int VT>
__device__ __forceinline__ void issue_p_and_qs(float (&pacc)[32], float (&qs)[VT / 2], uint32_t q_tile,
                                               uint32_t k_tile, uint64_t desc_sb) {
  using namespace sm90;
  wgmma_fence();
  const uint64_t dq = make_desc_sw128(q_tile, 16, 1024), dk = make_desc_sw128(k_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    LinWgmma<64, T>::template ss<0, 0>(pacc, dq + kmajor_step(64, kk), dk + kmajor_step(64, kk), kk > 0);
  }
  wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    LinWgmma<VT, T>::template ss<0, 1>(qs, dq + kmajor_step(64, kk), desc_sb + mnmajor_step(kk), kk > 0);
  }
  wgmma_commit();
}

// Row factors rq_i = scale / |q_i| (the L2 norm in the kernel) or scale, from the Q tile in shared
// memory (four lanes share a row: each sums two 16-byte pieces of every panel).
template <class T, int D>
__device__ __forceinline__ void q_row_factors(float (&rq)[2], const unsigned char* q_tile, bool l2norm, float scale,
                                              int warp, int g8, int t4) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = 16 * warp + g8 + 8 * r;
    float ss = 0.f;
    if (l2norm) {
#pragma unroll
      for (int pn = 0; pn < D / 64; ++pn) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          ss = add_squares8<T>(
              *reinterpret_cast<const uint4*>(q_tile + pn * 64 * 128 + i * 128 + (((2 * t4 + hh) ^ (i & 7)) << 4)), ss);
        }
      }
      ss += __shfl_xor_sync(0xffffffffu, ss, 1);
      ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    }
    rq[r] = scale * (l2norm ? rsqrtf(ss + kL2NormEps) : 1.f);
  }
}

// P_ij = rq_i rk_j e^(gc_i - gc_j) (q_i . k_j) on and below the diagonal, as the 16-bit A fragments of
// P U: every element computed, then selected (no branches; above the diagonal the exponential may
// overflow and is dropped). rk holds ones without the L2 norm.
template <class T>
__device__ __forceinline__ void scale_p(uint32_t (&pf)[16], const float (&pacc)[32], const float* gc, const float* rk,
                                        const float (&rq)[2], int warp, int g8, int t4) {
  const float gi[2] = {gc[16 * warp + g8], gc[16 * warp + g8 + 8]};
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int hh = (i >> 1) & 1, ti = 16 * warp + g8 + 8 * hh, tj = 8 * (i >> 2) + 2 * t4;
    const float2 gj = *reinterpret_cast<const float2*>(gc + tj);
    const float2 rkj = *reinterpret_cast<const float2*>(rk + tj);
    const float e0 = rq[hh] * rkj.x * __expf(gi[hh] - gj.x) * pacc[i];
    const float e1 = rq[hh] * rkj.y * __expf(gi[hh] - gj.y) * pacc[i + 1];
    pf[i >> 1] = pack2<T>(tj <= ti ? e0 : 0.f, tj + 1 <= ti ? e1 : 0.f);
  }
}

// QS rows times rq_i e^(gc_i).
template <int kNA>
__device__ __forceinline__ void scale_qs(float (&qs)[kNA], const float (&rq)[2], const float* gc, int warp, int g8) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float si = rq[r] * __expf(gc[16 * warp + g8 + 8 * r]);
#pragma unroll
    for (int i = 2 * r; i < kNA; i += 4) {
      qs[i] *= si;
      qs[i + 1] *= si;
    }
  }
}

// kSave: an instance with the stores for the backward (StateParams::save_chunks > 0), so that the
// plain forward's instance carries none of their code (with it, D = 256 measured 7% slower).
template <class T, int D, int VT, bool kSave>
__global__ void __launch_bounds__(kSm90StateThreads, 1)
    chunk_state_sm90_kernel(const StateParams<T> p, const __grid_constant__ CUtensorMap tm_hs,
                            const __grid_constant__ CUtensorMap tm_vs) {
#if AK_LINEAR_SM90
  using namespace sm90;
  using Lay = Sm90StateLayout<D, VT>;
  constexpr int kMS = D / 128;  // m64 tiles of S rows per warpgroup
  constexpr int kNA = VT / 2;   // accumulator floats per thread of a 64 x VT tile
  extern __shared__ __align__(16) unsigned char state_sm90_smem[];
  const uint32_t raw = smem_addr(state_sm90_smem);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* const base = state_sm90_smem + (sbase - raw);

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
  namespace hw = attention::cuda::sm90;
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
  StepClock clk;
  clk.prof = profile_slots(p.profile, wg);

  // Accumulator element i of a 64 x N tile: row 16 warp + g8 + 8 ((i >> 1) & 1), column
  // 8 (i >> 2) + 2 t4 + (i & 1). This warpgroup's S rows: 64 (wg kMS + ms) + that row.
  auto acc_row = [&](int i) { return 16 * warp + g8 + 8 * ((i >> 1) & 1); };
  auto acc_col = [&](int i) { return 8 * (i >> 2) + 2 * t4; };
  auto s_row = [&](int ms, int i) { return 64 * (wg * kMS + ms) + acc_row(i); };

  float S[kMS][kNA];
#pragma unroll
  for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
    for (int i = 0; i < kNA; i += 2) {
      float2 v = make_float2(0.f, 0.f);
      if (job.init) {
        v = *reinterpret_cast<const float2*>(job.init + s_row(ms, i) * D + vt0 + acc_col(i));
      } else if (job.identity) {
        v.x = s_row(ms, i) == vt0 + acc_col(i) ? 1.f : 0.f;
        v.y = s_row(ms, i) == vt0 + acc_col(i) + 1 ? 1.f : 0.f;
      }
      S[ms][i] = v.x;
      S[ms][i + 1] = v.y;
    }
  }
  float* const chunk_states = p.chunk_states && job.chunk_states
                                  ? p.chunk_states + (static_cast<int64_t>(n) * p.H + h) * (p.map.NC + 1) * DD
                                  : nullptr;
  auto store_state = [&](float* dst) {
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
      for (int i = 0; i < kNA; i += 2) {
        *reinterpret_cast<float2*>(dst + s_row(ms, i) * D + vt0 + acc_col(i)) = make_float2(S[ms][i], S[ms][i + 1]);
      }
    }
  };
  // Sb [D, VT]: row d, column v (N-major operand of (b)).
  auto store_sb = [&]() {
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
      for (int cb = 0; cb < VT / 8; cb += 2) {
        const float* a = &S[ms][4 * cb];
        stsm_x4(frag_x4_addr(sbase + Lay::kSb, D, 64 * (wg * kMS + ms) + 16 * warp, cb, lane), pack2<T>(a[0], a[1]),
                pack2<T>(a[2], a[3]), pack2<T>(a[4], a[5]), pack2<T>(a[6], a[7]));
      }
    }
  };

  // ---- loads of chunk c ----
  auto chunk_rows = [&](int c, int& t0, int& len) {
    t0 = begin + 64 * c;
    len = min(64, end - t0);
  };
  auto issue_k = [&](int c, int buf) {
    int t0, len;
    chunk_rows(c, t0, len);
    async_rows_sw128<D>(sbase + Lay::kK + buf * Lay::kTileD, len, p.k.row(row, t0, hk), p.k.st, tid);
    const int64_t vec = (static_cast<int64_t>(first + c) * p.H + h) * 64;
    if (tid < 16) {
      cp_async16(sbase + Lay::kGate + buf * 256 + tid * 16, p.gc + vec + tid * 4, 16);
    } else if (tid < 32 && p.l2norm) {
      cp_async16(sbase + Lay::kRk + buf * 256 + (tid - 16) * 16, p.rk + vec + (tid - 16) * 4, 16);
    }
  };
  auto src_q = [&](int c, int r) {
    int t0, len;
    chunk_rows(c, t0, len);
    return p.q.row(row, t0 + r, hk);
  };
  auto src_w = [&](int c) { return p.w + (static_cast<int64_t>(first + c) * p.H + h) * 64 * D; };
  auto src_u = [&](int c) { return p.u + (static_cast<int64_t>(first + c) * p.H + h) * 64 * D + vt0; };
  auto issue_qwu = [&](int c, int buf) {
    int t0, len;
    chunk_rows(c, t0, len);
    async_rows_sw128<D>(sbase + Lay::kQ + buf * Lay::kTileD, len, src_q(c, 0), p.q.st, tid);
    async_rows_sw128<D>(sbase + Lay::kW + buf * Lay::kTileD, 64, src_w(c), D, tid);
    if (!job.zero_u) async_rows_sw128<VT>(sbase + Lay::kU + buf * Lay::kTileV, 64, src_u(c), D, tid);
  };
  // Single-buffered q, w, u (kSQ == 1): warpgroup `wg` reloads one of them for chunk c + 1 once all
  // of its threads are past their reads (named barrier 1 + wg over its 128 threads).
  auto reload = [&](int c, int which) {
    if constexpr (Lay::kSQ == 1) {
      if (c + 1 >= chunks) return;
      named_sync(1 + wg, 128);
      const int wtid = tid & 127;
      if (which == 0) {
        async_rows_sw128<D, 128>(sbase + Lay::kW, 64, src_w(c + 1), D, wtid);
      } else if (which == 1) {
        if (job.zero_u) return;
        async_rows_sw128<VT, 128>(sbase + Lay::kU, 64, src_u(c + 1), D, wtid);
      } else {
        int t0, len;
        chunk_rows(c + 1, t0, len);
        async_rows_sw128<D, 128>(sbase + Lay::kQ, len, src_q(c + 1, 0), p.q.st, wtid);
      }
    }
  };

  // Without the L2 norm 1/|k| is 1: both rk slots hold ones, so every reader multiplies without a
  // branch (the loads never write them); published by the first barrier.
  if (!p.l2norm && tid < 128) reinterpret_cast<float*>(base + Lay::kRk)[tid] = 1.f;
  store_sb();
  if (chunk_states) store_state(chunk_states);
  if (chunks > 0) {
    issue_k(0, 0);
    issue_qwu(0, 0);
  }
  cp_async_commit();

  const uint64_t desc_sb = make_desc_sw128(sbase + Lay::kSb, D * 128, 1024);
  const uint64_t desc_ub = make_desc_sw128(sbase + Lay::kUb, 64 * 128, 1024);
  const uint64_t desc_ud = make_desc_sw128(sbase + Lay::kUd, 64 * 128, 1024);

  // Profile phases (cuda_dispatch.cu names them): 0 wait for loads, 1 barrier S1, 2 issue of the next
  // chunk's loads, 3 issue of (b) [and (a)], 4 wait for WS [P], 5 element-wise (c) [P scaling, QS wait
  // and scaling], 6 barrier S2, 7 (e) [and (d)] issue and wait, 8 output stores, 9 Sb (+ chunk state).
  clk.start();
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait_all();
    fence_proxy_async();
    if (save) hw::bulk_wait_read_all();  // chunk c - 1's Ub, overwritten after S1
    clk.stamp(0);
    __syncthreads();  // S1: chunk c's tiles and Sb are visible to every wgmma; chunk c - 1 is done
    if (save) save_chunk(c, true);
    clk.stamp(1);
    const int kb = c & 1, qb = Lay::kSQ == 2 ? (c & 1) : 0;
    if (c + 1 < chunks) {
      issue_k(c + 1, kb ^ 1);
      if constexpr (Lay::kSQ == 2) issue_qwu(c + 1, qb ^ 1);
    }
    cp_async_commit();
    clk.stamp(2);
    int t0, len;
    chunk_rows(c, t0, len);
    const uint32_t sQ = sbase + Lay::kQ + qb * Lay::kTileD;
    const uint32_t sW = sbase + Lay::kW + qb * Lay::kTileD;
    const uint32_t sK = sbase + Lay::kK + kb * Lay::kTileD;
    const unsigned char* uS = base + Lay::kU + qb * Lay::kTileV;
    const float* gc = reinterpret_cast<const float*>(base + Lay::kGate + kb * 256);
    const float* rk = reinterpret_cast<const float*>(base + Lay::kRk + kb * 256);
    const float gL = gc[63];

    float acc[kNA];       // warpgroup 0: W S; warpgroup 1: Q S, then O
    uint32_t pf[16];      // warpgroup 1: P as 16-bit A fragments (four k16 steps of four registers)
    if (wg == 0) {
      // (b) WS = W Sb.
      wgmma_fence();
      const uint64_t dw = make_desc_sw128(sW, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        LinWgmma<VT, T>::template ss<0, 1>(acc, dw + kmajor_step(64, kk), desc_sb + mnmajor_step(kk), kk > 0);
      }
      wgmma_commit();
      clk.stamp(3);
      float di[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 16 * warp + g8 + 8 * r;
        di[r] = rk[i] * __expf(gL - gc[i]);
      }
      wgmma_wait<0>();
      fence_regs(acc);
      clk.stamp(4);
      reload(c, 0);
      // (c) U = u - WS and Ud = U rk e^(gL - gc), both 16-bit, to shared memory.
      //     Four accumulator pairs per ldmatrix / stmatrix, no per-element branches.
      {
        uint32_t uf[VT / 16][4] = {};
        if (!job.zero_u) {
#pragma unroll
          for (int x = 0; x < VT / 16; ++x) ldsm_x4(uf[x], frag_x4_addr(smem_addr(uS), 64, 16 * warp, 2 * x, lane));
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
          stsm_x4(sbase + Lay::kUb + off, ub[0], ub[1], ub[2], ub[3]);
          stsm_x4(sbase + Lay::kUd + off, ud[0], ud[1], ud[2], ud[3]);
        }
      }
      reload(c, 1);
      clk.stamp(5);
    } else {
      // (a) P = Q K^T, then (b) QS = Q Sb, as two groups so P's scaling overlaps QS.
      float pacc[32];
      issue_p_and_qs<T, D, VT>(pacc, acc, sQ, sK, desc_sb);
      clk.stamp(3);
      float rq[2];
      q_row_factors<T, D>(rq, base + (sQ - sbase), p.l2norm, p.scale, warp, g8, t4);
      wgmma_wait<1>();
      fence_regs(pacc);
      clk.stamp(4);
      scale_p<T>(pf, pacc, gc, rk, rq, warp, g8, t4);
      wgmma_wait<0>();
      fence_regs(acc);
      reload(c, 2);
      scale_qs(acc, rq, gc, warp, g8);
      clk.stamp(5);
    }
    fence_proxy_async();
    if (save) hw::bulk_wait_read_all();  // Sb, overwritten after S2
    __syncthreads();  // S2: U and Ud are visible; q, w and u of chunk c are consumed
    if (save) save_chunk(c, false);
    clk.stamp(6);
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
    // K^T fragments of (e) when they come from registers (D = 128 only): ldmatrix.trans from the K
    // tile, lanes 8 i .. 8 i + 7 addressing the rows of 8x8 block i = (token half i / 2, column half
    // i % 2). They must stay untouched until the wgmma reading them has completed.
    uint32_t kf[4][4];
    const bool e_regs = kMS == 1 && p.e_from_registers;
    auto issue_e = [&]() {
      if (e_regs) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int t = 16 * kk + (lane & 7) + 8 * ((lane >> 4) & 1);
          const int d = 64 * wg + 16 * warp + 8 * ((lane >> 3) & 1);
          ldsm_x4_trans(kf[kk], sK + sw128_offset(64, t, d));
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          LinWgmma<VT, T>::template rs<1>(S[0], kf[kk], desc_ud + mnmajor_step(kk), 1);
        }
      } else {
        wgmma_fence();
#pragma unroll
        for (int ms = 0; ms < kMS; ++ms) {
          const uint64_t dkt = make_desc_sw128(sK + (wg * kMS + ms) * 64 * 128, 64 * 128, 1024);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            LinWgmma<VT, T>::template ss<1, 1>(S[ms], dkt + mnmajor_step(kk), desc_ud + mnmajor_step(kk), 1);
          }
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
      for (int kk = 0; kk < 4; ++kk) LinWgmma<VT, T>::template rs<1>(acc, pf + 4 * kk, desc_ub + mnmajor_step(kk), 1);
      wgmma_commit();
      wgmma_wait<0>();
    }
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) fence_regs(S[ms]);
    fence_regs(acc);
    fence_regs(pf);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) fence_regs(kf[kk]);
    clk.stamp(7);

    if (wg == 1 && job.output) {
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
    clk.stamp(8);
    store_sb();  // read by (b) of the next chunk, after its S1 (this chunk's (b) finished before S2)
    if (chunk_states) store_state(chunk_states + static_cast<int64_t>(c + 1) * DD);
    clk.stamp(9);
    clk.step();
  }
  if (job.fin) store_state(job.fin);
  if (save) hw::bulk_wait_all();
#else
  (void)p;
#endif
}

template <class T, int D, int VT>
void launch_chunk_state_sm90(const StateParams<T>& p, const SaveMaps* save, cudaStream_t stream) {
  if (p.N == 0 || p.H == 0) return;
  constexpr int kSmem = Sm90StateLayout<D, VT>::kAlloc;
  auto kernel =
      p.save_chunks > 0 ? chunk_state_sm90_kernel<T, D, VT, true> : chunk_state_sm90_kernel<T, D, VT, false>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int jobs = p.seg_pass == 0 ? p.N : p.N * (p.seg_pass == 1 ? 2 : 1) * (p.seg_count - 1);
  const dim3 grid(static_cast<unsigned>(jobs * (D / VT)), static_cast<unsigned>(p.H));
  static const SaveMaps no_save{};  // read only when p.save_chunks > 0
  const SaveMaps& sv = save != nullptr ? *save : no_save;
  kernel<<<grid, kSm90StateThreads, kSmem, stream>>>(p, sv.hs, sv.vs);
  ak::cuda::check_launch("chunk_state_sm90_kernel");
}

}  // namespace ak::linear::cuda::fwd
