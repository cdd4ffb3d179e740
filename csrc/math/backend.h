// What each backend defines for the tensor-math entries (math/entries.cpp), called with validated
// arguments: outputs contiguous and non-empty, inputs of the output's shape (any strides), dtypes
// as attnkit_math.h states them.
#pragma once

#include "core/common.h"

namespace ak::math {

// Where ak_map_binary has no second tensor, the scalar takes its place.
AK_DECLARE_BACKENDS(
    void map(const ak_tensor& dst, const ak_tensor& a, const ak_tensor* b, double scalar, int op);
    void where(const ak_tensor& dst, const ak_tensor& cond, const ak_tensor& a, const ak_tensor& b);
    void reduce(const ak_tensor& dst, const ak_tensor& src, int reduced_dims, int op);
    void matmul(const ak_tensor& dst, const ak_tensor& a, const ak_tensor& b);
    void index_select(const ak_tensor& dst, const ak_tensor& src, int dim, const ak_tensor& index);
    void scatter_rows(const ak_tensor& dst, const ak_tensor& src, const ak_tensor& index);)

}  // namespace ak::math
