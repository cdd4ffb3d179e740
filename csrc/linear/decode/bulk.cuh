// The paged decode step on sm_90a: the arithmetic of decode/lane_math.cuh with the state arriving in
// shared memory through the copy engine. A small block (two warps) per tile of one (sequence, value
// head): 4096 values, 32 rows at K = 128, contiguous in the slot. One bulk copy is issued before the
// preprocessing, then the warps advance the rows and write them back with streaming stores. Small tiles
// and small blocks keep many tiles per SM in flight without holding them in registers
// (bench/NOTES_serving.md has the shapes that were measured).
#pragma once

#include "arch/sm90.cuh"
#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/decode/lane_math.cuh"

namespace ak::linear::cuda::paged {

// Tile t of the call: sequence, value head and first row.
struct TileAt {
  int b, h, v0;
};
__device__ __forceinline__ TileAt tile_at(int64_t t, int tiles_per_head, int H, int rows) {
  const int64_t head = t / tiles_per_head;
  return {static_cast<int>(head / H), static_cast<int>(head % H), static_cast<int>(t % tiles_per_head) * rows};
}

// A warp's rows [r0, r0 + n) of a tile held in shared memory: advanced, stored, outputs written.
template <class T, int KPL, int WR>
__device__ __forceinline__ void advance_tile_rows(const DecodeParams<T>& p, const LaneInputs<KPL>& in,
                                                  const unsigned char* tile, int r0, int rows, bool resume,
                                                  const T* vrow, int64_t tile_from, T* out, int v0, int lane) {
  constexpr int R = step_rows<KPL>();
  const int c0 = lane * KPL;
#pragma unroll
  for (int step = 0; step < WR / R; ++step) {
    const int s0 = r0 + step * R;
    if (s0 >= rows) break;
    float st[R][KPL], v[R], o[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = s0 + r;
#pragma unroll
      for (int j = 0; j < KPL; ++j) st[r][j] = 0.f;
      v[r] = row < rows ? to_float(vrow[row]) : 0.f;
      if (row < rows && resume) {
        if (p.state_bf16) {
          load_vals<KPL>(reinterpret_cast<const __nv_bfloat16*>(tile) + row * p.K + c0, st[r]);
        } else {
          load_vals<KPL>(reinterpret_cast<const float*>(tile) + row * p.K + c0, st[r]);
        }
      }
    }
    advance_rows<R, KPL>(in, v, st, o);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (s0 + r < rows) store_row<KPL>(p.state, p.state_bf16, tile_from + static_cast<int64_t>(s0 + r) * p.K + c0, st[r]);
    }
    write_outputs<T, R>(out, v0 + s0, p.V, lane, p.scale, o);
  }
}

constexpr int kTileElems = 4096;
constexpr int kTileWarps = 2;
constexpr int kTileThreads = 32 * kTileWarps;

template <int KPL>
constexpr int tile_rows() {
  return kTileElems / (32 * KPL);
}

template <class T, int KPL>
__global__ void __launch_bounds__(kTileThreads) paged_decode_tile_kernel(const DecodeParams<T> p, int tiles_per_head) {
  constexpr int TR = tile_rows<KPL>();
  constexpr int WR = TR / kTileWarps;
  extern __shared__ __align__(128) unsigned char tile[];
  __shared__ __align__(8) uint64_t bar;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool stop = ak::cuda::check_failed(p.check);  // tested before the first write: its load overlaps
  const TileAt at = tile_at(blockIdx.x, tiles_per_head, p.H, TR);
  const int rows = min(TR, p.V - at.v0);
  const int slot = p.indices[at.b];
  T* out = p.out + at.b * p.out_b + at.h * p.out_h;
  if (slot <= 0 || slot >= p.slots) {  // padding (an index past the pool was refused or is skipped)
    if (stop) return;
    for (int r = threadIdx.x; r < rows; r += kTileThreads) out[at.v0 + r] = from_float<T>(0.f);
    return;
  }
  const bool resume = p.has_initial == nullptr || p.has_initial[at.b] != 0;
  const int es = p.state_bf16 ? 2 : 4;
  const int64_t tile_from = static_cast<int64_t>(slot) * p.slot_stride + (static_cast<int64_t>(at.h) * p.V + at.v0) * p.K;
  const uint32_t bar_addr = smem_u32(&bar);
  if (resume && threadIdx.x == 0) {
    mbar_init(bar_addr, 1);
    fence_barrier_init();
    const uint32_t bytes = static_cast<uint32_t>(rows * p.K * es);
    mbar_arrive_expect_tx(bar_addr, bytes);
    bulk_load(smem_u32(tile), static_cast<const unsigned char*>(p.state) + tile_from * es, bytes, bar_addr);
  }
  __syncthreads();  // the barrier is initialised before anyone waits on it
  LaneInputs<KPL> in;
  prepare<T, KPL>(p, at.b, at.h, lane, in);
  const T* vrow = p.qkv + at.b * p.qkv_row + 2 * p.HK * p.K + at.h * p.V + at.v0;
  if (resume) mbar_wait(bar_addr, 0);  // the copy lands before the block may leave
  if (stop) return;
  advance_tile_rows<T, KPL, WR>(p, in, tile, warp * WR, rows, resume, vrow, tile_from, out, at.v0, lane);
}

template <class T>
void launch_tiles(const DecodeParams<T>& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0 || p.V == 0) return;
  const int smem = kTileElems * (p.state_bf16 ? 2 : 4);
  static_assert(kTileElems * 4 <= 48 * 1024, "a tile must fit the default dynamic shared memory");
  auto go = [&](auto kernel, int rows) {
    const int tiles_per_head = (p.V + rows - 1) / rows;
    const int64_t tiles = static_cast<int64_t>(p.B) * p.H * tiles_per_head;
    if (tiles >= (int64_t{1} << 31)) fail(AK_ERR_UNSUPPORTED, "paged_decode: too many state tiles for one launch");
    kernel<<<static_cast<unsigned>(tiles), kTileThreads, smem, stream>>>(p, tiles_per_head);
  };
  switch (p.K / 32) {
    case 1: go(paged_decode_tile_kernel<T, 1>, tile_rows<1>()); break;
    case 2: go(paged_decode_tile_kernel<T, 2>, tile_rows<2>()); break;
    case 4: go(paged_decode_tile_kernel<T, 4>, tile_rows<4>()); break;
    case 8: go(paged_decode_tile_kernel<T, 8>, tile_rows<8>()); break;
    default: fail(AK_ERR_INTERNAL, "paged_decode_tile_kernel: K must be 32, 64, 128 or 256");
  }
  ak::cuda::check_launch("paged_decode_tile_kernel");
}

}  // namespace ak::linear::cuda::paged

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void PagedDecodeBulk<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  paged::launch_tiles(p, stream);
}

}  // namespace ak::linear::cuda
