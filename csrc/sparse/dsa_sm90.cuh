// DeepSeek's sparse decode (and MLA's every-row decode) on Hopper's wgmma, for 512 + 64 columns in 16 bits
// and groups of query heads that are a multiple of 64: a block takes 64 heads of one query row and KV head
// (wgmma's M) and one split of the top-k list, and walks the list 64 slots a tile. A tile's cache rows are
// gathered by cp.async (all 256 threads) into the 128-byte-swizzled layout wgmma reads (9 panels of 64
// columns), two tiles in flight. Each of the two warpgroups scores half of the tile's rows (S = Q K^T, 36
// m64n32k16 products over the 576 columns) and owns half of the 512 value columns: the row maxima meet in
// shared memory, each warpgroup writes its probabilities into a shared 64 x 64 P, and O += P V reads P and V
// (the tile's own first 512 columns, N-major, the warpgroup's 256 of them) from shared memory. The row sums
// meet at the end. Splits write their partial output and log-sum-exp, merged by the mma.sync path's combine.
//
// Its CUDA tests compare it with the float64 oracle; the CPU backend has no model of it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "arch/sm80.cuh"
#include "arch/sm90.cuh"
#include "arch/wgmma.cuh"
#include "attention/fwd/softmax.cuh"
#include "cuda/runtime.cuh"
#include "generated/sparse_launchers.h"
#include "sparse/dsa_source.h"
#include "sparse/launch.cuh"
#include "sparse/problem.h"

