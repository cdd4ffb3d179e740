// One output item of each sparse-attention op, written once for both backends: the CPU loops over the
// items (accumulating in double), the general CUDA kernels give each item a thread (in float). An item
// is one row of one head, restricted to a slice of at most kSlice value columns, so its accumulator stays
// small; every slice repeats the same scores in the same order, so slices agree exactly.
//
// Whatever the indices say, nothing here reads outside the tensors: rows past the compressed tensor,
// blocks or positions past a sequence and cache rows past the cache are skipped (the entries refuse such
// indices unless the caller vouched for them).
#pragma once

#include <cstdint>

#include "include/attnkit.h"
#include "core/numeric.h"
#include "sparse/problem.h"

namespace ak::sparse {

constexpr int64_t kSlice = 32;

// Slices of kSlice value columns in a row of `width`.
AK_HD int64_t value_slices(int64_t width) { return (width + kSlice - 1) / kSlice; }

AK_HD float exp_of(float x) { return expf(x); }
AK_HD double exp_of(double x) { return exp(x); }
AK_HD float log_of(float x) { return logf(x); }
AK_HD double log_of(double x) { return log(x); }

// Element i of a float tensor of the given dtype code, widened exactly.
AK_HD float load(const void* p, int32_t dtype, int64_t i) {
  switch (dtype) {
    case AK_FLOAT16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case AK_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case AK_FLOAT8_E4M3: return e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Writes a computed value rounded once (to nearest even) into a float16, bfloat16 or float32 tensor.
template <class Acc>
AK_HD void store(void* p, int32_t dtype, int64_t i, Acc v) {
  switch (dtype) {
    case AK_FLOAT16: static_cast<uint16_t*>(p)[i] = double_to_f16(static_cast<double>(v)); break;
    case AK_BFLOAT16: static_cast<uint16_t*>(p)[i] = double_to_bf16(static_cast<double>(v)); break;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); break;
  }
}

template <class Acc>
AK_HD Acc dot(const void* a, int64_t a_at, const void* b, int64_t b_at, int32_t dtype, int64_t n) {
  Acc s = 0;
  for (int64_t i = 0; i < n; i++) s += static_cast<Acc>(load(a, dtype, a_at + i)) * load(b, dtype, b_at + i);
  return s;
}

// The sequence holding token t: the last n with offsets[n] <= t (empty sequences skipped).
AK_HD int64_t sequence_of(const Packed& s, int64_t t) {
  int64_t lo = 0, hi = s.N - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (s.offsets[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// A softmax accumulated one key at a time over a slice of value columns.
template <class Acc>
struct OnlineSoftmax {
  Acc m = 0, l = 0, acc[kSlice] = {};
  bool any = false;
  // Folds in a key of score s whose value columns are read by value(c).
  template <class Value>
  AK_HD void add(Acc s, int64_t width, Value value) {
    Acc w = 1;
    if (!any) {
      m = s, any = true;
    } else if (s > m) {
      const Acc r = exp_of(m - s);
      l *= r;
      for (int64_t c = 0; c < width; c++) acc[c] *= r;
      m = s;
    } else {
      w = exp_of(s - m);
    }
    l += w;
    for (int64_t c = 0; c < width; c++) acc[c] += w * value(c);
  }
  AK_HD Acc out(int64_t c) const { return any ? acc[c] / l : Acc(0); }
  AK_HD Acc lse() const { return any ? m + log_of(l) : Acc(0); }
};

// Compressed rows visible at position i: those whose block [c stride, c stride + block) ends by i.
AK_HD int64_t visible_compressed(int64_t i, int64_t block, int64_t stride) {
  return i + 1 < block ? 0 : (i + 1 - block) / stride + 1;
}

// ---- NSA, compressed branch: item (token t, head h, columns [v0, v0 + kSlice)) ----
template <class Acc>
AK_HD void nsa_compression_item(const NsaCompression& p, int64_t t, int64_t h, int64_t v0) {
  const int64_t n = sequence_of(p.seq, t);
  const int64_t i = t - p.seq.offsets[n], hk = h / (p.H / p.Hkv);
  const int64_t base = p.seq.chunk_offsets[n];
  const int64_t nc = visible_compressed(i, p.block, p.stride);
  const int64_t width = p.V - v0 < kSlice ? p.V - v0 : kSlice;
  OnlineSoftmax<Acc> sm;
  for (int64_t c = 0; c < nc && base + c < p.C; c++) {
    const int64_t row = (base + c) * p.Hkv + hk;
    const Acc s = static_cast<Acc>(p.scale) * dot<Acc>(p.q, (t * p.H + h) * p.K, p.k_cmp, row * p.K, p.dtype, p.K);
    sm.add(s, width, [&](int64_t col) { return static_cast<Acc>(load(p.v_cmp, p.dtype, row * p.V + v0 + col)); });
  }
  for (int64_t c = 0; c < width; c++) store(p.output, p.dtype, (t * p.H + h) * p.V + v0 + c, sm.out(c));
  if (v0 == 0) p.lse[t * p.H + h] = static_cast<float>(sm.lse());
}

// ---- NSA, block selection: item (token t, KV head hk) ----
// Block c's importance is the group's summed probability of compressed row c (exp(s - lse) per head); the
// first block and the two last (the current block and the one before) are forced with importance G. The S
// most important blocks, in decreasing importance (ties: the smaller index first), then -1.
template <class Acc>
AK_HD void nsa_topk_item(const NsaTopk& p, int64_t t, int64_t hk) {
  const int64_t n = sequence_of(p.seq, t);
  const int64_t i = t - p.seq.offsets[n], G = p.H / p.Hkv;
  const int64_t base = p.seq.chunk_offsets[n];
  const int64_t current = i / p.block;
  Acc best[kMaxSelectedBlocks];
  int32_t which[kMaxSelectedBlocks];
  int64_t kept = 0;
  for (int64_t c = 0; c <= current; c++) {
    Acc importance = static_cast<Acc>(G);
    if (c != 0 && c != current && c + 1 != current) {
      if (base + c >= p.C) continue;
      importance = 0;
      const int64_t row = (base + c) * p.Hkv + hk;
      for (int64_t g = 0; g < G; g++) {
        const int64_t h = hk * G + g;
        const Acc s = static_cast<Acc>(p.scale) * dot<Acc>(p.q, (t * p.H + h) * p.K, p.k_cmp, row * p.K, p.dtype, p.K);
        importance += exp_of(s - static_cast<Acc>(p.lse[t * p.H + h]));
      }
    }
    // Insert after every kept block at least as important (so an equal one with a smaller index stays first).
    int64_t at = kept;
    while (at > 0 && best[at - 1] < importance) at--;
    if (at >= p.S) continue;
    const int64_t last = kept < p.S ? kept : p.S - 1;
    for (int64_t j = last; j > at; j--) best[j] = best[j - 1], which[j] = which[j - 1];
    best[at] = importance, which[at] = static_cast<int32_t>(c);
    if (kept < p.S) kept++;
  }
  int32_t* out = p.indices + (t * p.Hkv + hk) * p.S;
  for (int64_t j = 0; j < p.S; j++) out[j] = j < kept ? which[j] : -1;
}

// ---- NSA, selected branch: item (token t, head h, columns [v0, v0 + kSlice)) ----
template <class Acc>
AK_HD void nsa_selection_item(const NsaSelection& p, int64_t t, int64_t h, int64_t v0) {
  const int64_t n = sequence_of(p.seq, t);
  const int64_t bos = p.seq.offsets[n], len = p.seq.offsets[n + 1] - bos;
  const int64_t i = t - bos, hk = h / (p.H / p.Hkv);
  const int32_t* list = p.indices + (t * p.Hkv + hk) * p.S;
  int64_t count = p.counts ? p.counts[t * p.Hkv + hk] : p.S;
  count = count < 0 ? 0 : (count > p.S ? p.S : count);
  const int64_t width = p.V - v0 < kSlice ? p.V - v0 : kSlice;
  OnlineSoftmax<Acc> sm;
  for (int64_t e = 0; e < count; e++) {
    const int64_t b = list[e];
    if (b < 0 || b * p.block >= len) continue;
    bool repeated = false;
    for (int64_t f = 0; f < e && !repeated; f++) repeated = list[f] == b;
    if (repeated) continue;
    int64_t end = (b + 1) * p.block < len ? (b + 1) * p.block : len;
    if (p.causal && end > i + 1) end = i + 1;
    for (int64_t j = b * p.block; j < end; j++) {
      const int64_t row = (bos + j) * p.Hkv + hk;
      const Acc s = static_cast<Acc>(p.scale) * dot<Acc>(p.q, (t * p.H + h) * p.K, p.k, row * p.K, p.dtype, p.K);
      sm.add(s, width, [&](int64_t col) { return static_cast<Acc>(load(p.v, p.dtype, row * p.V + v0 + col)); });
    }
  }
  for (int64_t c = 0; c < width; c++) store(p.output, p.dtype, (t * p.H + h) * p.V + v0 + c, sm.out(c));
  if (p.lse && v0 == 0) p.lse[t * p.H + h] = sm.any ? static_cast<float>(sm.lse()) : -INFINITY;
}

// ---- Latent decode (DSA, MLA): item (row r = b * Sq + s, head h, columns [v0, v0 + kSlice)) ----
template <class Acc>
AK_HD void dsa_decode_item(const DsaDecode& p, int64_t r, int64_t h, int64_t v0) {
  const int64_t b = r / p.Sq, s = r % p.Sq, hk = h / (p.H / p.Hkv);
  const int64_t width_q = p.q_pe ? p.D : p.D + p.tail;  // the row width of q and kv
  const int64_t position = p.q_start + s;
  const int32_t* list = p.indices ? p.indices + (r * p.Hkv + hk) * p.topk : nullptr;
  const int64_t width = p.D - v0 < kSlice ? p.D - v0 : kSlice;
  OnlineSoftmax<Acc> sm;
  for (int64_t e = 0; e < p.topk; e++) {
    const int64_t j = list ? list[e] : e;
    if (j < 0 || j >= p.Skv) continue;
    if (p.causal && j * p.stride_kv + p.stride_kv - 1 > position) continue;
    const int64_t row = (b * p.Skv + j) * p.Hkv + hk, query = r * p.H + h;
    Acc dot_qk = dot<Acc>(p.q, query * width_q, p.kv, row * width_q, p.dtype, width_q);
    if (p.q_pe) dot_qk += dot<Acc>(p.q_pe, query * p.tail, p.kv_pe, row * p.tail, p.dtype, p.tail);
    const Acc sc = static_cast<Acc>(p.scale) * dot_qk;
    sm.add(sc, width, [&](int64_t col) { return static_cast<Acc>(load(p.kv, p.dtype, row * width_q + v0 + col)); });
  }
  for (int64_t c = 0; c < width; c++) store(p.output, p.dtype, (r * p.H + h) * p.D + v0 + c, sm.out(c));
}

// ---- The lightning indexer: item (query i, key j) ----
template <class Acc>
AK_HD void indexer_item(const Indexer& p, int64_t i, int64_t j) {
  float* out = p.logits + i * p.Sk + j;
  if (j < p.ks[i] || j >= p.ke[i]) {
    *out = p.clean ? -INFINITY : 0.0f;
    return;
  }
  const Acc ks = p.k_scale ? static_cast<Acc>(p.k_scale[j]) : Acc(1);
  Acc sum = 0;
  for (int64_t h = 0; h < p.H; h++) {
    const Acc s = ks * dot<Acc>(p.q, (i * p.H + h) * p.D, p.k, j * p.D, p.dtype, p.D);
    if (s > 0) sum += static_cast<Acc>(p.weights[i * p.H + h]) * s;
  }
  *out = static_cast<float>(sum);
}

}  // namespace ak::sparse
