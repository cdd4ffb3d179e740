// CPU element-wise work: strided copies with casts, fills and random numbers.
#include <algorithm>
#include <cstring>

#include "../core/common.h"
#include "../core/layout.h"
#include "../core/numeric.h"
#include "../core/random.h"
#include "backend.h"

namespace ak::cpu {
namespace {

// Reads one element as a double (exact for every dtype but int64 beyond 2^53).
double load(const void* base, int64_t offset, int32_t dtype) {
  switch (dtype) {
    case AK_FLOAT32: return static_cast<const float*>(base)[offset];
    case AK_FLOAT64: return static_cast<const double*>(base)[offset];
    case AK_FLOAT16: return f16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case AK_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case AK_INT32: return static_cast<const int32_t*>(base)[offset];
    case AK_INT64: return static_cast<double>(static_cast<const int64_t*>(base)[offset]);
    default: return static_cast<const uint8_t*>(base)[offset] ? 1.0 : 0.0;
  }
}

// Writes a double, rounding to nearest even (floats), truncating and saturating (integers).
void store(void* base, int64_t offset, int32_t dtype, double v) {
  switch (dtype) {
    case AK_FLOAT32: static_cast<float*>(base)[offset] = static_cast<float>(v); break;
    case AK_FLOAT64: static_cast<double*>(base)[offset] = v; break;
    case AK_FLOAT16: static_cast<uint16_t*>(base)[offset] = double_to_f16(v); break;
    case AK_BFLOAT16: static_cast<uint16_t*>(base)[offset] = double_to_bf16(v); break;
    case AK_INT32: static_cast<int32_t*>(base)[offset] = double_to_i32(v); break;
    case AK_INT64: static_cast<int64_t*>(base)[offset] = double_to_i64(v); break;
    default: static_cast<uint8_t*>(base)[offset] = (v != 0.0) ? 1 : 0; break;
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
  int64_t d = 0, s = 0;
  for (int64_t o = 0; o < outer_count; ++o) {
    for (int64_t i = 0; i < p.shape[inner]; ++i) fn(d + i * p.dst_strides[inner], s + i * p.src_strides[inner]);
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

}  // namespace

void copy_strided(const ak_tensor& dst, const ak_tensor& src) {
  const CopyPlan p = make_copy_plan(dst, src);
  if (p.numel == 0) return;
  const size_t esize = dtype_size(src.dtype);
  if (dst.dtype == src.dtype) {
    if (p.flat()) {
      std::memmove(dst.data, src.data, static_cast<size_t>(p.numel) * esize);
      return;
    }
    char* d = static_cast<char*>(dst.data);
    const char* s = static_cast<const char*>(src.data);
    for_each_offset(p, [&](int64_t od, int64_t os) { std::memcpy(d + od * esize, s + os * esize, esize); });
    return;
  }
  if (src.dtype == AK_INT64 && dst.dtype == AK_INT32) {
    // Saturate exactly rather than through a double.
    const int64_t* s = static_cast<const int64_t*>(src.data);
    int32_t* d = static_cast<int32_t*>(dst.data);
    for_each_offset(p, [&](int64_t od, int64_t os) {
      const int64_t v = s[os];
      d[od] = v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : static_cast<int32_t>(v));
    });
    return;
  }
  if (src.dtype == AK_INT64 && is_float_dtype(dst.dtype) && dst.dtype != AK_FLOAT64) {
    // Round once: through a double rounded to odd (a plain double would round twice above 2^53).
    const int64_t* s = static_cast<const int64_t*>(src.data);
    for_each_offset(p, [&](int64_t od, int64_t os) { store(dst.data, od, dst.dtype, int64_to_double_odd(s[os])); });
    return;
  }
  for_each_offset(p, [&](int64_t od, int64_t os) { store(dst.data, od, dst.dtype, load(src.data, os, src.dtype)); });
}

void fill(const ak_tensor& dst, double value) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  const size_t esize = dtype_size(dst.dtype);
  // Convert once, then replicate the bytes.
  unsigned char one[8];
  store(one, 0, dst.dtype, value);
  char* d = static_cast<char*>(dst.data);
  for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * esize, one, esize);
}

void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b) {
  const int64_t n = numel(dst);
  const int64_t block = 1 << 16;
  parallel_for((n + block - 1) / block, [&](int64_t blk) {
    const int64_t end = std::min<int64_t>(n, (blk + 1) * block);
    for (int64_t i = blk * block; i < end; ++i) {
      store(dst.data, i, dst.dtype, random_value(seed, offset + static_cast<uint64_t>(i), kind, a, b));
    }
  });
}

}  // namespace ak::cpu
