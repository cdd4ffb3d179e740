// The tiled CUDA kernels of the causal convolution, for the common layout: channels a multiple of 8,
// 16-byte aligned rows, widths 1..4. A thread owns 8 adjacent channels (one 16-byte load of a
// 16-bit row, two of a float32 one) and a run of kRun consecutive token rows, and walks them in order
// with the last W inputs in registers, so each input is read once (plus W - 1 rows of overlap per run)
// and every row of a warp is one contiguous segment. Sums run in float32 in the order of conv.h's
// element functions.
//
// The backward walks the same run one token ahead by W - 1: at token t it forms gz[t] = dy[t] through
// the activation (z recomputed from the window), adds gz[t] * e[t - W + 1 + i] into the thread's weight
// sums, and completes dx[t - W + 1] = sum_i weight[i] gz[t - i] (+ the final history's gradient).
// The block adds its runs' weight sums in order into one partial per (block row, channel, tap); the
// shared second pass (cuda.cu) adds the partials in order.
#pragma once

#include <cuda_runtime.h>

#include "core/numeric.h"
#include "linear/conv/conv.h"

namespace ak::linear::conv::cuda::tiled {

constexpr int kGroups = 32;  // channel groups (of 8) per block: one warp across a row
constexpr int kRuns = 8;     // token runs per block
constexpr int kRun = 16;     // token rows per run
constexpr int kBlockRows = kRuns * kRun;
constexpr int kBlockThreads = kGroups * kRuns;
constexpr int kMaxTiledWidth = 4;

// 8 consecutive elements of a row, as float32.
template <int DT>
__device__ __forceinline__ void load8(const void* base, int64_t at, float (&v)[8]) {
  if constexpr (DT == AK_FLOAT32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + at);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + at);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = static_cast<uint16_t>(w[i] & 0xffffu), hi = static_cast<uint16_t>(w[i] >> 16);
      v[2 * i] = DT == AK_BFLOAT16 ? bf16_to_float(lo) : f16_to_float(lo);
      v[2 * i + 1] = DT == AK_BFLOAT16 ? bf16_to_float(hi) : f16_to_float(hi);
    }
  }
}

template <int DT>
__device__ __forceinline__ void store8(void* base, int64_t at, const float (&v)[8]) {
  if constexpr (DT == AK_FLOAT32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + at);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = DT == AK_BFLOAT16 ? float_to_bf16(v[2 * i]) : float_to_f16(v[2 * i]);
      const uint32_t hi = DT == AK_BFLOAT16 ? float_to_bf16(v[2 * i + 1]) : float_to_f16(v[2 * i + 1]);
      w[i] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + at) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// e[W - 1 + j] of sequence s for 8 channels from c: x for j >= 0, else the history (or zeros).
template <int DT>
__device__ __forceinline__ void input8(const Problem& p, const Sequence& s, int64_t j, int64_t c, float (&v)[8]) {
  if (j >= 0) {
    load8<DT>(p.x.f.data, p.x.at(s.batch, s.begin + j, c), v);
  } else if (p.initial.given()) {
    load8<DT>(p.initial.data, (s.n * (p.W - 1) + (p.W - 1 + j)) * p.C + c, v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = 0.f;
  }
}

template <int W>
__device__ __forceinline__ void load_weights(const Problem& p, int64_t c, float (&w)[W][8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i][k] = p.weight.load((c + k) * W + i);
  }
}

// This thread's channels and run: false when its channels are past C.
__device__ __forceinline__ bool place(int64_t C, int64_t& c, int64_t& r0) {
  const int g = threadIdx.x % kGroups, run = threadIdx.x / kGroups;
  c = (static_cast<int64_t>(blockIdx.x) * kGroups + g) * 8;
  r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows + run * kRun;
  return c < C;
}

template <int DT, int W>
__global__ void __launch_bounds__(kBlockThreads) forward_kernel(const ForwardArgs a) {
  const Problem& p = a.p;
  int64_t c, r0;
  if (!place(p.C, c, r0)) return;
  const int64_t r1 = min(r0 + kRun, a.rows);
  Sequence s;
  if (r0 >= r1 || !p.seqs.find(r0, s)) return;  // rows past the last offset are left as they are
  float w[W][8];
  load_weights<W>(p, c, w);
  float e[W][8];  // e[i] = input at position pos - (W - 1) + i; e[W - 1] loaded per token
  auto refill = [&]() {
#pragma unroll
    for (int i = 0; i < W - 1; ++i) input8<DT>(p, s, s.pos - (W - 1) + i, c, e[i]);
  };
  refill();
  for (int64_t r = r0; r < r1; ++r) {
    if (s.pos >= s.length) {  // the next sequence starts at r
      if (!p.seqs.find(r, s)) return;
      refill();
    }
    load8<DT>(p.x.f.data, p.x.at(s.batch, s.begin + s.pos, c), e[W - 1]);
    float y[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float z = 0.f;
#pragma unroll
      for (int i = 0; i < W; ++i) z += w[i][k] * e[i][k];
      y[k] = activate(p.activation, z);
    }
    store8<DT>(a.output.f.data, a.output.at(s.batch, s.begin + s.pos, c), y);
#pragma unroll
    for (int i = 0; i + 1 < W; ++i) {
#pragma unroll
      for (int k = 0; k < 8; ++k) e[i][k] = e[i + 1][k];
    }
    ++s.pos;
  }
}

