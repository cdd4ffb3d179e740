// One decode block, as phases between barriers: the CUDA kernel runs each phase on its 128 threads with a
// __syncthreads between phases; the CPU backend runs the same phases thread by thread, one phase after
// the other, which is what the barriers guarantee. So the CPU tests exercise the kernel's own indexing,
// masking, online softmax, split and combine.
//
// A block serves one (split, KV head, sequence): the R = G Sq query rows of that KV head (row r = i G + g:
// query token i, head hk G + g) against the split's keys, in tiles of 32 keys: load K and V (phase 1),
// scores (2), the online softmax's row statistics (3), P V into the accumulators (4).
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/decode/problem.h"
#include "core/numeric.h"
#include "include/attnkit.h"

namespace ak::attention::decode {

AK_HD float element(const void* p, int32_t dtype, int64_t i) {
  const uint16_t b = static_cast<const uint16_t*>(p)[i];
  return dtype == AK_BFLOAT16 ? bf16_to_float(b) : f16_to_float(b);
}

// Eight 16-bit elements, moved as one 16-byte load or store.
struct alignas(16) Words {
  uint32_t w[4];
};
AK_HD Words words(const void* p, int64_t element) {
  return *reinterpret_cast<const Words*>(static_cast<const uint16_t*>(p) + element);
}

// Two 16-bit elements of a 4-byte word, widened.
AK_HD void pair(uint32_t w, int32_t dtype, float& lo, float& hi) {
  const uint16_t a = static_cast<uint16_t>(w & 0xffffu), b = static_cast<uint16_t>(w >> 16);
  lo = dtype == AK_BFLOAT16 ? bf16_to_float(a) : f16_to_float(a);
  hi = dtype == AK_BFLOAT16 ? bf16_to_float(b) : f16_to_float(b);
}

// The block's shared memory, carved from one buffer of bytes(R, D).
struct Shared {
  float* q;        // [R][D], scaled by nothing: the scores multiply by scale
  uint16_t* k;     // [kTileKeys][D + 2] (the pad makes lanes on consecutive keys hit distinct banks)
  uint16_t* v;     // [kTileKeys][D]
  float* s;        // [R][kTileKeys + 1]: scores, then probabilities
  float* m;        // [R] running max
  float* l;        // [R] running sum
  float* alpha;    // [R] this tile's rescale of the accumulators
  AK_HD static int64_t bytes(int64_t R, int64_t D) {
    return 4 * R * D + 2 * kTileKeys * (D + 2) + 2 * kTileKeys * D + 4 * R * (kTileKeys + 1) + 12 * R;
  }
  AK_HD static Shared carve(unsigned char* base, int64_t R, int64_t D) {
    Shared sh;
    sh.q = reinterpret_cast<float*>(base);
    sh.s = sh.q + R * D;
    sh.m = sh.s + R * (kTileKeys + 1);
    sh.l = sh.m + R;
    sh.alpha = sh.l + R;
    sh.k = reinterpret_cast<uint16_t*>(sh.alpha + R);
    sh.v = sh.k + kTileKeys * (D + 2);
    return sh;
  }
};

// A thread's accumulators: output columns (2 c, 2 c + 1) of rows r0, r0 + step, ... (see pv()).
struct Acc {
  float a[kMaxAcc];
};

// Where a block works: its sequence, KV head, key range and the causal limit of each query token.
struct Block {
  const Problem& p;
  int64_t b, hk, begin, end, len;
  AK_HD Block(const Problem& problem, int64_t split, int64_t kv_head, int64_t seq)
      : p(problem), b(seq), hk(kv_head) {
    len = p.lengths[b];
    if (len < 0) len = 0;
    if (len > p.capacity) len = p.capacity;
    begin = split * p.chunk;
    end = begin + p.chunk < len ? begin + p.chunk : len;
  }
  AK_HD int64_t G() const { return p.H / p.Hkv; }
  AK_HD int64_t R() const { return p.rows(); }

  // The cache row of key position `pos` of this sequence (-1: none, for a page outside the cache).
  AK_HD int64_t cache_row(int64_t pos) const {
    if (!p.table) return b * p.capacity + pos;
    const int64_t page = p.table[b * p.max_pages + pos / p.page_size];
    if (page < 0 || (page + 1) * p.page_size > p.cache_rows) return -1;
    return page * p.page_size + pos % p.page_size;
  }

  // Before the first tile: q rows to shared memory, the statistics reset, the accumulators zeroed.
  AK_HD void start(const Shared& sh, int t, Acc& acc) const {
    const int64_t R = this->R(), D = p.D;
    for (int64_t e = t; e < R * D; e += kThreads) {
      const int64_t r = e / D, c = e % D, i = r / G(), h = hk * G() + r % G();
      sh.q[e] = element(p.q, p.dtype, ((b * p.Sq + i) * p.H + h) * D + c);
    }
    if (t < R) sh.m[t] = -INFINITY, sh.l[t] = 0.f;
    for (int j = 0; j < kMaxAcc; j++) acc.a[j] = 0.f;
  }

