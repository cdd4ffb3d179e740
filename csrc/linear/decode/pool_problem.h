// The pool copies and the padding rows of the paged chunked prefill (ak_state_pool_copy,
// ak_zero_padding_rows): the calls as the backends see them, after their entries checked them.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::linear {

struct PoolCopy {
  bool gather = true;               // pool -> states; else states -> pool
  bool swapped = false;             // states hold each slot's last two dims swapped: [.., C, R] for [.., R, C]
  int64_t N = 0;                    // sequences
  int64_t slots = 0;                // rows of the pool
  int64_t slot_size = 0;            // elements per slot: outer R C
  int64_t outer = 1, R = 1, C = 1;  // a slot as [outer, R, C] (its last two dims; outer the rest)
  const ak_tensor* pool = nullptr;         // [slots, ...] fp32 or bf16, each slot dense, slots apart
  const ak_tensor* indices = nullptr;      // [N] int32
  const ak_tensor* has_initial = nullptr;  // [N] bool, or null (every live slot resumes); gather only
  const ak_tensor* states = nullptr;       // [N, ...] fp32, dense (contiguous or swapped)
  bool trusted = false;                    // CUDA: no host read of the indices (AK_POOL_TRUSTED_INDICES)
};

struct PaddingRows {
  int64_t N = 0;                          // sequences: B, or the packed ones
  int64_t B = 0, T = 0;                   // output as [B, T, row]
  int64_t row_bytes = 0;                  // one token's row
  const ak_tensor* output = nullptr;      // [B, T, ...] contiguous
  const ak_tensor* indices = nullptr;     // [N] int32
  const ak_tensor* cu_seqlens = nullptr;  // [N + 1] int32 or int64 (B = 1), or null (sequence n = batch row n)
};

// A forward that advances a state pool in place (ak_delta_rule_fwd_pool): each sequence's state lives in
// slot indices[n] of `cache` [slots, H, V, K] (float32 or bfloat16; <= 0: padding, nothing read or written),
// starting from zero where has_initial[n] is false. `trusted`: the caller vouches for the indices (on CUDA,
// nothing is read back).
struct StatePool {
  const ak_tensor* cache = nullptr;
  const ak_tensor* indices = nullptr;      // [N] int32
  const ak_tensor* has_initial = nullptr;  // [N] bool, or null (every live slot resumes)
  bool trusted = false;
};

// The [N, H, V, K] view of contiguous per-sequence states [N, H, K, V] (the delta rule's layout): what
// a pool copy moves to or from `cache`'s slots, transposing each head's state.
inline ak_tensor kv_states_view(float* data, const ak_tensor& cache, int64_t N) {
  ak_tensor t = cache;
  const int64_t H = cache.shape[1], V = cache.shape[2], K = cache.shape[3];
  t.data = data, t.dtype = AK_FLOAT32, t.rank = 4;
  const int64_t shape[4] = {N, H, V, K}, strides[4] = {H * K * V, K * V, 1, V};
  for (int d = 0; d < 4; ++d) t.shape[d] = shape[d], t.strides[d] = strides[d];
  return t;
}

// t with its last two dims swapped (the same memory).
inline ak_tensor swap_last_dims(ak_tensor t) {
  const int a = t.rank - 2, b = t.rank - 1;
  const int64_t shape = t.shape[a], stride = t.strides[a];
  t.shape[a] = t.shape[b], t.strides[a] = t.strides[b];
  t.shape[b] = shape, t.strides[b] = stride;
  return t;
}

// The pool copy between `pool`'s slots and `states` (kv_states_view), its indices already checked.
inline PoolCopy pool_states_copy(const StatePool& pool, const ak_tensor& states, bool gather) {
  PoolCopy c;
  c.gather = gather, c.swapped = true, c.trusted = true;
  c.N = states.shape[0], c.slots = pool.cache->shape[0];
  c.outer = states.shape[1], c.R = states.shape[2], c.C = states.shape[3];
  c.slot_size = c.outer * c.R * c.C;
  c.pool = pool.cache, c.indices = pool.indices, c.states = &states;
  c.has_initial = gather ? pool.has_initial : nullptr;
  return c;
}

namespace cpu {
void pool_copy(const PoolCopy& p);
void zero_padding_rows(const PaddingRows& p);
}  // namespace cpu

// A packed sequence's rows [lo, hi) clamped into [0, T): offsets read where they live, unchecked, so
// bad ones zero fewer rows and never reach outside the output.
AK_HD void clamp_rows(int64_t T, int64_t& lo, int64_t& hi) {
  lo = lo < 0 ? 0 : (lo > T ? T : lo);
  hi = hi < lo ? lo : (hi > T ? T : hi);
}

}  // namespace ak::linear
