// Iteration plans for strided copies: merge dimensions that are contiguous in both tensors and drop
// size-1 dimensions, so a permute or a cast touches as few index computations as possible.
#pragma once

#include <cstdint>

#include "include/attnkit.h"

namespace ak {

struct CopyPlan {
  int rank = 0;  // 0 means a single element
  int64_t shape[AK_MAX_RANK] = {};
  int64_t dst_strides[AK_MAX_RANK] = {};
  int64_t src_strides[AK_MAX_RANK] = {};
  int64_t numel = 1;
  // True when both sides walk memory in the same order with unit stride (one flat run).
  bool flat() const { return rank <= 1 && (rank == 0 || (dst_strides[0] == 1 && src_strides[0] == 1)); }
};

inline CopyPlan make_copy_plan(const ak_tensor& dst, const ak_tensor& src) {
  CopyPlan p;
  for (int i = 0; i < dst.rank; ++i) {
    p.numel *= dst.shape[i];
    if (dst.shape[i] == 1) continue;
    const int r = p.rank;
    // Merge with the previous (outer) kept dimension when both tensors are contiguous across them.
    if (r > 0 && p.dst_strides[r - 1] == dst.strides[i] * dst.shape[i] &&
        p.src_strides[r - 1] == src.strides[i] * dst.shape[i]) {
      p.shape[r - 1] *= dst.shape[i];
      p.dst_strides[r - 1] = dst.strides[i];
      p.src_strides[r - 1] = src.strides[i];
      continue;
    }
    p.shape[r] = dst.shape[i];
    p.dst_strides[r] = dst.strides[i];
    p.src_strides[r] = src.strides[i];
    p.rank = r + 1;
  }
  return p;
}

}  // namespace ak
