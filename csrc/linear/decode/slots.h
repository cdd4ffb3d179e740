// The pool operations' slot indices as the host sees them (the CPU backend's tensors, the general
// path's host copies, or indices read back): an index at or past the pool's rows is refused before
// anything is written.
#pragma once

#include <cstdint>
#include <string>

#include "core/common.h"

namespace ak::linear {

inline void require_slots_in_pool(const int32_t* idx, int64_t n, int64_t slots) {
  for (int64_t i = 0; i < n; ++i) {
    require(idx[i] < slots, "state_indices: entry " + std::to_string(i) + " is " + std::to_string(idx[i]) +
                                ", past the " + std::to_string(slots) + " slots of state_cache");
  }
}

// The same for a host-resident int32 tensor (nothing to check without one).
inline void require_slots_in_pool(const ak_tensor* indices, int64_t n, int64_t slots) {
  if (indices) require_slots_in_pool(static_cast<const int32_t*>(indices->data), n, slots);
}

}  // namespace ak::linear
