// The store unit of a kernel that moves rows of bytes unchanged (zeroing, gathering or scattering them): the
// widest access, 16 bytes down to 1, that divides a row's bytes and every address involved, and a call with
// the unsigned type of that width, so the kernel is instantiated once per width.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace ak::cuda {

inline bool aligned_to(const void* p, int64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline int64_t widest_unit(int64_t row_bytes, std::initializer_list<const void*> addresses) {
  const auto fits = [&](int64_t unit) {
    if (row_bytes % unit != 0) return false;
    for (const void* p : addresses) {
      if (!aligned_to(p, unit)) return false;
    }
    return true;
  };
  int64_t unit = 16;
  while (unit > 1 && !fits(unit)) unit /= 2;
  return unit;
}

// f(W{}) with W the unsigned type of `unit` bytes (uint4 for 16).
template <class F>
void with_unit(int64_t unit, F&& f) {
  switch (unit) {
    case 16: f(uint4{}); break;
    case 8: f(uint2{}); break;
    case 4: f(uint32_t{}); break;
    case 2: f(uint16_t{}); break;
    default: f(uint8_t{}); break;
  }
}

}  // namespace ak::cuda
