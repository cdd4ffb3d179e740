// The tensor-math C entries: check every argument (messages name it), then hand the call to the
// backend of the output's device.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/common.h"
#include "math/backend.h"
#include "math/element.h"

using namespace ak;
using namespace ak::math;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

bool same_shape(const ak_tensor& a, const ak_tensor& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

// An input of an element-wise entry: a view of the output's shape on its device.
const ak_tensor& check_input(const ak_tensor* p, const char* name, const ak_tensor& dst) {
  const ak_tensor& t = check_tensor(p, name);
  require(same_shape(t, dst), std::string(name) + ": expected shape " + shape_string(dst) +
                                  " (the output's; a broadcast dimension has stride 0), got " + shape_string(t));
  check_same_device(t, name, dst, "dst");
  return t;
}

void check_result_dtype(const ak_tensor& dst, int32_t expected) {
  require(dst.dtype == expected, std::string("dst: expected dtype ") + dtype_name(expected) + ", got " +
                                     dtype_name(dst.dtype));
}

// float8_e4m3 is stored, cast and moved, never computed with (whatever the size, empty tensors too).
void refuse_float8(const ak_tensor& t, const char* name) {
  if (t.dtype == AK_FLOAT8_E4M3) {
    fail(AK_ERR_UNSUPPORTED,
         std::string(name) + ": dtype: float8_e4m3 has no arithmetic here; cast it to a wider float first");
  }
}

// Which dtypes an element-wise op takes; the message names the op's family.
void check_operand_dtype(int op, const ak_tensor& t, const char* name) {
  refuse_float8(t, name);
  const bool float_only = (op >= AK_MAP_SQRT && op <= AK_MAP_TANH) || op == AK_MAP_DIV || op == AK_MAP_POW;
  const bool no_bool = op == AK_MAP_NEG || op == AK_MAP_ABS || op == AK_MAP_SQUARE || op == AK_MAP_ADD ||
                       op == AK_MAP_SUB || op == AK_MAP_MUL;
  require(!float_only || is_float_dtype(t.dtype), std::string(name) + ": op " + str(op) +
                                                      " needs a floating dtype, got " + dtype_name(t.dtype));
  require(!no_bool || t.dtype != AK_BOOL, std::string(name) + ": op " + str(op) + " takes no bool tensors");
}

bool known_unary(int32_t op) { return op >= AK_MAP_NEG && op <= AK_MAP_ISFINITE; }
bool known_binary(int32_t op) {
  return (op >= AK_MAP_ADD && op <= AK_MAP_MINIMUM) || (op >= AK_MAP_EQ && op <= AK_MAP_LOGICAL_OR);
}

#define AK_MATH_DISPATCH(device_type, call) \
  if ((device_type) == AK_CPU) {            \
    cpu::call;                              \
  } else {                                  \
    AK_CUDA_CALL(cuda::call);               \
  }

}  // namespace

