// The lightning indexer on Hopper's 8-bit tensor cores (sm_90a), for DeepSeek's 64 heads of 128 dims in
// float8_e4m3. The logits are a GEMM whose N side is (query, head): a tile of 64 keys (wgmma's M) against
// 4 queries x 64 heads (N = 256) in one m64n256k32 product per 32 dims, so that the head sum of a key's
// logit runs along a thread's own accumulator columns and then over the 4 lanes of a quad, instead of across
// warps.
//
// A block: one TMA producer warp and two consumer warpgroups, whose products and epilogues (ReLU, head
// weights, head sum) interleave on the SM. The block holds 8 queries' rows (64 KB, consumer c uses queries
// 4c .. 4c + 3) and streams key tiles of 64 rows x 128 bytes through a ring; both consumers read every key
// tile. The work (groups of 8 queries x key tiles, group-major) is cut into one contiguous run of tiles per
// block, so the blocks' shares differ by at most one tile; a run visits a few (group, tile range) segments.
// A segment loads only the tiles that meet some range of its queries and writes the fill (-inf or 0) for the
// rest; a key outside its own query's range is filled at the write.
//
// Its CUDA tests compare it with the float64 oracle; the CPU backend has no model of it (it runs the
// mma.sync block's phases or the per-item definition).
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "cuda/backend.h"
#include "cuda/runtime.cuh"
#include "cuda/tensor_map.h"
#include "generated/sparse_launchers.h"
#include "sparse/problem.h"

