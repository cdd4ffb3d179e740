// The sm_80 primitives every kernel family uses (Ampere and newer, so Hopper too): element
// conversions, warp reductions, 16-byte asynchronous copies, ldmatrix and the m16n8k16 matrix product
// on 16-bit operands with fp32 accumulation.
//
// Fragments (PTX ISA "mma.m16n8k16"), lane l, g = l / 4, t = l % 4:
//   A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8:  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C 16x8:  c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]
// ldmatrix gives lane l the elements (row l / 4, columns 2 (l % 4), +1) of each 8x8 matrix, or with
// .trans (rows 2 (l % 4), +1; column l / 4); lanes 8i .. 8i + 7 name the rows of matrix i.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "arch/guard.h"

namespace ak::arch {

// ---- element conversions (all arithmetic is fp32) ----

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Two floats rounded into one 32-bit register of 16-bit elements (lo: the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The two 16-bit elements of a 32-bit register as floats.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// ---- warp reductions ----

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// Inclusive prefix sum over the lanes of a warp (lane 0 first).
template <class T>
__device__ __forceinline__ T warp_inclusive_scan(T x, int lane) {
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, m);
    if (lane >= m) x += y;
  }
  return x;
}

// Over the 4 lanes of a quad (the lanes that share an accumulator row).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

// 2^x on the special-function unit (flushes denormals; -inf gives 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- shared memory ----

// GPU-scope acquire load, release store and release add of a flag in global memory (the deterministic
// orders: a counter a block waits on before adding its piece, and advances after).
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_add_gpu(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- asynchronous copies global -> shared, 16 bytes ----

// src_bytes 0 reads nothing and zero-fills the destination (rows past a sequence's end).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  AK_ASM_SM80("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  AK_ASM_SM80("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { AK_ASM_SM80("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups of this thread are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { AK_ASM_SM80("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }

// ---- ldmatrix: r receives four (x4) or two (x2) registers ----

__device__ __forceinline__ void ldsm_x4(uint32_t* r, uint32_t addr) {
  AK_ASM_SM80("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
              : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, uint32_t addr) {
  AK_ASM_SM80("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
              : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
              : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t* r, uint32_t addr) {
  AK_ASM_SM80("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t* r, uint32_t addr) {
  AK_ASM_SM80("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
              : "=r"(r[0]), "=r"(r[1])
              : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) { ldsm_x4(r, smem_addr(p)); }
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) { ldsm_x4_trans(r, smem_addr(p)); }

// ---- the product: d += A B, m16n8k16, fp32 accumulators ----
// d: four accumulators (C fragment), a: four registers (A fragment), b0 / b1 or b[2]: the B fragment.

#define AK_MMA16816(TY)                                                                             \
  AK_ASM_SM80("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
              "{%8, %9}, {%0, %1, %2, %3};\n"                                                                 \
              : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <class T>
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma16816 takes f16 or bf16");
  if constexpr (std::is_same_v<T, __half>) {
    AK_MMA16816("f16");
  } else {
    AK_MMA16816("bf16");
  }
}
#undef AK_MMA16816
template <class T>
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, const uint32_t* b) {
  mma16816<T>(d, a, b[0], b[1]);
}

// ---- m16n8 accumulator tiles: acc[mt][nt] is the C fragment of rows 16 mt + lane / 4 (and + 8),
// columns 8 nt + 2 (lane % 4) (and + 1) ----

template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }
}

// Calls f(r, c, pair) for both row halves of every tile, with the tile at (m0, n0): pair points at
// the accumulators of (r, c) and (r, c + 1). Acc: float[MT][NT][4], const or not.
template <class Acc, class F>
__device__ __forceinline__ void for_acc_pairs(Acc& acc, int m0, int n0, int lane, F&& f) {
  constexpr int MT = std::extent_v<Acc, 0>, NT = std::extent_v<Acc, 1>;
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = m0 + 16 * mt + g, c = n0 + 8 * nt + 2 * q;
      f(r, c, &acc[mt][nt][0]);
      f(r + 8, c, &acc[mt][nt][2]);
    }
  }
}

}  // namespace ak::arch
