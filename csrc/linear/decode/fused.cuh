// The fused paged decode step (recurrentGdnDecode, recurrentKdaDecode) on any sm_80+ GPU: a block per
// (sequence, value head, 8 x 16 / KPL rows of V), each warp loading its 16 / KPL rows straight into
// registers before the preprocessing (decode/lane_math.cuh), so the block's lifetime is one load
// latency. The row is read once and written once: the pool's traffic is the floor.
#pragma once

#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/decode/lane_math.cuh"

namespace ak::linear::cuda::paged {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <int KPL>
constexpr int fused_rows_per_block() {
  return step_rows<KPL>() * kWarps;
}

template <class T, int KPL>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(const DecodeParams<T> p) {
  constexpr int R = step_rows<KPL>();
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int v0 = blockIdx.x * fused_rows_per_block<KPL>() + warp * R;
  if (v0 >= p.V || ak::cuda::check_failed(p.check)) return;
  const int slot = p.indices[b];
  T* out = p.out + b * p.out_b + h * p.out_h;
  if (slot <= 0 || slot >= p.slots) {  // padding (an index past the pool was refused before the launch)
    if (lane < R && v0 + lane < p.V) out[v0 + lane] = from_float<T>(0.f);
    return;
  }
  const int c0 = lane * KPL;
  const bool resume = p.has_initial == nullptr || p.has_initial[b] != 0;
  const int64_t slot_at = static_cast<int64_t>(slot) * p.slot_stride + static_cast<int64_t>(h) * p.V * p.K;
  float s[R][KPL], v[R], o[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < KPL; ++j) s[i][j] = 0.f;
    if (v0 + i < p.V && resume) load_row<KPL>(p.state, p.state_bf16, slot_at + static_cast<int64_t>(v0 + i) * p.K + c0, s[i]);
  }
  const T* row = p.qkv + b * p.qkv_row + 2 * p.HK * p.K + h * p.V;
#pragma unroll
  for (int i = 0; i < R; ++i) v[i] = v0 + i < p.V ? to_float(row[v0 + i]) : 0.f;
  LaneInputs<KPL> in;
  prepare<T, KPL>(p, b, h, lane, in);
  advance_rows<R, KPL>(in, v, s, o);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (v0 + i < p.V) store_row<KPL>(p.state, p.state_bf16, slot_at + static_cast<int64_t>(v0 + i) * p.K + c0, s[i]);
  }
  write_outputs<T, R>(out, v0, p.V, lane, p.scale, o);
}

}  // namespace ak::linear::cuda::paged

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void PagedDecodeFused<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  auto go = [&](auto kernel, int rows) {
    const dim3 grid(static_cast<unsigned>((p.V + rows - 1) / rows), static_cast<unsigned>(p.H),
                    static_cast<unsigned>(p.B));
    kernel<<<grid, paged::kThreads, 0, stream>>>(p);
  };
  switch (p.K / 32) {
    case 1: go(paged::paged_decode_kernel<T, 1>, paged::fused_rows_per_block<1>()); break;
    case 2: go(paged::paged_decode_kernel<T, 2>, paged::fused_rows_per_block<2>()); break;
    case 4: go(paged::paged_decode_kernel<T, 4>, paged::fused_rows_per_block<4>()); break;
    case 8: go(paged::paged_decode_kernel<T, 8>, paged::fused_rows_per_block<8>()); break;
    default: fail(AK_ERR_INTERNAL, "paged_decode_kernel: K must be 32, 64, 128 or 256");
  }
  ak::cuda::check_launch("paged_decode_kernel");
}

}  // namespace ak::linear::cuda
