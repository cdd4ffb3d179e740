// The vector path of the CUDA gate transforms, for the common layout (call.h: vector_layout): a row's
// channels contiguous, rows at a fixed stride, channels a multiple of 8, 16-byte alignment. A thread
// owns 8 adjacent channels, their amplitudes and biases in registers, and takes the rows lane,
// lane + row_lanes, ... of its block's chunk (VecTiling), a batch at a time so several 16-byte loads
// are in flight: one load of a 16-bit raw row (two of a float32 one), two of the float32 gate.
//
// The backward adds each thread's rows in order, then the block's row lanes by a fixed tree, into a
// partial per (chunk, channel) for dt_bias and, for A_log, per (chunk, group of 8) when a group lies
// in one head (the thread adds its 8 terms of a row in order first) or else per (chunk, channel).
// cuda.cu's sums kernel adds the partials. The order depends on the shape alone: same bits every run.
#pragma once

#include <cuda_runtime.h>

#include "arch/sm80.cuh"
#include "linear/gate/call.h"
#include "linear/gate/math.h"

namespace ak::linear::gate::cuda::vec {

constexpr int kForwardBatch = 4;   // rows in flight per thread
constexpr int kBackwardBatch = 2;  // (each row: raw and d_gate)

// 8 float32s at p (16-byte aligned).
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// 8 raw elements of a row: their bits as loaded (kept that way while a batch is in flight), as
// float32, and rounded back (the device's round-to-nearest-even conversions).
template <class Raw>
struct Raw8;
template <>
struct Raw8<float> {
  struct Bits {
    float v[8];
  };
  __device__ static Bits load(const float* p) {
    Bits b;
    load8(p, b.v);
    return b;
  }
  __device__ static void unpack(const Bits& b, float (&v)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = b.v[j];
  }
  __device__ static void store(float* p, const float (&v)[8]) { store8(p, v); }
};
template <class Raw, class H>
struct Half8 {
  using Bits = uint4;
  __device__ static Bits load(const Raw* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ static void unpack(const Bits& b, float (&v)[8]) {
    const uint32_t w[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = arch::unpack2<H>(w[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
  __device__ static void store(Raw* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) = make_uint4(arch::pack2<H>(v[0], v[1]), arch::pack2<H>(v[2], v[3]),
                                              arch::pack2<H>(v[4], v[5]), arch::pack2<H>(v[6], v[7]));
  }
};
template <>
struct Raw8<bf16_t> : Half8<bf16_t, __nv_bfloat16> {};
template <>
struct Raw8<f16_t> : Half8<f16_t, __half> {};

// The call as the vector kernels see it: base pointers and row strides (elements).
struct Forward {
  const void* raw = nullptr;
  float* gate = nullptr;
  int64_t raw_row = 0, gate_row = 0;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  int64_t rows = 0, columns = 1;
  float lower_bound = 0.f;
};

struct Backward {
  const void* raw = nullptr;
  const float* d_gate = nullptr;
  void* d_raw = nullptr;
  int64_t raw_row = 0, dg_row = 0, draw_row = 0;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  int64_t rows = 0, columns = 1, channels = 0;
  float lower_bound = 0.f;
  float* part_dt = nullptr;  // [chunks][channels]
  float* part_a = nullptr;   // [chunks][groups] (a group in one head) or [chunks][channels]
};

// A thread's group of channels, its thread row in the block and its rows [first, end) (step row_lanes).
struct Slot {
  int64_t group;
  int lane;
  bool live;
  int64_t first, end;
};

__device__ __forceinline__ Slot slot_of(const VecTiling& t, int64_t rows) {
  Slot s;
  const int tx = static_cast<int>(threadIdx.x) & (t.tile_groups - 1);
  s.lane = static_cast<int>(threadIdx.x) / t.tile_groups;
  s.group = static_cast<int64_t>(blockIdx.x) * t.tile_groups + tx;
  s.live = s.group < t.groups;
  const int64_t start = static_cast<int64_t>(blockIdx.y) * t.rows_per_chunk;
  s.first = start + s.lane;
  s.end = min(rows, start + t.rows_per_chunk);
  return s;
}

// The biases and amplitudes of channels c0 .. c0 + 7 (one division, then a head/column odometer).
// One: all 8 in one head, so amp[0] serves them all.
template <bool Fast, bool One>
__device__ __forceinline__ void channel_params(const float* a_log, const float* dt_bias, int64_t c0, int64_t columns,
                                               float (&amp)[8], float (&bias)[8]) {
  int64_t h = c0 / columns, d = c0 - h * columns;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    bias[j] = dt_bias[c0 + j];
    if (!One || j == 0) amp[j] = amplitude<Fast>(a_log[h]);
    else amp[j] = amp[0];
    if (++d == columns) d = 0, ++h;
  }
}

template <class Raw, bool Fast, bool Bounded>
__global__ void __launch_bounds__(kThreads) forward_kernel(const Forward a, const VecTiling t) {
  const Slot s = slot_of(t, a.rows);
  if (!s.live) return;
  const int64_t c0 = s.group * kVec;
  float amp[8], bias[8];
  channel_params<Fast, false>(a.a_log, a.dt_bias, c0, a.columns, amp, bias);
  const Raw* raw = static_cast<const Raw*>(a.raw) + c0;
  float* gate = a.gate + c0;
  const int64_t step = t.row_lanes;
  for (int64_t r = s.first; r < s.end; r += kForwardBatch * step) {
    typename Raw8<Raw>::Bits bits[kForwardBatch];
#pragma unroll
    for (int u = 0; u < kForwardBatch; ++u) {
      if (r + u * step < s.end) bits[u] = Raw8<Raw>::load(raw + (r + u * step) * a.raw_row);
    }
#pragma unroll
    for (int u = 0; u < kForwardBatch; ++u) {
      if (r + u * step >= s.end) continue;
      float x[8], g[8];
      Raw8<Raw>::unpack(bits[u], x);
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] = gate_value<Fast, Bounded>(x[j] + bias[j], amp[j], a.lower_bound);
      store8(gate + (r + u * step) * a.gate_row, g);
    }
  }
}

// One: every group of 8 channels lies in one head (per channel with D % 8 == 0), so the A_log terms
// of a row's group are added together first and the partials are per group.
template <class Raw, bool Fast, bool Bounded, bool One>
__global__ void __launch_bounds__(kThreads) backward_kernel(const Backward a, const VecTiling t) {
  constexpr int kA = One ? 1 : 8;  // A_log sums per thread
  constexpr int kSums = 8 + kA;    // dt_bias's 8, then A_log's
  __shared__ float lanes[kSums][kThreads];
  const Slot s = slot_of(t, a.rows);
  const int64_t c0 = s.group * kVec;
  float sum[kSums];
#pragma unroll
  for (int v = 0; v < kSums; ++v) sum[v] = 0.f;
  if (s.live) {
    float amp[8], bias[8];
    channel_params<Fast, One>(a.a_log, a.dt_bias, c0, a.columns, amp, bias);
    const Raw* raw = static_cast<const Raw*>(a.raw) + c0;
    const float* d_gate = a.d_gate + c0;
    Raw* d_raw = static_cast<Raw*>(a.d_raw) + c0;
    const int64_t step = t.row_lanes;
    for (int64_t r = s.first; r < s.end; r += kBackwardBatch * step) {
      typename Raw8<Raw>::Bits bits[kBackwardBatch];
      float dg[kBackwardBatch][8];
#pragma unroll
      for (int u = 0; u < kBackwardBatch; ++u) {
        const int64_t row = r + u * step;
        if (row < s.end) {
          bits[u] = Raw8<Raw>::load(raw + row * a.raw_row);
          load8(d_gate + row * a.dg_row, dg[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kBackwardBatch; ++u) {
        const int64_t row = r + u * step;
        if (row >= s.end) continue;
        float x[8], dx[8];
        Raw8<Raw>::unpack(bits[u], x);
        float row_a = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const Grad g = gate_grad<Fast, Bounded>(x[j] + bias[j], amp[j], a.lower_bound, dg[u][j]);
          dx[j] = g.dx;
          sum[j] += g.dx;
          if constexpr (One) row_a = j == 0 ? g.da_log : row_a + g.da_log;
          else sum[8 + j] += g.da_log;
        }
        if constexpr (One) sum[8] += row_a;
        Raw8<Raw>::store(d_raw + row * a.draw_row, dx);
      }
    }
  }
  // The block's thread rows by a fixed tree: lane l adds lane l + n, for n = row_lanes / 2, ..., 1.
#pragma unroll
  for (int v = 0; v < kSums; ++v) lanes[v][threadIdx.x] = sum[v];
  __syncthreads();
  for (int n = t.row_lanes / 2; n > 0; n /= 2) {
    if (s.lane < n) {
      const int other = static_cast<int>(threadIdx.x) + n * t.tile_groups;
#pragma unroll
      for (int v = 0; v < kSums; ++v) {
        sum[v] += lanes[v][other];
        lanes[v][threadIdx.x] = sum[v];
      }
    }
    __syncthreads();
  }
  if (s.lane != 0 || !s.live) return;
  const int64_t chunk = blockIdx.y;
  float dt[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) dt[j] = sum[j];
  store8(a.part_dt + chunk * a.channels + c0, dt);
  if constexpr (One) {
    a.part_a[chunk * t.groups + s.group] = sum[8];
  } else {
    float da[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) da[j] = sum[8 + j];
    store8(a.part_a + chunk * a.channels + c0, da);
  }
}

}  // namespace ak::linear::gate::cuda::vec
