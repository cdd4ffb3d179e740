// Pieces shared by the CPU forward and backward: how a sequence's rows are addressed in the strided
// inputs, which keys a query row admits, fp32 staging of K/V (and Q/dO), and the small dense loops.
//
// The CPU backend works tile by tile (Br query rows x Bc keys) with fp32 accumulation and never
// holds more than one Br x Bc block of scores per worker.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/common.h"
#include "core/numeric.h"
#include "attention/problem.h"

namespace ak::attention::cpu_detail {

constexpr int64_t kBlockRows = 32;  // Br: query rows per tile
constexpr int64_t kBlockKeys = 64;  // Bc: keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Sequence n's query / key lengths and where its tokens start in the packed (varlen) inputs.
struct Sequences {
  const AttnProblem& p;
  int64_t q_len(int64_t n) const { return p.varlen ? p.q_start[n + 1] - p.q_start[n] : p.Sq; }
  int64_t kv_len(int64_t n) const { return p.varlen ? p.kv_start[n + 1] - p.kv_start[n] : p.Skv; }
  // Token index of sequence n's first row, counting all sequences' rows one after another.
  int64_t q_first(int64_t n) const { return p.varlen ? p.q_start[n] : n * p.Sq; }
  int64_t kv_first(int64_t n) const { return p.varlen ? p.kv_start[n] : n * p.Skv; }
  int64_t q_total() const { return p.varlen ? p.q_start[p.N] : p.N * p.Sq; }
  int64_t kv_total() const { return p.varlen ? p.kv_start[p.N] : p.N * p.Skv; }
  // LSE index of (sequence n, head h, row i): [B, Hq, Sq] dense, [Hq, Tq] varlen.
  int64_t lse_index(int64_t n, int64_t h, int64_t i) const {
    return p.varlen ? h * p.q_start[p.N] + p.q_start[n] + i : (n * p.Hq + h) * p.Sq + i;
  }
};

// Element (n, i, h, 0) of a BSHD tensor (or (start[n] + i, h, 0) of a packed THD one).
template <class T>
struct RowAddress {
  T* base;
  int64_t batch_stride, seq_stride, head_stride;
  const std::vector<int64_t>* start;  // varlen token offsets, or null

  RowAddress(const ak_tensor& t, bool varlen, const std::vector<int64_t>& starts)
      : base(static_cast<T*>(t.data)),
        batch_stride(varlen ? 0 : t.strides[0]),
        seq_stride(t.strides[varlen ? 0 : 1]),
        head_stride(t.strides[varlen ? 1 : 2]),
        start(varlen ? &starts : nullptr) {}

