// Hopper (sm_90a) primitives of the linear-attention forward, as inline PTX: wgmma fences and groups,
// the proxy fence between thread stores and wgmma reads, and shared-memory matrix descriptors for the
// 128-byte swizzle. Outside an sm_90a device pass they compile to nothing (the kernels using them
// are only launched on compute capability 9.0).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AK_LINEAR_SM90 1
#else
#define AK_LINEAR_SM90 0
#endif

namespace ak::linear::cuda::fwd::sm90 {

// Orders prior register writes (accumulators, A fragments) before the next wgmma of the warpgroup.
__device__ __forceinline__ void wg_fence() {
#if AK_LINEAR_SM90
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if AK_LINEAR_SM90
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending committed groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wg_wait() {
#if AK_LINEAR_SM90
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Makes this thread's shared-memory writes (st.shared, cp.async) visible to the async proxy that
// wgmma reads through; a barrier after it publishes them to the other threads' wgmma.
__device__ __forceinline__ void fence_proxy_async() {
#if AK_LINEAR_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Pins accumulator registers: the compiler may not move their reads or writes across this point
// (wgmma writes them asynchronously between issue and wait).
template <int kN>
__device__ __forceinline__ void fence_regs(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Descriptor of an operand stored as 128-byte swizzled panels (bits 0-13 address >> 4, 16-29
// leading byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 = 1: 128B swizzle; base offset 0,
// so every tile starts on a 1024-byte boundary).
//   K-major (rows of 64 elements along K): LBO unused (16), SBO = 1024 (8 rows); a 16-wide K step is
//     +32 bytes inside the row, every 4 steps the next panel.
//   MN-major (rows along K, 64 contiguous M or N elements each): LBO = bytes from one 64-element
//     panel of M/N to the next, SBO = 1024 (8 rows of K); a 16-deep K step is +16 rows (2048 bytes).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

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