extern "C" {

AK_API ak_status ak_map_unary(const ak_tensor* dst_p, const ak_tensor* src_p, int32_t op) {
  AK_ENTRY("ak_map_unary", {
    require(known_unary(op), "op: unknown unary op code " + str(op));
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    const ak_tensor& src = check_input(src_p, "src", dst);
    check_operand_dtype(op, src, "src");
    check_result_dtype(dst, is_predicate(op) ? AK_BOOL : src.dtype);
    if (numel(dst) == 0) return;
    AK_MATH_DISPATCH(dst.device_type, map(dst, src, nullptr, 0.0, op));
  });
}

AK_API ak_status ak_map_binary(const ak_tensor* dst_p, const ak_tensor* a_p, const ak_tensor* b_p, double scalar,
                               int32_t op) {
  AK_ENTRY("ak_map_binary", {
    require(known_binary(op), "op: unknown binary op code " + str(op));
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    const ak_tensor& a = check_input(a_p, "a", dst);
    check_operand_dtype(op, a, "a");
    if (b_p != nullptr) {
      check_same_dtype(check_input(b_p, "b", dst), "b", a, "a");
    } else if (!is_float_dtype(a.dtype)) {
      // 2^63 is the first double past int64.
      require(std::isfinite(scalar) && std::trunc(scalar) == scalar && std::fabs(scalar) < 9223372036854775808.0,
              std::string("scalar: an operand of dtype ") + dtype_name(a.dtype) +
                  " needs an integer scalar in the int64 range, got " + std::to_string(scalar));
    }
    check_result_dtype(dst, is_predicate(op) ? AK_BOOL : a.dtype);
    if (numel(dst) == 0) return;
    AK_MATH_DISPATCH(dst.device_type, map(dst, a, b_p, scalar, op));
  });
}

AK_API ak_status ak_where(const ak_tensor* dst_p, const ak_tensor* cond_p, const ak_tensor* a_p,
                          const ak_tensor* b_p) {
  AK_ENTRY("ak_where", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    const ak_tensor& cond = check_input(cond_p, "cond", dst);
    check_dtype(cond, "cond", {AK_BOOL});
    const ak_tensor& a = check_input(a_p, "a", dst);
    const ak_tensor& b = check_input(b_p, "b", dst);
    check_same_dtype(a, "a", dst, "dst");
    check_same_dtype(b, "b", dst, "dst");
    if (numel(dst) == 0) return;
    AK_MATH_DISPATCH(dst.device_type, where(dst, cond, a, b));
  });
}

AK_API ak_status ak_reduce(const ak_tensor* dst_p, const ak_tensor* src_p, int32_t reduced_dims, int32_t op) {
  AK_ENTRY("ak_reduce", {
    require(op >= AK_REDUCE_SUM && op <= AK_REDUCE_MIN, "op: unknown reduction code " + str(op));
    const ak_tensor& src = check_tensor(src_p, "src");
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    check_same_device(dst, "dst", src, "src");
    require(reduced_dims >= 0 && reduced_dims <= src.rank,
            "reduced_dims: expected 0.." + str(src.rank) + " (src's rank), got " + str(reduced_dims));
    const int kept = src.rank - reduced_dims;
    bool shape_ok = dst.rank == kept;
    for (int i = 0; shape_ok && i < kept; ++i) shape_ok = dst.shape[i] == src.shape[i];
    std::string expected = "[";
    for (int i = 0; i < kept; ++i) expected += (i ? ", " : "") + str(src.shape[i]);
    require(shape_ok, "dst: expected shape " + expected + "] (src's leading dimensions), got " + shape_string(dst));
    refuse_float8(src, "src");
    require(op != AK_REDUCE_MEAN || is_float_dtype(src.dtype),
            std::string("src: a mean needs a floating dtype, got ") + dtype_name(src.dtype));
    const bool integer_sum = op == AK_REDUCE_SUM && !is_float_dtype(src.dtype);
    check_result_dtype(dst, integer_sum ? AK_INT64 : src.dtype);
    int64_t inner = 1;
    for (int i = kept; i < src.rank; ++i) inner *= src.shape[i];
    if (numel(dst) == 0) return;
    require(inner > 0 || op == AK_REDUCE_SUM || op == AK_REDUCE_MEAN,
            "src: a maximum or minimum needs at least one element per output; the reduced dimensions are empty");
    AK_MATH_DISPATCH(dst.device_type, reduce(dst, src, reduced_dims, op));
  });
}

