// The CUDA backend of the gate transforms. Each block covers `tile` channels (adjacent threads on
// adjacent channels, so a row is read and written in whole segments) of one chunk of rows, its
// `row_lanes` thread rows taking the chunk's rows in turn. The backward sums without atomics, in an
// order fixed by the shape (call.h): every thread adds its rows in order, a block adds its thread rows
// in order into one partial per (chunk, channel); then a second kernel adds the partials of a channel
// (eight strided runs of chunks, then the eight runs in order) and a third the columns of a head (a
// fixed tree). Same inputs, same bits.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/gate/backend.h"
#include "linear/gate/math.h"

namespace ak::linear::gate::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::Scratch;
using ak::cuda::stream;

// A thread's channel and the first of its rows.
struct Place {
  int64_t c, h, d;
  int64_t first, end;
  int lane;  // its thread row within the block
  bool live;
};

__device__ Place place_of(const Shape& s, const Tiling& t) {
  Place p;
  const int tx = static_cast<int>(threadIdx.x) % t.tile;
  p.lane = static_cast<int>(threadIdx.x) / t.tile;
  p.c = static_cast<int64_t>(blockIdx.x) * t.tile + tx;
  p.live = p.c < s.channels;
  p.h = p.live ? p.c / s.columns : 0;
  p.d = p.live ? p.c - p.h * s.columns : 0;
  const int64_t chunk_start = static_cast<int64_t>(blockIdx.y) * t.rows_per_chunk;
  p.first = chunk_start + p.lane;
  p.end = min(s.rows, chunk_start + t.rows_per_chunk);
  return p;
}

template <class Raw, bool Fast, bool Bounded>
__global__ void __launch_bounds__(kThreads) forward_kernel(const ForwardArgs a, const Tiling t) {
  const Place p = place_of(a.shape, t);
  if (!p.live) return;
  const float amp = amplitude<Fast>(a.a_log[p.h]);
  const float bias = a.dt_bias[p.c];
  const int64_t rc = a.raw_ch.at(p.h, p.d), gc = a.gate_ch.at(p.h, p.d);
  for (int64_t r = p.first; r < p.end; r += t.row_lanes) {
    int64_t off[2];
    row_offsets(a.rows, r, off);
    const float x = load<Raw>(a.raw, off[0] + rc) + bias;
    a.gate[off[1] + gc] = gate_value<Fast, Bounded>(x, amp, a.settings.lower_bound);
  }
}

// d_raw, and per (chunk, channel) the sums of dx (dt_bias's terms) and of the A_log terms.
template <class Raw, bool Fast, bool Bounded>
__global__ void __launch_bounds__(kThreads)
    partials_kernel(const BackwardArgs a, const Tiling t, float* part_dt, float* part_a) {
  __shared__ float lanes_dt[kThreads], lanes_a[kThreads];
  const Place p = place_of(a.shape, t);
  float dt = 0.f, da = 0.f;
  if (p.live) {
    const float amp = amplitude<Fast>(a.a_log[p.h]);
    const float bias = a.dt_bias[p.c];
    const int64_t rc = a.raw_ch.at(p.h, p.d), gc = a.dg_ch.at(p.h, p.d), dc = a.draw_ch.at(p.h, p.d);
    for (int64_t r = p.first; r < p.end; r += t.row_lanes) {
      int64_t off[3];
      row_offsets(a.rows, r, off);
      const float x = load<Raw>(a.raw, off[0] + rc) + bias;
      const Grad g = gate_grad<Fast, Bounded>(x, amp, a.settings.lower_bound, a.d_gate[off[1] + gc]);
      store<Raw>(a.d_raw, off[2] + dc, g.dx);
      dt += g.dx;
      da += g.da_log;
    }
  }
  lanes_dt[threadIdx.x] = dt;
  lanes_a[threadIdx.x] = da;
  __syncthreads();
  if (p.lane != 0 || !p.live) return;
  float sum_dt = 0.f, sum_a = 0.f;
  for (int l = 0; l < t.row_lanes; ++l) {
    sum_dt += lanes_dt[l * t.tile + threadIdx.x];
    sum_a += lanes_a[l * t.tile + threadIdx.x];
  }
  const int64_t at = static_cast<int64_t>(blockIdx.y) * a.shape.channels + p.c;
  part_dt[at] = sum_dt;
  part_a[at] = sum_a;
}

constexpr int kRuns = kThreads / 32;

