/*
 * attnkit: tensor math for writing references (element-wise maps with broadcasting, selection,
 * reductions, matrix products). Included by attnkit.h.
 *
 * Broadcasting is expressed with strides: the caller passes each input as a view of the output's
 * shape (stride 0 along a broadcast dimension), so every entry here sees operands of one shape.
 * Outputs are contiguous; inputs may have any strides (including 0). Dtype promotion happens in the
 * caller: the operands of one call share a dtype, as stated per entry.
 */
#ifndef ATTNKIT_MATH_H
#define ATTNKIT_MATH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element-wise operations (ak_map_unary, ak_map_binary). Keep in step with ops/tensor_math/codes.ts. */
typedef enum ak_map_op {
  /* unary, result in the input's dtype: any dtype but bool */
  AK_MAP_NEG = 0,
  AK_MAP_ABS = 1,
  AK_MAP_SQUARE = 2,
  /* unary, result in the input's dtype: floating dtypes only */
  AK_MAP_SQRT = 3,
  AK_MAP_EXP = 4,
  AK_MAP_LOG = 5,
  AK_MAP_SIGMOID = 6,
  AK_MAP_TANH = 7,
  /* unary, bool result: any dtype */
  AK_MAP_LOGICAL_NOT = 8,
  AK_MAP_ISNAN = 9,
  AK_MAP_ISFINITE = 10,
  /* binary, result in the inputs' dtype: add, sub, mul on any dtype but bool; maximum and minimum
   * on any dtype (NaN wins); div and pow on floating dtypes only */
  AK_MAP_ADD = 32,
  AK_MAP_SUB = 33,
  AK_MAP_MUL = 34,
  AK_MAP_DIV = 35,
  AK_MAP_POW = 36,
  AK_MAP_MAXIMUM = 37,
  AK_MAP_MINIMUM = 38,
  /* binary, bool result: any dtype */
  AK_MAP_EQ = 48,
  AK_MAP_NE = 49,
  AK_MAP_LT = 50,
  AK_MAP_LE = 51,
  AK_MAP_GT = 52,
  AK_MAP_GE = 53,
  AK_MAP_LOGICAL_AND = 54,
  AK_MAP_LOGICAL_OR = 55
} ak_map_op;

/* Reductions (ak_reduce). */
typedef enum ak_reduce_op {
  AK_REDUCE_SUM = 0,  /* floats: the source's dtype, accumulated in float64; ints and bool: int64 */
  AK_REDUCE_MEAN = 1, /* floating dtypes only; NaN over nothing */
  AK_REDUCE_MAX = 2,  /* the source's dtype; NaN wins; at least one element per output */
  AK_REDUCE_MIN = 3
} ak_reduce_op;

/* dst = op(src): same shape, dst contiguous. Computed in float64 on the CPU; on CUDA in float32 for
 * 16- and 32-bit floats, float64 for float64, int64 for integers (integer results wrap). */
AK_API ak_status ak_map_unary(const ak_tensor* dst, const ak_tensor* src, int32_t op);
/* dst = op(a, b), or op(a, scalar) when b is NULL (for integer dtypes the scalar must be an integer).
 * a, b and dst share a shape; a and b share a dtype; dst has it too, or is bool for comparisons. */
AK_API ak_status ak_map_binary(const ak_tensor* dst, const ak_tensor* a, const ak_tensor* b, double scalar,
                               int32_t op);
/* dst = cond ? a : b element by element: one shape; cond bool; a, b and dst of one dtype. */
AK_API ak_status ak_where(const ak_tensor* dst, const ak_tensor* cond, const ak_tensor* a, const ak_tensor* b);
/* Reduces the last `reduced_dims` dimensions of src into dst, whose shape is src's others (dst contiguous;
 * reduced_dims may be all of src's). Sum dtypes: dst int64 for integer and bool sources, else src's. */
AK_API ak_status ak_reduce(const ak_tensor* dst, const ak_tensor* src, int32_t reduced_dims, int32_t op);
/* dst[..., m, n] = sum_k a[..., m, k] * b[..., k, n]: dst contiguous of rank >= 2; a and b of dst's
 * rank with dst's batch sizes (stride 0 where a batch is broadcast); one dtype, not bool. Accumulates
 * in float64 on the CPU, in float32 (float64 for float64) on CUDA, in int64 for integers. */
AK_API ak_status ak_matmul(const ak_tensor* dst, const ak_tensor* a, const ak_tensor* b);
/* dst = src gathered along `dim` at `index` (int32 or int64, rank 1, contiguous, on src's device, each
 * value in [0, src.shape[dim])): dst's shape is src's with shape[dim] = index's length; same dtype.
 * The CPU backend refuses an index out of range; CUDA writes zeros for one and never reads outside src. */
AK_API ak_status ak_index_select(const ak_tensor* dst, const ak_tensor* src, int32_t dim, const ak_tensor* index);
/* dst[index[m]] = src[m] for each row m of src: dst [R, ...] contiguous, written in place; src [M, ...]
 * contiguous of dst's dtype and row shape; index int32 [M], contiguous, on dst's device. Rows of dst that no
 * index names keep their values; an index named twice leaves either row. The CPU backend refuses an index
 * outside [0, R) before writing; CUDA skips one. */
AK_API ak_status ak_scatter_rows(const ak_tensor* dst, const ak_tensor* src, const ak_tensor* index);

#ifdef __cplusplus
}
#endif

#endif /* ATTNKIT_MATH_H */
