// Host-side views of a call for the gated linear family's and KDA's chunked CUDA kernels: token-major
// views of the C tensors and their alignment.
#pragma once

#include <cstdint>
#include <memory>

#include "core/common.h"
#include "cuda/runtime.cuh"
#include "linear/common/packed_tables.h"
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

// The forward's views and sizes common to the family and KDA: q, k, v, the output, the sequences,
// the initial and final states (decays and saved states are the caller's).
template <class T>
FwdParams<T> forward_params(const DeltaProblem& p, const ChunkTables& tables, const ak_tensor* q, const ak_tensor* k,
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
