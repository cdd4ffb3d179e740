// A tiled attention block, as phases between barriers: the CUDA kernels run each phase on their 128 threads
// with a __syncthreads between phases; the CPU backends run the same phases thread by thread, one phase
// after the other, which is what the barriers guarantee. So the CPU tests exercise the kernels' own
// indexing, masking and online softmax.
//
// A block attends R query rows (all the query heads of one KV head, for one or a few query tokens) to a
// list of key slots, in tiles of 32 keys: load K and V (phase 1), scores (2), the online softmax's row
// statistics (3), P V into the accumulators (4). Decode (decode/source.h) and the sparse branches
// (sparse/tiled.h) differ only in where a slot's keys are and where the results go.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/numeric.h"
#include "include/attnkit.h"

namespace ak::attention::tiled {

// Threads of a block, and keys a tile.
constexpr int kThreads = 128;
constexpr int kTileKeys = 32;
// The most accumulators a thread keeps: R * D / (kThreads / 2) <= kMaxAcc, i.e. R * D <= 4096.
constexpr int kMaxAcc = 32;

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

// The eight K and V elements at columns [c, c + 8) of key slot `slot` (zeros past the block's slots and for
// a slot without a row): what both blocks' load phases move into shared memory.
template <class Source>
AK_HD void slot_words(const Source& src, int64_t slot, int64_t c, int64_t D, Words& kw, Words& vw) {
  kw = Words{}, vw = Words{};
  const int64_t row = slot < src.end ? src.row(slot) : -1;
  if (row < 0) return;
  const int64_t at = (row * src.Hkv + src.hk) * D + c;
  kw = words(src.k, at), vw = words(src.v, at);
}

// One block's attention of R query rows over a list of key slots, the phases generic in where the keys come
// from: a Source (attention/decode/source.h, sparse/tiled.h) says, all on the device,
//   q, k, v, dtype, D, Hkv, hk, R, scale, softcap   the operands (k, v as [rows, Hkv, D]) and the KV head;
//   begin, end                                     the block's key slots;
//   row(slot)                                      the K / V row of a slot, -1 for none (masked, reads zeros);
//   visible(slot, r)                               whether query row r may see a slot that has a row;
//   q_at(r)                                        where query row r starts in q;
//   write(r, c, o0, o1), stats(r, m, l)            the normalised output pair (c, c + 1) of row r, and the
//                                                  row's max and sum of exponentials (l = 0: nothing seen).
// kD > 0 fixes the head dim at compile time (the kernels' instances: loops unrolled, accumulators in
// registers); 0 reads it from the Source (the host runs).
template <class Source, int kD = 0>
struct Block {
  const Source& src;
  AK_HD explicit Block(const Source& source) : src(source) {}
  AK_HD int64_t dim() const { return kD > 0 ? kD : src.D; }

  // Before the first tile: q rows to shared memory, the statistics reset, the accumulators zeroed.
  AK_HD void start(const Shared& sh, int t, Acc& acc) const {
    const int64_t R = src.R, D = dim();
    for (int64_t e = t; e < R * D; e += kThreads) sh.q[e] = element(src.q, src.dtype, src.q_at(e / D) + e % D);
    if (t < R) sh.m[t] = -INFINITY, sh.l[t] = 0.f;
    for (int j = 0; j < kMaxAcc; j++) acc.a[j] = 0.f;
  }

  // Phase 1: the tile's K and V rows (zeros past the range and for slots without a row), 16 bytes a load.
  AK_HD void load(const Shared& sh, int t, int64_t tile) const {
    const int64_t D = dim(), per_row = D / 8;
    for (int64_t e = t; e < kTileKeys * per_row; e += kThreads) {
      const int64_t j = e / per_row, c = 8 * (e % per_row);
      Words kw, vw;
      slot_words(src, tile + j, c, D, kw, vw);
      uint32_t* k = reinterpret_cast<uint32_t*>(sh.k + j * (D + 2) + c);  // 4-byte aligned only (the pad)
      for (int w = 0; w < 4; w++) k[w] = kw.w[w];
      *reinterpret_cast<Words*>(sh.v + j * D + c) = vw;
    }
  }

  // Phase 2: scores of key t % 32 against rows t / 32, + 4, ...; masked ones -inf.
  AK_HD void scores(const Shared& sh, int t, int64_t tile) const {
    const int64_t D = dim(), j = t % kTileKeys, slot = tile + j;
    const bool has_row = slot < src.end && src.row(slot) >= 0;
    for (int64_t r = t / kTileKeys; r < src.R; r += kThreads / kTileKeys) {
      float s = -INFINITY;
      if (has_row && src.visible(slot, r)) {
        float dot = 0.f;
        const uint32_t* key = reinterpret_cast<const uint32_t*>(sh.k + j * (D + 2));
        const float* query = sh.q + r * D;
        for (int64_t c = 0; c < D; c += 2) {
          float lo, hi;
          pair(key[c / 2], src.dtype, lo, hi);
          dot += query[c] * lo + query[c + 1] * hi;
        }
        s = dot * src.scale;
        if (src.softcap > 0.f) s = src.softcap * tanhf(s / src.softcap);
      }
      sh.s[r * (kTileKeys + 1) + j] = s;
    }
  }

