// Walks over N views of one shape together (an output and its inputs, any strides, 0 for a broadcast
// dimension): the element offsets of each view, for one element or a run of them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::math {

template <int N>
struct Walk {
  int rank = 0;  // 0: a single element
  int64_t numel = 1;
  int64_t shape[AK_MAX_RANK] = {};
  int64_t strides[N][AK_MAX_RANK] = {};

  // The offsets of element i (row-major over shape) in every view.
  AK_HD void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
    }
  }

  // Calls fn(off) for the elements [begin, end) in row-major order, stepping through the innermost
  // dimension without divisions.
  template <class F>
  void for_range(int64_t begin, int64_t end, F&& fn) const {
    if (begin >= end) return;
    int64_t off[N];
    if (rank == 0) {
      for (int k = 0; k < N; ++k) off[k] = 0;
      fn(off);
      return;
    }
    int64_t idx[AK_MAX_RANK];
    int64_t rest = begin;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
    }
    offsets(begin, off);
    const int in = rank - 1;
    for (int64_t i = begin; i < end;) {
      const int64_t run = std::min(shape[in] - idx[in], end - i);
      int64_t at[N];
      for (int64_t j = 0; j < run; ++j) {
        for (int k = 0; k < N; ++k) at[k] = off[k] + j * strides[k][in];
        fn(at);
      }
      i += run;
      // Carry into the outer dimensions (odometer).
      for (int k = 0; k < N; ++k) off[k] += run * strides[k][in];
      idx[in] += run;
      for (int d = in; d > 0 && idx[d] == shape[d]; --d) {
        for (int k = 0; k < N; ++k) off[k] += strides[k][d - 1] - shape[d] * strides[k][d];
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }
};

// A walk over views that share views[0]'s shape (the first `rank` dimensions of each), with the
// dimensions of size 1 dropped and neighbours that are contiguous in every view merged.
template <int N>
Walk<N> make_walk(const ak_tensor* const (&views)[N], int rank) {
  Walk<N> w;
  const ak_tensor& ref = *views[0];
  for (int d = 0; d < rank; ++d) {
    w.numel *= ref.shape[d];
    if (ref.shape[d] == 1) continue;
    const int r = w.rank;
    bool merge = r > 0;
    for (int k = 0; k < N && merge; ++k) {
      merge = w.strides[k][r - 1] == views[k]->strides[d] * ref.shape[d];
    }
    if (merge) {
      w.shape[r - 1] *= ref.shape[d];
      for (int k = 0; k < N; ++k) w.strides[k][r - 1] = views[k]->strides[d];
      continue;
    }
    w.shape[r] = ref.shape[d];
    for (int k = 0; k < N; ++k) w.strides[k][r] = views[k]->strides[d];
    w.rank = r + 1;
  }
  return w;
}

template <int N>
Walk<N> make_walk(const ak_tensor* const (&views)[N]) {
  return make_walk(views, views[0]->rank);
}

}  // namespace ak::math
