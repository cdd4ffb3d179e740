// The fused paged decode step (recurrentGdnDecode, recurrentKdaDecode) on CUDA: a block per
// (sequence, value head, 16 rows of V), 8 warps of 2 rows each. Lane l owns key channels
// [l KPL, (l + 1) KPL) (KPL = K / 32): its slices of q and k (L2-normalised by warp sums), of the
// decay exp(g) and of every state row it touches. Per row v of the slot's state S [V, K]:
//   S_v <- S_v * exp(g);  u = beta (v_v - S_v . k);  S_v <- S_v + u k;  o_v = scale S_v . q
// with both dot products warp sums: the row is read once and written once (the pool's traffic is the
// floor). The preprocessing (norms, gate transform, beta's sigmoid) is recomputed by each block of a
// head from the row of packed_qkv and the raw projections, which the L2 serves after the first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#include "core/common.h"
#include "cuda/runtime.cuh"
#include "generated/linear_launchers.h"
#include "linear/decode/params.h"

namespace ak::linear::cuda::paged {

using namespace ::ak::arch;

constexpr int kThreads = 256;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kRowsPerWarp * (kThreads / 32);

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// One element of a raw projection in its dtype, as float.
__device__ __forceinline__ float load_raw(const void* p, int32_t dtype, int64_t at) {
  if (dtype == AK_BFLOAT16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[at]);
  if (dtype == AK_FLOAT16) return __half2float(static_cast<const __half*>(p)[at]);
  return static_cast<const float*>(p)[at];
}

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// KPL consecutive state values of a row, fp32 or bf16, as floats; and back.
template <int KPL>
__device__ __forceinline__ void load_row(const void* base, bool bf16, int64_t at, float (&s)[KPL]) {
  if (bf16) {
    const __nv_bfloat16* p = static_cast<const __nv_bfloat16*>(base) + at;
#pragma unroll
    for (int j = 0; j < KPL; ++j) s[j] = __bfloat162float(p[j]);
  } else {
    const float* p = static_cast<const float*>(base) + at;
    if constexpr (KPL % 4 == 0) {
#pragma unroll
      for (int j = 0; j < KPL; j += 4) {
        const float4 x = __ldcs(reinterpret_cast<const float4*>(p + j));
        s[j] = x.x, s[j + 1] = x.y, s[j + 2] = x.z, s[j + 3] = x.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < KPL; ++j) s[j] = p[j];
    }
  }
}
template <int KPL>
__device__ __forceinline__ void store_row(void* base, bool bf16, int64_t at, const float (&s)[KPL]) {
  if (bf16) {
    __nv_bfloat16* p = static_cast<__nv_bfloat16*>(base) + at;
#pragma unroll
    for (int j = 0; j < KPL; ++j) p[j] = __float2bfloat16_rn(s[j]);
  } else {
    float* p = static_cast<float*>(base) + at;
    if constexpr (KPL % 4 == 0) {
#pragma unroll
      for (int j = 0; j < KPL; j += 4) __stcs(reinterpret_cast<float4*>(p + j), make_float4(s[j], s[j + 1], s[j + 2], s[j + 3]));
    } else {
#pragma unroll
      for (int j = 0; j < KPL; ++j) p[j] = s[j];
    }
  }
}

template <class T, int KPL>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(const DecodeParams<T> p) {
  const int b = blockIdx.z, h = blockIdx.y, hk = h / (p.H / p.HK);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int v0 = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp;
  const int slot = p.indices[b];
  T* out = p.out + b * p.out_b + h * p.out_h;
  if (slot <= 0) {  // padding: zero output, the pool untouched
    for (int r = v0 + lane; r < min(v0 + kRowsPerWarp, p.V); r += 32) out[r] = from_float<T>(0.f);
    return;
  }
  const int c0 = lane * KPL;
  // This lane's slices of q and k, normalised: x / sqrt(sum x^2 + 1e-6).
  const T* row = p.qkv + b * p.qkv_row;
  float q[KPL], k[KPL], decay[KPL];
  float sq = 0.f, sk = 0.f;
#pragma unroll
  for (int j = 0; j < KPL; ++j) {
    q[j] = to_float(row[hk * p.K + c0 + j]);
    k[j] = to_float(row[(p.HK + hk) * p.K + c0 + j]);
    sq += q[j] * q[j], sk += k[j] * k[j];
  }
  const float nq = 1.f / sqrtf(warp_sum(sq) + 1e-6f), nk = 1.f / sqrtf(warp_sum(sk) + 1e-6f);
  const float a = expf(p.a_log[h]);
  const int64_t gate_at = b * p.gate_b + h * p.gate_h;
#pragma unroll
  for (int j = 0; j < KPL; ++j) {
    q[j] *= nq, k[j] *= nk;
    const float x = p.per_channel ? load_raw(p.raw_gate, p.gate_dtype, gate_at + c0 + j) + p.dt_bias[h * p.K + c0 + j]
                                  : load_raw(p.raw_gate, p.gate_dtype, gate_at) + p.dt_bias[h];
    decay[j] = expf(p.bounded ? p.lower_bound * sigmoid(a * x) : -a * softplus(x));
  }
  const float beta = sigmoid(load_raw(p.raw_beta, p.beta_dtype, b * p.beta_b + h * p.beta_h));
  const bool resume = p.has_initial == nullptr || p.has_initial[b] != 0;
  const int64_t slot_at = static_cast<int64_t>(slot) * p.slot_stride + static_cast<int64_t>(h) * p.V * p.K;
  // Both rows' state loads in flight before any arithmetic.
  float s[kRowsPerWarp][KPL];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = v0 + i;
#pragma unroll
    for (int j = 0; j < KPL; ++j) s[i][j] = 0.f;
    if (r < p.V && resume) load_row<KPL>(p.state, p.state_bf16, slot_at + static_cast<int64_t>(r) * p.K + c0, s[i]);
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = v0 + i;
    if (r >= p.V) break;
    float pred = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
      s[i][j] *= decay[j];
      pred += s[i][j] * k[j];
    }
    const float u = beta * (to_float(row[2 * p.HK * p.K + h * p.V + r]) - warp_sum(pred));
    float o = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
      s[i][j] += u * k[j];
      o += s[i][j] * q[j];
    }
    o = warp_sum(o);
    store_row<KPL>(p.state, p.state_bf16, slot_at + static_cast<int64_t>(r) * p.K + c0, s[i]);
    if (lane == 0) out[r] = from_float<T>(p.scale * o);
  }
}

}  // namespace ak::linear::cuda::paged

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void PagedDecodeFused<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  const dim3 grid(static_cast<unsigned>((p.V + paged::kRowsPerBlock - 1) / paged::kRowsPerBlock),
                  static_cast<unsigned>(p.H), static_cast<unsigned>(p.B));
  switch (p.K / 32) {
    case 1: paged::paged_decode_kernel<T, 1><<<grid, paged::kThreads, 0, stream>>>(p); break;
    case 2: paged::paged_decode_kernel<T, 2><<<grid, paged::kThreads, 0, stream>>>(p); break;
    case 4: paged::paged_decode_kernel<T, 4><<<grid, paged::kThreads, 0, stream>>>(p); break;
    case 8: paged::paged_decode_kernel<T, 8><<<grid, paged::kThreads, 0, stream>>>(p); break;
    default: fail(AK_ERR_INTERNAL, "paged_decode_kernel: K must be 32, 64, 128 or 256");
  }
  ak::cuda::check_launch("paged_decode_kernel");
}

}  // namespace ak::linear::cuda