  T* at(int64_t n, int64_t i, int64_t h) const {
    const int64_t row = (start ? (*start)[n] : 0) + i;
    return base + n * batch_stride + row * seq_stride + h * head_stride;
  }
};

// 16-bit float storage <-> fp32.
inline float load_half(const uint16_t* src, int64_t d, int32_t dtype) {
  return dtype == AK_BFLOAT16 ? bf16_to_float(src[d]) : f16_to_float(src[d]);
}
inline void load_row(const uint16_t* src, int64_t D, int32_t dtype, float* dst) {
  if (dtype == AK_BFLOAT16) {
    for (int64_t d = 0; d < D; ++d) dst[d] = bf16_to_float(src[d]);
  } else {
    for (int64_t d = 0; d < D; ++d) dst[d] = f16_to_float(src[d]);
  }
}
// float8_e4m3 storage times its dequantisation scale -> fp32.
inline void load_row_e4m3(const uint8_t* src, int64_t D, float scale, float* dst) {
  for (int64_t d = 0; d < D; ++d) dst[d] = e4m3_to_float(src[d]) * scale;
}
inline void store_row(const float* src, int64_t D, int32_t dtype, float scale, uint16_t* dst) {
  if (dtype == AK_BFLOAT16) {
    for (int64_t d = 0; d < D; ++d) dst[d] = float_to_bf16(src[d] * scale);
  } else {
    for (int64_t d = 0; d < D; ++d) dst[d] = float_to_f16(src[d] * scale);
  }
}

// Keys [lo, hi] (inclusive; empty when lo > hi) admitted by query row i of a sequence with sq query
// rows and skv keys: the row sits at key position p = i + skv - sq (bottom-right alignment).
struct KeyRange {
  int64_t lo, hi;
  bool empty() const { return lo > hi; }
};
inline KeyRange admitted_keys(const AttnProblem& p, int64_t i, int64_t sq, int64_t skv) {
  const int64_t pos = i + skv - sq;
  const int64_t lo = p.window_left < 0 ? 0 : std::max<int64_t>(0, pos - p.window_left);
  const int64_t hi = p.window_right < 0 ? skv - 1 : std::min<int64_t>(skv - 1, pos + p.window_right);
  return {lo, hi};
}
// Query rows [first, last] (empty when first > last) that admit at least one key of [j0, j1].
// Both window edges move right with i, so these rows form one interval.
inline KeyRange admitting_rows(const AttnProblem& p, int64_t j0, int64_t j1, int64_t sq, int64_t skv) {
  const int64_t shift = skv - sq;
  const int64_t first = p.window_right < 0 ? 0 : std::max<int64_t>(0, j0 - p.window_right - shift);
  const int64_t last = p.window_left < 0 ? sq - 1 : std::min<int64_t>(sq - 1, j1 + p.window_left - shift);
  return {first, last};
}

// Scores of one tile row: the raw z = sm_scale * q . k, softcapped; returns the softcapped value.
inline float cap_score(float z, float softcap) { return softcap > 0 ? softcap * std::tanh(z / softcap) : z; }

// acc[j] += a * x[j]: the compiler vectorises this (no reduction across lanes).
inline void axpy(float* __restrict acc, const float* __restrict x, float a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += a * x[j];
}

// row[j] = sum_d q[d] * mt[d * ld + j] for j < n: a row of q . M^T with M staged transposed, so the
// inner loop runs along contiguous memory.
inline void row_times_transposed(const float* __restrict q, const float* mt, int64_t ld, int64_t D, int64_t n,
                                 float* __restrict row) {
  for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
  for (int64_t d = 0; d < D; ++d) axpy(row, mt + d * ld, q[d], n);
}

// Per (sequence, head) fp32 copies of a BSHD / THD operand, rows [len][D] and, when asked, the
// transpose [D][len]. Sequence n's block for head h starts at offset(n, h).
struct Staged {
  std::vector<float> rows, cols;
  std::vector<int64_t> seq_offset;  // element offset of each sequence's first head block
  int64_t D = 0;
  std::vector<int64_t> lengths;

  const float* row_block(int64_t n, int64_t h) const { return rows.data() + seq_offset[n] + h * lengths[n] * D; }
  const float* col_block(int64_t n, int64_t h) const { return cols.data() + seq_offset[n] + h * lengths[n] * D; }
};

// Converts operand `t` (H heads) of every sequence to fp32: the rows when `keep_rows`, the transpose
// when `transposed`. float8_e4m3 operands are multiplied by `scale` [N, H] (float32) on the way.
inline Staged stage(const ak_tensor& t, const AttnProblem& p, bool is_query, int64_t H, bool keep_rows,
                    bool transposed, const ak_tensor* scale = nullptr) {
  Sequences seqs{p};
  Staged s;
  s.D = p.D;
  s.lengths.resize(p.N);
  s.seq_offset.resize(p.N + 1);
  int64_t total = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    s.lengths[n] = is_query ? seqs.q_len(n) : seqs.kv_len(n);
    s.seq_offset[n] = total;
    total += s.lengths[n] * H * p.D;
  }
  s.seq_offset[p.N] = total;
  if (keep_rows) s.rows.resize(total);
  if (transposed) s.cols.resize(total);
  const RowAddress<const uint16_t> at(t, p.varlen, is_query ? p.q_start : p.kv_start);
  const RowAddress<const uint8_t> at8(t, p.varlen, is_query ? p.q_start : p.kv_start);
  const bool fp8 = p.dtype == AK_FLOAT8_E4M3;
  const int64_t D = p.D;
  parallel_for(p.N * H, [&](int64_t item) {
    const int64_t n = item / H, h = item % H, len = s.lengths[n];
    const int64_t off = s.seq_offset[n] + h * len * D;
    const float factor = fp8 ? static_cast<const float*>(scale->data)[n * H + h] : 1.0f;
    std::vector<float> row(D);
    for (int64_t i = 0; i < len; ++i) {
      if (fp8) {
        load_row_e4m3(at8.at(n, i, h), D, factor, row.data());
      } else {
        load_row(at.at(n, i, h), D, p.dtype, row.data());
      }
      if (keep_rows) std::copy(row.begin(), row.end(), s.rows.begin() + off + i * D);
      if (transposed) {
        for (int64_t d = 0; d < D; ++d) s.cols[off + d * len + i] = row[d];
      }
    }
  });
  return s;
}

}  // namespace ak::attention::cpu_detail
