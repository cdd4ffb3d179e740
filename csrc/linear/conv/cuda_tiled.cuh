// The tiled CUDA kernels of the causal convolution, for the common layout: channels a multiple of 8,
// 16-byte aligned rows, widths 1..4. A thread owns kVec = 4 adjacent channels (one 8-byte load of a
// 16-bit row, one 16-byte load of a float32 one) and a run of kRun consecutive token rows, and walks
// them in order with the last W inputs in registers, so each input is read once (plus W - 1 rows of
// overlap per run) and every row of a warp is one contiguous segment. The forward fetches its run's
// rows kBatch at a time before using them, so the loads are in flight together. Sums run in float32
// in the order of conv.h's element functions.
//
// The backward walks the same run one token ahead by W - 1: at token t it forms gz[t] = dy[t] through
// the activation (z recomputed from the window), adds gz[t] * e[t - W + 1 + i] into the thread's weight
// sums, and completes dx[t - W + 1] = sum_i weight[i] gz[t - i] (+ the final history's gradient).
// The block adds its runs' weight sums in order into one partial per (block row, channel, tap); the
// shared second pass (cuda.cu) adds the partials in order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "core/numeric.h"
#include "linear/conv/conv.h"

namespace ak::linear::conv::cuda::tiled {

constexpr int kVec = 4;      // channels per thread
constexpr int kGroups = 64;  // channel groups per block: two warps across a row of 256 channels
constexpr int kRuns = 4;     // token runs per block
constexpr int kRun = 16;     // token rows per run
constexpr int kBatch = 8;    // forward rows fetched together
constexpr int kBwdBatch = 4; // backward tokens (x and dy rows) fetched together
constexpr int kBlockRows = kRuns * kRun;
constexpr int kBlockThreads = kGroups * kRuns;
constexpr int kMaxTiledWidth = 4;

// kVec consecutive elements of a row as they are stored (8 bytes of a 16-bit row, 16 of a float32 one).
template <int DT>
using Raw = std::conditional_t<DT == AK_FLOAT32, float4, uint2>;

template <int DT>
__device__ __forceinline__ Raw<DT> fetch(const void* base, int64_t at) {
  if constexpr (DT == AK_FLOAT32) {
    return *reinterpret_cast<const float4*>(static_cast<const float*>(base) + at);
  } else {
    return *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(base) + at);
  }
}

// A 16-bit value (the low half of bits) as float32, with the hardware conversions.
__device__ __forceinline__ float half_bits(int DT, uint32_t bits) {
  const unsigned short h = static_cast<unsigned short>(bits & 0xffffu);
  return DT == AK_BFLOAT16 ? __uint_as_float(static_cast<uint32_t>(h) << 16) : __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint32_t to_half_bits(int DT, float v) {
  return DT == AK_BFLOAT16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

template <int DT>
__device__ __forceinline__ void unpack(const Raw<DT>& raw, float (&v)[kVec]) {
  if constexpr (DT == AK_FLOAT32) {
    v[0] = raw.x, v[1] = raw.y, v[2] = raw.z, v[3] = raw.w;
  } else {
    v[0] = half_bits(DT, raw.x & 0xffffu), v[1] = half_bits(DT, raw.x >> 16);
    v[2] = half_bits(DT, raw.y & 0xffffu), v[3] = half_bits(DT, raw.y >> 16);
  }
}

template <int DT>
__device__ __forceinline__ void load_vec(const void* base, int64_t at, float (&v)[kVec]) {
  unpack<DT>(fetch<DT>(base, at), v);
}

template <int DT>
__device__ __forceinline__ void store_vec(void* base, int64_t at, const float (&v)[kVec]) {
  if constexpr (DT == AK_FLOAT32) {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + at) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint32_t w[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t lo = to_half_bits(DT, v[2 * i]), hi = to_half_bits(DT, v[2 * i + 1]);
      w[i] = lo | (hi << 16);
    }
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(base) + at) = make_uint2(w[0], w[1]);
  }
}

// e[W - 1 + j] of sequence s for 8 channels from c: x for j >= 0, else the history (or zeros).
template <int DT>
__device__ __forceinline__ void input_vec(const Problem& p, const Sequence& s, int64_t j, int64_t c, float (&v)[kVec]) {
  if (j >= 0) {
    load_vec<DT>(p.x.f.data, p.x.at(s.batch, s.begin + j, c), v);
  } else if (p.initial.given()) {
    load_vec<DT>(p.initial.data, (s.n * (p.W - 1) + (p.W - 1 + j)) * p.C + c, v);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = 0.f;
  }
}

