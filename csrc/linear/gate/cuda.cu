// The CUDA backend of the gate transforms. The common layout (channels contiguous, rows at one
// stride, channels a multiple of 8, 16-byte alignment; call.h: vector_layout) takes the vector
// kernels of cuda_vec.cuh; every other layout, and float64 raw, the generic kernels here. A generic
// block covers `tile` channels (adjacent threads on adjacent channels, so a row is read and written
// in whole segments) of one chunk of rows, its `row_lanes` thread rows taking the chunk's rows in
// turn. The backward sums without atomics, in an order fixed by the shape (call.h): every thread
// adds its rows in order, a block adds its thread rows in order into one partial per (chunk,
// channel); then one sums kernel adds, for d_dt_bias, the partials of a channel (eight strided runs
// of chunks, then the eight runs in order) and, for d_a_log, the A_log partials of a head (strided
// runs, then a fixed tree). Same inputs, same bits. Kernels per call: the forward 1, the backward 2.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/gate/backend.h"
#include "linear/gate/cuda_vec.cuh"
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

// What the sums kernel adds: partials of dt_bias per (chunk, channel) and of A_log per (chunk,
// column), `a_width` columns a chunk, `a_per_head` adjacent ones per head.
struct Sums {
  const float* part_dt = nullptr;
  const float* part_a = nullptr;
  int64_t chunks = 0, channels = 0, heads = 0, a_width = 0, a_per_head = 0;
  float* d_dt_bias = nullptr;
  float* d_a_log = nullptr;
};

// d_dt_bias of 32 channels: warp w adds chunks w, w + 8, ... of its lane's channel, then warp 0 adds
// the eight runs in order.
__device__ void channel_sums(const Sums& s, int64_t block, float (&shared)[kThreads]) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int64_t c = block * 32 + lane;
  float v = 0.f;
  if (c < s.channels) {
#pragma unroll 8
    for (int64_t k = w; k < s.chunks; k += kRuns) v += s.part_dt[k * s.channels + c];
  }
  shared[threadIdx.x] = v;
  __syncthreads();
  if (w != 0 || c >= s.channels) return;
  float sum = 0.f;
  for (int r = 0; r < kRuns; ++r) sum += shared[r * 32 + lane];
  s.d_dt_bias[c] = sum;
}

// d_a_log of head h: its chunks x a_per_head block of A_log partials, thread (row i, column j) of
// kThreads / width x width adding rows i, i + ..., columns j, j + width, ... in order, then a tree.
__device__ void head_sum(const Sums& s, int64_t h, float (&shared)[kThreads]) {
  int width = 1;
  while (width < kThreads && width < s.a_per_head) width *= 2;
  const int col = static_cast<int>(threadIdx.x) % width, row = static_cast<int>(threadIdx.x) / width;
  const int row_lanes = kThreads / width;
  const float* part = s.part_a + h * s.a_per_head;
  float v = 0.f;
  for (int64_t k = row; k < s.chunks; k += row_lanes) {
    for (int64_t j = col; j < s.a_per_head; j += width) v += part[k * s.a_width + j];
  }
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int n = kThreads / 2; n > 0; n /= 2) {
    if (static_cast<int>(threadIdx.x) < n) shared[threadIdx.x] += shared[threadIdx.x + n];
    __syncthreads();
  }
  if (threadIdx.x == 0) s.d_a_log[h] = shared[0];
}

// Blocks [0, ceil(channels / 32)) give d_dt_bias, the next `heads` d_a_log (a block may take several,
// in turn; which block takes which changes no sum's order).
__global__ void __launch_bounds__(kThreads) sums_kernel(const Sums s) {
  __shared__ float shared[kThreads];
  const int64_t channel_blocks = (s.channels + 31) / 32;
  for (int64_t b = blockIdx.x; b < channel_blocks + s.heads; b += gridDim.x) {
    if (b < channel_blocks) channel_sums(s, b, shared);
    else head_sum(s, b - channel_blocks, shared);
    __syncthreads();  // before the next block's use of `shared`
  }
}

void launch_sums(const Sums& s, cudaStream_t st) {
  const int64_t blocks = (s.channels + 31) / 32 + s.heads;
  if (blocks == 0) return;
  sums_kernel<<<static_cast<unsigned>(std::min<int64_t>(blocks, 65535)), kThreads, 0, st>>>(s);
  check_launch("gate_transform_sums");
}

dim3 grid_of(const Tiling& t) {
  return dim3(static_cast<unsigned>(t.channel_tiles), static_cast<unsigned>(t.chunks));
}

// Calls fn(raw) with raw's storage type where the vector path takes it (float64 never does).
template <class F>
bool with_vector_raw(int32_t dtype, F&& fn) {
  switch (dtype) {
    case AK_FLOAT32: fn(float{}); return true;
    case AK_FLOAT16: fn(f16_t{}); return true;
    case AK_BFLOAT16: fn(bf16_t{}); return true;
    default: return false;
  }
}

bool vector_ok(const ForwardArgs& a) {
  if (a.raw_dtype == AK_FLOAT64) return false;
  const Channels ch[2] = {a.raw_ch, a.gate_ch};
  const void* const base[2] = {a.raw, a.gate};
  const int64_t bytes[2] = {static_cast<int64_t>(dtype_size(a.raw_dtype)), 4};
  return vector_layout(a.shape, a.rows, ch, base, bytes);
}

