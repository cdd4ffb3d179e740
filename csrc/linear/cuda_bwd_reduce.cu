// The last stage of the delta-rule backward, shared by both paths: dq and dk summed over each group
// of value heads (a fixed order, so the result is deterministic), the L2-norm backward
// dx = r (dy - y (y . dy)) with y = x r, r = (|x|^2 + eps)^-1/2, and the dtype conversion. Also the
// zeros for rows no sequence covers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../cuda/runtime.cuh"
#include "cuda_bwd.cuh"
#include "cuda_bwd_elem.cuh"

namespace ak::linear::cuda::bwd {
namespace {

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
      xv[e] = d < K ? to_f(x[d]) : 0.f;
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
    if (d < K) o[d] = from_f<T>(acc[e]);
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

// Rows [first, T) of batch row 0 (varlen calls have B = 1).
template <class T>
__global__ void zero_rows(Problem p, int first) {
  const int t = first + blockIdx.x;
  const T z = from_f<T>(0.f);
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

template <class F>
void by_dtype(int dtype, F&& f) {
  switch (dtype) {
    case AK_FLOAT32:
      f(float{});
      break;
    case AK_FLOAT16:
      f(__half{});
      break;
    case AK_BFLOAT16:
      f(__nv_bfloat16{});
      break;
    default:
      fail(AK_ERR_INVALID_ARGUMENT, "delta_rule_bwd: q must be float32, float16 or bfloat16");
  }
}

}  // namespace

void launch_reduce_dqk(const Problem& p, const float* dq_heads, const float* dk_heads, cudaStream_t stream) {
  const int64_t P = p.padded();
  if (P == 0 || p.HK == 0) return;
  by_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_dqk<T><<<dim3(ak::cuda::ceil_div(P, kWarps), p.HK), kWarps * 32, 0, stream>>>(p, dq_heads, dk_heads);
  });
  ak::cuda::check_launch("delta_bwd: reduce dq, dk");
}

void launch_zero_uncovered(const Problem& p, int first_token, cudaStream_t stream) {
  const int rows = p.map.T - first_token;
  if (rows <= 0) return;
  by_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    zero_rows<T><<<rows, 256, 0, stream>>>(p, first_token);
  });
  ak::cuda::check_launch("delta_bwd: zero uncovered rows");
}

}  // namespace ak::linear::cuda::bwd
