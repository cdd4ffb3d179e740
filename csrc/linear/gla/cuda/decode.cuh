// One decode step of the gated linear family: a block per (sequence, value head) streams its fp32
// state once, S' = diag(exp(gk + g + gamma)) S + k v^T and o = S'^T (scale q), with W consecutive
// value columns per thread (16-byte loads when V % 4 == 0) and the rows split between thread groups
// whose partial outputs meet in shared memory. Memory-bound: the state is read and written once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::gla {

using namespace ::ak::arch;

constexpr int kDecodeThreads = 256;

template <class T, int W>
__global__ void __launch_bounds__(kDecodeThreads) gla_decode_kernel(const DecodeParams<T> p) {
  __shared__ float qs[256], ks[256], as[256];
  __shared__ float red[kDecodeThreads * W];
  const int b = blockIdx.x, h = blockIdx.y, hk = h / p.group, tid = threadIdx.x;
  const float common = (p.g ? p.g[b * p.gb + h * p.gh] : 0.f) + (p.gamma ? p.gamma[h] : 0.f);
  for (int r = tid; r < p.K; r += kDecodeThreads) {
    qs[r] = to_float(p.q[b * p.qb + hk * p.qh + r]);
    ks[r] = to_float(p.k[b * p.kb + hk * p.kh + r]);
    as[r] = __expf(common + (p.gk ? p.gk[b * p.gkb + h * p.gkh + r] : 0.f));
  }
  __syncthreads();
  const int cols = p.V / W;
  const int groups = kDecodeThreads / cols;
  const int c = tid % cols, grp = tid / cols;
  const int64_t base = (static_cast<int64_t>(b) * p.H + h) * p.K * p.V;
  float vv[W], acc[W];
#pragma unroll
  for (int w = 0; w < W; ++w) {
    vv[w] = to_float(p.v[b * p.vb + h * p.vh + c * W + w]);
    acc[w] = 0.f;
  }
  if (grp < groups) {
    for (int r = grp; r < p.K; r += groups) {
      const int64_t off = base + static_cast<int64_t>(r) * p.V + c * W;
      float s[W];
      if constexpr (W == 4) {
        const float4 x = *reinterpret_cast<const float4*>(p.state + off);
        s[0] = x.x, s[1] = x.y, s[2] = x.z, s[3] = x.w;
      } else {
        s[0] = p.state[off];
      }
#pragma unroll
      for (int w = 0; w < W; ++w) {
        s[w] = as[r] * s[w] + ks[r] * vv[w];
        acc[w] += s[w] * qs[r];
      }
      if constexpr (W == 4) {
        *reinterpret_cast<float4*>(p.new_state + off) = make_float4(s[0], s[1], s[2], s[3]);
      } else {
        p.new_state[off] = s[0];
      }
    }
  }
#pragma unroll
  for (int w = 0; w < W; ++w) red[tid * W + w] = grp < groups ? acc[w] : 0.f;
  __syncthreads();
  if (grp == 0) {
    for (int j = 1; j < groups; ++j) {
#pragma unroll
      for (int w = 0; w < W; ++w) acc[w] += red[(j * cols + c) * W + w];
    }
#pragma unroll
    for (int w = 0; w < W; ++w) p.o[b * p.ob + h * p.oh + c * W + w] = from_float<T>(p.scale * acc[w]);
  }
}

}  // namespace ak::linear::cuda::gla

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void GlaDecode<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  const dim3 grid(static_cast<unsigned>(p.B), static_cast<unsigned>(p.H));
  const bool vec = p.V % 4 == 0 && reinterpret_cast<uintptr_t>(p.state) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.new_state) % 16 == 0;
  if (vec) {
    gla::gla_decode_kernel<T, 4><<<grid, gla::kDecodeThreads, 0, stream>>>(p);
  } else {
    gla::gla_decode_kernel<T, 1><<<grid, gla::kDecodeThreads, 0, stream>>>(p);
  }
  ak::cuda::check_launch("gla_decode_kernel");
}

}  // namespace ak::linear::cuda
