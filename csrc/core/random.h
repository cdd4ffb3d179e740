// Counter-based random numbers shared by the CPU and CUDA backends.
//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) turns a
// 64-bit counter and a 64-bit key into four 32-bit words. Uniforms use 53 bits; normals use
// Box-Muller with a logarithm and sine/cosine written here from IEEE-exact operations (explicit fma,
// uncontracted multiply/add, correctly rounded sqrt and division), so the CPU and CUDA backends
// produce bit-identical doubles for the same (seed, counter).
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace ak {

struct Philox4 {
  uint32_t x[4];
};

AK_HD Philox4 philox4x32_10(uint64_t counter, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uncontracted arithmetic: the device compiler would otherwise fuse a*b+c differently from the host.
AK_HD double rmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
AK_HD double radd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
AK_HD double rfma(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
AK_HD double rdiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
AK_HD double rsqrt_exact(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Two 32-bit words -> a double in [0, 1) with 53 random bits.
AK_HD double unit_uniform(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

// Natural log for x in (0, 1]: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
// log(m) = 2 atanh(s), s = (m - 1) / (m + 1), as a series in s^2 (|s| < 0.172, 12 terms).
AK_HD double exact_log_unit(double x) {
  uint64_t u = double_bits(x);
  int e = static_cast<int>((u >> 52) & 0x7ff) - 1023;
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m = bits_double(u);
  if (m > 1.4142135623730951) {
    m = rmul(m, 0.5);
    e += 1;
  }
  const double s = rdiv(radd(m, -1.0), radd(m, 1.0));
  const double z = rmul(s, s);
  double p = 1.0 / 25.0;  // atanh series: sum of z^k / (2k + 1), by Horner's rule from k = 12
  for (int n = 23; n >= 1; n -= 2) p = rfma(p, z, 1.0 / n);
  const double log_m = rmul(rmul(2.0, s), p);
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return radd(rfma(static_cast<double>(e), ln2_hi, log_m), rmul(static_cast<double>(e), ln2_lo));
}

// sin and cos of a in [0, pi/2] by their Taylor series (12 and 12 terms, error < 1e-17), evaluated
// by Horner's rule from the highest term: kSin[i] = (-1)^(11-i) / (23 - 2i)!, kCos[i] = (-1)^(12-i) / (24 - 2i)!.
AK_HD void exact_sincos_quarter(double a, double* s, double* c) {
  constexpr double kSin[12] = {-1.0 / 25852016738884976640000.0, 1.0 / 51090942171709440000.0,
                               -1.0 / 121645100408832000.0, 1.0 / 355687428096000.0, -1.0 / 1307674368000.0,
                               1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0,
                               -1.0 / 6.0, 1.0};
  constexpr double kCos[13] = {1.0 / 620448401733239439360000.0, -1.0 / 1124000727777607680000.0,
                               1.0 / 2432902008176640000.0, -1.0 / 6402373705728000.0, 1.0 / 20922789888000.0,
                               -1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0, 1.0 / 40320.0,
                               -1.0 / 720.0, 1.0 / 24.0, -0.5, 1.0};
  const double z = rmul(a, a);
  double ps = kSin[0];
  for (int i = 1; i < 12; ++i) ps = rfma(ps, z, kSin[i]);
  *s = rmul(a, ps);
  double pc = kCos[0];
  for (int i = 1; i < 13; ++i) pc = rfma(pc, z, kCos[i]);
  *c = pc;
}

// Element `index` of a random stream: kind 0 uniform in [a, b), kind 1 normal(mean a, std b).
// Normals come in Box-Muller pairs: elements 2j and 2j+1 share one Philox block.
AK_HD double random_value(uint64_t seed, uint64_t index, int kind, double a, double b) {
  if (kind == 0) {
    const Philox4 r = philox4x32_10(index, seed);
    return rfma(unit_uniform(r.x[0], r.x[1]), radd(b, -a), a);
  }
  const Philox4 r = philox4x32_10(index >> 1, seed);
  const double u1 = radd(1.0, -unit_uniform(r.x[0], r.x[1]));  // (0, 1]
  const double u2 = unit_uniform(r.x[2], r.x[3]);              // [0, 1)
  const double radius = rsqrt_exact(rmul(-2.0, exact_log_unit(u1)));
  // angle 2*pi*u2 = quadrant * pi/2 + rest, rest in [0, pi/2)
  const double quarters = rmul(u2, 4.0);  // exact
  const double quadrant = floor(quarters);
  const double rest = rmul(radd(quarters, -quadrant), 1.5707963267948966);
  double s, c;
  exact_sincos_quarter(rest, &s, &c);
  double sin_v, cos_v;
  switch (static_cast<int>(quadrant)) {
    case 0: sin_v = s; cos_v = c; break;
    case 1: sin_v = c; cos_v = -s; break;
    case 2: sin_v = -s; cos_v = -c; break;
    default: sin_v = -c; cos_v = s; break;
  }
  const double z = (index & 1) ? rmul(radius, sin_v) : rmul(radius, cos_v);
  return rfma(z, b, a);
}

}  // namespace ak
