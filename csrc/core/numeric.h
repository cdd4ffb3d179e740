// Scalar conversions shared by the CPU and CUDA backends, written with integer and IEEE-exact
// operations only, so both backends round every value the same way (to nearest, ties to even).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define AK_HD __host__ __device__ __forceinline__
#else
#define AK_HD inline
#endif

namespace ak {

// Raw 16-bit storage types: the CPU backend never does arithmetic in these.
struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

// The bits of a value of one type read as another of the same size (memcpy: defined behaviour on
// the host, a register move on the device).
template <class To, class From>
AK_HD To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of one size");
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));
  return to;
}
AK_HD uint32_t float_bits(float f) { return bit_cast<uint32_t>(f); }
AK_HD float bits_float(uint32_t u) { return bit_cast<float>(u); }
AK_HD uint64_t double_bits(double d) { return bit_cast<uint64_t>(d); }
AK_HD double bits_double(uint64_t u) { return bit_cast<double>(u); }

// ---- 16-bit floats ----

AK_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

AK_HD uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

AK_HD float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  // zero or subnormal: man * 2^-24, exact in float
  const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

AK_HD uint16_t float_to_f16(float f) {
  uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / inf
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf (>= 65520)
  if (x < 0x38800000u) {
    // Result is subnormal (or zero): round |f| * 2^24 to an integer, ties to even, exactly.
    // |f| < 2^-14, so |f| * 2^24 < 1024 and the product is exact in double.
    const double scaled = static_cast<double>(bits_float(x)) * 16777216.0;
    double whole = floor(scaled);
    const double frac = scaled - whole;
    if (frac > 0.5 || (frac == 0.5 && fmod(whole, 2.0) != 0.0)) whole += 1.0;
    return sign | static_cast<uint16_t>(whole);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  const uint32_t odd = (x >> 13) & 1u;
  x = x - 0x38000000u + 0xfffu + odd;
  return sign | static_cast<uint16_t>(x >> 13);
}

// double -> float rounded to odd: then rounding that float to a 16-bit float (which keeps at least
// 2 bits fewer at every exponent) equals rounding the double directly, with no double rounding.
AK_HD float double_to_float_odd(double d) {
  float f = static_cast<float>(d);
  const double back = static_cast<double>(f);
  if (back != d && back == back && d == d) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) == 0x7f800000u) {
      u -= 1;  // overflowed to inf: the truncation is the largest finite float (odd)
    } else if (fabs(back) > fabs(d)) {
      u -= 1;  // step toward zero to get the truncation
    }
    f = bits_float(u | 1u);
  }
  return f;
}

AK_HD uint16_t double_to_bf16(double d) { return float_to_bf16(double_to_float_odd(d)); }

// ---- 8-bit float e4m3 (no infinities: 0x7f / 0xff are NaN; the largest finite value is 448) ----

AK_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, man = b & 7u;
  if (exp == 0xfu && man == 7u) return bits_float(sign | 0x7fc00000u);
  if (exp != 0) return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
  const float mag = static_cast<float>(man) * 0.001953125f;  // subnormal: man * 2^-9
  return sign ? -mag : mag;
}

// The exact value rounded to nearest even. NaN, infinities and magnitudes of 480 and above give NaN, and
// so does rounding up past 448 (as PyTorch's float8_e4m3fn conversion does: 464 is a tie and rounds to
// 448, anything between it and 480 to the NaN code).
AK_HD uint8_t double_to_e4m3(double d) {
  if (d != d) return 0x7fu;
  const uint8_t sign = (double_bits(d) >> 63) ? 0x80u : 0u;
  const double a = fabs(d);
  if (a >= 480.0) return sign | 0x7fu;
  auto round_even = [](double x) {
    double whole = floor(x);
    const double frac = x - whole;
    if (frac > 0.5 || (frac == 0.5 && fmod(whole, 2.0) != 0.0)) whole += 1.0;
    return whole;
  };
  if (a < 0.015625) {  // below 2^-6: subnormal steps of 2^-9; 8 steps round up to the smallest normal, code 8
    return sign | static_cast<uint8_t>(round_even(a * 512.0));
  }
  int e = 0;
  frexp(a, &e);
  int unbiased = e - 1;                                // a in [2^u, 2^(u+1))
  double man = round_even(ldexp(a, 3 - unbiased));     // in [8, 16]
  if (man == 16.0) {
    man = 8.0;
    unbiased += 1;
  }
  return sign | static_cast<uint8_t>(((unbiased + 7) << 3) | (static_cast<int>(man) - 8));
}
AK_HD uint16_t double_to_f16(double d) { return float_to_f16(double_to_float_odd(d)); }

// int64 -> double rounded to odd (exact below 2^53): rounding that double once more to float, f16
// or bf16 then equals rounding the integer directly, which a plain conversion to double would not.
AK_HD double int64_to_double_odd(int64_t x) {
  const bool negative = x < 0;
  const uint64_t magnitude = negative ? ~static_cast<uint64_t>(x) + 1u : static_cast<uint64_t>(x);
  if (magnitude < (1ull << 53)) return negative ? -static_cast<double>(magnitude) : static_cast<double>(magnitude);
  int shift = 0;
  for (uint64_t high = magnitude >> 53; high != 0; high >>= 1) ++shift;
  uint64_t kept = magnitude >> shift;  // 53 bits, exact in double
  if ((magnitude & ((1ull << shift) - 1u)) != 0) kept |= 1u;  // sticky bit
  const double scale = bits_double(static_cast<uint64_t>(1023 + shift) << 52);  // 2^shift
  const double d = static_cast<double>(kept) * scale;
  return negative ? -d : d;
}

// ---- integers and bools from floating values: truncate toward zero, saturate, NaN -> 0 ----

AK_HD int32_t double_to_i32(double d) {
  if (!(d == d)) return 0;
  if (d >= 2147483647.0) return 2147483647;
  if (d <= -2147483648.0) return (-2147483647 - 1);
  return static_cast<int32_t>(d);
}
AK_HD int64_t double_to_i64(double d) {
  if (!(d == d)) return 0;
  if (d >= 9223372036854775807.0) return INT64_MAX;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

}  // namespace ak
