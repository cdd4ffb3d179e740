// CPU access to the strided tensors of the linear-attention entries: rows of a view whose last
// dimension is contiguous, widened to fp32 on load and rounded to the tensor's dtype on store.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::linear::cpu {

// Offset (in elements) of the row at leading coordinates (i0, i1, i2) of a rank-4 view, or of the
// element at (i0, i1, i2) of a rank-3 view whose last stride is 1.
inline int64_t row_offset(const ak_tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}
// Offset of the row at (i0, i1) of a rank-3 view [A, B, D] (decode tensors).
inline int64_t row_offset(const ak_tensor& t, int64_t i0, int64_t i1) {
  return i0 * t.strides[0] + i1 * t.strides[1];
}

// Reads n contiguous elements at `offset` as fp32.
inline void load_row(const ak_tensor& t, int64_t offset, int64_t n, float* dst) {
  switch (t.dtype) {
    case AK_FLOAT32: {
      const float* s = static_cast<const float*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      break;
    }
    case AK_BFLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
    case AK_FLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
      break;
    }
    default: fail(AK_ERR_INTERNAL, "load_row: unexpected dtype");
  }
}

// Writes n contiguous elements at `offset`, rounding fp32 to the tensor's dtype (nearest even).
inline void store_row(const ak_tensor& t, int64_t offset, int64_t n, const float* src) {
  switch (t.dtype) {
    case AK_FLOAT32: {
      float* d = static_cast<float*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      break;
    }
    case AK_BFLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      break;
    }
    case AK_FLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
      break;
    }
    default: fail(AK_ERR_INTERNAL, "store_row: unexpected dtype");
  }
}

// An fp32 scalar of g or beta ([B, T, H] or [B, H] views, last stride 1).
inline float scalar_at(const ak_tensor& t, int64_t offset) { return static_cast<const float*>(t.data)[offset]; }
inline void set_scalar(const ak_tensor& t, int64_t offset, float value) {
  static_cast<float*>(t.data)[offset] = value;
}

// A [K, V] fp32 state read into (or written from) a double one.
inline void widen(const float* src, int64_t n, double* dst) {
  for (int64_t e = 0; e < n; ++e) dst[e] = src[e];
}
inline void narrow(const double* src, int64_t n, float* dst) {
  for (int64_t e = 0; e < n; ++e) dst[e] = static_cast<float>(src[e]);
}

// The epsilon inside the square root of the in-kernel L2 norm, x / sqrt(sum(x^2) + eps), as FLA uses.
constexpr double kL2NormEps = 1e-6;

// Normalises x in place and returns the norm sqrt(sum(x^2) + eps) it divided by.
inline double l2_normalize(float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const double norm = std::sqrt(sum + kL2NormEps);
  const double inv = 1.0 / norm;
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
  return norm;
}

// Reverse mode of l2_normalize: given the original x, its norm and d(x/norm), returns dx in place of
// dxhat: dx = dxhat / norm - x (x . dxhat) / norm^3.
inline void l2_normalize_backward(const float* x, double norm, int64_t n, double* dxhat) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(x[i]) * dxhat[i];
  const double inv = 1.0 / norm, c = dot * inv * inv * inv;
  for (int64_t i = 0; i < n; ++i) dxhat[i] = dxhat[i] * inv - x[i] * c;
}

}  // namespace ak::linear::cpu
