// Which tokens each sequence and each chunk of a call covers, for every chunked linear-attention
// kernel. Fixed length: sequence n is batch row n, tokens [0, T), chunks n NC .. n NC + NC - 1.
// Varlen (packed, B = 1): the tables built on the device from cu_seqlens by launch_chunk_tables, so
// a kernel finds a sequence or a chunk with one 16-byte load. A packed call's work is sized by its
// capacity (DeltaProblem::chunk_capacity: what any offsets over T tokens and N sequences can need),
// never by the offsets themselves, so a call plans without reading them back and a graph captured once
// replays for any offsets: the chunks past the live ones are empty (length 0) and every kernel skips
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_check.h"

namespace ak::linear::cuda {

struct ChunkMap {
  const int4* seq = nullptr;    // varlen: per sequence {row 0, begin, end, first chunk}
  const int4* chunk = nullptr;  // varlen: per chunk {row 0, first token, length, sequence}
  int T = 0;                    // tokens per batch row
  int NC = 0;                   // fixed length: chunks per sequence
  int C = 64;                   // tokens per chunk

  // {row, begin, end, first chunk} of sequence n.
  __device__ __forceinline__ int4 seq_of(int n) const {
    if (seq != nullptr) return seq[n];
    return make_int4(n, 0, T, n * NC);
  }
  // {row, first token, length (1 .. C), sequence} of chunk g.
  __device__ __forceinline__ int4 chunk_of(int g) const {
    if (chunk != nullptr) return chunk[g];
    const int n = g / NC, t0 = (g - n * NC) * C;
    return make_int4(n, t0, min(C, T - t0), n);
  }
  __device__ __forceinline__ void sequence(int n, int& row, int& begin, int& end, int& first) const {
    const int4 s = seq_of(n);
    row = s.x, begin = s.y, end = s.z, first = s.w;
  }
  __device__ __forceinline__ void chunk_rows(int g, int& row, int& t0, int& len) const {
    const int4 c = chunk_of(g);
    row = c.x, t0 = c.y, len = c.z;
  }
  // The chunks before the first empty one, of `all` (a packed table's capacity, whose count sits in
  // entry `all`): what a persistent kernel walks.
  __device__ __forceinline__ int live_chunks(int all) const {
    return chunk != nullptr ? min(all, chunk[all].x) : all;
  }
};

// Builds the varlen tables of ChunkMap from the device copy of cu_seqlens ([N + 1]): seq [N] and
// chunk [capacity + 1] (capacity = DeltaProblem::chunk_capacity(C)): the live chunks of C tokens, then
// empty ones {0, 0, 0, 0}, then the live count in entry `capacity`. Under a graph's device check (offsets checked on
// the device, not read back) a failed check leaves every sequence and chunk empty: nothing is computed
// from bad offsets.
void launch_chunk_tables(const int32_t* cu, int N, int C, int capacity, int4* seq, int4* chunk, cudaStream_t stream,
                         const ak::cuda::DeviceCheck* check = nullptr);

}  // namespace ak::linear::cuda
