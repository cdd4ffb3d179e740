// Hopper (sm_90a) primitives of the linear-attention forward, as inline PTX: the wgmma fences and groups,
// the proxy fence and the 128-byte-swizzle descriptors are attention's (../attention/cuda_sm90_ptx.cuh);
// this file adds the offsets of the swizzled layout, the descriptor steps and the matrix store the
// linear kernels use. Outside an sm_90a device pass they compile to nothing (the kernels using them
// are only launched on compute capability 9.0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../attention/cuda_sm90_ptx.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AK_LINEAR_SM90 1
#else
#define AK_LINEAR_SM90 0
#endif

namespace ak::linear::cuda::fwd::sm90 {

using attention::cuda::sm90::fence_proxy_async;
using attention::cuda::sm90::fence_regs;
using attention::cuda::sm90::wgmma_commit;
using attention::cuda::sm90::wgmma_fence;
using attention::cuda::sm90::wgmma_wait;
// Operand descriptors for the 128-byte swizzle, as the linear kernels use them (every tile starts on a
// 1024-byte boundary):
//   K-major (rows of 64 elements along K): SBO = 1024 (8 rows); a 16-wide K step is +32 bytes inside the
//     row, every 4 steps the next panel (kmajor_step).
//   MN-major (rows along K, 64 contiguous M or N elements each): LBO = bytes from one 64-element panel of
//     M/N to the next, SBO = 1024 (8 rows of K); a 16-deep K step is +16 rows, 2048 bytes (mnmajor_step).
using attention::cuda::sm90::make_desc_sw128;

// Stores four 8x8 16-bit matrices from mma fragment registers (thread l holds row l / 4, columns
// 2 (l % 4) and + 1 of each); lanes 8 m .. 8 m + 7 give the row addresses of matrix m.
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if AK_LINEAR_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
#endif
}

// Byte offset of element (r, c) in a tile of `rows` rows stored as 128-byte swizzled panels.
__device__ __forceinline__ uint32_t sw128_offset(int rows, int r, int c) {
  return static_cast<uint32_t>((c >> 6) * rows * 128 + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2);
}

// Descriptor advance (in 16-byte units) for K step kk of a K-major operand with `rows` rows per panel.
__device__ __forceinline__ uint64_t kmajor_step(int rows, int kk) {
  return static_cast<uint64_t>(((kk >> 2) * rows * 128 + (kk & 3) * 32) >> 4);
}
// Descriptor advance for K step kk (16 rows) of an MN-major operand.
__device__ __forceinline__ uint64_t mnmajor_step(int kk) { return static_cast<uint64_t>((kk * 16 * 128) >> 4); }

}  // namespace ak::linear::cuda::fwd::sm90
