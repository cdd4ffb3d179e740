// The sm_90a primitives of the Hopper kernels, as inline PTX: mbarriers, bulk tensor copies (TMA),
// plain bulk copies and fp32 bulk reductions, wgmma fences and groups, shared-memory matrix
// descriptors and offsets of the 128-byte swizzle, matrix stores, register reallocation and named
// barriers. Outside an sm_90a device pass the instructions compile to nothing (arch/guard.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "arch/guard.h"
#include "arch/sm80.cuh"

namespace ak::arch {

// The shared-memory address of a generic pointer (sm80's smem_addr, under the Hopper kernels' name).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return smem_addr(p); }

// Programmatic dependent launch: a kernel lets the next kernel of its stream start launching (its blocks
// become resident and wait), and that kernel waits until the one before has finished and its writes show.
__device__ __forceinline__ void launch_dependents() { AK_ASM_SM90A("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_prerequisites() { AK_ASM_SM90A("griddepcontrol.wait;\n" ::: "memory"); }

// ---- mbarriers ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  AK_ASM_SM90A("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the copy engine completes them).
__device__ __forceinline__ void fence_barrier_init() {
  AK_ASM_SM90A("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` more to come from the copy engine in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  AK_ASM_SM90A("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  AK_ASM_SM90A("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// True once the phase with the given parity has completed. A fresh barrier is in phase 0, so
// waiting for parity 1 returns at once: producers start on "empty" barriers with parity 1.
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
#if AK_ARCH_SM90A
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
#else
  (void)bar;
  (void)parity;
  return true;
#endif
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- bulk tensor copies ----

// Loads one box of a 4-D tensor map (coordinates innermost first) into shared memory; completion
// is counted in bytes on `bar`. Out-of-bounds elements are filled with zeros (and still counted).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  AK_ASM_SM90A(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Stores one box of shared memory to a 4-D tensor map (coordinates innermost first), as a bulk
// group of this thread (bulk_commit, then bulk_wait_read_all before the box is overwritten).
__device__ __forceinline__ void tma_store_4d(const void* tmap, uint32_t src, int c0, int c1, int c2, int c3) {
  AK_ASM_SM90A("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  AK_ASM_SM90A("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy accesses.
__device__ __forceinline__ void fence_proxy_async() { AK_ASM_SM90A("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- wgmma ----

__device__ __forceinline__ void wgmma_fence() { AK_ASM_SM90A("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { AK_ASM_SM90A("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  AK_ASM_SM90A("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins accumulator registers at this point of the program: the compiler may not move their reads
// or writes across it (the hardware writes them asynchronously between issue and wait).
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

// The dynamic shared memory of a kernel whose TMA tiles use the 128-byte swizzle: its base rounded up
// to the pattern's 1024 bytes (launches allocate 1024 bytes of slack), as an address of the shared
// window and as a pointer.
struct SwizzledSmem {
  uint32_t addr;
  unsigned char* ptr;
};
__device__ __forceinline__ SwizzledSmem swizzled_smem() {
  extern __shared__ __align__(16) unsigned char ak_dynamic_smem[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(ak_dynamic_smem));
  const uint32_t addr = (raw + 1023u) & ~1023u;
  return {addr, ak_dynamic_smem + (addr - raw)};
}

// Zeroes an accumulator array (wgmma accumulators before a first product with scale_d = 1).
template <int kN>
__device__ __forceinline__ void zero_regs(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) r[i] = 0.0f;
}

// Shared-memory matrix descriptor for the 128-byte swizzle (the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B): bits 0-13 start address >> 4, 16-29 leading-dimension byte offset
// >> 4, 32-45 stride-dimension byte offset >> 4, 49-51 base offset (0: every operand starts on a
// 1024-byte boundary of the swizzle pattern), 62-63 swizzle mode (1 = 128B).
//   K-major operand (rows of 64 elements = 128 bytes): LBO unused (1), SBO = 1024 (8 rows).
//   MN-major operand: LBO = bytes from one 64-element panel of the MN dimension to the next,
//   SBO = 1024 (8 rows of K).
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

// ---- plain bulk copies, bulk reductions, transposing matrix stores (the backward) ----

// `bytes` (a multiple of 16) from global to shared memory, completing on the mbarrier.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  AK_ASM_SM90A(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// dst[i] += src[i] for `bytes` / 4 floats, performed at L2 (atomic per element).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  AK_ASM_SM90A("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { AK_ASM_SM90A("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until this thread's committed bulk operations have finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read_all() {
  AK_ASM_SM90A("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until this thread's committed bulk operations are complete (their writes performed).
__device__ __forceinline__ void bulk_wait_all() { AK_ASM_SM90A("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Four 8x8 16-bit matrices, transposed on the way: lane l's register i holds row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of matrix i; lane 8 i + r gives the address of stored row r of
// matrix i (which receives column r).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  AK_ASM_SM90A("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ---- warp specialisation ----

template <int kRegs>
__device__ __forceinline__ void regs_increase() { AK_ASM_SM90A("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void regs_decrease() { AK_ASM_SM90A("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }

// Named barriers (id 0 is __syncthreads): bar.sync waits, bar.arrive signals without waiting.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}


// Stores four 8x8 16-bit matrices from mma fragment registers (thread l holds row l / 4, columns
// 2 (l % 4) and + 1 of each); lanes 8 m .. 8 m + 7 give the row addresses of matrix m.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  AK_ASM_SM90A("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// dst[0..3] += a, b, c, d with one 16-byte vector reduction at L2.
__device__ __forceinline__ void red_add_v4(float* dst, float a, float b, float c, float d) {
  AK_ASM_SM90A("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}

// Shared-memory accesses by address (the swizzled tiles are addressed as integers).
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_s32(uint32_t addr, int v) {
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// ---- the 128-byte swizzle ----
// Element (r, c) of a tile of R rows stored as 128-byte panels of 64 columns lies at
// (c / 64) * 128 R + 128 r + 16 ((c % 64 / 8) ^ (r % 8)) + 2 (c % 8) (the layout TMA writes and wgmma reads).

// Byte offset of element (r, c) in a tile of `rows` rows.
__device__ __forceinline__ uint32_t sw128_offset(int rows, int r, int c) {
  return static_cast<uint32_t>((c >> 6) * rows * 128 + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2);
}
// Descriptor advance (16-byte units) for K step kk (16 columns) of a K-major operand of `rows` rows.
__device__ __forceinline__ uint64_t kmajor_step(int rows, int kk) {
  return static_cast<uint64_t>(((kk >> 2) * rows * 128 + (kk & 3) * 32) >> 4);
}
// Descriptor advance for K step kk (16 rows) of an MN-major operand.
__device__ __forceinline__ uint64_t mnmajor_step(int kk) { return static_cast<uint64_t>((kk * 16 * 128) >> 4); }

}  // namespace ak::arch
