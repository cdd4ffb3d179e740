// Warp-level building blocks of the general (sm_80+) attention backward: 16-bit element traits,
// cp.async tile loads, ldmatrix and mma.sync m16n8k16 with fp32 accumulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ak::attention::cuda::bwd {

template <class T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __nv_bfloat162 v;
    *reinterpret_cast<uint32_t*>(&v) = bits;
    return __bfloat1622float2(v);
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    __half2 v;
    *reinterpret_cast<uint32_t*>(&v) = bits;
    return __half22float2(v);
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes zeros (the source is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc (MT x NT tiles of 16 x 8) += A[rows a_row0 .., k] * B[k, cols b_col0 ..] for k in [0, K).
// Shared-memory operands, rows padded so ldmatrix is conflict-free:
//   A_K_CONTIGUOUS: A stored sA[row * lda + k]; else transposed, sA[k * lda + row].
//   B_K_CONTIGUOUS: B stored sB[col * ldb + k] (e.g. K for Q K^T); else sB[k * ldb + col].
// Fragments follow mma.m16n8k16: lane (g = lane / 4, t = lane % 4) holds acc[mi][ni][e] at row
// a_row0 + 16 mi + g + 8 (e / 2), col b_col0 + 8 ni + 2 t + (e % 2).
template <int MT, int NT, bool A_K_CONTIGUOUS, bool B_K_CONTIGUOUS, class T>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const T* sA, int lda, int a_row0, const T* sB,
                                         int ldb, int b_col0, int K) {
  static_assert(NT % 2 == 0, "B fragments load two 8-column tiles at a time");
  const int lane = threadIdx.x & 31;
  const int quad = lane >> 3, r8 = lane & 7;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      if constexpr (A_K_CONTIGUOUS) {
        const int row = a_row0 + mi * 16 + (lane & 15);
        ldmatrix_x4(a[mi], sA + row * lda + k0 + (lane >> 4) * 8);
      } else {
        // Matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15).
        const int k = k0 + (quad >> 1) * 8 + r8;
        ldmatrix_x4_trans(a[mi], sA + k * lda + a_row0 + mi * 16 + (quad & 1) * 8);
      }
    }
#pragma unroll
    for (int ni = 0; ni < NT; ni += 2) {
      uint32_t b[4];  // b0, b1 of tile ni, then of tile ni + 1
      if constexpr (B_K_CONTIGUOUS) {
        // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        const int n = b_col0 + ni * 8 + (quad >> 1) * 8 + r8;
        ldmatrix_x4(b, sB + n * ldb + k0 + (quad & 1) * 8);
      } else {
        // Matrices: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), transposed.
        const int k = k0 + (quad & 1) * 8 + r8;
        ldmatrix_x4_trans(b, sB + k * ldb + b_col0 + ni * 8 + (quad >> 1) * 8);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        mma16816<T>(acc[mi][ni], a[mi], b[0], b[1]);
        mma16816<T>(acc[mi][ni + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int ni = 0; ni < NT; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
}

// exp2 on the special-function unit (inputs here are <= 0 or -inf; -inf gives 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) from exp2, accurate to a few ulp of 1 (tanh.approx is too coarse for the recomputed
// probabilities): 1 - 2 / (e^{2x} + 1), with the sign folded so the exponent never overflows.
__device__ __forceinline__ float accurate_tanh(float x) {
  const float e = fast_exp2(-2.8853900817779268f * fabsf(x));  // e^{-2|x|}
  const float t = __fdividef(1.0f - e, 1.0f + e);
  return copysignf(t, x);
}

}  // namespace ak::attention::cuda::bwd
