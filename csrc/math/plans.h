// How the reductions, matrix products and gathers walk their operands, worked out once on the host
// for both backends from validated descriptors.
#pragma once

#include <cstdint>

#include "math/walk.h"

namespace ak::math {

// Dimensions [first, first + count) of a view, as a view of their own.
inline ak_tensor sub_view(const ak_tensor& t, int first, int count) {
  ak_tensor v = t;
  v.rank = count;
  for (int i = 0; i < count; ++i) {
    v.shape[i] = t.shape[first + i];
    v.strides[i] = t.strides[first + i];
  }
  return v;
}

// A reduction: the outputs (dst and src's offset of each) and, from there, the reduced elements.
struct ReducePlan {
  Walk<2> outer;  // dst, src over the kept dimensions
  Walk<1> inner;  // src over the reduced dimensions
};

inline ReducePlan make_reduce_plan(const ak_tensor& dst, const ak_tensor& src, int reduced_dims) {
  const int kept = src.rank - reduced_dims;
  ReducePlan p;
  const ak_tensor* outer[2] = {&dst, &src};
  p.outer = make_walk(outer, kept);
  const ak_tensor reduced = sub_view(src, kept, reduced_dims);
  const ak_tensor* inner[1] = {&reduced};
  p.inner = make_walk(inner);
  return p;
}

// A batched matrix product dst[z] = a[z] b[z]: the batches' offsets and each matrix's strides.
struct MatmulPlan {
  Walk<3> batches;  // dst, a, b over the batch dimensions
  int64_t m, n, k;
  int64_t a_row, a_col, b_row, b_col;
};

inline MatmulPlan make_matmul_plan(const ak_tensor& dst, const ak_tensor& a, const ak_tensor& b) {
  const int r = dst.rank;
  MatmulPlan p;
  const ak_tensor* views[3] = {&dst, &a, &b};
  p.batches = make_walk(views, r - 2);
  p.m = dst.shape[r - 2];
  p.n = dst.shape[r - 1];
  p.k = a.shape[r - 1];
  p.a_row = a.strides[r - 2];
  p.a_col = a.strides[r - 1];
  p.b_row = b.strides[r - 2];
  p.b_col = b.strides[r - 1];
  return p;
}

// A gather along one dimension: dst's elements are [outer][selected][inner], row-major.
struct IndexPlan {
  Walk<1> outer;  // src over the dimensions before `dim`
  Walk<2> inner;  // dst, src over the dimensions after it
  int64_t selected;
  int64_t dim_size, dim_stride;
};

inline IndexPlan make_index_plan(const ak_tensor& dst, const ak_tensor& src, int dim, const ak_tensor& index) {
  IndexPlan p;
  const ak_tensor before = sub_view(src, 0, dim);
  const ak_tensor* outer[1] = {&before};
  p.outer = make_walk(outer);
  const int after = src.rank - dim - 1;
  const ak_tensor dst_after = sub_view(dst, dim + 1, after), src_after = sub_view(src, dim + 1, after);
  const ak_tensor* inner[2] = {&dst_after, &src_after};
  p.inner = make_walk(inner);
  p.selected = index.shape[0];
  p.dim_size = src.shape[dim];
  p.dim_stride = src.strides[dim];
  return p;
}

}  // namespace ak::math
