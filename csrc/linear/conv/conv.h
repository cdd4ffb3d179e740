// The causal depthwise convolution, written once for both backends: the calls' tensors, the walk
// from a token row to its sequence, and the value of one output element or one gradient element.
// Every sum runs in float32 in the same order on both backends; the backends only differ in who
// computes which element.
//
// For token p of a sequence and channel c, with e the sequence's inputs extended on the left by its
// history (e[m] = history[m] for m < W - 1, e[W - 1 + p] = x[p]):
//   z[p, c] = sum_{i < W} weight[c, i] * e[p + i, c],   y = z or silu(z)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::linear::conv {

// The widest kernel served (taps kept in registers).
constexpr int64_t kMaxWidth = 8;

// Unrolls a loop over the kMaxWidth taps on the GPU, so the accumulators stay in registers.
#if defined(__CUDACC__)
#define AK_CONV_UNROLL _Pragma("unroll")
#else
#define AK_CONV_UNROLL
#endif

// Float data of any float dtype, read and written as float32.
struct Floats {
  void* data = nullptr;
  int32_t dtype = AK_FLOAT32;

  AK_HD bool given() const { return data != nullptr; }
  AK_HD float load(int64_t at) const {
    switch (dtype) {
      case AK_FLOAT16: return f16_to_float(static_cast<const uint16_t*>(data)[at]);
      case AK_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(data)[at]);
      default: return static_cast<const float*>(data)[at];
    }
  }
  AK_HD void store(int64_t at, float v) const {
    switch (dtype) {
      case AK_FLOAT16: static_cast<uint16_t*>(data)[at] = float_to_f16(v); break;
      case AK_BFLOAT16: static_cast<uint16_t*>(data)[at] = float_to_bf16(v); break;
      default: static_cast<float*>(data)[at] = v;
    }
  }
};

// A [B, T, C] tensor with contiguous channels and any batch and token strides.
struct Tokens {
  Floats f;
  int64_t batch_stride = 0, token_stride = 0;
  AK_HD int64_t at(int64_t b, int64_t t, int64_t c) const { return b * batch_stride + t * token_stride + c; }
};

// One sequence of a call: its batch row, first token and length; `pos` is a token's place in it.
struct Sequence {
  int64_t n = 0, batch = 0, begin = 0, length = 0, pos = 0;
};

// The sequences of a call: the B batch rows, or the N packed sequences of row 0 given by offsets.
struct Sequences {
  const int32_t* offsets = nullptr;  // [N + 1] on the tensors' device, or null (batch rows)
  int64_t N = 0, B = 0, T = 0;

  AK_HD Sequence of(int64_t n) const {
    Sequence s;
    s.n = n;
    if (offsets == nullptr) {
      s.batch = n;
      s.length = T;
    } else {
      s.begin = offsets[n];
      s.length = offsets[n + 1] - offsets[n];
    }
    return s;
  }
  // The sequence holding flat row r = b * T + t; false for a row past the last offset.
  AK_HD bool find(int64_t r, Sequence& s) const {
    if (offsets == nullptr) {
      s = of(r / T);
      s.pos = r % T;
      return true;
    }
    if (r >= offsets[N]) return false;
    int64_t lo = 0, hi = N - 1;  // the last n with offsets[n] <= r (repeated offsets: empty sequences)
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (offsets[mid] <= r) lo = mid;
      else hi = mid - 1;
    }
    s = of(lo);
    s.pos = r - s.begin;
    return true;
  }
};

// Activation codes (attnkit_linear.h): AK_CONV_NONE, AK_CONV_SILU.
AK_HD float activate(int activation, float z) { return activation == AK_CONV_SILU ? z / (1.f + expf(-z)) : z; }
// dy * activation'(z): silu' = s (1 + z (1 - s)) with s = sigmoid(z).
AK_HD float through_activation(int activation, float z, float dy) {
  if (activation != AK_CONV_SILU) return dy;
  const float s = 1.f / (1.f + expf(-z));
  return dy * s * (1.f + z * (1.f - s));
}

// What the forward and the backward both read.
struct Problem {
  Sequences seqs;
  int64_t C = 0, W = 0;
  int activation = AK_CONV_NONE;
  Tokens x;
  Floats weight;   // [C, W]
  Floats initial;  // [N, W - 1, C], or not given (zeros)
  int device = 0;  // the CUDA device of the tensors

  // e[W - 1 + j] of sequence s, channel c, for j in [-(W - 1), length).
  AK_HD float input(const Sequence& s, int64_t j, int64_t c) const {
    if (j >= 0) return x.f.load(x.at(s.batch, s.begin + j, c));
    if (!initial.given()) return 0.f;
    return initial.load((s.n * (W - 1) + (W - 1 + j)) * C + c);
  }
  // The convolution before the activation at token p of s.
  AK_HD float preactivation(const Sequence& s, int64_t p, int64_t c) const {
    float z = 0.f;
    for (int64_t i = 0; i < W; ++i) z += weight.load(c * W + i) * input(s, p - (W - 1) + i, c);
    return z;
  }
};

struct ForwardArgs {
  Problem p;
  Tokens output;
  Floats final_state;  // [N, W - 1, C], or not given
  int64_t rows = 0;    // B * T
};

