// Moving recurrent states between a pool [num_slots, ...] and per-sequence states [N, ...] (the paged
// chunked prefill runs the training ops between a gather and a scatter): one strided copy or fill per
// sequence with the device's own copy and fill, which convert the pool's dtype. The indices are read to
// the host first.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "cpu/backend.h"
#include "linear/checks.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::linear;

namespace {

// Row i of t along its first dim, as a view of rank - 1.
ak_tensor row_view(const ak_tensor& t, int64_t i) {
  ak_tensor v = t;
  v.data = static_cast<unsigned char*>(t.data) + i * t.strides[0] * static_cast<int64_t>(dtype_size(t.dtype));
  v.rank = t.rank - 1;
  for (int d = 0; d + 1 < t.rank; ++d) v.shape[d] = t.shape[d + 1], v.strides[d] = t.strides[d + 1];
  return v;
}

template <class T>
std::vector<T> to_host(const ak_tensor& t, int64_t n) {
  std::vector<T> h(static_cast<size_t>(n));
  if (n == 0) return h;
  if (t.device_type == AK_CPU) {
    std::memcpy(h.data(), t.data, static_cast<size_t>(n) * sizeof(T));
  } else {
    AK_CUDA_CALL(ak::cuda::copy_to_host(t, h.data(), n * static_cast<int64_t>(sizeof(T))));
  }
  return h;
}

void copy(const ak_tensor& dst, const ak_tensor& src) {
  if (dst.device_type == AK_CPU) {
    ak::cpu::copy_strided(dst, src);
  } else {
    AK_CUDA_CALL(ak::cuda::copy_strided(dst, src));
  }
}

void zero(const ak_tensor& dst) {
  if (dst.device_type == AK_CPU) {
    ak::cpu::fill(dst, 0.0);
  } else {
    AK_CUDA_CALL(ak::cuda::fill(dst, 0.0));
  }
}

}  // namespace

extern "C" {

AK_API ak_status ak_state_pool_copy(const ak_tensor* pool_, const ak_tensor* indices_, const ak_tensor* has_initial,
                                    const ak_tensor* states_, int32_t direction) {
  AK_ENTRY("ak_state_pool_copy", {
    require(direction == AK_POOL_GATHER || direction == AK_POOL_SCATTER,
            "direction: expected AK_POOL_GATHER = 0 or AK_POOL_SCATTER = 1, got " + std::to_string(direction));
    const ak_tensor& pool = check_tensor(pool_, "state_cache");
    check_dtype(pool, "state_cache", {AK_FLOAT32, AK_BFLOAT16});
    check_device(pool, "state_cache");
    const ak_tensor& states = check_contiguous(states_, "states");
    check_dtype(states, "states", {AK_FLOAT32});
    check_same_device(states, "states", pool, "state_cache");
    require(pool.rank >= 2 && states.rank == pool.rank &&
                std::equal(pool.shape + 1, pool.shape + pool.rank, states.shape + 1),
            "states: expected [N, " + shape_string(pool).substr(1) + " without the slot count, got " +
                shape_string(states));
    int64_t slot_size = 1;
    for (int d = pool.rank - 1; d >= 1; --d) {
      require(pool.strides[d] == slot_size, "state_cache: expected every slot dense (slots may be apart)");
      slot_size *= pool.shape[d];
    }
    const int64_t N = states.shape[0];
    const ak_tensor& idx = check_per_sequence(indices_, "state_indices", AK_INT32, N, pool, "state_cache");
    if (has_initial) check_per_sequence(has_initial, "has_initial_state", AK_BOOL, N, pool, "state_cache");
    const std::vector<int32_t> slots = to_host<int32_t>(idx, N);
    require_slots_in_pool(slots.data(), N, pool.shape[0]);
    const std::vector<uint8_t> resume = has_initial ? to_host<uint8_t>(*has_initial, N) : std::vector<uint8_t>(N, 1);
    for (int64_t n = 0; n < N; ++n) {
      const bool live = slots[n] > 0;
      const ak_tensor state = row_view(states, n);
      if (direction == AK_POOL_GATHER) {
        if (live && resume[n]) {
          copy(state, row_view(pool, slots[n]));
        } else {
          zero(state);
        }
      } else if (live) {
        copy(row_view(pool, slots[n]), state);
      }
    }
  });
}

}  // extern "C"
