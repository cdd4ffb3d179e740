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

// A packed sequence's rows [lo, hi) clamped into [0, T): offsets read where they live, unchecked, so
// bad ones zero fewer rows and never reach outside the output.
AK_HD void clamp_rows(int64_t T, int64_t& lo, int64_t& hi) {
  lo = lo < 0 ? 0 : (lo > T ? T : lo);
  hi = hi < lo ? lo : (hi > T ? T : hi);
}

}  // namespace ak::linear
