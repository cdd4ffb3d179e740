// Decode as a Source of the tiled block (attention/tiled/block.h): block (split, KV head, sequence) attends the R = G Sq query
// rows of that KV head (row r = i G + g: query token i, head hk G + g) to key positions [split chunk, ...) of
// its sequence, read in place (contiguous, or paged through the block table); one split writes the output,
// more write partial results that combine() merges by their log-sum-exp.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/decode/problem.h"
#include "attention/tiled/block.h"

namespace ak::attention::decode {

struct DecodeSource {
  const void* q;
  const void* k;
  const void* v;
  int32_t dtype;
  int64_t D, Hkv, hk, R;
  float scale, softcap;
  int64_t begin, end;
  const Problem& p;
  int64_t b, split, len;

  AK_HD DecodeSource(const Problem& problem, int64_t split_index, int64_t kv_head, int64_t seq)
      : q(problem.q), k(problem.k), v(problem.v), dtype(problem.dtype), D(problem.D), Hkv(problem.Hkv),
        hk(kv_head), R(problem.rows()), scale(problem.scale), softcap(problem.softcap), p(problem), b(seq),
        split(split_index) {
    len = p.lengths[b];
    if (len < 0) len = 0;
    if (len > p.capacity) len = p.capacity;
    begin = split * p.chunk;
    end = begin + p.chunk < len ? begin + p.chunk : len;
  }
  AK_HD int64_t G() const { return p.H / p.Hkv; }

  // The cache row of key position `pos` (-1 for a page outside the cache).
  AK_HD int64_t row(int64_t pos) const {
    if (!p.table) return b * p.capacity + pos;
    int64_t slot, within;
    if (p.capacity <= INT32_MAX) {  // 32-bit division where it fits (a key's position is below capacity)
      const int32_t at = static_cast<int32_t>(pos), size = static_cast<int32_t>(p.page_size);
      slot = at / size, within = at - (at / size) * size;
    } else {
      slot = pos / p.page_size, within = pos % p.page_size;
    }
    const int64_t page = p.table[b * p.max_pages + slot];
    if (page < 0 || (page + 1) * p.page_size > p.cache_rows) return -1;
    return page * p.page_size + within;
  }
  // Causal: query token i of Sq sees the keys up to len - Sq + i.
  AK_HD bool visible(int64_t pos, int64_t r) const { return !p.causal || pos <= len - p.Sq + r / G(); }
  // The last key position row r sees (visible() as a bound, for blocks that keep it per row).
  AK_HD int64_t last_visible(int64_t r) const { return p.causal ? len - p.Sq + r / G() : INT64_MAX; }
  AK_HD int64_t q_at(int64_t r) const { return ((b * p.Sq + r / G()) * p.H + hk * G() + r % G()) * D; }

  AK_HD void write(int64_t r, int64_t c, float o0, float o1) const {
    if (p.splits == 1) {
      uint16_t* out = static_cast<uint16_t*>(p.output) + q_at(r) + c;
      out[0] = dtype == AK_BFLOAT16 ? float_to_bf16(o0) : float_to_f16(o0);
      out[1] = dtype == AK_BFLOAT16 ? float_to_bf16(o1) : float_to_f16(o1);
    } else {
      float* part = p.partial + (((split * p.B + b) * p.Hkv + hk) * R + r) * D + c;
      part[0] = o0, part[1] = o1;
    }
  }
  AK_HD void stats(int64_t r, float m, float l) const {
    if (p.splits > 1) p.partial_lse[((split * p.B + b) * p.Hkv + hk) * R + r] = l > 0.f ? m + logf(l) : -INFINITY;
  }
};

// The combine of one output element (b, hk, r, column c) over the splits' partial results.
AK_HD void combine(const Problem& p, int64_t b, int64_t hk, int64_t r, int64_t c) {
  const int64_t R = p.rows();
  float top = -INFINITY;
  for (int64_t s = 0; s < p.splits; s++) {
    const float lse = p.partial_lse[((s * p.B + b) * p.Hkv + hk) * R + r];
    top = lse > top ? lse : top;
  }
  float num = 0.f, den = 0.f;
  if (top != -INFINITY) {
    for (int64_t s = 0; s < p.splits; s++) {
      const int64_t at = ((s * p.B + b) * p.Hkv + hk) * R + r;
      const float lse = p.partial_lse[at];
      if (lse == -INFINITY) continue;
      const float w = expf(lse - top);
      num += w * p.partial[at * p.D + c];
      den += w;
    }
  }
  const float o = den > 0.f ? num / den : 0.f;
  const int64_t G = p.H / p.Hkv, i = r / G, h = hk * G + r % G;
  uint16_t* out = static_cast<uint16_t*>(p.output);
  out[((b * p.Sq + i) * p.H + h) * p.D + c] = p.dtype == AK_BFLOAT16 ? float_to_bf16(o) : float_to_f16(o);
}

}  // namespace ak::attention::decode
