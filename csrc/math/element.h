// Element access and the scalar form of every tensor-math operation, written once for both backends
// (host and device). A backend picks the type it computes in (Compute): the CPU computes every float
// in double, CUDA in float for 16- and 32-bit floats; integers compute in int64 on both.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::math {

// Storage of each dtype, its exact widening (Wide) and its rounding from a computed value.
template <class S>
struct Elem;
template <>
struct Elem<float> {
  using Wide = float;
  static constexpr bool kFloat = true;
  AK_HD static float load(float v) { return v; }
  AK_HD static float store(double v) { return static_cast<float>(v); }
};
// Types that compute as they are stored.
template <class T, bool kIsFloat>
struct Exact {
  using Wide = T;
  static constexpr bool kFloat = kIsFloat;
  AK_HD static T load(T v) { return v; }
  AK_HD static T store(T v) { return v; }
};
template <>
struct Elem<double> : Exact<double, true> {};
// The 16-bit floats: read exactly into float; written from float, or from double with one rounding.
struct F16Bits {
  AK_HD static float load(uint16_t b) { return f16_to_float(b); }
  AK_HD static uint16_t round(float v) { return float_to_f16(v); }
  AK_HD static uint16_t round(double v) { return double_to_f16(v); }
};
struct BF16Bits {
  AK_HD static float load(uint16_t b) { return bf16_to_float(b); }
  AK_HD static uint16_t round(float v) { return float_to_bf16(v); }
  AK_HD static uint16_t round(double v) { return double_to_bf16(v); }
};
template <class H, class Bits>
struct Elem16 {
  using Wide = float;
  static constexpr bool kFloat = true;
  AK_HD static float load(H v) { return Bits::load(v.bits); }
  AK_HD static H store(float v) { return H{Bits::round(v)}; }
  AK_HD static H store(double v) { return H{Bits::round(v)}; }
};
template <>
struct Elem<f16_t> : Elem16<f16_t, F16Bits> {};
template <>
struct Elem<bf16_t> : Elem16<bf16_t, BF16Bits> {};
// Integer results wrap around, as two's-complement arithmetic does.
template <>
struct Elem<int32_t> {
  using Wide = int64_t;
  static constexpr bool kFloat = false;
  AK_HD static int64_t load(int32_t v) { return v; }
  AK_HD static int32_t store(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }
};
template <>
struct Elem<int64_t> : Exact<int64_t, false> {};
template <>
struct Elem<uint8_t> {  // bool
  using Wide = int64_t;
  static constexpr bool kFloat = false;
  AK_HD static int64_t load(uint8_t v) { return v != 0; }
  AK_HD static uint8_t store(int64_t v) { return v != 0; }
};

// A descriptor's data as an array of T.
template <class T>
const T* data_of(const ak_tensor& t) {
  return static_cast<const T*>(t.data);
}
template <class T>
T* out_of(const ak_tensor& t) {
  return static_cast<T*>(t.data);
}

// The CPU's compute type: double for every float, int64 for integers and bool.
template <class S>
using HostCompute = std::conditional_t<Elem<S>::kFloat, double, int64_t>;

// Calls f(S{}) with the storage type of a dtype code.
template <class F>
void with_storage(int32_t dtype, F&& f) {
  switch (dtype) {
    case AK_FLOAT32: f(float{}); break;
    case AK_FLOAT64: f(double{}); break;
    case AK_FLOAT16: f(f16_t{}); break;
    case AK_BFLOAT16: f(bf16_t{}); break;
    case AK_INT32: f(int32_t{}); break;
    case AK_INT64: f(int64_t{}); break;
    case AK_BOOL: f(uint8_t{}); break;
    case AK_FLOAT8_E4M3:
      fail(AK_ERR_UNSUPPORTED, "dtype: float8_e4m3 has no arithmetic here; cast it to a wider float first");
    default: fail(AK_ERR_INVALID_ARGUMENT, "dtype: unknown code " + std::to_string(dtype));
  }
}

// Calls f(T{}) with an unsigned type of `bytes` bytes, for work that moves elements unchanged.
template <class F>
void with_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: fail(AK_ERR_INTERNAL, "unexpected element size " + std::to_string(bytes));
  }
}

// Unsigned arithmetic for the integer ops, so that overflow wraps instead of being undefined.
AK_HD int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + b); }
AK_HD int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - b); }
AK_HD int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// The math library's float and double forms under one name each.
AK_HD float m_abs(float x) { return fabsf(x); }
AK_HD double m_abs(double x) { return fabs(x); }
AK_HD float m_sqrt(float x) { return sqrtf(x); }
AK_HD double m_sqrt(double x) { return sqrt(x); }
AK_HD float m_exp(float x) { return expf(x); }
AK_HD double m_exp(double x) { return exp(x); }
AK_HD float m_log(float x) { return logf(x); }
AK_HD double m_log(double x) { return log(x); }
AK_HD float m_tanh(float x) { return tanhf(x); }
AK_HD double m_tanh(double x) { return tanh(x); }
AK_HD float m_pow(float x, float y) { return powf(x, y); }
AK_HD double m_pow(double x, double y) { return pow(x, y); }

template <class C>
AK_HD bool is_nan(C x) {
  return x != x;  // false for integers
}