// The activation and its derivative with the hardware exponential and reciprocal for 16-bit tensors:
// their few-ulp float32 error is far below the 16-bit rounding of what they feed. float32 tensors keep
// conv.h's forms.
template <int DT>
__device__ __forceinline__ float activate_fast(int activation, float z) {
  if constexpr (DT == AK_FLOAT32) {
    return activate(activation, z);
  } else {
    return activation == AK_CONV_SILU ? z * __frcp_rn(1.f + __expf(-z)) : z;
  }
}
template <int DT>
__device__ __forceinline__ float through_activation_fast(int activation, float z, float dy) {
  if constexpr (DT == AK_FLOAT32) {
    return through_activation(activation, z, dy);
  } else {
    if (activation != AK_CONV_SILU) return dy;
    const float s = __frcp_rn(1.f + __expf(-z));
    return dy * s * (1.f + z * (1.f - s));
  }
}

template <int W>
__device__ __forceinline__ void load_weights(const Problem& p, int64_t c, float (&w)[W][kVec]) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i][k] = p.weight.load((c + k) * W + i);
  }
}

// This thread's channels and run: false when its channels are past C.
__device__ __forceinline__ bool place(int64_t C, int64_t& c, int64_t& r0) {
  const int g = threadIdx.x % kGroups, run = threadIdx.x / kGroups;
  c = (static_cast<int64_t>(blockIdx.x) * kGroups + g) * kVec;
  r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows + run * kRun;
  return c < C;
}

// One token through the window, its input already in e[W - 1]: y = act(sum_i w[i] e[i]) stored at `at`
// of the output, then the window moves on by one.
template <int DT, int W>
__device__ __forceinline__ void emit_token(const ForwardArgs& a, int64_t at, int activation,
                                           const float (&w)[W][kVec], float (&e)[W][kVec]) {
  float y[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    float z = 0.f;
#pragma unroll
    for (int i = 0; i < W; ++i) z += w[i][j] * e[i][j];
    y[j] = activate_fast<DT>(activation, z);
  }
  store_vec<DT>(a.output.f.data, at, y);
#pragma unroll
  for (int i = 0; i + 1 < W; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) e[i][j] = e[i + 1][j];
  }
}

// A run wholly inside one sequence (the common case): its kRun rows fetched at once, the loop unrolled,
// no per-row bookkeeping. e holds the W - 1 inputs before the run.
template <int DT, int W, bool Silu>
__device__ __forceinline__ void forward_run(const ForwardArgs& a, const Sequence& s, int64_t c, const float (&w)[W][kVec],
                                            float (&e)[W][kVec]) {
  const Problem& p = a.p;
  const int64_t x0 = p.x.at(s.batch, s.begin + s.pos, c), y0 = a.output.at(s.batch, s.begin + s.pos, c);
  Raw<DT> raw[kRun];
#pragma unroll
  for (int k = 0; k < kRun; ++k) raw[k] = fetch<DT>(p.x.f.data, x0 + k * p.x.token_stride);
#pragma unroll
  for (int k = 0; k < kRun; ++k) {
    unpack<DT>(raw[k], e[W - 1]);
    emit_token<DT, W>(a, y0 + k * a.output.token_stride, Silu ? AK_CONV_SILU : AK_CONV_NONE, w, e);
  }
}

