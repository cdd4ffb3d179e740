// Warp-level tensor-core helpers over shared-memory tiles addressed as typed pointers with a row
// stride in elements (the chunked backward's kernels): fragment loads, the tiled warp product, and
// accumulator and tile copies. Fragment layouts: arch/sm80.cuh.
//
// Tiles live in shared memory row-major with a row stride of (width + 8) elements: 16 bytes more
// than a multiple of 128, so the 8 rows of every ldmatrix fall into distinct banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "arch/sm80.cuh"

namespace ak::linear::cuda {

using namespace ::ak::arch;

// A fragment (16 x 16 at rows m0, columns k0) of a matrix stored [m][k].
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  ldsm_x4(a, s + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3));
}
// A fragment of A = S^T where S is stored [k][m].
template <class T>
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const T* s, int ld, int m0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  ldsm_x4_trans(a, s + (k0 + r + ((mat >> 1) << 3)) * ld + m0 + ((mat & 1) << 3));
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
  ldsm_x4_trans(b, s + (k0 + r + ((mat & 1) << 3)) * ld + n0 + ((mat >> 1) << 3));
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

// Stores an accumulator tile as T into shared memory [m][n] (row stride ld).
template <class T, int MT, int NT>
__device__ __forceinline__ void store_acc(const float (&acc)[MT][NT][4], T* s, int ld, int m0, int n0, int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
    *reinterpret_cast<uint32_t*>(s + r * ld + c) = pack2<T>(v[0], v[1]);
  });
}

// The same in fp32 into device memory (a state slice: d_initial_state, a segment's end state).
template <int MT, int NT>
__device__ __forceinline__ void store_acc_f32(const float (&acc)[MT][NT][4], float* dst, int64_t ld, int m0, int n0,
                                              int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
    *reinterpret_cast<float2*>(dst + r * ld + c) = make_float2(v[0], v[1]);
  });
}

// Loads an accumulator tile from fp32 device memory (the layout store_acc_f32 writes).
template <int MT, int NT>
__device__ __forceinline__ void load_acc_f32(float (&acc)[MT][NT][4], const float* src, int64_t ld, int m0, int n0,
                                             int lane) {
  for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, float* v) {
    const float2 x = *reinterpret_cast<const float2*>(src + r * ld + c);
    v[0] = x.x;
    v[1] = x.y;
  });
}

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

}  // namespace ak::linear::cuda
