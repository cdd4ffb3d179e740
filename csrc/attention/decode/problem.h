// A decode call over a KV cache as the decode backends see it, after ak_attention_decode checked it: each
// sequence's Sq new queries (all the query heads of one KV head together, R = G Sq rows) against its
// `lengths[b]` cached keys, the keys split into `splits` ranges of `chunk` keys whose partial results are
// combined by their log-sum-exp.
#pragma once

#include <cstdint>

#include "attention/tiled/block.h"
#include "core/numeric.h"

namespace ak::attention::decode {

using tiled::kMaxAcc;
using tiled::kThreads;
using tiled::kTileKeys;

struct Problem {
  const void* q = nullptr;  // [B, Sq, H, D] contiguous
  const void* k = nullptr;  // contiguous [B, Skv, Hkv, D], or paged [rows, Hkv, D]
  const void* v = nullptr;
  const int32_t* lengths = nullptr;  // [B] keys per sequence (device memory on CUDA)
  const int32_t* table = nullptr;    // [B, max_pages] or null (contiguous)
  void* output = nullptr;            // [B, Sq, H, D], q's dtype
  float* partial = nullptr;          // [splits, B, Hkv, R, D] (splits > 1)
  float* partial_lse = nullptr;      // [splits, B, Hkv, R]
  int32_t dtype = 0;                 // float16 or bfloat16: q, k, v and output
  int64_t B = 0, Sq = 0, H = 0, Hkv = 0, D = 0;
  int64_t capacity = 0;                        // keys a sequence may hold (Skv, or max_pages * page_size)
  int64_t cache_rows = 0, page_size = 0, max_pages = 0;  // paged caches
  int64_t splits = 1, chunk = 0;               // key ranges [s chunk, (s + 1) chunk)
  float scale = 0, softcap = 0;
  bool causal = false;
  int32_t device = 0;                          // CUDA: where the workspace goes
  char block = 't';                            // CPU: the block whose phases run: 't'iled, 'w'arp, 'm'ma, 'p'ipe
                                               // (CUDA: the planner's row)
  AK_HD int64_t rows() const { return (H / Hkv) * Sq; }
};

// The split of each sequence's keys: enough blocks for `blocks_wanted`, ranges of whole tiles and at least
// 256 keys (a shorter range does not pay for its partial result).
inline void plan_splits(Problem& p, int64_t blocks_wanted) {
  const int64_t blocks = p.B * p.Hkv;
  int64_t splits = 1;
  if (blocks > 0 && blocks < blocks_wanted) splits = (blocks_wanted + blocks - 1) / blocks;
  const int64_t most = p.capacity / 256 > 1 ? p.capacity / 256 : 1;
  if (splits > most) splits = most;
  int64_t chunk = (p.capacity + splits - 1) / splits;
  chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  if (chunk == 0) chunk = kTileKeys;
  p.splits = (p.capacity + chunk - 1) / chunk > 0 ? (p.capacity + chunk - 1) / chunk : 1;
  p.chunk = chunk;
}

}  // namespace ak::attention::decode
