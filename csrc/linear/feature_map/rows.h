// The element-wise stages of feature-map linear attention, written once for both backends: the
// calls' tensors as 4-D views that share their first three dimensions (rows of one token and head),
// read and written as float32 whatever their dtype, and the scalar maps (phi, its slope, the
// per-token factor). Each row is one (batch, token, head); the backends only differ in who walks a
// row's columns.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::linear::feature_map {

// A strided 4-D view of float data of any float dtype.
struct FloatView {
  void* data = nullptr;
  int32_t dtype = AK_FLOAT32;
  int64_t s[4] = {};

  AK_HD float load(int64_t at) const {
    switch (dtype) {
      case AK_FLOAT16: return f16_to_float(static_cast<const uint16_t*>(data)[at]);
      case AK_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(data)[at]);
      case AK_FLOAT64: return static_cast<float>(static_cast<const double*>(data)[at]);
      default: return static_cast<const float*>(data)[at];
    }
  }
  // The value as this view's dtype would hold it (the rounding a store makes).
  AK_HD float rounded(float v) const {
    switch (dtype) {
      case AK_FLOAT16: return f16_to_float(float_to_f16(v));
      case AK_BFLOAT16: return bf16_to_float(float_to_bf16(v));
      default: return v;
    }
  }
  AK_HD void store(int64_t at, float v) const {
    switch (dtype) {
      case AK_FLOAT16: static_cast<uint16_t*>(data)[at] = float_to_f16(v); break;
      case AK_BFLOAT16: static_cast<uint16_t*>(data)[at] = float_to_bf16(v); break;
      case AK_FLOAT64: static_cast<double*>(data)[at] = v; break;
      default: static_cast<float*>(data)[at] = v;
    }
  }
  // The offset of row (i0, i1, i2).
  AK_HD int64_t row(const int64_t (&i)[3]) const { return i[0] * s[0] + i[1] * s[1] + i[2] * s[2]; }
};

inline FloatView float_view(const ak_tensor& t) {
  FloatView v;
  v.data = t.data;
  v.dtype = t.dtype;
  for (int d = 0; d < 4; ++d) v.s[d] = t.strides[d];
  return v;
}

// phi codes (attnkit_linear.h): AK_FMAP_IDENTITY, AK_FMAP_ELU1, AK_FMAP_RELU.
AK_HD float phi_of(int phi, float x) {
  if (phi == AK_FMAP_ELU1) return x > 0.f ? x + 1.f : expf(x);
  if (phi == AK_FMAP_RELU) return x > 0.f ? x : 0.f;
  return x;
}
// d phi / dx times g; relu and elu+1 take the slope of x > 0 (1) or not (0, exp(x)).
AK_HD float through_phi(int phi, float x, float g) {
  if (phi == AK_FMAP_ELU1) return x > 0.f ? g : g * expf(x);
  if (phi == AK_FMAP_RELU) return x > 0.f ? g : 0.f;
  return g;
}

// The rows of a call: [n0, n1, n2] row-major, the token index along dimension token_dim (1 or 2).
struct Rows {
  int64_t n[3] = {};
  int64_t count = 0;
  int token_dim = 1;
  int factor = AK_FMAP_FACTOR_NONE;
  int device = 0;  // the CUDA device of the tensors

  AK_HD void index(int64_t r, int64_t (&i)[3]) const {
    i[2] = r % n[2];
    r /= n[2];
    i[1] = r % n[1];
    i[0] = r / n[1];
  }
  // The factor of token t's query row: 1, 1 / (t + 1) (causal) or 1 / T (bidirectional).
  AK_HD float factor_of(const int64_t (&i)[3]) const {
    if (factor == AK_FMAP_FACTOR_CAUSAL) return 1.f / static_cast<float>(i[token_dim] + 1);
    if (factor == AK_FMAP_FACTOR_MEAN) return 1.f / static_cast<float>(n[token_dim]);
    return 1.f;
  }
};

inline Rows rows_of(const ak_tensor& t, int token_dim, int factor) {
  Rows r;
  for (int d = 0; d < 3; ++d) r.n[d] = t.shape[d];
  r.count = t.shape[0] * t.shape[1] * t.shape[2];
  r.token_dim = token_dim;
  r.factor = factor;
  r.device = t.device_index;
  return r;
}

// The arguments of each stage, checked by the entries.
struct FeaturesArgs {  // dst = [phi(x) f c, phi(x) f s] or phi(x) f
  Rows rows;
  FloatView dst, x;
  const float* cos = nullptr;  // [T] or null
  const float* sin = nullptr;
  int phi = 0;
  int64_t k = 0;  // x's columns
};
struct FeatureGradArgs {  // dx = phi'(x) f (dF[:K] c + dF[K:] s), or phi'(x) f dF
  Rows rows;
  FloatView dx, x, df;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int phi = 0;
  int64_t k = 0;
};
struct ValuesArgs {  // dst = [v | 1 | 0 ...]
  Rows rows;
  FloatView dst, v;
  int64_t w = 0, width = 0;
};
struct NormaliseArgs {  // dst = num[:w] / (num[w] + eps f)
  Rows rows;
  FloatView dst, num;
  float eps = 0.f;
  int64_t w = 0;
};
struct NormaliseGradArgs {  // dst = [round(dO / D) | dD high | dD low | 0 ...]
  Rows rows;
  FloatView dst, d_output, num;
  float eps = 0.f;
  int64_t w = 0, width = 0;
};

