// Where chunk c of one state-pass job (a sequence or a segment of one, a value head, a V tile) reads
// its inputs, for the three state kernels: tokens [t0, t0 + len) of q and k (rows past the job's
// end load as zeros), and the prep stage's per-chunk rows of w and u and its gc and 1 / |k| vectors.
#pragma once

#include <cstdint>

#include "arch/sm80.cuh"
#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda::fwd {

template <class T, int D>
struct ChunkSources {
  const StateParams<T>& p;
  int row, begin, end, first, h, hk, vt0;

  __device__ __forceinline__ int t0(int c) const { return begin + 64 * c; }
  __device__ __forceinline__ int len(int c) const { return min(64, end - t0(c)); }
  __device__ __forceinline__ const T* q(int c) const { return p.q.row(row, t0(c), hk); }
  __device__ __forceinline__ const T* k(int c) const { return p.k.row(row, t0(c), hk); }
  // Chunk c's first row in the prep stage's [chunks * H * 64] layouts.
  __device__ __forceinline__ int64_t prep_row(int c) const { return (static_cast<int64_t>(first + c) * p.H + h) * 64; }
  __device__ __forceinline__ const T* w(int c) const { return p.w + prep_row(c) * D; }
  __device__ __forceinline__ const T* u(int c) const { return p.u + prep_row(c) * D + vt0; }

  // gc and (with the L2 norm) 1 / |k| of chunk c into their 256-byte slots with cp.async, by threads
  // 0-15 and 16-31 of the calling group.
  __device__ __forceinline__ void load_vectors(int c, uint32_t gate_slot, uint32_t rk_slot, int tid) const {
    const int64_t vec = prep_row(c);
    if (tid < 16) {
      ::ak::arch::cp_async16(gate_slot + tid * 16, p.gc + vec + tid * 4, 16);
    } else if (tid < 32 && p.l2norm) {
      ::ak::arch::cp_async16(rk_slot + (tid - 16) * 16, p.rk + vec + (tid - 16) * 4, 16);
    }
  }
};

// Chunk c's tiles in shared memory: q, w and k (shared-window addresses), u, and the gc and 1 / |k|
// vectors. Lay names the regions (kQ, kW, kK, kU, kGate, kRk; tiles of kTileD / kTileV bytes); k and
// the vectors alternate between two buffers, q, w and u between kQwuBuffers.
struct ChunkTiles {
  uint32_t q, w, k;
  const unsigned char* u;
  const float* gc;
  const float* rk;
};

template <class Lay, int kQwuBuffers>
__device__ __forceinline__ ChunkTiles chunk_tiles(const unsigned char* base, uint32_t sbase, int c) {
  const int kb = c & 1, qb = kQwuBuffers == 2 ? (c & 1) : 0;
  return {sbase + Lay::kQ + qb * Lay::kTileD,
          sbase + Lay::kW + qb * Lay::kTileD,
          sbase + Lay::kK + kb * Lay::kTileD,
          base + Lay::kU + qb * Lay::kTileV,
          reinterpret_cast<const float*>(base + Lay::kGate + kb * 256),
          reinterpret_cast<const float*>(base + Lay::kRk + kb * 256)};
}

// The cp.async pipeline of the mma.sync and wgmma state kernels: k, gc and 1 / |k| in two buffers,
// q, w and u in kQwuBuffers (with one, the kernel reloads them itself once read). issue_k(c, buffer)
// and issue_qwu(c, buffer) issue chunk c's copies; each call below ends with one commit.
template <class IssueK, class IssueQwu>
__device__ __forceinline__ void issue_first_chunk(int chunks, IssueK&& issue_k, IssueQwu&& issue_qwu) {
  if (chunks > 0) {
    issue_k(0, 0);
    issue_qwu(0, 0);
  }
  ::ak::arch::cp_async_commit();
}

// At chunk c, once every thread is past chunk c - 1: chunk c + 1 into the buffers chunk c leaves free.
template <int kQwuBuffers, class IssueK, class IssueQwu>
__device__ __forceinline__ void issue_next_chunk(int c, int chunks, IssueK&& issue_k, IssueQwu&& issue_qwu) {
  if (c + 1 < chunks) {
    issue_k(c + 1, (c & 1) ^ 1);
    if constexpr (kQwuBuffers == 2) issue_qwu(c + 1, (c & 1) ^ 1);
  }
  ::ak::arch::cp_async_commit();
}

}  // namespace ak::linear::cuda::fwd
