// Warp-level tensor-core helpers of the delta-rule backward (mma.sync m16n8k16, fp32 accumulators,
// bf16 or f16 operands from shared memory through ldmatrix; sm_80 and newer).
//
// Fragments (PTX ISA, mma.m16n8k16 with .bf16/.f16), lane l, g = l / 4, q = l % 4:
//   A (16 x 16): a0 = A[g][2q..2q+1], a1 = A[g+8][2q..], a2 = A[g][2q+8..], a3 = A[g+8][2q+8..]
//   B (16 x 8):  b0 = B[2q..2q+1][g], b1 = B[2q+8..2q+9][g]
//   C (16 x 8):  c0, c1 = C[g][2q..2q+1], c2, c3 = C[g+8][2q..2q+1]
// ldmatrix.x4 loads four 8x8 matrices, lanes 8i..8i+7 naming the rows of matrix i; lane l receives
// M[l/4][2(l%4)..] of each (or, with .trans, M[2(l%4)..][l/4], i.e. the transpose).
//
// Tiles live in shared memory row-major with a row stride of (width + 8) elements: 16 bytes more
// than a multiple of 128, so the 8 rows of every ldmatrix fall into distinct banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ak::linear::cuda::bwd {

// The PTX primitives; a host emulator (AK_BWD_EMULATE, not part of the build) supplies its own to
// run the kernels on a CPU for checking.
#ifndef AK_BWD_EMULATE
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif  // AK_BWD_EMULATE

// Two floats to a packed pair of T (low half = x).
template <class T>
__device__ __forceinline__ uint32_t pack2(float x, float y);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  __half2 v = __floats2half2_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t u);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t u) {
  __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&u);
  return __bfloat1622float2(v);
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t u) {
  __half2 v = *reinterpret_cast<__half2*>(&u);
  return __half22float2(v);
}

// A fragment (16 x 16 at rows m0, columns k0) of a matrix stored [m][k].
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  ldsm_x4(a, s + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3));
}
// A fragment of A = S^T where S is stored [k][m].
template <class T>
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldsm_x4_t(a, s + (k0 + r + ((mat >> 1) << 3)) * ld + m0 + ((mat & 1) << 3));
}
// B fragments of two n8 tiles (n0 and n0 + 8, k0..k0+15) of B stored [n][k]: b[0..1] tile n0, b[2..3] tile n0+8.
template <class T>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const T* s, int ld, int n0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldsm_x4(b, s + (n0 + r + ((mat >> 1) << 3)) * ld + k0 + ((mat & 1) << 3));
}
// B fragments of one n8 tile (n0) over two k-steps, B stored [n][k]: b[0..1] for k0..k0+15, b[2..3]
// for k0+16..k0+31.
template <class T>
__device__ __forceinline__ void load_b1_nk_k32(uint32_t (&b)[4], const T* s, int ld, int n0, int k0, int lane) {
  ldsm_x4(b, s + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) << 3));
}
// The same for B stored [k][n].
template <class T>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const T* s, int ld, int n0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldsm_x4_t(b, s + (k0 + r + ((mat & 1) << 3)) * ld + n0 + ((mat >> 1) << 3));
}

// acc[mt][nt] += A[m0 + 16 mt .., 0..kdim) * B[0..kdim, n0 + 8 nt ..): MT m16 tiles, NT n8 tiles
// (NT even). A_T: A stored [k][m]; B_KN: B stored [k][n] (else [n][k]). NEG negates A.
template <class T, int MT, int NT, bool A_T, bool B_KN, bool NEG = false>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], const T* as, int lda, int m0, const T* bs, int ldb,
                                         int n0, int kdim, int lane) {
  static_assert(NT % 2 == 0, "n tiles come in pairs");
#pragma unroll 2
  for (int k0 = 0; k0 < kdim; k0 += 16) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (A_T) {
        load_a_t<T>(a[mt], as, lda, m0 + 16 * mt, k0, lane);
      } else {
        load_a<T>(a[mt], as, lda, m0 + 16 * mt, k0, lane);
      }
      if constexpr (NEG) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mt][r] ^= 0x80008000u;
      }
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      if constexpr (B_KN) {
        load_b_kn<T>(b, bs, ldb, n0 + 16 * np, k0, lane);
      } else {
        load_b_nk<T>(b, bs, ldb, n0 + 16 * np, k0, lane);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.f;
}