template <int DT, int W>
__global__ void __launch_bounds__(kBlockThreads, 2) forward_kernel(const ForwardArgs a) {
  const Problem& p = a.p;
  int64_t c, r0;
  if (!place(p.C, c, r0)) return;
  const int64_t r1 = min(r0 + kRun, a.rows);
  Sequence s;
  if (r0 >= r1 || !p.seqs.find(r0, s)) return;  // rows past the last offset are left as they are
  float w[W][kVec];
  load_weights<W>(p, c, w);
  float e[W][kVec];  // e[i] = input at position pos - (W - 1) + i; e[W - 1] loaded per token
  auto refill = [&]() {
#pragma unroll
    for (int i = 0; i < W - 1; ++i) input_vec<DT>(p, s, s.pos - (W - 1) + i, c, e[i]);
  };
  refill();
  if (r1 - r0 == kRun && s.pos + kRun <= s.length) {
    if (p.activation == AK_CONV_SILU) {
      forward_run<DT, W, true>(a, s, c, w, e);
    } else {
      forward_run<DT, W, false>(a, s, c, w, e);
    }
    return;
  }
  // Where the next row to fetch sits: (batch row, token) of flat row r, walked without divisions.
  const bool packed = p.seqs.offsets != nullptr;
  int64_t fb = packed ? 0 : r0 / p.seqs.T, ft = packed ? r0 : r0 % p.seqs.T;
  for (int64_t rb = r0; rb < r1; rb += kBatch) {
    Raw<DT> raw[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (rb + k < r1) {
        raw[k] = fetch<DT>(p.x.f.data, p.x.at(fb, ft, c));
        if (++ft == p.seqs.T && !packed) ft = 0, ++fb;
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t r = rb + k;
      if (r >= r1) break;
      if (s.pos >= s.length) {  // the next sequence starts at r
        if (!p.seqs.find(r, s)) return;
        refill();
      }
      unpack<DT>(raw[k], e[W - 1]);
      emit_token<DT, W>(a, a.output.at(s.batch, s.begin + s.pos, c), p.activation, w, e);
      ++s.pos;
    }
  }
}

// A run wholly inside one sequence with the W - 1 tokens after it (the common case): the backward's walk
// with every bound known at compile time; x and dy of kBwdBatch tokens fetched together.
template <int DT, int W, bool Silu>
__device__ __forceinline__ void backward_run(const BackwardArgs& a, const Sequence& s, int64_t c, const float (&w)[W][kVec],
                                             float (&dw)[W][kVec]) {
  const Problem& p = a.p;
  constexpr int kSteps = kRun + W - 1;  // tokens t walked; dx of t - (W - 1) completes at t
  float e[W][kVec], gz[W][kVec];
#pragma unroll
  for (int i = 0; i < W; ++i) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) gz[i][k] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < W - 1; ++i) input_vec<DT>(p, s, s.pos - (W - 1) + i, c, e[i + 1]);
  const int64_t x0 = p.x.at(s.batch, s.begin + s.pos, c), y0 = a.d_output.at(s.batch, s.begin + s.pos, c);
  const int64_t d0 = a.dx.at(s.batch, s.begin + s.pos, c);
  const bool has_dx = a.dx.f.given();
#pragma unroll
  for (int tb = 0; tb < kSteps; tb += kBwdBatch) {
    Raw<DT> rx[kBwdBatch], rdy[kBwdBatch];
#pragma unroll
    for (int k = 0; k < kBwdBatch; ++k) {
      if (tb + k < kSteps) {
        rx[k] = fetch<DT>(p.x.f.data, x0 + (tb + k) * p.x.token_stride);
        rdy[k] = fetch<DT>(a.d_output.f.data, y0 + (tb + k) * a.d_output.token_stride);
      }
    }
#pragma unroll
    for (int k = 0; k < kBwdBatch; ++k) {
      const int t = tb + k;
      if (t < kSteps) {
#pragma unroll
        for (int i = 0; i + 1 < W; ++i) {
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            e[i][j] = e[i + 1][j];
            gz[i][j] = gz[i + 1][j];
          }
        }
        unpack<DT>(rx[k], e[W - 1]);
        float dy[kVec];
        unpack<DT>(rdy[k], dy);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          if constexpr (Silu) {
            float z = 0.f;
#pragma unroll
            for (int i = 0; i < W; ++i) z += w[i][j] * e[i][j];
            gz[W - 1][j] = through_activation_fast<DT>(AK_CONV_SILU, z, dy[j]);
          } else {
            gz[W - 1][j] = dy[j];
          }
        }
        if (t < kRun) {
#pragma unroll
          for (int i = 0; i < W; ++i) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) dw[i][j] += gz[W - 1][j] * e[i][j];
          }
        }
        if (t >= W - 1 && has_dx) {
          float d[kVec];
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            float acc = 0.f;
#pragma unroll
            for (int i = W - 1; i >= 0; --i) acc += w[i][j] * gz[W - 1 - i][j];
            d[j] = acc;
          }
          store_vec<DT>(a.dx.f.data, d0 + (t - (W - 1)) * a.dx.token_stride, d);
        }
      }
    }
  }
}