  // Phase 1: the tile's K and V rows (zeros past the range), 16 bytes a load.
  AK_HD void load(const Shared& sh, int t, int64_t tile) const {
    const int64_t D = p.D, per_row = D / 8;
    for (int64_t e = t; e < kTileKeys * per_row; e += kThreads) {
      const int64_t j = e / per_row, c = 8 * (e % per_row), pos = tile + j;
      const int64_t row = pos < end ? cache_row(pos) : -1;
      Words kw = {}, vw = {};
      if (row >= 0) {
        const int64_t at = (row * p.Hkv + hk) * D + c;
        kw = words(p.k, at), vw = words(p.v, at);
      }
      uint32_t* k = reinterpret_cast<uint32_t*>(sh.k + j * (D + 2) + c);  // 4-byte aligned only (the pad)
      for (int w = 0; w < 4; w++) k[w] = kw.w[w];
      *reinterpret_cast<Words*>(sh.v + j * D + c) = vw;
    }
  }

  // Phase 2: scores of key t % 32 against rows t / 32, + 4, ...; masked ones -inf.
  AK_HD void scores(const Shared& sh, int t, int64_t tile) const {
    const int64_t D = p.D, R = this->R(), j = t % kTileKeys, pos = tile + j;
    for (int64_t r = t / kTileKeys; r < R; r += kThreads / kTileKeys) {
      const int64_t i = r / G();
      bool visible = pos < end;
      if (p.causal && pos > len - p.Sq + i) visible = false;
      float s = -INFINITY;
      if (visible) {
        float dot = 0.f;
        const uint32_t* key = reinterpret_cast<const uint32_t*>(sh.k + j * (D + 2));
        const float* query = sh.q + r * D;
        for (int64_t c = 0; c < D; c += 2) {
          float lo, hi;
          pair(key[c / 2], p.dtype, lo, hi);
          dot += query[c] * lo + query[c + 1] * hi;
        }
        s = dot * p.scale;
        if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
      }
      sh.s[r * (kTileKeys + 1) + j] = s;
    }
  }

  // Phase 3: per row (thread t = r), the new max, the tile's probabilities and the rescale.
  AK_HD void softmax(const Shared& sh, int t) const {
    if (t >= R()) return;
    float* s = sh.s + t * (kTileKeys + 1);
    float top = sh.m[t];
    for (int j = 0; j < kTileKeys; j++) top = s[j] > top ? s[j] : top;
    if (top == -INFINITY) {  // nothing visible yet
      for (int j = 0; j < kTileKeys; j++) s[j] = 0.f;
      sh.alpha[t] = 1.f;
      return;
    }
    const float alpha = sh.m[t] == -INFINITY ? 0.f : expf(sh.m[t] - top);
    float sum = 0.f;
    for (int j = 0; j < kTileKeys; j++) {
      s[j] = s[j] == -INFINITY ? 0.f : expf(s[j] - top);
      sum += s[j];
    }
    sh.alpha[t] = alpha;
    sh.l[t] = sh.l[t] * alpha + sum;
    sh.m[t] = top;
  }

  // Thread t's columns and rows: column pair t % (D / 2), rows t / (D / 2), + 256 / D, ...
  AK_HD int64_t first_row(int t) const { return t / (p.D / 2); }
  AK_HD int64_t row_step() const { return kThreads / (p.D / 2); }

  // Phase 4: the accumulators rescaled, plus the tile's P V.
  AK_HD void pv(const Shared& sh, int t, Acc& acc) const {
    const int64_t D = p.D, R = this->R(), c = 2 * (t % (D / 2));
    int n = 0;
    for (int64_t r = first_row(t); r < R; r += row_step(), n += 2) {
      float a0 = acc.a[n] * sh.alpha[r], a1 = acc.a[n + 1] * sh.alpha[r];
      const float* prob = sh.s + r * (kTileKeys + 1);
      for (int j = 0; j < kTileKeys; j++) {
        float lo, hi;
        pair(*reinterpret_cast<const uint32_t*>(sh.v + j * D + c), p.dtype, lo, hi);
        a0 += prob[j] * lo, a1 += prob[j] * hi;
      }
      acc.a[n] = a0, acc.a[n + 1] = a1;
    }
  }

  // After the last tile: the output (one split) or the split's normalised partial result and its lse.
  AK_HD void finish(const Shared& sh, int t, const Acc& acc, int64_t split) const {
    const int64_t D = p.D, R = this->R(), c = 2 * (t % (D / 2));
    int n = 0;
    for (int64_t r = first_row(t); r < R; r += row_step(), n += 2) {
      const float l = sh.l[r], inv = l > 0.f ? 1.f / l : 0.f;
      if (p.splits == 1) {
        const int64_t i = r / G(), h = hk * G() + r % G();
        const int64_t at = ((b * p.Sq + i) * p.H + h) * D + c;
        uint16_t* out = static_cast<uint16_t*>(p.output);
        out[at] = p.dtype == AK_BFLOAT16 ? float_to_bf16(acc.a[n] * inv) : float_to_f16(acc.a[n] * inv);
        out[at + 1] = p.dtype == AK_BFLOAT16 ? float_to_bf16(acc.a[n + 1] * inv) : float_to_f16(acc.a[n + 1] * inv);
      } else {
        float* part = p.partial + (((split * p.B + b) * p.Hkv + hk) * R + r) * D + c;
        part[0] = acc.a[n] * inv, part[1] = acc.a[n + 1] * inv;
      }
    }
    if (p.splits > 1 && t < R) {
      p.partial_lse[((split * p.B + b) * p.Hkv + hk) * R + t] = sh.l[t] > 0.f ? sh.m[t] + logf(sh.l[t]) : -INFINITY;
    }
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
