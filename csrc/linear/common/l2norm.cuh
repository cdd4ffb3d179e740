// The in-kernel L2 norm of q and k (useQkL2norm): x / sqrt(sum(x^2) + eps). The kernels read q and k
// raw and scale rows and columns by these row factors instead of rewriting the tiles.
#pragma once

#include <cstdint>

#include "arch/sm80.cuh"
#include "linear/common/padded.h"

namespace ak::linear::cuda {

// The epsilon inside the square root of the in-kernel L2 norm, x / sqrt(sum(x^2) + eps) (FLA's, and
// the CPU backend's).
constexpr float kL2NormEps = 1e-6f;

// ss plus the squares of the eight 16-bit values of v (a 16-byte piece of a row): the L2 norm's sums.
template <class T>
__device__ __forceinline__ float add_squares8(const uint4& v, float ss) {
  const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = ::ak::arch::unpack2<T>(wv[e]);
    ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
  }
  return ss;
}

// 1 / sqrt(|row|^2 + eps) of rows r0 .. r0 + 15 of a padded 64 x D tile of 16-bit elements: lanes l
// and l + 16 each sum half of row r0 + l, and both end up holding its value.
template <class T, int D>
__device__ __forceinline__ float inv_row_norm16(const unsigned char* tile, int r0, int lane) {
  const unsigned char* src = tile + (r0 + (lane & 15)) * tile_pitch(D) + (lane >> 4) * D;
  float ss = 0.f;
#pragma unroll
  for (int c16 = 0; c16 < D / 16; ++c16) ss = add_squares8<T>(*reinterpret_cast<const uint4*>(src + c16 * 16), ss);
  ss += __shfl_xor_sync(0xffffffffu, ss, 16);
  return rsqrtf(ss + kL2NormEps);
}

}  // namespace ak::linear::cuda
