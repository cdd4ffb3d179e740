// Fragment loads from padded row-major tiles in shared memory, addressed in bytes (the chunked
// forward's kernels), and the asynchronous tile copy that fills them. Fragment layouts: arch/sm80.cuh.
//
// Tiles live in shared memory row-major with a pitch of (columns * 2 + 16) bytes (tile_pitch): eight
// consecutive rows then start in eight different 16-byte bank groups, so ldmatrix and the 4-byte
// epilogue stores are free of bank conflicts without a swizzle.
#pragma once

#include <cstdint>

#include "arch/sm80.cuh"
#include "linear/common/padded.h"

namespace ak::linear::cuda {

using namespace ::ak::arch;

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

}  // namespace ak::linear::cuda
