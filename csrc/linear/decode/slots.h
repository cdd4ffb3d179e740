// The pool operations' per-sequence arguments: their checks (state_indices int32 [N], has_initial_state
// bool [N]), and the slot indices as the host sees them (the CPU backend's tensors, the general path's
// host copies, or indices read back): an index at or past the pool's rows is refused before anything is
// written.
#pragma once

#include <cstdint>
#include <string>

#include "core/common.h"
#include "linear/checks.h"

namespace ak::linear {

// One entry per sequence: `dtype`, shape [N], contiguous, on the reference tensor's device.
inline const ak_tensor& check_per_sequence(const ak_tensor* t, const char* name, int32_t dtype, int64_t N,
                                           const ak_tensor& ref, const char* ref_name) {
  const ak_tensor& r = check_tensor(t, name);
  check_dtype(r, name, {dtype});
  check_shape(r, name, {N});
  require(is_contiguous(r), std::string(name) + ": expected a contiguous tensor");
  check_same_device(r, name, ref, ref_name);
  return r;
}

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