// Stores an accumulator tile as T into shared memory [m][n] (row stride ld).
template <class T, int MT, int NT>
__device__ __forceinline__ void store_acc(const float (&acc)[MT][NT][4], T* s, int ld, int m0, int n0, int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = m0 + 16 * mt + g, c = n0 + 8 * nt + 2 * q;
      *reinterpret_cast<uint32_t*>(s + r * ld + c) = pack2<T>(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<uint32_t*>(s + (r + 8) * ld + c) = pack2<T>(acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// The same in fp32 into device memory (a state slice: d_initial_state, a segment's end state).
template <int MT, int NT>
__device__ __forceinline__ void store_acc_f32(const float (&acc)[MT][NT][4], float* dst, int64_t ld, int m0, int n0,
                                              int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = m0 + 16 * mt + g, c = n0 + 8 * nt + 2 * q;
      *reinterpret_cast<float2*>(dst + r * ld + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(dst + (r + 8) * ld + c) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// Loads an accumulator tile from fp32 device memory (the layout store_acc_f32 writes).
template <int MT, int NT>
__device__ __forceinline__ void load_acc_f32(float (&acc)[MT][NT][4], const float* src, int64_t ld, int m0, int n0,
                                             int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = m0 + 16 * mt + g, c = n0 + 8 * nt + 2 * q;
      const float2 a = *reinterpret_cast<const float2*>(src + r * ld + c);
      const float2 b = *reinterpret_cast<const float2*>(src + (r + 8) * ld + c);
      acc[mt][nt][0] = a.x;
      acc[mt][nt][1] = a.y;
      acc[mt][nt][2] = b.x;
      acc[mt][nt][3] = b.y;
    }
}

// ---- asynchronous global -> shared copies (16 bytes) ----

#ifndef AK_BWD_EMULATE
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif  // AK_BWD_EMULATE

// Copies rows [0, rows) x [0, width) of T from global (row stride gld elements, 16-byte aligned rows)
// into shared (row stride sld); rows in [valid, rows) are zero-filled instead. All threads of the
// block take part (nthreads of them).
template <class T>
__device__ __forceinline__ void tile_load(T* s, int sld, const T* g, int64_t gld, int rows, int valid, int width,
                                          int tid, int nthreads) {
  constexpr int kVec = 16 / sizeof(T);
  const int per_row = width / kVec;
  for (int idx = tid; idx < rows * per_row; idx += nthreads) {
    const int r = idx / per_row, c = (idx - r * per_row) * kVec;
    if (r < valid) {
      cp_async16(s + r * sld + c, g + r * gld + c);
    } else {
      *reinterpret_cast<uint4*>(s + r * sld + c) = make_uint4(0, 0, 0, 0);
    }
  }
}

// Copies a shared tile to global with 16-byte stores.
template <class T>
__device__ __forceinline__ void tile_store(T* g, int64_t gld, const T* s, int sld, int rows, int width, int tid,
                                           int nthreads) {
  constexpr int kVec = 16 / sizeof(T);
  const int per_row = width / kVec;
  for (int idx = tid; idx < rows * per_row; idx += nthreads) {
    const int r = idx / per_row, c = (idx - r * per_row) * kVec;
    *reinterpret_cast<uint4*>(g + r * gld + c) = *reinterpret_cast<const uint4*>(s + r * sld + c);
  }
}

// Sums over the 4 lanes of a quad (the lanes that share an accumulator row).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

}  // namespace ak::linear::cuda::bwd