// 32 channels per block: warp w adds chunks w, w + 8, ... of its lane's channel, then warp 0 adds
// the eight runs in order. Writes d_dt_bias and each channel's A_log sum.
__global__ void __launch_bounds__(kThreads) channel_sums_kernel(const float* part_dt, const float* part_a,
                                                                int64_t chunks, int64_t channels,
                                                                float* d_dt_bias, float* channel_a) {
  __shared__ float runs_dt[kRuns][32], runs_a[kRuns][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float dt = 0.f, da = 0.f;
  if (c < channels) {
    for (int64_t k = w; k < chunks; k += kRuns) {
      dt += part_dt[k * channels + c];
      da += part_a[k * channels + c];
    }
  }
  runs_dt[w][lane] = dt;
  runs_a[w][lane] = da;
  __syncthreads();
  if (w != 0 || c >= channels) return;
  float sum_dt = 0.f, sum_a = 0.f;
  for (int r = 0; r < kRuns; ++r) {
    sum_dt += runs_dt[r][lane];
    sum_a += runs_a[r][lane];
  }
  d_dt_bias[c] = sum_dt;
  channel_a[c] = sum_a;
}

// One block per head: d_a_log[h] = the sum of its columns' A_log sums (strided runs, then a tree).
__global__ void __launch_bounds__(kThreads) head_sums_kernel(const float* channel_a, int64_t columns,
                                                             float* d_a_log) {
  __shared__ float part[kThreads];
  const int64_t h = blockIdx.x;
  float v = 0.f;
  for (int64_t d = threadIdx.x; d < columns; d += kThreads) v += channel_a[h * columns + d];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int n = kThreads / 2; n > 0; n /= 2) {
    if (static_cast<int>(threadIdx.x) < n) part[threadIdx.x] += part[threadIdx.x + n];
    __syncthreads();
  }
  if (threadIdx.x == 0) d_a_log[h] = part[0];
}

dim3 grid_of(const Tiling& t) {
  return dim3(static_cast<unsigned>(t.channel_tiles), static_cast<unsigned>(t.chunks));
}

}  // namespace

void forward(const ForwardArgs& a) {
  DeviceGuard guard(a.device);
  const Tiling t = tiling_of(a.shape);
  if (t.chunks == 0 || t.channel_tiles == 0) return;
  with_raw_type(a.raw_dtype, [&](auto raw) {
    with_settings(a.settings, [&](auto fast, auto bounded) {
      forward_kernel<decltype(raw), decltype(fast)::value, decltype(bounded)::value>
          <<<grid_of(t), kThreads, 0, stream(a.device)>>>(a, t);
    });
  });
  check_launch("gate_transform_fwd");
}

void backward(const BackwardArgs& a) {
  DeviceGuard guard(a.device);
  const Shape& s = a.shape;
  const Tiling t = tiling_of(s);
  if (s.heads == 0) return;
  cudaStream_t st = stream(a.device);
  const int64_t C = s.channels;
  // The partials (2 x chunks x C) and, per channel, the A_log sums (C; d_a_log itself per head).
  const int64_t parts = t.chunks * C;
  Scratch scratch(a.device, static_cast<size_t>(std::max<int64_t>(1, 2 * parts + C)) * sizeof(float));
  float* part_dt = scratch.as<float>();
  float* part_a = part_dt + parts;
  float* channel_a = s.per_channel ? part_a + parts : a.d_a_log;
  if (parts > 0) {
    with_raw_type(a.raw_dtype, [&](auto raw) {
      with_settings(a.settings, [&](auto fast, auto bounded) {
        partials_kernel<decltype(raw), decltype(fast)::value, decltype(bounded)::value>
            <<<grid_of(t), kThreads, 0, st>>>(a, t, part_dt, part_a);
      });
    });
    check_launch("gate_transform_partials");
  }
  if (C > 0) {
    channel_sums_kernel<<<ak::cuda::ceil_div(C, 32), kThreads, 0, st>>>(part_dt, part_a, t.chunks, C,
                                                                         a.d_dt_bias, channel_a);
    check_launch("gate_transform_channel_sums");
  }
  if (s.per_channel) {
    head_sums_kernel<<<static_cast<unsigned>(s.heads), kThreads, 0, st>>>(channel_a, s.columns, a.d_a_log);
    check_launch("gate_transform_head_sums");
  }
}

}  // namespace ak::linear::gate::cuda