// Column j of a feature row (j < 2K with weights).
AK_HD float feature_at(const FeaturesArgs& a, const int64_t (&i)[3], int64_t xo, float f, int64_t j) {
  const bool weighted = a.cos != nullptr;
  const int64_t c = weighted && j >= a.k ? j - a.k : j;
  float y = phi_of(a.phi, a.x.load(xo + c * a.x.s[3])) * f;
  if (weighted) y *= j < a.k ? a.cos[i[a.rows.token_dim]] : a.sin[i[a.rows.token_dim]];
  return y;
}

AK_HD float feature_grad_at(const FeatureGradArgs& a, const int64_t (&i)[3], int64_t xo, int64_t go, float f,
                            int64_t c) {
  float g = a.df.load(go + c * a.df.s[3]);
  if (a.cos != nullptr) {
    const int64_t t = i[a.rows.token_dim];
    g = g * a.cos[t] + a.df.load(go + (c + a.k) * a.df.s[3]) * a.sin[t];
  }
  return through_phi(a.phi, a.x.load(xo + c * a.x.s[3]), g * f);
}

// The normaliser D of a row (the kernel's ones column plus the scaled eps).
AK_HD float normaliser(const FloatView& num, int64_t w, float eps, int64_t no, float f) {
  return num.load(no + w * num.s[3]) + eps * f;
}

// One row of each stage: columns lane, lane + step, ... (the CPU walks a row alone, CUDA a warp).
AK_HD void features_row(const FeaturesArgs& a, int64_t r, int lane, int step) {
  int64_t i[3];
  a.rows.index(r, i);
  const int64_t xo = a.x.row(i), d = a.dst.row(i);
  const float f = a.rows.factor_of(i);
  const int64_t width = a.cos != nullptr ? 2 * a.k : a.k;
  for (int64_t j = lane; j < width; j += step) a.dst.store(d + j * a.dst.s[3], feature_at(a, i, xo, f, j));
}

AK_HD void feature_grad_row(const FeatureGradArgs& a, int64_t r, int lane, int step) {
  int64_t i[3];
  a.rows.index(r, i);
  const int64_t xo = a.x.row(i), go = a.df.row(i), d = a.dx.row(i);
  const float f = a.rows.factor_of(i);
  for (int64_t c = lane; c < a.k; c += step) a.dx.store(d + c * a.dx.s[3], feature_grad_at(a, i, xo, go, f, c));
}

AK_HD void values_row(const ValuesArgs& a, int64_t r, int lane, int step) {
  int64_t i[3];
  a.rows.index(r, i);
  const int64_t vo = a.v.row(i), d = a.dst.row(i);
  for (int64_t j = lane; j < a.width; j += step) {
    const float y = j < a.w ? a.v.load(vo + j * a.v.s[3]) : (j == a.w ? 1.f : 0.f);
    a.dst.store(d + j * a.dst.s[3], y);
  }
}

AK_HD void normalise_row(const NormaliseArgs& a, int64_t r, int lane, int step) {
  int64_t i[3];
  a.rows.index(r, i);
  const int64_t no = a.num.row(i), d = a.dst.row(i);
  const float den = normaliser(a.num, a.w, a.eps, no, a.rows.factor_of(i));
  for (int64_t j = lane; j < a.w; j += step) a.dst.store(d + j * a.dst.s[3], a.num.load(no + j * a.num.s[3]) / den);
}

// `total` sums one value per lane over the lanes of a row (the identity on the CPU).
#ifdef __CUDACC__
#pragma nv_exec_check_disable
#endif
template <class Total>
AK_HD void normalise_grad_row(const NormaliseGradArgs& a, int64_t r, int lane, int step, Total total) {
  int64_t i[3];
  a.rows.index(r, i);
  const int64_t no = a.num.row(i), go = a.d_output.row(i), d = a.dst.row(i);
  const float den = normaliser(a.num, a.w, a.eps, no, a.rows.factor_of(i));
  float dot = 0.f;
  for (int64_t j = lane; j < a.w; j += step) {
    const float rounded = a.dst.rounded(a.d_output.load(go + j * a.d_output.s[3]) / den);
    a.dst.store(d + j * a.dst.s[3], rounded);
    dot += rounded * (a.num.load(no + j * a.num.s[3]) / den);
  }
  const float dD = -total(dot);
  const float high = a.dst.rounded(dD);
  for (int64_t j = a.w + lane; j < a.width; j += step) {
    a.dst.store(d + j * a.dst.s[3], j == a.w ? high : (j == a.w + 1 ? dD - high : 0.f));
  }
}

}  // namespace ak::linear::feature_map
