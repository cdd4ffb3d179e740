// The pool operations' per-sequence arguments: their checks (state_indices int32 [N], has_initial_state
// bool [N]), and the slot indices as the host sees them (the CPU backend's tensors, the general path's
// host copies, or indices read back): an index at or past the pool's rows, or a live slot named twice, is
// refused before anything is written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "linear/checks.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#include "cuda/device_check.h"
#endif

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

// A pool [num_slots, ...]: every slot dense (the dims after the first contiguous) and slots apart (the
// slot stride at least a slot). Returns the elements of a slot.
inline int64_t check_pool_slots(const ak_tensor& pool, const char* name) {
  int64_t slot_size = 1;
  for (int d = pool.rank - 1; d >= 1; --d) {
    require(pool.strides[d] == slot_size, std::string(name) + ": expected every slot dense (slots may be apart)");
    slot_size *= pool.shape[d];
  }
  require(pool.strides[0] >= slot_size, std::string(name) + ": expected slots apart, got a slot stride of " +
                                            std::to_string(pool.strides[0]) + " below the slot's " +
                                            std::to_string(slot_size) + " elements");
  return slot_size;
}

// Every index below the slot count, and no live slot (index > 0) named twice: two sequences would
// advance one state.
inline void require_slots_in_pool(const int32_t* idx, int64_t n, int64_t slots) {
  std::vector<std::pair<int32_t, int64_t>> live;  // (slot, entry), sorted to find repeats
  for (int64_t i = 0; i < n; ++i) {
    require(idx[i] < slots, "state_indices: entry " + std::to_string(i) + " is " + std::to_string(idx[i]) +
                                ", past the " + std::to_string(slots) + " slots of state_cache");
    if (idx[i] > 0) live.emplace_back(idx[i], i);
  }
  std::sort(live.begin(), live.end());
  for (size_t j = 1; j < live.size(); ++j) {
    require(live[j].first != live[j - 1].first,
            "state_indices: entries " + std::to_string(live[j - 1].second) + " and " + std::to_string(live[j].second) +
                " both name slot " + std::to_string(live[j].first) + " (each live slot at most once)");
  }
}

// The same for an int32 tensor wherever it lives (nothing to check without one): read in place on the
// host, read back from a device (one small copy, which waits for the device's stream).
inline void require_slots_in_pool(const ak_tensor* indices, int64_t n, int64_t slots) {
  if (indices == nullptr || n == 0) return;
  if (indices->device_type == AK_CPU) {
    return require_slots_in_pool(static_cast<const int32_t*>(indices->data), n, slots);
  }
  std::vector<int32_t> host(static_cast<size_t>(n));
  AK_CUDA_CALL(ak::cuda::copy_to_host(*indices, host.data(), n * static_cast<int64_t>(sizeof(int32_t))));
  require_slots_in_pool(host.data(), n, slots);
}

#if AK_WITH_CUDA
// The same rule for a CUDA call: eagerly, read back and refused before anything is written (unless the
// caller vouches for the indices); inside a graph capture, where nothing can be read back, checked on the
// device (with the offsets when given), returning the graph's check record for the call's kernels.
inline ak::cuda::DeviceCheck* require_slots_on_device(int device, const ak_tensor* indices, int64_t n, int64_t slots,
                                                      bool trusted, const char* label,
                                                      const ak_tensor* cu_seqlens = nullptr, int64_t T = 0) {
  ak::cuda::DeviceCheck* c = ak::cuda::capture_pool_check(device, indices, n, slots, cu_seqlens, T, label, trusted);
  if (c == nullptr && !trusted) require_slots_in_pool(indices, n, slots);
  return c;
}
#endif

}  // namespace ak::linear
