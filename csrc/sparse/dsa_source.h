// Latent decode (DeepSeek sparse attention, MLA) as a latent Source of the tensor-core attention block
// (attention/tiled/mma_block.h): block (query row x = b Sq + s, KV head hk, group g) attends the KV head's
// query heads 16 g .. 16 g + 15 (fewer in the last group) to the cache rows the row's top-k list names (MLA:
// every row). A cache row holds the key (D + tail columns, the tail possibly in a tensor of its own) and,
// in its first D, the value: one shared-memory tile serves both products.
#pragma once

#include <cstdint>

#include "attention/tiled/block.h"
#include "attention/tiled/mma_block.h"
#include "sparse/problem.h"
#include "sparse/rows.h"

namespace ak::sparse {

// How a latent kernel's blocks cover a query row: heads a block, and blocks an SM.
struct LatentBlocks {
  int64_t heads, per_sm;
};
constexpr LatentBlocks kLatentMmaSplit{16, 2};   // the mma.sync block (attention/tiled/mma_block.h)
constexpr LatentBlocks kLatentWgmmaSplit{64, 1};  // the Hopper kernel (sparse/dsa_sm90.cuh)

// The split of the lists: the count of splits (at most one per four tiles of 64 slots) whose blocks (groups
// x query rows x KV heads x splits) finish soonest at `per_sm` per multiprocessor (`sms`; 0: the
// H200's 132, which the CPU backend splits for): waves of blocks times a block's work, in tiles: its tiles,
// one more for its start and output, and one more with splits (its partial result written and merged); the
// fewer splits on a tie. A count that leaves a last wave mostly empty loses to a smaller one.
inline void plan_latent_splits(DsaDecode& p, int sms, LatentBlocks kind = kLatentMmaSplit) {
  constexpr int64_t kTile = ak::attention::tiled::kMmaKeys;
  const int64_t slots = kind.per_sm * int64_t(sms > 0 ? sms : 132);
  const int64_t groups = (p.H / p.Hkv + kind.heads - 1) / kind.heads;
  const int64_t blocks = groups * p.B * p.Sq * p.Hkv;
  const int64_t most = p.topk / (4 * kTile) > 1 ? p.topk / (4 * kTile) : 1;
  int64_t best_chunk = 0, best_splits = 1, best_cost = -1;
  for (int64_t want = 1; want <= most; want++) {
    int64_t chunk = (p.topk + want - 1) / want;
    chunk = chunk > 0 ? (chunk + kTile - 1) / kTile * kTile : kTile;
    const int64_t splits = (p.topk + chunk - 1) / chunk > 1 ? (p.topk + chunk - 1) / chunk : 1;
    if (splits != want && want > 1) continue;  // the same split as a smaller count
    const int64_t waves = blocks > 0 ? (blocks * splits + slots - 1) / slots : 1;
    const int64_t cost = waves * (chunk / kTile + (splits > 1 ? 2 : 1));
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best_chunk = chunk, best_splits = splits;
  }
  p.chunk = best_chunk;
  p.splits = best_splits;
}

// Whether the Hopper kernel (sparse/dsa_sm90.cuh) serves a call: 16-bit, 512 + 64 columns, KV groups of a
// multiple of 64 query heads.
inline bool dsa_wgmma_serves(int32_t dtype, int64_t dv, int64_t width, int64_t group) {
  return (dtype == AK_BFLOAT16 || dtype == AK_FLOAT16) && dv == 512 && width == 576 && group > 0 && group % 64 == 0;
}

// The tensor-core block's warps for a latent Source: 8 (its 512 value columns 64 a warp, and each tile's
// steps with twice the warps behind them at the two blocks an SM that its shared memory allows).
constexpr int kLatentWarps = 8;

// kDv > 0 fixes the value width at compile time (the kernels' instances); 0 reads it from the problem.
template <int kDv = 0>
struct DsaSource {
  static constexpr bool kLatentValues = true;
  static constexpr int kValueDim = kDv;

  const DsaDecode& p;
  const void* q;
  const void* k;
  int32_t dtype;
  int64_t D, Dv, Hkv, hk, R;
  float scale, softcap = 0.f;
  int64_t begin = 0, end;
  int64_t x, h0, b, position, split;
  const int32_t* list;

