// Host-side views of a call for the gated linear family's and KDA's chunked CUDA kernels: token-major
// views of the C tensors, their alignment, and the device tables of a packed call's chunks.
#pragma once

#include <cstdint>
#include <memory>

#include "core/common.h"
#include "cuda/runtime.cuh"
#include "linear/gla/cuda/params.h"
#include "linear/problem.h"

namespace ak::linear::cuda::gla {

template <class T>
inline Rows<const T> rows_in(const ak_tensor* t) {
  if (t == nullptr) return {};
  return {static_cast<const T*>(t->data), t->strides[0], t->strides[1], t->strides[2]};
}
template <class T>
inline Rows<T> rows_out(const ak_tensor* t) {
  if (t == nullptr) return {};
  return {static_cast<T*>(t->data), t->strides[0], t->strides[1], t->strides[2]};
}

inline float* f32(const ak_tensor* t) { return t ? static_cast<float*>(t->data) : nullptr; }

// Rows of 16-byte pieces: the base 16-byte aligned, every step of the token-major view too.
inline bool aligned_rows(const ak_tensor* t) {
  if (t == nullptr) return true;
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(t->dtype));
  if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  for (int i = 0; i + 1 < t->rank; ++i) {
    if (t->shape[i] > 1 && t->strides[i] % per16 != 0) return false;
  }
  return true;
}

// Device tables of a packed call's sequences and chunks (chunk_map.cuh); nothing without cu_seqlens.
struct MapTables {
  ChunkMap map;
  int chunks = 0;  // of the whole call
  std::unique_ptr<ak::cuda::Scratch> scratch;
  MapTables(const DeltaProblem& p, cudaStream_t stream) {
    map.T = static_cast<int>(p.T);
    map.C = kChunk;
    map.NC = static_cast<int>((p.T + kChunk - 1) / kChunk);
    if (!p.varlen) {
      chunks = static_cast<int>(p.N) * map.NC;
      return;
    }
    for (int64_t n = 0; n < p.N; ++n) chunks += static_cast<int>((p.end(n) - p.begin(n) + kChunk - 1) / kChunk);
    const int N = static_cast<int>(p.N);
    scratch = std::make_unique<ak::cuda::Scratch>(p.device_index, (static_cast<size_t>(N) + chunks + 1) * sizeof(int4));
    int4* tables = scratch->as<int4>();
    map.seq = tables;
    map.chunk = tables + N;
    launch_chunk_tables(static_cast<const int32_t*>(p.cu_seqlens->data), N, kChunk, tables, tables + N, stream);
  }
};

// The forward's views and sizes common to the family and KDA: q, k, v, the output, the sequences,
// the initial and final states (decays and saved states are the caller's).
template <class T>
FwdParams<T> forward_params(const DeltaProblem& p, const MapTables& tables, const ak_tensor* q, const ak_tensor* k,
                            const ak_tensor* v, const ak_tensor* output, const ak_tensor* initial_state,
                            const ak_tensor* final_state) {
  FwdParams<T> fp;
  fp.q = rows_in<T>(q);
  fp.k = rows_in<T>(k);
  fp.v = rows_in<T>(v);
  fp.o = rows_out<T>(output);
  fp.map = tables.map;
  fp.initial_state = f32(initial_state);
  fp.final_state = f32(final_state);
  fp.N = static_cast<int>(p.N);
  fp.H = static_cast<int>(p.H);
  fp.group = static_cast<int>(p.group());
  fp.K = static_cast<int>(p.K);
  fp.V = static_cast<int>(p.V);
  fp.scale = static_cast<float>(p.scale);
  return fp;
}

}  // namespace ak::linear::cuda::gla
