// The scalar maps of the gate transforms, written once for both backends (float32 arithmetic):
// with x = raw + dt_bias and a = exp(A_log),
//   softplus: g = -a softplus(x)          dg/dx = -a sigmoid(x)      dg/dA_log = g
//   bounded:  g = L sigmoid(z), z = a x   dg/dx = L s'(z) a          dg/dA_log = L s'(z) z
// Fast selects the device's approximate exp, log and division (__expf, __logf, __fdividef); the
// host has no such primitives and always computes the accurate forms.
#pragma once

#include <cmath>

#include "core/numeric.h"

namespace ak::linear::gate {

template <bool Fast>
AK_HD float exp_of(float x) {
#ifdef __CUDA_ARCH__
  if (Fast) return __expf(x);
#endif
  return expf(x);
}

template <bool Fast>
AK_HD float log_of(float x) {
#ifdef __CUDA_ARCH__
  if (Fast) return __logf(x);
#endif
  return logf(x);
}

template <bool Fast>
AK_HD float divide(float a, float b) {
#ifdef __CUDA_ARCH__
  if (Fast) return __fdividef(a, b);
#endif
  return a / b;
}

// log(1 + e^x) without overflow. Accurate: max(x, 0) + log1p(e^-|x|), good to a few ulps everywhere.
// Fast: x itself above 15 (where the two differ by less than half an ulp of x), else log(1 + e^x),
// whose error is absolute (about 1e-6) rather than relative for very negative x.
template <bool Fast>
AK_HD float softplus(float x) {
  if (Fast) return x > 15.f ? x : log_of<true>(1.f + exp_of<true>(x));
  return fmaxf(x, 0.f) + log1pf(exp_of<false>(-fabsf(x)));
}

// sigmoid(z) and its slope sigmoid(z) sigmoid(-z), from e^-|z| (in (0, 1], so nothing overflows
// and the slope underflows to exactly 0 for large |z|).
struct Sigmoid {
  float value;
  float slope;
};
template <bool Fast>
AK_HD Sigmoid sigmoid(float z) {
  const float e = exp_of<Fast>(-fabsf(z));
  const float r = divide<Fast>(1.f, 1.f + e);  // sigmoid(|z|)
  return {z >= 0.f ? r : e * r, e * r * r};
}

// The amplitude a = exp(A_log).
template <bool Fast>
AK_HD float amplitude(float a_log) {
  return exp_of<Fast>(a_log);
}

template <bool Fast, bool Bounded>
AK_HD float gate_value(float x, float a, float lower_bound) {
  if (Bounded) return lower_bound * sigmoid<Fast>(a * x).value;
  return -a * softplus<Fast>(x);
}

// The gradients of one element for the loss dg * g: with respect to x (raw's and dt_bias's) and to
// A_log.
struct Grad {
  float dx;
  float da_log;
};
template <bool Fast, bool Bounded>
AK_HD Grad gate_grad(float x, float a, float lower_bound, float dg) {
  if (Bounded) {
    const float z = a * x;
    const Sigmoid s = sigmoid<Fast>(z);
    const float t = dg * lower_bound * s.slope;
    // A zero slope means |z| is huge (possibly infinite): its product with z is 0, never 0 * inf.
    return {t * a, s.slope == 0.f ? 0.f : t * z};
  }
  return {-dg * a * sigmoid<Fast>(x).value, -dg * a * softplus<Fast>(x)};
}

}  // namespace ak::linear::gate
