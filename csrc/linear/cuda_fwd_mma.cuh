// Tensor-core building blocks of the chunked forward (sm_80 and later, so sm_90 too): asynchronous
// 16-byte copies into shared memory, ldmatrix fragment loads from padded row-major tiles, and the
// m16n8k16 bf16/f16 matrix product with fp32 accumulation.
//
// Fragment layouts (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
//   A 16x16: a[0] = (row g,   cols 2t, 2t+1)   a[1] = (row g+8, cols 2t, 2t+1)
//            a[2] = (row g,   cols 2t+8, +9)   a[3] = (row g+8, cols 2t+8, +9)
//   B 16x8:  b[0] = (rows 2t, 2t+1, col g)     b[1] = (rows 2t+8, 2t+9, col g)
//   C 16x8:  c[0], c[1] = (row g, cols 2t, 2t+1)   c[2], c[3] = (row g+8, cols 2t, 2t+1)
// ldmatrix gives lane l the elements (row l/4, cols 2(l%4), +1) of each 8x8 block, or with .trans
// (rows 2(l%4), +1; col l/4); lanes 8i..8i+7 name the rows of block i.
//
// Tiles live in shared memory row-major with a pitch of (columns * 2 + 16) bytes: eight consecutive
// rows then start in eight different 16-byte bank groups, so ldmatrix and the 4-byte epilogue
// stores are free of bank conflicts without a swizzle.
#pragma once

#include <cstdint>

#include "cuda_fwd_common.cuh"
#include "cuda_fwd_layouts.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define AK_LINEAR_NO_MMA 1  // these paths are never launched below sm_80 (the dispatcher checks)
#endif

namespace ak::linear::cuda::fwd {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- asynchronous copies ----

// Copies 16 bytes global -> shared; with src_bytes == 0 nothing is read and the destination is zeroed.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// ---- ldmatrix ----

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t addr) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t (&r)[2], uint32_t addr) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
#endif
}

// A fragment (16x16) of a row-major tile X at rows r0.., cols c0..: A[m][k] = X[r0 + m][c0 + k].
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t base, int pitch, int r0, int c0, int lane) {
  const int row = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = c0 + ((lane >> 4) & 1) * 8;
  ldsm_x4(a, base + row * pitch + col * 2);
}
// A fragment of a transposed tile: A[m][k] = Z[k0 + k][m0 + m] for a row-major Z.
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], uint32_t base, int pitch, int m0, int k0,
                                             int lane) {
  const int zrow = k0 + (lane & 7) + ((lane >> 4) & 1) * 8;
  const int zcol = m0 + ((lane >> 3) & 1) * 8;
  ldsm_x4_trans(a, base + zrow * pitch + zcol * 2);
}
// Two B fragments (n-tiles n0 and n0 + 8) of B[k][n] = Y[n][k] for a row-major Y ("K^T" operands).
__device__ __forceinline__ void load_b2_nk(uint32_t (&b)[2][2], uint32_t base, int pitch, int k0, int n0,
                                           int lane) {
  const int row = n0 + (lane & 7) + ((lane >> 4) & 1) * 8;
  const int col = k0 + ((lane >> 3) & 1) * 8;
  uint32_t r[4];
  ldsm_x4(r, base + row * pitch + col * 2);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}
// One B fragment of B[k][n] = Y[n][k] (n-tile n0).
__device__ __forceinline__ void load_b1_nk(uint32_t (&b)[2], uint32_t base, int pitch, int k0, int n0, int lane) {
  const int row = n0 + (lane & 7);
  const int col = k0 + ((lane >> 3) & 1) * 8;
  ldsm_x2(b, base + row * pitch + col * 2);
}
// Two B fragments (n-tiles n0 and n0 + 8) of B[k][n] = Z[k][n] for a row-major Z.
__device__ __forceinline__ void load_b2_kn(uint32_t (&b)[2][2], uint32_t base, int pitch, int k0, int n0,
                                           int lane) {
  const int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = n0 + ((lane >> 4) & 1) * 8;
  uint32_t r[4];
  ldsm_x4_trans(r, base + row * pitch + col * 2);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}
// One B fragment of B[k][n] = Z[k][n] (n-tile n0).
__device__ __forceinline__ void load_b1_kn(uint32_t (&b)[2], uint32_t base, int pitch, int k0, int n0, int lane) {
  const int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  ldsm_x2_trans(b, base + row * pitch + n0 * 2);
}

// ---- the product ----

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                        const uint32_t (&b)[2]) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifndef AK_LINEAR_NO_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Stores a 4-byte pair of 16-bit elements into a padded shared tile at (row, col) (col even).
__device__ __forceinline__ void st_pair(unsigned char* tile, int pitch, int row, int col, uint32_t v) {
  *reinterpret_cast<uint32_t*>(tile + row * pitch + col * 2) = v;
}
__device__ __forceinline__ uint32_t ld_pair(const unsigned char* tile, int pitch, int row, int col) {
  return *reinterpret_cast<const uint32_t*>(tile + row * pitch + col * 2);
}

// Copies rows [0, rows) x cols (16-bit elements, cols % 8 == 0) of a strided global matrix into a
// padded shared tile with cp.async, zero-filling rows >= valid (those read nothing). All threads of
// the block take part. `src(r)` gives the address of row r (called only for r < valid).
template <int ROWS, int COLS, int THREADS, class RowPtr>
__device__ __forceinline__ void async_tile(unsigned char* tile, int valid, RowPtr src, int tid) {
  constexpr int kChunks = COLS / 8;  // 16-byte pieces per row
  constexpr int kPitch = tile_pitch(COLS);
  const uint32_t base = smem_addr(tile);
#pragma unroll
  for (int e = tid; e < ROWS * kChunks; e += THREADS) {
    const int r = e / kChunks, c = e - r * kChunks;
    const bool ok = r < valid;
    const unsigned char* g = reinterpret_cast<const unsigned char*>(src(ok ? r : 0)) + c * 16;
    cp_async16(base + r * kPitch + c * 16, g, ok ? 16 : 0);
  }
}

}  // namespace ak::linear::cuda::fwd