namespace ak::sparse::cuda {

namespace dsa90 {

constexpr int kHeads = 64;                      // query heads a block (M)
constexpr int kKeys = 64;                       // list slots a tile (N of S, K of P V)
constexpr int kWidth = 576, kValues = 512;      // columns of q and of a cache row; value columns
constexpr int kHalf = kValues / 2;              // value columns a warpgroup
constexpr int kScored = kKeys / 2;              // a tile's rows a warpgroup scores
constexpr int kPanels = kWidth / 64;            // 128-byte swizzle panels of a row
constexpr int kPanelBytes = 64 * 128;           // a panel of 64 rows
constexpr int kTileBytes = kPanels * kPanelBytes;  // 72 KB: q, or one stage of cache rows
constexpr int kChunks = kWidth / 8;             // 16-byte moves a row
constexpr int kThreads = 256;                   // two warpgroups
constexpr int kQOffset = 0, kStageOffset = kTileBytes;
constexpr int kPOffset = kStageOffset + 2 * kTileBytes;          // P: 64 heads x 64 slots, one panel
constexpr int kRowsOffset = kPOffset + kPanelBytes;               // int64 element offset of each slot's row
constexpr int kMeetOffset = kRowsOffset + 2 * kKeys * 8;          // [2][kHeads] floats: row maxima, row sums
constexpr int kSmemBytes = kMeetOffset + 2 * kHeads * 4 + 1024;  // + slack to align the base to 1024

static_assert(kSmemBytes <= 227 * 1024, "shared memory");
static_assert(kKeys * 8 % kThreads == 0 && kWidth - kValues == 64, "a tile's moves: whole passes, one rotary panel");
static_assert(kHeads == kKeys, "q and a tile of rows share one panel layout (and descriptor steps)");

template <class T>
__global__ void __launch_bounds__(kThreads, 1) dsa_sm90_kernel(DsaDecode p) {
#if AK_ARCH_SM90A
  using namespace ak::arch;
  using namespace ak::attention::cuda;
  const SwizzledSmem sm = swizzled_smem();
  unsigned char* const base = sm.ptr;
  const uint32_t sQ = sm.addr + kQOffset;
  auto stage = [&](int s) { return sm.addr + kStageOffset + s * kTileBytes; };
  int64_t* const rows = reinterpret_cast<int64_t*>(base + kRowsOffset);  // [2][kKeys], -1: nothing
  float* const meet = reinterpret_cast<float*>(base + kMeetOffset);

  const int tid = threadIdx.x, warp = tid / 32 % 4, lane = tid % 32;
  const int half = tid / 128;  // this warpgroup's value half
  const int64_t G = p.H / p.Hkv;
  const int64_t h0_in_group = blockIdx.x * kHeads;
  const int64_t x = blockIdx.y, hk = blockIdx.z % p.Hkv, split = blockIdx.z / p.Hkv;
  const int64_t h0 = hk * G + h0_in_group;  // this block's first query head
  const int64_t b = x / p.Sq, position = p.q_start + x % p.Sq;
  int64_t begin = 0, end = p.topk;
  if (p.splits > 1) {
    begin = split * p.chunk;
    end = begin + p.chunk < p.topk ? begin + p.chunk : p.topk;
  }
  const int64_t n = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  const int32_t* const list = p.indices ? p.indices + (x * p.Hkv + hk) * p.topk : nullptr;
  const uint16_t* const kv = static_cast<const uint16_t*>(p.kv);
  const uint16_t* const kv_pe = static_cast<const uint16_t*>(p.kv_pe);
  const int64_t tail = kWidth - kValues;

  // Tile t's list entry of this thread's slot (threads below kKeys; -1 past the list), read a tile before
  // its lookup so that the read's latency is not on the tile's path.
  auto fetch = [&](int64_t t) -> int64_t {
    const int64_t slot = begin + t * kKeys + tid;
    if (tid >= kKeys || t >= n || slot >= end) return -1;
    return list ? list[slot] : slot;
  };
  // An entry's cache row as an element offset of its first column in kv (-1: padding, past the cache or past
  // the causal limit); the rotary part, when kv_pe holds it, is at (offset / kValues) * tail there.
  auto lookup = [&](int64_t j, int s) {
    if (tid < kKeys) {
      const bool hidden = p.causal && j * p.stride_kv + p.stride_kv - 1 > position;
      const bool has = j >= 0 && j < p.Skv && !hidden;
      rows[s * kKeys + tid] = has ? ((b * p.Skv + j) * p.Hkv + hk) * (p.kv_pe ? kValues : kWidth) : -1;
    }
  };
  // The 16-byte moves of a tile's rows (zeros for rows without a cache row): 8 threads a row, a thread taking
  // the same 16 bytes of each 64-column panel, so that a warp's move reads 128 contiguous bytes of 4 rows and
  // the swizzled destination steps by whole panels (constant offsets, no per-move address arithmetic).
  auto copy_tile = [&](int s) {
    const int part = tid % 8;
#pragma unroll
    for (int pass = 0; pass < kKeys * 8 / kThreads; pass++) {
      const int r = tid / 8 + pass * (kThreads / 8);
      const int64_t at = rows[s * kKeys + r];
      const int size = at >= 0 ? 16 : 0;
      const uint16_t* const src = at >= 0 ? kv + at + 8 * part : kv;
      const uint16_t* rope = kv;  // the last panel: the rotary columns, in kv_pe when it holds them
      if (at >= 0) rope = p.kv_pe ? kv_pe + at / kValues * tail + 8 * part : src + kValues;
      const uint32_t dst = stage(s) + sw128_offset(kKeys, r, 8 * part);
#pragma unroll
      for (int panel = 0; panel < kPanels - 1; panel++) cp_async16(dst + panel * kPanelBytes, src + 64 * panel, size);
      cp_async16(dst + (kPanels - 1) * kPanelBytes, rope, size);
    }
  };

  // q's 64 rows (zeros past the group), with the first tile.
  for (int e = tid; e < kHeads * kChunks; e += kThreads) {
    const int r = e / kChunks, c = e % kChunks;
    const bool has = h0_in_group + r < G;
    const int64_t h = x * p.H + h0 + r;
    const uint16_t* src = static_cast<const uint16_t*>(p.q);
    if (has) {
      src = p.q_pe && c >= kValues / 8 ? static_cast<const uint16_t*>(p.q_pe) + h * tail + 8 * (c - kValues / 8)
                                       : src + h * (p.q_pe ? kValues : kWidth) + 8 * c;
    }
    cp_async16(sQ + sw128_offset(kHeads, r, 8 * c), src, has ? 16 : 0);
  }
  int64_t listed = fetch(1);  // the next lookup's entry
  if (n > 0) {
    lookup(fetch(0), 0);
    __syncthreads();
    copy_tile(0);
  }
  cp_async_commit();

  const float exp_scale = static_cast<float>(p.scale) * 1.4426950408889634f;
  RowState st;
  float o[kHalf / 2];
  st.start(o);
  const uint64_t q_desc = make_desc_sw128(sQ, 16, 1024);
  for (int64_t t = 0; t < n; t++) {
    const int s = static_cast<int>(t % 2);
    __syncthreads();  // every thread is done with tile t - 1 (its stage and rows are the next tile's)
    if (t + 1 < n) {
      lookup(listed, s ^ 1);
      listed = fetch(t + 2);
      __syncthreads();
      copy_tile(s ^ 1);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this thread's moves of tile t (and of q)
    fence_proxy_async();  // ... visible to the tensor cores' reads
    __syncthreads();

    // This warpgroup's rows of the tile start kScored rows (whole 8-row swizzle atoms) into each panel.
    float s_acc[kScored / 2];
    wgmma_fence();
    const uint64_t k_desc = make_desc_sw128(stage(s) + half * kScored * 128, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < kPanels * 4; kk++) {
      const uint64_t step = kmajor_step(kKeys, kk);  // q and the tile both have 64-row panels
      Wgmma<kScored, T>::template ss<0, 0>(s_acc, q_desc + step, k_desc + step, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s_acc);
    // Slots without a cache row take no weight.
#pragma unroll
    for (int i = 0; i < kScored / 2; i++) {
      const int col = half * kScored + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
      if (rows[s * kKeys + col] < 0) s_acc[i] = -INFINITY;
    }
    // The row maxima over both warpgroups' slots; the running maximum is raised to them first, so that
    // softmax_step's own correction is 1 and corr carries the whole rescale.
    float mine[2] = {-INFINITY, -INFINITY}, corr[2], unit[2];
#pragma unroll
    for (int i = 0; i < kScored / 2; i++) mine[(i >> 1) & 1] = fmaxf(mine[(i >> 1) & 1], s_acc[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
      mine[r] = quad_max(mine[r]);
      if (lane % 4 == 0) meet[half * kHeads + 16 * warp + lane / 4 + 8 * r] = mine[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float m = fmaxf(st.m[r], fmaxf(mine[r], meet[(half ^ 1) * kHeads + 16 * warp + lane / 4 + 8 * r]));
      corr[r] = fast_exp2(st.m[r] * exp_scale - (m == -INFINITY ? 0.0f : m * exp_scale));
      st.l[r] *= corr[r];
      st.m[r] = m;
    }
    softmax_step(s_acc, st, exp_scale, unit);
#pragma unroll
    for (int i = 0; i < kHalf / 2; i++) o[i] *= corr[(i >> 1) & 1];
#pragma unroll
    for (int i = 0; i < kScored / 2; i += 2) {
      const int row = 16 * warp + lane / 4 + 8 * ((i >> 1) & 1);
      const int col = half * kScored + 8 * (i / 4) + 2 * (lane % 4);
      uint32_t* const at = reinterpret_cast<uint32_t*>(base + kPOffset + sw128_offset(kHeads, row, col));
      *at = pack2<T>(s_acc[i], s_acc[i + 1]);
    }
    fence_proxy_async();  // P's stores visible to the tensor cores' reads
    __syncthreads();
    wgmma_fence();
    const uint64_t p_desc = make_desc_sw128(sm.addr + kPOffset, 16, 1024);
    const uint64_t v_desc = make_desc_sw128(stage(s) + half * (kHalf / 64) * kPanelBytes, kPanelBytes, 1024);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; kk++) {
      Wgmma<kHalf, T>::template ss<0, 1>(o, p_desc + kmajor_step(kHeads, kk), v_desc + mnmajor_step(kk), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
  }

  cp_async_wait<0>();  // q's moves when the list had no tile
  // Each warpgroup summed its own slots: the sums meet, and lane 0 of a quad holds the total for
  // softmax_finish's quad sum.
  float sums[2];
#pragma unroll
  for (int r = 0; r < 2; r++) sums[r] = quad_sum(st.l[r]);
  __syncthreads();  // the last tile's reads of meet are done
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (lane % 4 == 0) meet[half * kHeads + 16 * warp + lane / 4 + 8 * r] = sums[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; r++) {
    st.l[r] = lane % 4 == 0 ? sums[r] + meet[(half ^ 1) * kHeads + 16 * warp + lane / 4 + 8 * r] : 0.0f;
  }
  float inv[2], lse[2];
  softmax_finish(st, exp_scale, inv, lse);
  const int64_t rows_total = p.B * p.Sq * p.H;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = 16 * warp + lane / 4 + 8 * r;
    if (h0_in_group + row >= G) continue;
    const int64_t at = x * p.H + h0 + row;
    if (p.splits > 1 && half == 0 && lane % 4 == 0) p.partial_lse[split * rows_total + at] = lse[r];
#pragma unroll
    for (int i = 2 * r; i < kHalf / 2; i += 4) {
      // o[i], o[i + 1]: columns 8 (i / 4) + 2 (lane % 4) and the next of this half.
      const int64_t c = half * kHalf + 8 * (i / 4) + 2 * (lane % 4);
      const float v0 = o[i] * inv[r], v1 = o[i + 1] * inv[r];
      if (p.splits > 1) {
        float2* dst = reinterpret_cast<float2*>(p.partial + (split * rows_total + at) * kValues + c);
        *dst = make_float2(v0, v1);
      } else {
        *reinterpret_cast<uint32_t*>(static_cast<T*>(p.output) + at * kValues + c) = pack2<T>(v0, v1);
      }
    }
  }
#endif
}

}  // namespace dsa90

template <class T, int D, int Tile>
void DsaWgmma<T, D, Tile>::launch(const Args& args, cudaStream_t stream) {
  using namespace dsa90;
  // Split by the caller (cuda.cu), which returns before an empty call.
  launch_latent_splits(args, stream, "sparse.dsa.decode.wgmma", [&](const DsaDecode& p) {
    auto* const kernel = dsa_sm90_kernel<T>;
    AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    const dim3 grid(static_cast<unsigned>(p.H / p.Hkv / kHeads), static_cast<unsigned>(p.B * p.Sq),
                    static_cast<unsigned>(p.Hkv * p.splits));
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  });
}

}  // namespace ak::sparse::cuda