struct BackwardArgs {
  Problem p;
  Tokens d_output;
  Floats d_final;    // [N, W - 1, C], or not given (zero)
  Tokens dx;         // not given: skipped
  Floats dweight;    // [C, W], or not given
  Floats d_initial;  // [N, W - 1, C], or not given
  int64_t rows = 0;  // B * T
  // The weight gradient in two passes: part q sums rows [q * part_rows, (q + 1) * part_rows) into
  // partial[q, c, i], then each (c, i) adds the parts in order (the same bits on every run).
  int64_t part_rows = 1, parts = 0;
  float* partial = nullptr;
};

// The weight gradient's split of `rows` rows: parts of at least 64 rows, at most 256 parts.
inline void split_rows(BackwardArgs& a) {
  const int64_t per = (a.rows + 255) / 256;
  a.part_rows = per > 64 ? per : 64;
  a.parts = (a.rows + a.part_rows - 1) / a.part_rows;
}

// ---- one element each ----

AK_HD void output_at(const ForwardArgs& a, int64_t r, int64_t c) {
  Sequence s;
  if (!a.p.seqs.find(r, s)) return;  // past the last offset: left as it is
  const float y = activate(a.p.activation, a.p.preactivation(s, s.pos, c));
  a.output.f.store(a.output.at(s.batch, s.begin + s.pos, c), y);
}

// Entry k of sequence n's final history: e[L + k], the history's when L + k < W - 1.
AK_HD void final_state_at(const ForwardArgs& a, int64_t n, int64_t k, int64_t c) {
  const Problem& p = a.p;
  const Sequence s = p.seqs.of(n);
  a.final_state.store((n * (p.W - 1) + k) * p.C + c, p.input(s, s.length - (p.W - 1) + k, c));
}

// The gradient at z[p] (dOutput through the activation).
AK_HD float grad_z(const BackwardArgs& a, const Sequence& s, int64_t p, int64_t c) {
  const float dy = a.d_output.f.load(a.d_output.at(s.batch, s.begin + p, c));
  if (a.p.activation == AK_CONV_NONE) return dy;
  return through_activation(a.p.activation, a.p.preactivation(s, p, c), dy);
}

// The gradient of e[W - 1 + j] (j < 0: the initial history): the outputs it fed, z[j + W - 1 - i]
// for the tokens of the sequence, and the final history's entry it became.
AK_HD float grad_input(const BackwardArgs& a, const Sequence& s, int64_t j, int64_t c) {
  const Problem& p = a.p;
  float g = 0.f;
  for (int64_t i = p.W - 1; i >= 0; --i) {
    const int64_t t = j + (p.W - 1) - i;
    if (t >= 0 && t < s.length) g += p.weight.load(c * p.W + i) * grad_z(a, s, t, c);
  }
  const int64_t k = j - (s.length - (p.W - 1));
  if (a.d_final.given() && k >= 0) g += a.d_final.load((s.n * (p.W - 1) + k) * p.C + c);
  return g;
}

AK_HD void dx_at(const BackwardArgs& a, int64_t r, int64_t c) {
  Sequence s;
  if (!a.p.seqs.find(r, s)) {  // past the last offset (B = 1): nothing depends on it
    a.dx.f.store(a.dx.at(0, r, c), 0.f);
    return;
  }
  a.dx.f.store(a.dx.at(s.batch, s.begin + s.pos, c), grad_input(a, s, s.pos, c));
}

AK_HD void d_initial_at(const BackwardArgs& a, int64_t n, int64_t k, int64_t c) {
  const Problem& p = a.p;
  const Sequence s = p.seqs.of(n);
  a.d_initial.store((n * (p.W - 1) + k) * p.C + c, grad_input(a, s, k - (p.W - 1), c));
}

// Pass 1 of the weight gradient: part q of channel c.
AK_HD void dweight_part(const BackwardArgs& a, int64_t q, int64_t c) {
  const Problem& p = a.p;
  float acc[kMaxWidth] = {};
  const int64_t end = (q + 1) * a.part_rows < a.rows ? (q + 1) * a.part_rows : a.rows;
  for (int64_t r = q * a.part_rows; r < end; ++r) {
    Sequence s;
    if (!p.seqs.find(r, s)) break;  // rows past the last offset are all at the end
    const float g = grad_z(a, s, s.pos, c);
    AK_CONV_UNROLL
    for (int64_t i = 0; i < kMaxWidth; ++i) {
      if (i < p.W) acc[i] += g * p.input(s, s.pos - (p.W - 1) + i, c);
    }
  }
  AK_CONV_UNROLL
  for (int64_t i = 0; i < kMaxWidth; ++i) {
    if (i < p.W) a.partial[(q * p.C + c) * p.W + i] = acc[i];
  }
}

// Pass 2: the parts of weight tap (c, i) = flat index ci, added in order.
AK_HD void dweight_sum(const BackwardArgs& a, int64_t ci) {
  const int64_t taps = a.p.C * a.p.W;
  float total = 0.f;
  for (int64_t q = 0; q < a.parts; ++q) total += a.partial[q * taps + ci];
  a.dweight.store(ci, total);
}

}  // namespace ak::linear::conv