AK_API ak_status ak_matmul(const ak_tensor* dst_p, const ak_tensor* a_p, const ak_tensor* b_p) {
  AK_ENTRY("ak_matmul", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    require(dst.rank >= 2, "dst: expected rank 2 or more ([..., M, N]), got " + shape_string(dst));
    const ak_tensor& a = check_tensor(a_p, "a");
    const ak_tensor& b = check_tensor(b_p, "b");
    check_same_device(a, "a", dst, "dst");
    check_same_device(b, "b", dst, "dst");
    check_same_dtype(a, "a", dst, "dst");
    check_same_dtype(b, "b", dst, "dst");
    require(dst.dtype != AK_BOOL, "dst: matrix products take no bool tensors");
    refuse_float8(dst, "dst");
    const int r = dst.rank;
    require(a.rank == r && b.rank == r, "a, b: expected rank " + str(r) + " (dst's), got " + shape_string(a) +
                                            " and " + shape_string(b));
    for (int i = 0; i < r - 2; ++i) {
      require(a.shape[i] == dst.shape[i] && b.shape[i] == dst.shape[i],
              "a, b: batch dimension " + str(i) + " must be dst's (" + str(dst.shape[i]) + "), got " +
                  shape_string(a) + " and " + shape_string(b));
    }
    const int64_t m = dst.shape[r - 2], n = dst.shape[r - 1], k = a.shape[r - 1];
    require(a.shape[r - 2] == m, "a: expected " + str(m) + " rows (dst's), got " + shape_string(a));
    require(b.shape[r - 1] == n, "b: expected " + str(n) + " columns (dst's), got " + shape_string(b));
    require(b.shape[r - 2] == k, "b: expected " + str(k) + " rows (a's columns), got " + shape_string(b));
    if (numel(dst) == 0) return;
    AK_MATH_DISPATCH(dst.device_type, matmul(dst, a, b));
  });
}

AK_API ak_status ak_index_select(const ak_tensor* dst_p, const ak_tensor* src_p, int32_t dim,
                                 const ak_tensor* index_p) {
  AK_ENTRY("ak_index_select", {
    const ak_tensor& src = check_tensor(src_p, "src");
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    const ak_tensor& index = check_contiguous(index_p, "index");
    require(dim >= 0 && dim < src.rank, "dim: expected 0.." + str(src.rank - 1) + " (src's dimensions), got " +
                                            str(dim));
    check_dtype(index, "index", {AK_INT32, AK_INT64});
    require(index.rank == 1, "index: expected rank 1, got " + shape_string(index));
    check_same_device(dst, "dst", src, "src");
    check_same_device(index, "index", src, "src");
    check_same_dtype(dst, "dst", src, "src");
    bool shape_ok = dst.rank == src.rank;
    for (int i = 0; shape_ok && i < src.rank; ++i) {
      shape_ok = dst.shape[i] == (i == dim ? index.shape[0] : src.shape[i]);
    }
    require(shape_ok, "dst: expected src's shape " + shape_string(src) + " with dimension " + str(dim) + " of " +
                          str(index.shape[0]) + ", got " + shape_string(dst));
    if (numel(dst) == 0) return;
    require(src.shape[dim] > 0, "index: selects from dimension " + str(dim) + " of src, which is empty");
    AK_MATH_DISPATCH(dst.device_type, index_select(dst, src, dim, index));
  });
}

AK_API ak_status ak_scatter_rows(const ak_tensor* dst_p, const ak_tensor* src_p, const ak_tensor* index_p) {
  AK_ENTRY("ak_scatter_rows", {
    const ak_tensor& dst = check_contiguous(dst_p, "dst");
    const ak_tensor& src = check_contiguous(src_p, "src");
    const ak_tensor& index = check_contiguous(index_p, "index");
    check_dtype(index, "index", {AK_INT32});
    require(index.rank == 1, "index: expected rank 1, got " + shape_string(index));
    check_same_device(src, "src", dst, "dst");
    check_same_device(index, "index", dst, "dst");
    check_same_dtype(src, "src", dst, "dst");
    require(dst.rank >= 1 && src.rank == dst.rank && src.shape[0] == index.shape[0] &&
                std::equal(src.shape + 1, src.shape + src.rank, dst.shape + 1),
            "src: expected [" + str(index.shape[0]) + ", ...] rows of dst " + shape_string(dst) + ", got " +
                shape_string(src));
    if (numel(src) == 0) return;
    AK_MATH_DISPATCH(dst.device_type, scatter_rows(dst, src, index));
  });
}

}  // extern "C"
