// Hopper primitives the attention backward needs beyond cuda_sm90_ptx.cuh: plain (non-tensor) bulk
// copies into shared memory, bulk fp32 reductions from shared into global memory with their group
// waits, and the transposing 8x8 matrix store. Empty outside an sm_90a device pass, like the rest
// of the Hopper kernel.
#pragma once

#include <cstdint>

#include "cuda_sm90_ptx.cuh"  // AK_SM90_ENABLED

namespace ak::attention::cuda::bwd {

// `bytes` (a multiple of 16) from global to shared memory, completing on the mbarrier.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if AK_SM90_ENABLED
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// dst[i] += src[i] for `bytes` / 4 floats, performed at L2 (atomic per element).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
#if AK_SM90_ENABLED
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void bulk_commit() {
#if AK_SM90_ENABLED
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until this thread's committed bulk operations have finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read_all() {
#if AK_SM90_ENABLED
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}

// Waits until this thread's committed bulk operations are complete (their writes performed).
__device__ __forceinline__ void bulk_wait_all() {
#if AK_SM90_ENABLED
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// Four 8x8 16-bit matrices, transposed on the way: lane l's register i holds row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of matrix i; lane 8 i + r gives the address of stored row r of
// matrix i (which receives column r).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if AK_SM90_ENABLED
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

}  // namespace ak::attention::cuda::bwd