bool vector_ok(const BackwardArgs& a) {
  if (a.raw_dtype == AK_FLOAT64) return false;
  const Channels ch[3] = {a.raw_ch, a.dg_ch, a.draw_ch};
  const void* const base[3] = {a.raw, a.d_gate, a.d_raw};
  const int64_t raw_bytes = static_cast<int64_t>(dtype_size(a.raw_dtype));
  const int64_t bytes[3] = {raw_bytes, 4, raw_bytes};
  return vector_layout(a.shape, a.rows, ch, base, bytes);
}

dim3 grid_of(const VecTiling& t) {
  return dim3(static_cast<unsigned>(t.channel_tiles), static_cast<unsigned>(t.chunks));
}

// The forward's vector path; false (nothing launched) where the layout does not suit it.
bool vector_forward(const ForwardArgs& a) {
  if (!vector_ok(a)) return false;
  const VecTiling t = vec_tiling_of(a.shape);
  vec::Forward v;
  v.raw = a.raw;
  v.gate = a.gate;
  v.raw_row = row_stride(a.rows, 0);
  v.gate_row = row_stride(a.rows, 1);
  v.a_log = a.a_log;
  v.dt_bias = a.dt_bias;
  v.rows = a.shape.rows;
  v.columns = a.shape.columns;
  v.lower_bound = a.settings.lower_bound;
  return with_vector_raw(a.raw_dtype, [&](auto raw) {
    with_settings(a.settings, [&](auto fast, auto bounded) {
      vec::forward_kernel<decltype(raw), decltype(fast)::value, decltype(bounded)::value>
          <<<grid_of(t), kThreads, 0, stream(a.device)>>>(v, t);
    });
    check_launch("gate_transform_fwd_vec");
  });
}

}  // namespace

void forward(const ForwardArgs& a) {
  DeviceGuard guard(a.device);
  const Tiling t = tiling_of(a.shape);
  if (t.chunks == 0 || t.channel_tiles == 0) return;
  if (vector_forward(a)) return;
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
  if (s.heads == 0) return;
  cudaStream_t st = stream(a.device);
  const int64_t C = s.channels;
  const bool vector = s.rows > 0 && vector_ok(a);
  // A group of 8 channels lies in one head: the vector path's A_log partials are per group.
  const bool one_head = vector && s.per_channel && s.columns % kVec == 0;
  const VecTiling vt = vector ? vec_tiling_of(s) : VecTiling{};
  const Tiling t = vector ? Tiling{} : tiling_of(s);
  const int64_t chunks = vector ? vt.chunks : t.chunks;
  Sums sums;
  sums.chunks = chunks;
  sums.channels = C;
  sums.heads = s.heads;
  sums.a_width = one_head ? vt.groups : C;
  sums.a_per_head = one_head ? s.columns / kVec : s.columns;
  sums.d_dt_bias = a.d_dt_bias;
  sums.d_a_log = a.d_a_log;
  // The partials: chunks x C for dt_bias, chunks x a_width for A_log.
  const int64_t parts_dt = chunks * C, parts_a = chunks * sums.a_width;
  Scratch scratch(a.device, static_cast<size_t>(std::max<int64_t>(1, parts_dt + parts_a)) * sizeof(float));
  float* part_dt = scratch.as<float>();
  float* part_a = part_dt + parts_dt;
  sums.part_dt = part_dt;
  sums.part_a = part_a;
  if (vector) {
    vec::Backward v;
    v.raw = a.raw;
    v.d_gate = a.d_gate;
    v.d_raw = a.d_raw;
    v.raw_row = row_stride(a.rows, 0);
    v.dg_row = row_stride(a.rows, 1);
    v.draw_row = row_stride(a.rows, 2);
    v.a_log = a.a_log;
    v.dt_bias = a.dt_bias;
    v.rows = s.rows;
    v.columns = s.columns;
    v.channels = C;
    v.lower_bound = a.settings.lower_bound;
    v.part_dt = part_dt;
    v.part_a = part_a;
    with_vector_raw(a.raw_dtype, [&](auto raw) {
      with_settings(a.settings, [&](auto fast, auto bounded) {
        using Raw = decltype(raw);
        constexpr bool kFast = decltype(fast)::value, kBounded = decltype(bounded)::value;
        if (one_head) vec::backward_kernel<Raw, kFast, kBounded, true><<<grid_of(vt), kThreads, 0, st>>>(v, vt);
        else vec::backward_kernel<Raw, kFast, kBounded, false><<<grid_of(vt), kThreads, 0, st>>>(v, vt);
      });
    });
    check_launch("gate_transform_partials_vec");
  } else if (parts_dt > 0) {
    with_raw_type(a.raw_dtype, [&](auto raw) {
      with_settings(a.settings, [&](auto fast, auto bounded) {
        partials_kernel<decltype(raw), decltype(fast)::value, decltype(bounded)::value>
            <<<grid_of(t), kThreads, 0, st>>>(a, t, part_dt, part_a);
      });
    });
    check_launch("gate_transform_partials");
  }
  launch_sums(sums, st);
}

}  // namespace ak::linear::gate::cuda
