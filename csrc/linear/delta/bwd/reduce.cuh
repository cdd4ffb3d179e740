// Kernels of the last stage of the delta-rule backward (group sum, L2-norm backward, zeros for
// uncovered rows); see reduce.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "linear/delta/bwd/problem.cuh"

namespace ak::linear::cuda::bwd {
namespace reduce_detail {

constexpr int kWarps = 8;
constexpr int kPerLane = 8;  // K <= 256

template <class T>
__device__ void reduce_row(const Problem& p, const float* heads, RowView in, OutView out, int hk, int64_t pr,
                           int row, int t, int lane) {
  const int K = p.K;
  const int64_t P = p.padded();
  float acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    float s = 0.f;
    if (d < K) {
      for (int j = 0; j < p.group; ++j) {
        s += heads[((static_cast<int64_t>(hk) * p.group + j) * P + pr) * K + d];
      }
    }
    acc[e] = s;
  }
  if (p.l2norm) {
    const T* x = static_cast<const T*>(in.p) + in.offset(row, t, hk);
    float xv[kPerLane];
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      xv[e] = d < K ? to_float(x[d]) : 0.f;
      ss += xv[e] * xv[e];
    }
    const float r = rsqrtf(warp_sum(ss) + kL2NormEps);
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) dot += xv[e] * r * acc[e];
    dot = warp_sum(dot);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = r * (acc[e] - xv[e] * r * dot);
  }
  T* o = static_cast<T*>(out.p) + out.offset(row, t, hk);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < K) o[d] = from_float<T>(acc[e]);
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) reduce_dqk(Problem p, const float* dq_heads, const float* dk_heads) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t pr = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int hk = blockIdx.y;
  if (pr >= p.padded()) return;
  const int C = p.C;
  const int g = static_cast<int>(pr / C), r = static_cast<int>(pr - static_cast<int64_t>(g) * C);
  const int4 ci = p.map.chunk_of(g);
  if (r >= ci.z) return;
  reduce_row<T>(p, dq_heads, p.q, p.dq, hk, pr, ci.x, ci.y + r, lane);
  reduce_row<T>(p, dk_heads, p.k, p.dk, hk, pr, ci.x, ci.y + r, lane);
}

// The same for K a multiple of 4 (fp32 rows of 16-byte aligned float4s): lane l owns columns
// 4l .. 4l + 3 (and 128 + 4l .. for K > 128), every head of the group is loaded before any sum, and
// warps stride over the rows (head-major, so neighbouring warps read neighbouring rows).
template <class T>
__device__ __forceinline__ void reduce_row_vec(const Problem& p, const float* heads, RowView in, OutView out, int hk,
                                               int64_t pr, int row, int t, int lane) {
  const int K = p.K;
  const int64_t P = p.padded();
  float acc[2][4] = {};
#pragma unroll 4
  for (int j = 0; j < p.group; ++j) {
    const float* src = heads + ((static_cast<int64_t>(hk) * p.group + j) * P + pr) * K;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = 4 * lane + 128 * e;
      if (d < K) {
        const float4 v = *reinterpret_cast<const float4*>(src + d);
        acc[e][0] += v.x;
        acc[e][1] += v.y;
        acc[e][2] += v.z;
        acc[e][3] += v.w;
      }
    }
  }
  if (p.l2norm) {
    const T* x = static_cast<const T*>(in.p) + in.offset(row, t, hk);
    float xv[2][4];
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = 4 * lane + 128 * e + i;
        xv[e][i] = d < K ? to_float(x[d]) : 0.f;
        ss += xv[e][i] * xv[e][i];
      }
    const float r = rsqrtf(warp_sum(ss) + kL2NormEps);
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) dot += xv[e][i] * r * acc[e][i];
    dot = warp_sum(dot);
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[e][i] = r * (acc[e][i] - xv[e][i] * r * dot);
  }
  T* o = static_cast<T*>(out.p) + out.offset(row, t, hk);
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = 4 * lane + 128 * e + i;
      if (d < K) o[d] = from_float<T>(acc[e][i]);
    }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) reduce_dqk_vec(Problem p, const float* dq_heads, const float* dk_heads) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t P = p.padded(), rows = P * p.HK;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t wr = static_cast<int64_t>(blockIdx.x) * kWarps + warp; wr < rows; wr += stride) {
    const int hk = static_cast<int>(wr / P);
    const int64_t pr = wr - static_cast<int64_t>(hk) * P;
    const int g = static_cast<int>(pr / p.C), r = static_cast<int>(pr - static_cast<int64_t>(g) * p.C);
    const int4 ci = p.map.chunk_of(g);
    if (r >= ci.z) continue;
    reduce_row_vec<T>(p, dq_heads, p.q, p.dq, hk, pr, ci.x, ci.y + r, lane);
    reduce_row_vec<T>(p, dk_heads, p.k, p.dk, hk, pr, ci.x, ci.y + r, lane);
  }
}

// Rows [first, T) of batch row 0 (varlen calls have B = 1); first read from first_at when given
// (a captured call's cu_seqlens[N], clamped to [0, T]: the grid then covers all T rows).
template <class T>
__global__ void zero_rows(Problem p, int first, const int32_t* first_at) {
  if (first_at != nullptr) first = min(max(*first_at, 0), p.map.T);
  const int t = first + blockIdx.x;
  if (t >= p.map.T) return;
  const T z = from_float<T>(0.f);
  for (int idx = threadIdx.x; idx < p.HK * p.K; idx += blockDim.x) {
    const int hk = idx / p.K, d = idx - hk * p.K;
    static_cast<T*>(p.dq.p)[p.dq.offset(0, t, hk) + d] = z;
    static_cast<T*>(p.dk.p)[p.dk.offset(0, t, hk) + d] = z;
  }
  for (int idx = threadIdx.x; idx < p.H * p.V; idx += blockDim.x) {
    const int h = idx / p.V, e = idx - h * p.V;
    static_cast<T*>(p.dv.p)[p.dv.offset(0, t, h) + e] = z;
  }
  for (int h = threadIdx.x; h < p.H; h += blockDim.x) {
    static_cast<float*>(p.dbeta.p)[p.dbeta.offset(0, t, h)] = 0.f;
    if (p.dg.p != nullptr) static_cast<float*>(p.dg.p)[p.dg.offset(0, t, h)] = 0.f;
  }
}

}  // namespace reduce_detail
}  // namespace ak::linear::cuda::bwd