// The larger (smaller) of two values, NaN if either is NaN.
template <class C>
AK_HD C nan_max(C a, C b) {
  return is_nan(a) ? a : (is_nan(b) || b > a ? b : a);
}
template <class C>
AK_HD C nan_min(C a, C b) {
  return is_nan(a) ? a : (is_nan(b) || b < a ? b : a);
}

// Ops whose result is in the operands' dtype. Ops that need a float never reach here with an integer
// (the entries refuse them), so their integer branch only has to compile.
template <class C>
AK_HD C apply_unary(int op, C x) {
  constexpr bool kFloat = std::is_floating_point<C>::value;
  switch (op) {
    case AK_MAP_NEG: if constexpr (kFloat) return -x; else return wrap_sub(0, x);
    case AK_MAP_ABS: if constexpr (kFloat) return m_abs(x); else return x < 0 ? wrap_sub(0, x) : x;
    case AK_MAP_SQUARE: if constexpr (kFloat) return x * x; else return wrap_mul(x, x);
    default: break;
  }
  if constexpr (kFloat) {
    switch (op) {
      case AK_MAP_SQRT: return m_sqrt(x);
      case AK_MAP_EXP: return m_exp(x);
      case AK_MAP_LOG: return m_log(x);
      case AK_MAP_SIGMOID: return C(1) / (C(1) + m_exp(-x));
      case AK_MAP_TANH: return m_tanh(x);
      default: break;
    }
  }
  return x;
}

template <class C>
AK_HD C apply_binary(int op, C a, C b) {
  constexpr bool kFloat = std::is_floating_point<C>::value;
  switch (op) {
    case AK_MAP_ADD: if constexpr (kFloat) return a + b; else return wrap_add(a, b);
    case AK_MAP_SUB: if constexpr (kFloat) return a - b; else return wrap_sub(a, b);
    case AK_MAP_MUL: if constexpr (kFloat) return a * b; else return wrap_mul(a, b);
    case AK_MAP_MAXIMUM: return nan_max(a, b);
    case AK_MAP_MINIMUM: return nan_min(a, b);
    default: break;
  }
  if constexpr (kFloat) {
    if (op == AK_MAP_DIV) return a / b;
    if (op == AK_MAP_POW) return m_pow(a, b);
  }
  return a;
}

// Ops with a bool result.
template <class C>
AK_HD bool apply_predicate(int op, C a, C b) {
  switch (op) {
    case AK_MAP_LOGICAL_NOT: return a == C(0);
    case AK_MAP_ISNAN: return is_nan(a);
    case AK_MAP_ISFINITE: return !is_nan(a - a);  // inf - inf and NaN - NaN are NaN
    case AK_MAP_EQ: return a == b;
    case AK_MAP_NE: return a != b;
    case AK_MAP_LT: return a < b;
    case AK_MAP_LE: return a <= b;
    case AK_MAP_GT: return a > b;
    case AK_MAP_GE: return a >= b;
    case AK_MAP_LOGICAL_AND: return a != C(0) && b != C(0);
    case AK_MAP_LOGICAL_OR: return a != C(0) || b != C(0);
    default: return false;
  }
}

AK_HD bool is_predicate(int op) { return (op >= AK_MAP_LOGICAL_NOT && op <= AK_MAP_ISFINITE) || op >= AK_MAP_EQ; }

// One element of a map, stored as D: the op's own dtype S, or bool (uint8_t) for a predicate.
template <class S, class D, class C>
AK_HD D map_value(int op, C x, C y) {
  if constexpr (std::is_same<D, uint8_t>::value) {
    if (is_predicate(op)) return apply_predicate(op, x, y);
  }
  if constexpr (std::is_same<D, S>::value) {
    return Elem<S>::store(op < AK_MAP_ADD ? apply_unary(op, x) : apply_binary(op, x, y));
  } else {
    return D{};  // not reached: a map's output is S or bool
  }
}

// acc + x * y, wrapping for integers.
template <class A>
AK_HD A mul_add(A acc, A x, A y) {
  if constexpr (std::is_floating_point<A>::value) return acc + x * y; else return wrap_add(acc, wrap_mul(x, y));
}

// Reductions: the accumulator's start and step.
template <class A>
AK_HD A reduce_identity(int op) {
  if (op == AK_REDUCE_MAX) {
    if constexpr (std::is_floating_point<A>::value) return -INFINITY; else return INT64_MIN;
  }
  if (op == AK_REDUCE_MIN) {
    if constexpr (std::is_floating_point<A>::value) return INFINITY; else return INT64_MAX;
  }
  return A(0);
}
template <class A>
AK_HD A reduce_step(int op, A acc, A x) {
  if (op == AK_REDUCE_MAX) return nan_max(acc, x);
  if (op == AK_REDUCE_MIN) return nan_min(acc, x);
  if constexpr (std::is_floating_point<A>::value) return acc + x; else return wrap_add(acc, x);
}
// The accumulator's final value: the mean divides by the count (NaN for none).
template <class A>
AK_HD A reduce_finish(int op, A acc, int64_t count) {
  if constexpr (std::is_floating_point<A>::value) {
    if (op == AK_REDUCE_MEAN) return acc / static_cast<A>(count);
  }
  return acc;
}

}  // namespace ak::math
