// The fused bidirectional forward of feature-map linear attention: with X = the features of a row
// (phi(x), or [phi(x) cos_t, phi(x) sin_t] under cosformer weights; F columns) and a sequence's
// sums Y = sum_t X(k_t)^T [v_t | 1] (F x (V + 1), float32, in a workspace), each query row's output
// is X(q_t) Y[:, :V] / (X(q_t) Y[:, V] + eps), or X(q_t) Y[:, :V] without the normaliser. Two
// passes over the sequence (the sums, then every query against them) instead of the chunked
// kernel's two calls around four element-wise stages.
#pragma once

#include <cstdint>

#include "linear/feature_map/rows.h"

namespace ak::linear::feature_map {

struct BidirectionalArgs {
  FloatView q, k, v, out;       // [B, T, H, *] (token_dim 1) or [B, H, T, *] (token_dim 2)
  float* sums = nullptr;        // [B, H, F, V + 1] float32 contiguous; the backend zeroes it
  const float* cos = nullptr;   // [T] or null (then sin is null too)
  const float* sin = nullptr;
  int64_t batch = 0, tokens = 0, heads = 0, k_dim = 0, features = 0, v_dim = 0;
  int token_dim = 1;
  int phi = 0;
  bool normalised = true;
  float eps = 0.f;
  int device = 0;

  // Element strides of batch, token and head in a view (its last dim holds the columns).
  AK_HD int64_t batch_stride(const FloatView& t) const { return t.s[0]; }
  AK_HD int64_t token_stride(const FloatView& t) const { return t.s[token_dim]; }
  AK_HD int64_t head_stride(const FloatView& t) const { return t.s[3 - token_dim]; }
  AK_HD int64_t row(const FloatView& t, int64_t b, int64_t tok, int64_t h) const {
    return b * batch_stride(t) + tok * token_stride(t) + h * head_stride(t);
  }
};

// The backward: the gradients of q, k and v for the forward `forward` (whose out is not read) from
// d_output; the workspaces are the backend's (sums and d_sums [B, H, F, V + 1] float32, r_rows
// [B, H, T, V] in the data's dtype, dd [B, H, T] float32), zeroed or written by it.
struct BidirectionalGradArgs {
  BidirectionalArgs forward;
  FloatView d_output, dq, dk, dv;
  float* d_sums = nullptr;
  void* r_rows = nullptr;
  float* dd = nullptr;
};

// A view the kernels read in 16-byte pieces: the dtype given, unit column stride, the other strides
// multiples of 8 elements and 16-byte aligned data.
inline bool vector_view(const FloatView& t, int32_t dtype) {
  bool ok = t.dtype == dtype && t.s[3] == 1 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  for (int d = 0; d < 3; ++d) ok = ok && t.s[d] % 8 == 0;
  return ok;
}

// Whether the CUDA kernels serve a call (else the entry refuses it and the caller takes the chunked
// path): 16-bit data, F and V multiples of 64, and q, k, v, out vector views.
inline bool bidirectional_cuda_serves(const BidirectionalArgs& a) {
  const int32_t dtype = a.q.dtype;
  return (dtype == AK_FLOAT16 || dtype == AK_BFLOAT16) && a.features % 64 == 0 && a.v_dim % 64 == 0 &&
         vector_view(a.q, dtype) && vector_view(a.k, dtype) && vector_view(a.v, dtype) && vector_view(a.out, dtype);
}

// The backward's CUDA kernels also need K a multiple of 64 and V of 64 or 128 (one value tile a row).
inline bool bidirectional_grad_cuda_serves(const BidirectionalGradArgs& g) {
  const BidirectionalArgs& a = g.forward;
  const int32_t dtype = a.q.dtype;
  return bidirectional_cuda_serves(a) && a.k_dim % 64 == 0 && (a.v_dim == 64 || a.v_dim == 128) &&
         vector_view(g.d_output, dtype) && vector_view(g.dq, dtype) && vector_view(g.dk, dtype) &&
         vector_view(g.dv, dtype);
}

}  // namespace ak::linear::feature_map
