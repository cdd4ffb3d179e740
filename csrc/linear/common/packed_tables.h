// The device tables of a chunked call (ChunkMap, chunk_map.cuh), for every chunked linear-attention
// dispatch: nothing for fixed-length calls; for a packed call, tables sized by its capacity and built on
// the device from cu_seqlens, after a device check of the offsets when a graph is being captured (the
// entry did not read them back then).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/backend.h"
#include "cuda/runtime.cuh"
#include "linear/common/chunk_map.cuh"
#include "linear/problem.h"

namespace ak::linear::cuda {

struct ChunkTables {
  ChunkMap map;
  int chunks = 0;  // of the whole call: B rows of ceil(T / C), or a packed call's capacity
  std::unique_ptr<ak::cuda::Scratch> scratch;

  // `label` names the call in a failed device check's message.
  ChunkTables(const DeltaProblem& p, int C, cudaStream_t stream, const char* label) {
    map.T = static_cast<int>(p.T);
    map.C = C;
    map.NC = static_cast<int>((p.T + C - 1) / C);
    const int64_t capacity = p.chunk_capacity(C);
    require(capacity < (int64_t{1} << 31) - 1, std::string(label) + " on CUDA: too many chunks for one call");
    chunks = static_cast<int>(capacity);
    if (!p.varlen) return;
    const ak::cuda::DeviceCheck* check =
        p.offsets_on_device
            ? ak::cuda::capture_pool_check(p.device_index, nullptr, 0, 0, p.cu_seqlens, p.T, label, true)
            : nullptr;
    const int N = static_cast<int>(p.N);
    scratch = std::make_unique<ak::cuda::Scratch>(p.device_index,
                                                  (static_cast<size_t>(N) + chunks + 1) * sizeof(int4));
    int4* tables = scratch->as<int4>();
    map.seq = tables;
    map.chunk = tables + N;
    launch_chunk_tables(static_cast<const int32_t*>(p.cu_seqlens->data), N, C, chunks, tables, tables + N, stream,
                        check);
  }
};

// The tokens past a packed call's last offset, which no sequence covers (a backward zeroes their
// gradients): none for a fixed-length call; from the host's copy of the offsets; or, in a capture, from
// the device's (the kernels read cu_seqlens[N] themselves, clamped to [0, T]).
struct UncoveredTail {
  bool any = false;                  // whether any token can be uncovered (launch the zeroing)
  int first = 0;                     // the first uncovered token, when known on the host
  const int32_t* first_at = nullptr; // else where the device holds it
};

inline UncoveredTail uncovered_tail(const DeltaProblem& p) {
  UncoveredTail u;
  if (!p.varlen) return u;
  if (p.offsets_on_device) {
    u.any = p.T > 0;
    u.first_at = static_cast<const int32_t*>(p.cu_seqlens->data) + p.N;
    return u;
  }
  u.first = static_cast<int>(p.seq_start[static_cast<size_t>(p.N)]);
  u.any = u.first < p.T;
  return u;
}

}  // namespace ak::linear::cuda