namespace ak::sparse::cuda {

namespace idx90 {

constexpr int kHeads = 64, kDim = 128;         // the shape it is built for (one 128-byte row a head)
constexpr int kWgQueries = 4;                  // queries a consumer warpgroup: N = 4 x 64 = 256
constexpr int kConsumers = 2;
constexpr int kGroup = kWgQueries * kConsumers;  // queries a block holds
constexpr int kTileKeys = 64;                  // keys a tile (M)
constexpr int kStages = 8;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kQBytes = kGroup * kHeads * kDim;       // 64 KB
constexpr int kWgQBytes = kWgQueries * kHeads * kDim;  // 32 KB, one TMA box of 256 rows
constexpr int kKBytes = kTileKeys * kDim;              // 8 KB a stage
constexpr int kQOffset = 0;
constexpr int kKOffset = kQOffset + kQBytes;
constexpr int kBarOffset = kKOffset + kStages * kKBytes;
constexpr int kNumBars = 2 + 2 * kStages;  // q_full, q_empty, k_full[kStages], k_empty[kStages]
constexpr int kSmemBytes = kBarOffset + kNumBars * 8 + 1024;  // + slack to align the base to 1024
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
constexpr uint32_t kReleases = 4 * kConsumers;  // one arrival per consumer warp

static_assert(kSmemBytes <= 227 * 1024, "shared memory");
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");

// A block's share of the work: tiles [begin, end) of the group-major order (group g, key tile t) -> g tiles + t.
struct Share {
  int64_t at, end, tiles;
  __device__ Share(int64_t groups, int64_t tiles_, int blocks, int block) : tiles(tiles_) {
    const int64_t work = groups * tiles;
    at = work * block / blocks;
    end = work * (block + 1) / blocks;
  }
};

// A segment of a share: query group g, key tiles [t0, t1), of which [n0, n1) meet a range of its queries
// (the union of the queries' ranges; n1 <= n0: none).
struct Segment {
  int64_t g, t0, t1, n0, n1;
};

__device__ __forceinline__ Segment segment_at(const Indexer& p, int64_t at, int64_t end, int64_t tiles) {
  Segment s;
  s.g = at / tiles;
  s.t0 = at % tiles;
  s.t1 = min(tiles, s.t0 + (end - at));
  int64_t lo = p.Sk, hi = 0;
  for (int qi = 0; qi < kGroup; qi++) {
    const int64_t i = s.g * kGroup + qi;
    if (i >= p.Sq) break;
    const int64_t a = p.ks[i], b = p.ke[i];
    if (a < b) lo = min(lo, a), hi = max(hi, b);
  }
  s.n0 = max(s.t0, lo / kTileKeys);
  s.n1 = min(s.t1, (hi + kTileKeys - 1) / kTileKeys);
  return s;
}

// The fill of keys [k0, k1) for consumer c's queries (its 128 threads, coalesced along the keys).
__device__ __forceinline__ void write_fill(const Indexer& p, int64_t i_base, int64_t k0, int64_t k1, int tid,
                                           float fill) {
  k1 = min(k1, p.Sk);
  for (int qq = 0; qq < kWgQueries; qq++) {
    const int64_t i = i_base + qq;
    if (i >= p.Sq) break;
    for (int64_t key = k0 + tid; key < k1; key += 128) p.logits[i * p.Sk + key] = fill;
  }
}

// min(max(a b, 0), 1) in one instruction (FMUL.SAT).
__device__ __forceinline__ float mul_sat(float a, float b) {
  float r;
  asm("mul.rn.sat.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Thread (warp, lane) of a consumer after a tile's product: acc[4 j + 2 r + c] is the score of key
// 16 warp + lane / 4 + 8 r against column 8 j + 2 (lane % 4) + c, column = 64 qq + head. Returns the
// weighted ReLU head sums of its two keys for query lane % 4 of the warpgroup.
template <bool kPositiveScales>
__device__ __forceinline__ void head_sums(const float (&acc)[128], const float (&w)[32][2], const float (&sc)[2],
                                          int lane, float (&out)[2]) {
  float v[kWgQueries][2];
#pragma unroll
  for (int qq = 0; qq < kWgQueries; qq++) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < 8; jj++) {
        const int j = 8 * qq + jj;
#pragma unroll
        for (int c = 0; c < 2; c++) {
          if constexpr (kPositiveScales) {
            // A key scale >= 0 leaves the ReLU's sign test to the raw score, |score| <= 128 x 448^2 < 2^25
            // (e4m3's largest value is 448): relu(s) = 2^25 sat(s 2^-25), a saturating multiply on the FMA
            // pipe instead of a max on the half-rate ALU pipe; the sum is scaled back once.
            sum = fmaf(mul_sat(acc[4 * j + 2 * r + c], 0x1p-25f), w[j][c], sum);
          } else {
            sum = fmaf(fmaxf(acc[4 * j + 2 * r + c] * sc[r], 0.f), w[j][c], sum);
          }
        }
      }
      v[qq][r] = kPositiveScales ? sum * (0x1p25f * sc[r]) : sum;
    }
  }
  // Reduce-scatter over the quad: lanes exchange the half they do not keep (queries by bit 1, then bit 0).
  const bool b1 = (lane >> 1) & 1, b0 = lane & 1;
  float half[2][2];
#pragma unroll
  for (int a = 0; a < 2; a++) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float mine = b1 ? v[2 + a][r] : v[a][r], other = b1 ? v[a][r] : v[2 + a][r];
      half[a][r] = mine + __shfl_xor_sync(0xffffffffu, other, 2);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const float mine = b0 ? half[1][r] : half[0][r], other = b0 ? half[0][r] : half[1][r];
    out[r] = mine + __shfl_xor_sync(0xffffffffu, other, 1);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    indexer_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                        const Indexer p) {
#if AK_ARCH_SM90A
  using namespace ak::arch;
  const uint32_t base = swizzled_smem().addr;
  const uint32_t sQ = base + kQOffset, bars = base + kBarOffset;
  const uint32_t q_full = bars, q_empty = bars + 8;
  auto k_stage = [&](int s) { return base + kKOffset + s * kKBytes; };
  auto k_full = [&](int s) { return bars + 16u + 8u * s; };
  auto k_empty = [&](int s) { return bars + 16u + 8u * (kStages + s); };

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, kReleases);
    for (int s = 0; s < kStages; s++) {
      mbar_init(k_full(s), 1);
      mbar_init(k_empty(s), kReleases);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int64_t groups = (p.Sq + kGroup - 1) / kGroup, tiles = (p.Sk + kTileKeys - 1) / kTileKeys;
  const Share share(groups, tiles, gridDim.x, blockIdx.x);
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---------------- producer ----------------
    regs_decrease<kProducerRegs>();
    if (threadIdx.x != 0) return;
    prefetch_tmap(&tm_q);
    prefetch_tmap(&tm_k);
    int s = 0;
    uint32_t phase = 0, q_uses = 0;
    for (int64_t at = share.at; at < share.end;) {
      const Segment seg = segment_at(p, at, share.end, tiles);
      at += seg.t1 - seg.t0;
      if (seg.n1 <= seg.n0) continue;
      mbar_wait(q_empty, (q_uses & 1) ^ 1);  // a fresh barrier passes parity 1
      mbar_arrive_expect_tx(q_full, kQBytes);
      for (int c = 0; c < kConsumers; c++) {
        tma_load_4d(sQ + c * kWgQBytes, &tm_q, q_full, 0, static_cast<int>((seg.g * kGroup + kWgQueries * c) * kHeads),
                    0, 0);
      }
      q_uses++;
      for (int64_t t = seg.n0; t < seg.n1; t++) {
        mbar_wait(k_empty(s), phase ^ 1);
        mbar_arrive_expect_tx(k_full(s), kKBytes);
        tma_load_4d(k_stage(s), &tm_k, k_full(s), 0, static_cast<int>(t * kTileKeys), 0, 0);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<kConsumerRegs>();
    const int c = wg - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const float fill = p.clean ? -INFINITY : 0.f;
    const uint64_t q_desc = make_desc_sw128(sQ + c * kWgQBytes, 16, 1024);
    int s = 0;
    uint32_t phase = 0, q_uses = 0;
    for (int64_t at = share.at; at < share.end;) {
      const Segment seg = segment_at(p, at, share.end, tiles);
      at += seg.t1 - seg.t0;
      const int64_t i_base = seg.g * kGroup + kWgQueries * c;
      const int64_t n0 = seg.n1 > seg.n0 ? seg.n0 : seg.t1, n1 = seg.n1 > seg.n0 ? seg.n1 : seg.t1;
      write_fill(p, i_base, seg.t0 * kTileKeys, n0 * kTileKeys, tid, fill);
      write_fill(p, i_base, n1 * kTileKeys, seg.t1 * kTileKeys, tid, fill);
      if (n1 <= n0) continue;

      // This thread's weights (its 64 columns) and its output query's range.
      float w[32][2];
#pragma unroll
      for (int j = 0; j < 32; j++) {
        const int64_t i = i_base + j / 8;
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
          w[j][cc] = i < p.Sq ? p.weights[i * kHeads + 8 * (j % 8) + 2 * (lane % 4) + cc] : 0.f;
        }
      }
      const int64_t i_out = i_base + lane % 4;
      float* const out_row = i_out < p.Sq ? p.logits + i_out * p.Sk : nullptr;
      const int32_t lo = out_row ? p.ks[i_out] : 0, hi = out_row ? p.ke[i_out] : 0;
      const int32_t sk = static_cast<int32_t>(p.Sk);

      mbar_wait(q_full, q_uses & 1);
      for (int64_t t = n0; t < n1; t++) {
        const int32_t key0 = static_cast<int32_t>(t) * kTileKeys + 16 * warp + lane / 4;  // keys key0, key0 + 8
        float acc[128];
        mbar_wait(k_full(s), phase);
        wgmma_fence();
        const uint64_t k_desc = make_desc_sw128(k_stage(s), 16, 1024);
#pragma unroll
        for (int kk = 0; kk < kDim / 32; kk++) {
          Wgmma<256, __nv_fp8_e4m3>::ss<0, 0>(acc, k_desc + 2 * kk, q_desc + 2 * kk, kk > 0 ? 1 : 0);
        }
        wgmma_commit();
        float sc[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const int32_t key = key0 + 8 * r;
          sc[r] = p.k_scale == nullptr ? 1.f : key < sk ? p.k_scale[key] : 0.f;
        }
        wgmma_wait<0>();
        fence_regs(acc);
        if (lane == 0) mbar_arrive(k_empty(s));
        if (++s == kStages) s = 0, phase ^= 1;
        float out[2];
        if (__all_sync(0xffffffffu, sc[0] >= 0.f && sc[1] >= 0.f)) {
          head_sums<true>(acc, w, sc, lane, out);
        } else {
          head_sums<false>(acc, w, sc, lane, out);
        }
        if (out_row != nullptr) {
#pragma unroll
          for (int r = 0; r < 2; r++) {
            const int32_t key = key0 + 8 * r;
            if (key < sk) out_row[key] = key >= lo && key < hi ? out[r] : fill;
          }
        }
      }
      if (lane == 0) mbar_arrive(q_empty);
      q_uses++;
    }
  }
#endif
}

}  // namespace idx90

template <class T, int D, int Tile>
void IndexerWgmma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  using namespace idx90;
  const int64_t groups = (p.Sq + kGroup - 1) / kGroup, tiles = (p.Sk + kTileKeys - 1) / kTileKeys;
  if (groups * tiles == 0) return;
  CUtensorMap tm_q, tm_k;
  ak::cuda::encode_rows_map(tm_q, AK_FLOAT8_E4M3, p.q, kDim, p.Sq * kHeads, 1, 1, kDim, kDim, kDim,
                            kWgQueries * kHeads, "indexer q");
  ak::cuda::encode_rows_map(tm_k, AK_FLOAT8_E4M3, p.k, kDim, p.Sk, 1, 1, kDim, kDim, kDim, kTileKeys, "indexer k");
  int device = 0;
  AK_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t blocks = std::min<int64_t>(groups * tiles, ::ak::cuda::caps(device).sms);
  AK_CUDA_CHECK(cudaFuncSetAttribute(indexer_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  indexer_sm90_kernel<<<static_cast<unsigned>(blocks), kThreads, kSmemBytes, stream>>>(tm_q, tm_k, p);
  ::ak::cuda::check_launch("sparse.indexer.wgmma");
}

}  // namespace ak::sparse::cuda
