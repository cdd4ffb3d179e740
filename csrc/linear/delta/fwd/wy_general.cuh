// The chunk-local WY factors in fp32 for the general path (any dtype, K up to 256, chunk 32/64/128),
// written only when a caller asks for aw/au:
//   L  = tril(diag(beta) K K^T * exp(gc_i - gc_j), -1)      (scaled K K^T, per chunk)
//   A  = (I + L)^-1                                         (forward substitution, one column a thread)
//   Aw = A diag(beta exp(gc)),  Au = A diag(beta)
// One block per (batch row, chunk, value head); K K^T accumulates over 32-wide tiles of K in shared
// memory, each thread owning C * C / 256 entries.
#pragma once

#include "cuda/runtime.cuh"
#include "linear/delta/fwd/params.h"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;

constexpr int kWyThreads = 256;
constexpr int kWyTile = 32;

template <int C>
constexpr size_t wy_general_smem() {
  return sizeof(float) * (2 * C * (C + 1) + C * (kWyTile + 1) + 3 * C);
}

template <class T, int C>
__global__ void __launch_bounds__(kWyThreads) wy_general_kernel(const WyParams<T> p) {
  constexpr int kPerThread = C * C / kWyThreads;
  constexpr int kLd = C + 1;
  extern __shared__ float wy_smem[];
  float* L = wy_smem;               // [C][C + 1]
  float* A = L + C * kLd;           // [C][C + 1]
  float* kt = A + C * kLd;          // [C][kWyTile + 1]
  float* gc = kt + C * (kWyTile + 1);
  float* bt = gc + C;
  float* rk = bt + C;

  const int b = blockIdx.x / p.NC, c = blockIdx.x - b * p.NC;
  const int h = blockIdx.y, hk = h / p.group;
  const int t0 = c * C, len = min(C, p.tokens - t0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  if (tid < C) {
    bt[tid] = tid < len ? p.beta.at(b, t0 + tid, h) : 0.f;
    gc[tid] = tid < len ? p.g.at(b, t0 + tid, h) : 0.f;
    rk[tid] = 1.f;
  }
  __syncthreads();
  if (tid == 0) {
    float s = 0.f;
    for (int i = 0; i < C; ++i) gc[i] = (s += gc[i]);
  }
  if (p.l2norm) {
    for (int i = warp; i < len; i += kWyThreads / 32) {
      const T* krow = p.k.row(b, t0 + i, hk);
      float ss = 0.f;
      for (int d = lane; d < p.K; d += 32) {
        const float x = to_float(krow[d]);
        ss = fmaf(x, x, ss);
      }
      ss = warp_sum(ss);
      if (lane == 0) rk[i] = rsqrtf(ss + kL2NormEps);
    }
  }

  float acc[kPerThread];
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) acc[q] = 0.f;
  for (int d0 = 0; d0 < p.K; d0 += kWyTile) {
    __syncthreads();  // the previous tile is consumed
    for (int e = tid; e < C * kWyTile; e += kWyThreads) {
      const int i = e / kWyTile, d = e - i * kWyTile;
      kt[i * (kWyTile + 1) + d] =
          (i < len && d0 + d < p.K) ? to_float(p.k.row(b, t0 + i, hk)[d0 + d]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int e = tid + q * kWyThreads, i = e / C, j = e - i * C;
      if (j < i) {
        float s = acc[q];
#pragma unroll 8
        for (int d = 0; d < kWyTile; ++d) s = fmaf(kt[i * (kWyTile + 1) + d], kt[j * (kWyTile + 1) + d], s);
        acc[q] = s;
      }
    }
  }
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int e = tid + q * kWyThreads, i = e / C, j = e - i * C;
    L[i * kLd + j] = j < i ? bt[i] * rk[i] * rk[j] * expf(gc[i] - gc[j]) * acc[q] : 0.f;
  }
  __syncthreads();

  // Forward substitution for column `col` of A: A[i][col] = [i == col] - sum_{col <= j < i} L[i][j] A[j][col].
  if (tid < C) {
    const int col = tid;
    for (int i = 0; i < C; ++i) {
      float x = 0.f;
      if (i >= col) {
        x = i == col ? 1.f : 0.f;
        for (int j = col; j < i; ++j) x = fmaf(-L[i * kLd + j], A[j * kLd + col], x);
      }
      A[i * kLd + col] = x;
    }
  }
  __syncthreads();

  const int64_t base = ((static_cast<int64_t>(b) * p.H + h) * p.tokens + t0) * C;
  for (int e = tid; e < len * C; e += kWyThreads) {
    const int i = e / C, j = e - i * C;
    const float a = A[i * kLd + j] * bt[j];
    if (p.aw) p.aw[base + e] = a * expf(gc[j]);
    if (p.au) p.au[base + e] = a;
  }
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void FwdWyGeneral<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  using namespace fwd;
  if (p.B == 0 || p.NC == 0 || p.H == 0) return;
  const dim3 grid(static_cast<unsigned>(p.B * p.NC), static_cast<unsigned>(p.H));
  auto go = [&](auto kernel, size_t smem) {
    AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<grid, kWyThreads, smem, stream>>>(p);
    ak::cuda::check_launch("wy_general_kernel");
  };
  switch (p.C) {
    case 32: go(wy_general_kernel<T, 32>, wy_general_smem<32>()); break;
    case 64: go(wy_general_kernel<T, 64>, wy_general_smem<64>()); break;
    case 128: go(wy_general_kernel<T, 128>, wy_general_smem<128>()); break;
    default: fail(AK_ERR_INTERNAL, "wy_general: unexpected chunk size");
  }
}

}  // namespace ak::linear::cuda
