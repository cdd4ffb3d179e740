// Views of the token-major tensors the chunked linear-attention kernels read and write, and the
// in-kernel L2 norm's epsilon.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "arch/sm80.cuh"

namespace ak::linear::cuda {

using namespace ::ak::arch;

// The epsilon inside the square root of the in-kernel L2 norm, x / sqrt(sum(x^2) + eps) (FLA's, and
// the CPU backend's).
constexpr float kL2NormEps = 1e-6f;

// A token-major view [B, T, heads, D] with a contiguous last dimension; strides in elements.
template <class T>
struct Rows {
  T* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __host__ __device__ __forceinline__ T* row(int64_t b, int64_t t, int64_t head) const {
    return p + b * sb + t * st + head * sh;
  }
};

// A view [B, T, H] of fp32 scalars (g, beta); p == nullptr reads as zero.
struct Scalars {
  const float* p = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
  __device__ __forceinline__ float at(int64_t b, int64_t t, int64_t h) const {
    return p ? p[b * sb + t * st + h * sh] : 0.f;
  }
};

// ss plus the squares of the eight 16-bit values of v (a 16-byte piece of a row): the L2 norm's sums.
template <class T>
__device__ __forceinline__ float add_squares8(const uint4& v, float ss) {
  const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = unpack2<T>(wv[e]);
    ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
  }
  return ss;
}

}  // namespace ak::linear::cuda