template <int DT, int W>
__global__ void __launch_bounds__(kBlockThreads, 2) backward_kernel(const BackwardArgs a) {
  __shared__ float sums[kRuns][W][kGroups * kVec];
  const Problem& p = a.p;
  int64_t c, r0;
  const bool live = place(p.C, c, r0);
  const int g = threadIdx.x % kGroups, run = threadIdx.x / kGroups;
  float dw[W][kVec] = {};
  int64_t r1 = min(r0 + kRun, a.rows);
  if (live && r0 < r1) {
    float w[W][kVec];
    load_weights<W>(p, c, w);
    Sequence s;
    if (r1 - r0 == kRun && p.seqs.find(r0, s) && s.pos + kRun + (W - 1) <= s.length) {
      if (p.activation == AK_CONV_SILU) {
        backward_run<DT, W, true>(a, s, c, w, dw);
      } else {
        backward_run<DT, W, false>(a, s, c, w, dw);
      }
      r1 = r0;  // done: skip the general walk
    }
    float e[W][kVec];   // inputs at positions t - (W - 1) .. t
    float gz[W][kVec];  // gz[t - (W - 1)] .. gz[t]; gz[W - 1] is the newest
    int64_t r = r0;
    while (r < r1) {
      if (!p.seqs.find(r, s)) {  // past the last offset (one batch row): nothing depends on these rows
        if (a.dx.f.given()) {
          const float zero[kVec] = {};
          for (; r < r1; ++r) store_vec<DT>(a.dx.f.data, a.dx.at(0, r, c), zero);
        }
        break;
      }
      // One segment: the rows of sequence s from s.pos to min(its end, r1).
      const int64_t p0 = s.pos, p1 = min(s.length, s.pos + (r1 - r));
#pragma unroll
      for (int i = 0; i < W; ++i) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) gz[i][k] = 0.f;
      }
#pragma unroll
      for (int i = 0; i < W - 1; ++i) input_vec<DT>(p, s, p0 - (W - 1) + i, c, e[i + 1]);
      // t runs ahead of the token whose dx completes (t - (W - 1)) by W - 1 positions; x and dy of
      // kBatch tokens are fetched together before they are used.
      const int64_t t_stop = p1 + (W - 1), t_load = min(t_stop, s.length);
      for (int64_t tb = p0; tb < t_stop; tb += kBwdBatch) {
        Raw<DT> rx[kBwdBatch], rdy[kBwdBatch];
#pragma unroll
        for (int k = 0; k < kBwdBatch; ++k) {
          if (tb + k < t_load) {
            rx[k] = fetch<DT>(p.x.f.data, p.x.at(s.batch, s.begin + tb + k, c));
            rdy[k] = fetch<DT>(a.d_output.f.data, a.d_output.at(s.batch, s.begin + tb + k, c));
          }
        }
#pragma unroll
        for (int kb = 0; kb < kBwdBatch; ++kb) {
        const int64_t t = tb + kb;
        if (t >= t_stop) break;
#pragma unroll
        for (int i = 0; i + 1 < W; ++i) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            e[i][k] = e[i + 1][k];
            gz[i][k] = gz[i + 1][k];
          }
        }
        if (t < s.length) {
          unpack<DT>(rx[kb], e[W - 1]);
          float dy[kVec];
          unpack<DT>(rdy[kb], dy);
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            if (p.activation == AK_CONV_NONE) {
              gz[W - 1][k] = dy[k];
            } else {
              float z = 0.f;
#pragma unroll
              for (int i = 0; i < W; ++i) z += w[i][k] * e[i][k];
              gz[W - 1][k] = through_activation_fast<DT>(p.activation, z, dy[k]);
            }
          }
          if (t < p1) {  // t is one of this run's rows: its weight terms are this thread's
#pragma unroll
            for (int i = 0; i < W; ++i) {
#pragma unroll
              for (int k = 0; k < kVec; ++k) dw[i][k] += gz[W - 1][k] * e[i][k];
            }
          }
        } else {
#pragma unroll
          for (int k = 0; k < kVec; ++k) gz[W - 1][k] = 0.f;
        }
        const int64_t q = t - (W - 1);  // the token whose gradient is complete
        if (q >= p0 && a.dx.f.given()) {
          float d[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            float acc = 0.f;
#pragma unroll
            for (int i = W - 1; i >= 0; --i) acc += w[i][k] * gz[W - 1 - i][k];
            d[k] = acc;
          }
          const int64_t kf = q - (s.length - (W - 1));
          if (a.d_final.given() && kf >= 0) {
            float f[kVec];
            load_vec<DT>(a.d_final.data, (s.n * (W - 1) + kf) * p.C + c, f);
#pragma unroll
            for (int k = 0; k < kVec; ++k) d[k] += f[k];
          }
          store_vec<DT>(a.dx.f.data, a.dx.at(s.batch, s.begin + q, c), d);
        }
        }
      }
      r += p1 - p0;
    }
  }
  if (!a.partial) return;
#pragma unroll
  for (int i = 0; i < W; ++i) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) sums[run][i][g * kVec + k] = dw[i][k];
  }
  __syncthreads();
  // Thread t writes the taps of the block's channel t: the runs added in order.
  static_assert(kBlockThreads == kGroups * kVec, "a thread per channel of the block");
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kGroups * kVec + threadIdx.x;
  if (ch >= p.C) return;
  for (int i = 0; i < W; ++i) {
    float total = 0.f;
    for (int k = 0; k < kRuns; ++k) total += sums[k][i][threadIdx.x];
    a.partial[(static_cast<int64_t>(blockIdx.y) * p.C + ch) * W + i] = total;
  }
}

}  // namespace ak::linear::conv::cuda::tiled