  // Phase 3: per row (thread t = r), the new max, the tile's probabilities and the rescale.
  AK_HD void softmax(const Shared& sh, int t) const {
    if (t >= src.R) return;
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
  AK_HD int64_t first_row(int t) const { return t / (dim() / 2); }
  AK_HD int64_t row_step() const { return kThreads / (dim() / 2); }

  // Phase 4: the accumulators rescaled, plus the tile's P V. Slot n of the accumulators holds row
  // first_row + n row_step (a fixed trip count, so the kernels keep them in registers).
  AK_HD void pv(const Shared& sh, int t, Acc& acc) const {
    const int64_t D = dim(), c = 2 * (t % (D / 2));
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int n = 0; n < kMaxAcc / 2; n++) {
      const int64_t r = first_row(t) + n * row_step();
      if (r >= src.R) break;
      float a0 = acc.a[2 * n] * sh.alpha[r], a1 = acc.a[2 * n + 1] * sh.alpha[r];
      const float* prob = sh.s + r * (kTileKeys + 1);
      for (int j = 0; j < kTileKeys; j++) {
        float lo, hi;
        pair(*reinterpret_cast<const uint32_t*>(sh.v + j * D + c), src.dtype, lo, hi);
        a0 += prob[j] * lo, a1 += prob[j] * hi;
      }
      acc.a[2 * n] = a0, acc.a[2 * n + 1] = a1;
    }
  }

  // After the last tile: the normalised outputs, and each row's statistics.
  AK_HD void finish(const Shared& sh, int t, const Acc& acc) const {
    const int64_t c = 2 * (t % (dim() / 2));
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int n = 0; n < kMaxAcc / 2; n++) {
      const int64_t r = first_row(t) + n * row_step();
      if (r >= src.R) break;
      const float l = sh.l[r], inv = l > 0.f ? 1.f / l : 0.f;
      src.write(r, c, acc.a[2 * n] * inv, acc.a[2 * n + 1] * inv);
    }
    if (t < src.R) src.stats(t, sh.m[t], sh.l[t]);
  }

  // The whole block on the host: each phase on every thread in turn (what the barriers order).
  void run_on_host() const {
    std::vector<Words> memory(static_cast<size_t>(Shared::bytes(src.R, dim()) / 16 + 1));  // 16-byte aligned
    const Shared sh = Shared::carve(reinterpret_cast<unsigned char*>(memory.data()), src.R, dim());
    std::vector<Acc> acc(kThreads);
    for (int t = 0; t < kThreads; t++) start(sh, t, acc[t]);
    for (int64_t tile = src.begin; tile < src.end; tile += kTileKeys) {
      for (int t = 0; t < kThreads; t++) load(sh, t, tile);
      for (int t = 0; t < kThreads; t++) scores(sh, t, tile);
      for (int t = 0; t < kThreads; t++) softmax(sh, t);
      for (int t = 0; t < kThreads; t++) pv(sh, t, acc[t]);
    }
    for (int t = 0; t < kThreads; t++) finish(sh, t, acc[t]);
  }

#ifdef __CUDACC__
  // The whole block on the device: the same phases, a barrier between each.
  __device__ void run_on_device(unsigned char* smem) const {
    const int t = static_cast<int>(threadIdx.x);
    const Shared sh = Shared::carve(smem, src.R, dim());
    Acc acc;
    start(sh, t, acc);
    __syncthreads();
    for (int64_t tile = src.begin; tile < src.end; tile += kTileKeys) {
      load(sh, t, tile);
      __syncthreads();
      scores(sh, t, tile);
      __syncthreads();
      softmax(sh, t);
      __syncthreads();
      pv(sh, t, acc);
      __syncthreads();
    }
    finish(sh, t, acc);
  }
#endif
};

// Whether the tiled block serves a call: 16-bit operands, D of 64, 128 or 256, R D <= 4096, operands on 16
// bytes.
inline bool tiled_serves(int32_t dtype, int64_t D, int64_t R) {
  return (dtype == AK_FLOAT16 || dtype == AK_BFLOAT16) && (D == 64 || D == 128 || D == 256) && R >= 1 &&
         R * D <= kMaxAcc * kThreads;
}

}  // namespace ak::attention::tiled
