// CPU element-wise work: strided copies with casts, fills and random numbers.
//
// Each (source, destination) dtype pair compiles to its own loop (no switch per element), and large
// copies split their outermost dimension across threads.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/common.h"
#include "core/layout.h"
#include "core/numeric.h"
#include "core/random.h"
#include "cpu/backend.h"

namespace ak::cpu {
namespace {

// Storage type and conversions of each dtype. load() is exact for every dtype but int64 beyond
// 2^53; store() rounds to nearest even (floats) or truncates and saturates (integers, NaN -> 0).
struct F32 {
  using T = float;
  static double load(T v) { return v; }
  static T store(double d) { return static_cast<float>(d); }
};
struct F64 {
  using T = double;
  static double load(T v) { return v; }
  static T store(double d) { return d; }
};
struct F16 {
  using T = uint16_t;
  static double load(T v) { return f16_to_float(v); }
  static T store(double d) { return double_to_f16(d); }
};
struct BF16 {
  using T = uint16_t;
  static double load(T v) { return bf16_to_float(v); }
  static T store(double d) { return double_to_bf16(d); }
};
struct I32 {
  using T = int32_t;
  static double load(T v) { return v; }
  static T store(double d) { return double_to_i32(d); }
};
struct I64 {
  using T = int64_t;
  static double load(T v) { return static_cast<double>(v); }
  static T store(double d) { return double_to_i64(d); }
};
struct F8 {
  using T = uint8_t;
  static double load(T v) { return e4m3_to_float(v); }
  static T store(double d) { return double_to_e4m3(d); }
};
struct Bool {
  using T = uint8_t;
  static double load(T v) { return v ? 1.0 : 0.0; }
  static T store(double d) { return d != 0.0 ? 1 : 0; }  // NaN is true
};

template <class S, class D>
inline typename D::T convert(typename S::T v) {
  if constexpr (std::is_same_v<S, D>) {
    return v;
  } else if constexpr (std::is_same_v<S, I64> && std::is_same_v<D, I32>) {
    return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : static_cast<int32_t>(v));
  } else if constexpr (std::is_same_v<S, I64> &&
                       (std::is_same_v<D, F32> || std::is_same_v<D, F16> || std::is_same_v<D, BF16>)) {
    // Round once: through a double rounded to odd (a plain double would round twice above 2^53).
    return D::store(int64_to_double_odd(v));
  } else {
    return D::store(S::load(v));
  }
}

template <class F>
void with_dtype(int32_t dtype, F&& f) {
  switch (dtype) {
    case AK_FLOAT32: f(F32{}); break;
    case AK_FLOAT64: f(F64{}); break;
    case AK_FLOAT16: f(F16{}); break;
    case AK_BFLOAT16: f(BF16{}); break;
    case AK_INT32: f(I32{}); break;
    case AK_INT64: f(I64{}); break;
    case AK_BOOL: f(Bool{}); break;
    case AK_FLOAT8_E4M3: f(F8{}); break;
    default: fail(AK_ERR_INVALID_ARGUMENT, "dtype: unknown code " + std::to_string(dtype));
  }
}

// Visits every element of a plan in row-major order: fn(dst_offset, src_offset).
template <class F>
void for_each_offset(const CopyPlan& p, F&& fn) {
  if (p.numel == 0) return;
  if (p.rank == 0) {
    fn(0, 0);
    return;
  }
  int64_t idx[AK_MAX_RANK] = {};
  const int inner = p.rank - 1;
  const int64_t outer_count = p.numel / p.shape[inner];
  const int64_t ds = p.dst_strides[inner], ss = p.src_strides[inner];
  int64_t d = 0, s = 0;
  for (int64_t o = 0; o < outer_count; ++o) {
    for (int64_t i = 0; i < p.shape[inner]; ++i) fn(d + i * ds, s + i * ss);
    // advance the outer index (odometer)
    for (int k = inner - 1; k >= 0; --k) {
      ++idx[k];
      d += p.dst_strides[k];
      s += p.src_strides[k];
      if (idx[k] < p.shape[k]) break;
      d -= p.dst_strides[k] * p.shape[k];
      s -= p.src_strides[k] * p.shape[k];
      idx[k] = 0;
    }
  }
}

// Runs body(part, dst_base, src_base) over slices of the plan's outermost dimension, in parallel
// when the copy is large enough to pay for threads.
template <class F>
void split_outer(const CopyPlan& p, F&& body) {
  constexpr int64_t kParallelFrom = int64_t{1} << 18;
  if (p.rank == 0 || p.numel < kParallelFrom || p.shape[0] < 2 || cpu_threads() < 2) {
    body(p, 0, 0);
    return;
  }
  const int64_t parts = std::min<int64_t>(p.shape[0], int64_t{cpu_threads()} * 4);
  const int64_t per_row = p.numel / p.shape[0];
  parallel_for(parts, [&](int64_t i) {
    const int64_t begin = p.shape[0] * i / parts, end = p.shape[0] * (i + 1) / parts;
    if (begin == end) return;
    CopyPlan part = p;
    part.shape[0] = end - begin;
    part.numel = per_row * (end - begin);
    body(part, begin * p.dst_strides[0], begin * p.src_strides[0]);
  });
}

}  // namespace

void copy_strided(const ak_tensor& dst, const ak_tensor& src) {
  const CopyPlan p = make_copy_plan(dst, src);
  if (p.numel == 0) return;
  if (dst.dtype == src.dtype && p.flat()) {
    std::memmove(dst.data, src.data, static_cast<size_t>(p.numel) * dtype_size(src.dtype));
    return;
  }
  with_dtype(src.dtype, [&](auto s_tag) {
    with_dtype(dst.dtype, [&](auto d_tag) {
      using S = decltype(s_tag);
      using D = decltype(d_tag);
      const auto* s = static_cast<const typename S::T*>(src.data);
      auto* d = static_cast<typename D::T*>(dst.data);
      split_outer(p, [&](const CopyPlan& part, int64_t d_base, int64_t s_base) {
        for_each_offset(part, [&](int64_t od, int64_t os) { d[d_base + od] = convert<S, D>(s[s_base + os]); });
      });
    });
  });
}

void fill(const ak_tensor& dst, double value) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  with_dtype(dst.dtype, [&](auto tag) {
    using D = decltype(tag);
    std::fill_n(static_cast<typename D::T*>(dst.data), n, D::store(value));  // convert once
  });
}

void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b) {
  const int64_t n = numel(dst);
  const int64_t block = 1 << 16;
  with_dtype(dst.dtype, [&](auto tag) {
    using D = decltype(tag);
    auto* d = static_cast<typename D::T*>(dst.data);
    parallel_for((n + block - 1) / block, [&](int64_t blk) {
      const int64_t end = std::min<int64_t>(n, (blk + 1) * block);
      for (int64_t i = blk * block; i < end; ++i) {
        d[i] = D::store(random_value(seed, offset + static_cast<uint64_t>(i), kind, a, b));
      }
    });
  });
}

void arange(const ak_tensor& dst, double start, double step) {
  const int64_t n = numel(dst);
  with_dtype(dst.dtype, [&](auto tag) {
    using D = decltype(tag);
    auto* d = static_cast<typename D::T*>(dst.data);
    for (int64_t i = 0; i < n; ++i) d[i] = D::store(start + static_cast<double>(i) * step);
  });
}

}  // namespace ak::cpu