  AK_HD DsaSource(const DsaDecode& problem, int64_t group, int64_t row, int64_t kv_head, int64_t split_index = 0)
      : p(problem), q(problem.q), k(problem.kv), dtype(problem.dtype), D(problem.D + problem.tail), Dv(problem.D),
        Hkv(problem.Hkv), hk(kv_head), scale(static_cast<float>(problem.scale)), end(problem.topk), x(row),
        split(split_index) {
    if (p.splits > 1) {
      begin = split * p.chunk;
      end = begin + p.chunk < p.topk ? begin + p.chunk : p.topk;
    }
    const int64_t G = p.H / p.Hkv, first = group * ak::attention::tiled::kMmaRows;
    h0 = hk * G + first;
    R = G - first < ak::attention::tiled::kMmaRows ? G - first : ak::attention::tiled::kMmaRows;
    b = x / p.Sq, position = p.q_start + x % p.Sq;
    list = p.indices ? p.indices + (x * p.Hkv + hk) * p.topk : nullptr;
  }
  // The groups of 16 query heads a KV head's heads make.
  AK_HD static int64_t groups(const DsaDecode& p) {
    return (p.H / p.Hkv + ak::attention::tiled::kMmaRows - 1) / ak::attention::tiled::kMmaRows;
  }

  // Columns c .. c + 7 of query row r (c a multiple of 8), from q or, past Dv, from a separate rotary part.
  AK_HD const uint16_t* query_ptr(int64_t r, int64_t c) const {
    const int64_t h = x * p.H + h0 + r;
    if (p.q_pe && c >= Dv) return static_cast<const uint16_t*>(p.q_pe) + h * (D - Dv) + c - Dv;
    return static_cast<const uint16_t*>(q) + h * (p.q_pe ? Dv : D) + c;
  }
  // The cache row of list entry `slot`, -1 for padding, a row past the cache or one past the causal limit.
  AK_HD int64_t row(int64_t slot) const {
    const int64_t j = list ? list[slot] : slot;
    if (j < 0 || j >= p.Skv) return -1;
    if (p.causal && j * p.stride_kv + p.stride_kv - 1 > position) return -1;
    return b * p.Skv + j;
  }
  AK_HD bool visible(int64_t, int64_t) const { return true; }
  // Columns c .. c + 7 of cache row `row` (c a multiple of 8), from kv or, past Dv, from its rotary part.
  AK_HD const uint16_t* key_ptr(int64_t row, int64_t c) const {
    const int64_t at = row * Hkv + hk;
    if (p.kv_pe && c >= Dv) return static_cast<const uint16_t*>(p.kv_pe) + at * (D - Dv) + c - Dv;
    return static_cast<const uint16_t*>(k) + at * (p.kv_pe ? Dv : D) + c;
  }
  // The elements between consecutive cache rows at column c (key_ptr(row, c) = key_ptr(0, c) + row stride).
  AK_HD int64_t key_stride(int64_t c) const { return Hkv * (p.kv_pe ? (c >= Dv ? D - Dv : Dv) : D); }
  // The output pair, or with splits this split's partial one (normalised by its own sum).
  AK_HD void write(int64_t r, int64_t c, float o0, float o1) const {
    const int64_t at = (x * p.H + h0 + r) * Dv + c;
    if (p.splits > 1) {
      float* part = p.partial + split * p.B * p.Sq * p.H * Dv + at;
      part[0] = o0, part[1] = o1;
      return;
    }
    store(p.output, dtype, at, o0), store(p.output, dtype, at + 1, o1);
  }
  AK_HD void stats(int64_t r, float m, float l) const {
    if (p.splits > 1) p.partial_lse[split * p.B * p.Sq * p.H + x * p.H + h0 + r] = l > 0.f ? m + logf(l) : -INFINITY;
  }
};

// The combine of output element (query row x, head h, column c) over the splits, weighted by their
// log-sum-exps (0 where no split saw a row).
AK_HD void combine_latent(const DsaDecode& p, int64_t x, int64_t h, int64_t c) {
  const int64_t rows = p.B * p.Sq * p.H, at = x * p.H + h;
  float top = -INFINITY;
  for (int64_t s = 0; s < p.splits; s++) top = p.partial_lse[s * rows + at] > top ? p.partial_lse[s * rows + at] : top;
  float num = 0.f, den = 0.f;
  if (top != -INFINITY) {
    for (int64_t s = 0; s < p.splits; s++) {
      const float lse = p.partial_lse[s * rows + at];
      if (lse == -INFINITY) continue;
      const float w = expf(lse - top);
      num += w * p.partial[(s * rows + at) * p.D + c];
      den += w;
    }
  }
  store(p.output, p.dtype, at * p.D + c, den > 0.f ? num / den : 0.f);
}

}  // namespace ak::sparse
