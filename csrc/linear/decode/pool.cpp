// Moving recurrent states between a pool [num_slots, ...] and per-sequence states [N, ...] (the paged
// chunked prefill runs the training ops between a gather and a scatter). The CPU backend copies or fills
// one sequence at a time with its strided copy and fill, which convert the pool's dtype; on CUDA one
// launch moves every sequence (decode/pool_cuda.cu). The indices are checked on the host first, so an
// index past the pool or a live slot named twice is refused before anything is written: on CUDA that
// costs one read-back of the [N] indices (there is no device-side error report to defer it to).
#include <algorithm>
#include <string>

#include "core/common.h"
#include "cpu/backend.h"
#include "linear/checks.h"
#include "linear/decode/pool_problem.h"
#include "linear/decode/slots.h"
#if AK_WITH_CUDA
#include "linear/decode/pool_cuda.h"
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

// The view of a contiguous tensor with its last two dims swapped (the delta rule's [.., K, V] states
// read as the pool's [.., V, K]).
bool swapped_contiguous(const ak_tensor& t) { return t.rank >= 3 && is_contiguous(swap_last_dims(t)); }

PoolCopy parse(const ak_tensor* pool_, const ak_tensor* indices, const ak_tensor* has_initial,
               const ak_tensor* states_, int32_t mode) {
  require((mode & ~(1 | AK_POOL_TRUSTED_INDICES)) == 0,
          "mode: expected AK_POOL_GATHER = 0 or AK_POOL_SCATTER = 1, optionally | " +
              std::string("AK_POOL_TRUSTED_INDICES = 2, got ") + std::to_string(mode));
  PoolCopy p;
  p.gather = (mode & 1) == AK_POOL_GATHER;
  p.trusted = (mode & AK_POOL_TRUSTED_INDICES) != 0;
  const ak_tensor& pool = check_tensor(pool_, "state_cache");
  check_dtype(pool, "state_cache", {AK_FLOAT32, AK_BFLOAT16});
  const ak_tensor& states = check_tensor(states_, "states");
  check_dtype(states, "states", {AK_FLOAT32});
  check_same_device(states, "states", pool, "state_cache");
  require(pool.rank >= 2 && states.rank == pool.rank &&
              std::equal(pool.shape + 1, pool.shape + pool.rank, states.shape + 1),
          "states: expected [N, " + shape_string(pool).substr(1) + " without the slot count, got " +
              shape_string(states));
  p.swapped = !is_contiguous(states) && swapped_contiguous(states);
  require(is_contiguous(states) || p.swapped,
          "states: expected a contiguous tensor, or the view of one with its last two dims swapped");
  p.slot_size = check_pool_slots(pool, "state_cache");
  p.N = states.shape[0], p.slots = pool.shape[0];
  p.R = pool.rank >= 3 ? pool.shape[pool.rank - 2] : 1, p.C = pool.shape[pool.rank - 1];
  p.outer = p.R * p.C == 0 ? 0 : p.slot_size / (p.R * p.C);
  p.pool = &pool, p.states = &states;
  p.indices = &check_per_sequence(indices, "state_indices", AK_INT32, p.N, pool, "state_cache");
  if (has_initial) {
    p.has_initial = &check_per_sequence(has_initial, "has_initial_state", AK_BOOL, p.N, pool, "state_cache");
  }
  return p;
}

}  // namespace

void ak::linear::cpu::pool_copy(const PoolCopy& p) {
  const int32_t* slots = static_cast<const int32_t*>(p.indices->data);
  const uint8_t* resume = p.has_initial ? static_cast<const uint8_t*>(p.has_initial->data) : nullptr;
  for (int64_t n = 0; n < p.N; ++n) {
    const bool live = slots[n] > 0;
    const ak_tensor state = row_view(*p.states, n);
    if (p.gather) {
      if (live && (resume == nullptr || resume[n] != 0)) {
        ak::cpu::copy_strided(state, row_view(*p.pool, slots[n]));
      } else {
        ak::cpu::fill(state, 0.0);  // a swapped row is still one dense run
      }
    } else if (live) {
      ak::cpu::copy_strided(row_view(*p.pool, slots[n]), state);
    }
  }
}

extern "C" {

AK_API ak_status ak_state_pool_copy(const ak_tensor* pool, const ak_tensor* indices, const ak_tensor* has_initial,
                                    const ak_tensor* states, int32_t mode) {
  AK_ENTRY("ak_state_pool_copy", {
    const PoolCopy p = parse(pool, indices, has_initial, states, mode);
    if (p.N == 0) return;
    if (p.pool->device_type == AK_CPU) {
      require_slots_in_pool(p.indices, p.N, p.slots);
      return ak::linear::cpu::pool_copy(p);
    }
    AK_CUDA_CALL(ak::linear::cuda::pool_copy(p));
  });
}

}  // extern "C"