template <int DT, int W>
__global__ void __launch_bounds__(kBlockThreads) backward_kernel(const BackwardArgs a) {
  __shared__ float sums[kRuns][W][kGroups * 8];
  const Problem& p = a.p;
  int64_t c, r0;
  const bool live = place(p.C, c, r0);
  const int g = threadIdx.x % kGroups, run = threadIdx.x / kGroups;
  float dw[W][8] = {};
  const int64_t r1 = min(r0 + kRun, a.rows);
  if (live && r0 < r1) {
    float w[W][8];
    load_weights<W>(p, c, w);
    float e[W][8];   // inputs at positions t - (W - 1) .. t
    float gz[W][8];  // gz[t - (W - 1)] .. gz[t]; gz[W - 1] is the newest
    Sequence s;
    int64_t r = r0;
    while (r < r1) {
      if (!p.seqs.find(r, s)) {  // past the last offset (one batch row): nothing depends on these rows
        if (a.dx.f.given()) {
          const float zero[8] = {};
          for (; r < r1; ++r) store8<DT>(a.dx.f.data, a.dx.at(0, r, c), zero);
        }
        break;
      }
      // One segment: the rows of sequence s from s.pos to min(its end, r1).
      const int64_t p0 = s.pos, p1 = min(s.length, s.pos + (r1 - r));
#pragma unroll
      for (int i = 0; i < W; ++i) {
#pragma unroll
        for (int k = 0; k < 8; ++k) gz[i][k] = 0.f;
      }
#pragma unroll
      for (int i = 0; i < W - 1; ++i) input8<DT>(p, s, p0 - (W - 1) + i, c, e[i + 1]);
      // t runs ahead of the token whose dx completes (t - (W - 1)) by W - 1 positions.
      for (int64_t t = p0; t < p1 + (W - 1); ++t) {
#pragma unroll
        for (int i = 0; i + 1 < W; ++i) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            e[i][k] = e[i + 1][k];
            gz[i][k] = gz[i + 1][k];
          }
        }
        if (t < s.length) {
          input8<DT>(p, s, t, c, e[W - 1]);
          float dy[8];
          load8<DT>(a.d_output.f.data, a.d_output.at(s.batch, s.begin + t, c), dy);
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            if (p.activation == AK_CONV_NONE) {
              gz[W - 1][k] = dy[k];
            } else {
              float z = 0.f;
#pragma unroll
              for (int i = 0; i < W; ++i) z += w[i][k] * e[i][k];
              gz[W - 1][k] = through_activation(p.activation, z, dy[k]);
            }
          }
          if (t < p1) {  // t is one of this run's rows: its weight terms are this thread's
#pragma unroll
            for (int i = 0; i < W; ++i) {
#pragma unroll
              for (int k = 0; k < 8; ++k) dw[i][k] += gz[W - 1][k] * e[i][k];
            }
          }
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) gz[W - 1][k] = 0.f;
        }
        const int64_t q = t - (W - 1);  // the token whose gradient is complete
        if (q >= p0 && a.dx.f.given()) {
          float d[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            float acc = 0.f;
#pragma unroll
            for (int i = W - 1; i >= 0; --i) acc += w[i][k] * gz[W - 1 - i][k];
            d[k] = acc;
          }
          const int64_t kf = q - (s.length - (W - 1));
          if (a.d_final.given() && kf >= 0) {
            float f[8];
            load8<DT>(a.d_final.data, (s.n * (W - 1) + kf) * p.C + c, f);
#pragma unroll
            for (int k = 0; k < 8; ++k) d[k] += f[k];
          }
          store8<DT>(a.dx.f.data, a.dx.at(s.batch, s.begin + q, c), d);
        }
      }
      r += p1 - p0;
    }
  }
  if (!a.partial) return;
#pragma unroll
  for (int i = 0; i < W; ++i) {
#pragma unroll
    for (int k = 0; k < 8; ++k) sums[run][i][g * 8 + k] = dw[i][k];
  }
  __syncthreads();
  // Thread (run, g) writes taps of channel g * 8 + run: the runs added in order.
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kGroups * 8 + g * 8 + run;
  if (ch >= p.C) return;
  for (int i = 0; i < W; ++i) {
    float total = 0.f;
    for (int k = 0; k < kRuns; ++k) total += sums[k][i][g * 8 + run];
    a.partial[(static_cast<int64_t>(blockIdx.y) * p.C + ch) * W + i] = total;
  }
}

}  // namespace ak::linear::conv::cuda::tiled
