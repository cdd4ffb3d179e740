// Where a sequence's start and end states live (the delta rule's own [N, H, K, V] states, or the slots
// of a pool, which the paged prefill advances in place with no gather or scatter around the kernels),
// and the state kernels' accesses to them, a pair of columns at a time.
#pragma once

#include <type_traits>

#include "linear/common/warp_tiles.cuh"
#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda::fwd {

// Elements (r, c) and (r, c + 1): one 8-byte access in the [K, V] layout, two in a pool's [V, K], where
// the eight rows a warp's lanes hold at one column are 32 contiguous bytes.
__device__ __forceinline__ float2 load_pair(const StateIn& s, int r, int c) {
  const float* a = s.ptr + r * s.rs + c * s.cs;
  if (s.cs == 1) return *reinterpret_cast<const float2*>(a);
  return make_float2(a[0], a[s.cs]);
}

__device__ __forceinline__ void store_pair(const StateOut& s, int r, int c, float x, float y) {
  float* a = s.ptr + r * s.rs + c * s.cs;
  if (s.cs == 1) {
    *reinterpret_cast<float2*>(a) = make_float2(x, y);
  } else {
    a[0] = x;
    a[s.cs] = y;
  }
}

// A dense [D, D] state (chunk states, segment summaries).
__device__ __forceinline__ StateOut dense_state(float* p, int D) { return {p, D, 1}; }

// Sequence n's state of head h at the start (kStart) or the end of the call: none without
// initial_state / final_state, for a padding sequence or a fresh slot of a pool, or after a failed check.
template <bool kStart, class T>
__device__ __forceinline__ StateAt<std::conditional_t<kStart, const float, float>> sequence_state(
    const StateParams<T>& p, int n, int h, int D) {
  const int64_t DD = static_cast<int64_t>(D) * D;
  auto* const base = [&] {
    if constexpr (kStart) {
      return p.initial_state;
    } else {
      return p.final_state;
    }
  }();
  if (base == nullptr) return {};
  if (p.slots == nullptr) return {base + (static_cast<int64_t>(n) * p.H + h) * DD, D, 1};
  const int32_t slot = p.slots[n];
  if (slot <= 0 || slot >= p.pool_slots || ak::cuda::check_failed(p.check)) return {};
  if (kStart && p.has_initial != nullptr && p.has_initial[n] == 0) return {};
  return {base + slot * p.slot_stride + h * DD, 1, D};
}

// An mma accumulator tile (rows m0.., columns n0..) from / to a state.
template <int MT, int NT>
__device__ __forceinline__ void load_acc_state(float (&acc)[MT][NT][4], const StateIn& s, int m0, int n0, int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, float* v) {
    const float2 x = load_pair(s, r, c);
    v[0] = x.x;
    v[1] = x.y;
  });
}

template <int MT, int NT>
__device__ __forceinline__ void store_acc_state(const float (&acc)[MT][NT][4], const StateOut& s, int m0, int n0,
                                                int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) { store_pair(s, r, c, v[0], v[1]); });
}

}  // namespace ak::linear::cuda::fwd
