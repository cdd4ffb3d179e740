// What the CUDA forward kernels of the delta-rule family share: strided views of the token-major
// tensors, element conversions, warp reductions and the map from chunks and sequences to tokens.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ak::linear::cuda::fwd {

// The epsilon inside the square root of the in-kernel L2 norm, x / sqrt(sum(x^2) + eps) (FLA's, and
// the CPU backend's kL2NormEps).
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

// ---- element conversions ----

template <class T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static __forceinline__ float load(const float* p) { return *p; }
  __device__ static __forceinline__ float to_float(float x) { return x; }
  __device__ static __forceinline__ float from_float(float x) { return x; }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ static __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct Elem<__half> {
  __device__ static __forceinline__ float load(const __half* p) { return __half2float(*p); }
  __device__ static __forceinline__ float to_float(__half x) { return __half2float(x); }
  __device__ static __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

// Two floats rounded into one 32-bit register of 16-bit elements (lo = first, the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
// The two 16-bit elements of a 32-bit register as floats.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<__half2*>(&bits));
}

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

// ---- warp reductions ----

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// ---- sequences and chunks ----

// Which tokens a sequence or a chunk covers. Fixed length (cu == nullptr): sequence n is batch row n,
// tokens [0, T), chunks n * NC .. n * NC + NC - 1. Varlen: sequence n is tokens [cu[n], cu[n + 1]) of
// row 0, and its chunks are chunk_first[n] .. chunk_first[n + 1] - 1 (built by build_chunk_table).
struct ChunkMap {
  const int32_t* cu = nullptr;
  const int32_t* chunk_first = nullptr;  // varlen: [N + 1]
  const int32_t* chunk_seq = nullptr;    // varlen: [chunks], the sequence of each chunk
  int T = 0, NC = 0, C = 64;

  __device__ __forceinline__ void sequence(int n, int& row, int& begin, int& end, int& first) const {
    if (cu == nullptr) {
      row = n, begin = 0, end = T, first = n * NC;
    } else {
      row = 0, begin = cu[n], end = cu[n + 1], first = chunk_first[n];
    }
  }
  // Chunk gch: its batch row, first token and length (1..C).
  __device__ __forceinline__ void chunk(int gch, int& row, int& t0, int& len) const {
    if (cu == nullptr) {
      const int n = gch / NC, c = gch - n * NC;
      row = n, t0 = c * C, len = min(C, T - t0);
    } else {
      const int n = chunk_seq[gch];
      const int c = gch - chunk_first[n];
      row = 0, t0 = cu[n] + c * C, len = min(C, cu[n + 1] - t0);
    }
  }
};

}  // namespace ak::linear::cuda::fwd
