// The per-lane arithmetic shared by the paged decode kernels (decode/fused.cuh, decode/bulk.cuh). A warp
// owns whole state rows; lane l owns key channels [l KPL, (l + 1) KPL) (KPL = K / 32): its slices of q and
// k (L2-normalised by warp sums), of the decay exp(g) and of every row it touches. Per row v of the
// slot's state S [V, K]:
//   S_v <- S_v * exp(g);  u = beta (v_v - S_v . k);  S_v <- S_v + u k;  o_v = scale S_v . q
// with both dot products warp sums. The preprocessing (norms, gate transform, beta's sigmoid) is
// recomputed by each block of a head from the row of packed_qkv and the raw projections (L2 hits after
// the first block).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#include "core/common.h"
#include "linear/decode/params.h"

namespace ak::linear::cuda::paged {

using namespace ::ak::arch;

// Rows a warp advances together: 16 / KPL, so that each lane holds 16 state values whatever K is.
template <int KPL>
constexpr int step_rows() {
  return 16 / KPL;
}

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

// KPL consecutive state values (fp32 or bf16, global or shared memory) as floats, in the widest loads
// the slice allows.
template <int KPL>
__device__ __forceinline__ void load_vals(const float* p, float (&s)[KPL]) {
  if constexpr (KPL % 4 == 0) {
#pragma unroll
    for (int j = 0; j < KPL; j += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + j);
      s[j] = x.x, s[j + 1] = x.y, s[j + 2] = x.z, s[j + 3] = x.w;
    }
  } else if constexpr (KPL == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    s[0] = x.x, s[1] = x.y;
  } else {
    s[0] = p[0];
  }
}
template <int KPL>
__device__ __forceinline__ void load_vals(const __nv_bfloat16* p, float (&s)[KPL]) {
  if constexpr (KPL % 2 == 0) {
    uint32_t w[KPL / 2];
    if constexpr (KPL == 8) {
      const uint4 x = *reinterpret_cast<const uint4*>(p);
      w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    } else if constexpr (KPL == 4) {
      const uint2 x = *reinterpret_cast<const uint2*>(p);
      w[0] = x.x, w[1] = x.y;
    } else {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
#pragma unroll
    for (int j = 0; j < KPL / 2; ++j) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[j]));
      s[2 * j] = f.x, s[2 * j + 1] = f.y;
    }
  } else {
    s[0] = __bfloat162float(p[0]);
  }
}

// The same back, as streaming stores (the pool's rows are not read again by this call).
template <int KPL>
__device__ __forceinline__ void store_vals(float* p, const float (&s)[KPL]) {
  if constexpr (KPL % 4 == 0) {
#pragma unroll
    for (int j = 0; j < KPL; j += 4) __stcs(reinterpret_cast<float4*>(p + j), make_float4(s[j], s[j + 1], s[j + 2], s[j + 3]));
  } else if constexpr (KPL == 2) {
    __stcs(reinterpret_cast<float2*>(p), make_float2(s[0], s[1]));
  } else {
    __stcs(p, s[0]);
  }
}
template <int KPL>
__device__ __forceinline__ void store_vals(__nv_bfloat16* p, const float (&s)[KPL]) {
  if constexpr (KPL % 2 == 0) {
    uint32_t w[KPL / 2];
#pragma unroll
    for (int j = 0; j < KPL / 2; ++j) w[j] = pack2<__nv_bfloat16>(s[2 * j], s[2 * j + 1]);
    if constexpr (KPL == 8) {
      __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
    } else if constexpr (KPL == 4) {
      __stcs(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
    } else {
      __stcs(reinterpret_cast<unsigned int*>(p), w[0]);
    }
  } else {
    p[0] = __float2bfloat16_rn(s[0]);
  }
}

// A row of the pool (fp32 or bf16) through its untyped base.
template <int KPL>
__device__ __forceinline__ void load_row(const void* base, bool bf16, int64_t at, float (&s)[KPL]) {
  if (bf16) {
    load_vals<KPL>(static_cast<const __nv_bfloat16*>(base) + at, s);
  } else {
    load_vals<KPL>(static_cast<const float*>(base) + at, s);
  }
}
template <int KPL>
__device__ __forceinline__ void store_row(void* base, bool bf16, int64_t at, const float (&s)[KPL]) {
  if (bf16) {
    store_vals<KPL>(static_cast<__nv_bfloat16*>(base) + at, s);
  } else {
    store_vals<KPL>(static_cast<float*>(base) + at, s);
  }
}

// A lane's share of one (sequence, value head): normalised q and k slices, the decay, beta.
template <int KPL>
struct LaneInputs {
  float q[KPL], k[KPL], decay[KPL];
  float beta;
};

template <class T, int KPL>
__device__ __forceinline__ void prepare(const DecodeParams<T>& p, int b, int h, int lane, LaneInputs<KPL>& in) {
  const int hk = h / (p.H / p.HK), c0 = lane * KPL;
  const T* row = p.qkv + b * p.qkv_row;
  float sq = 0.f, sk = 0.f;
#pragma unroll
  for (int j = 0; j < KPL; ++j) {
    in.q[j] = to_float(row[hk * p.K + c0 + j]);
    in.k[j] = to_float(row[(p.HK + hk) * p.K + c0 + j]);
    sq += in.q[j] * in.q[j], sk += in.k[j] * in.k[j];
  }
  const float a = expf(p.a_log[h]);
  const int64_t gate_at = b * p.gate_b + h * p.gate_h;
  in.beta = sigmoid(load_raw(p.raw_beta, p.beta_dtype, b * p.beta_b + h * p.beta_h));
#pragma unroll
  for (int j = 0; j < KPL; ++j) {
    const float x = p.per_channel ? load_raw(p.raw_gate, p.gate_dtype, gate_at + c0 + j) + p.dt_bias[h * p.K + c0 + j]
                                  : load_raw(p.raw_gate, p.gate_dtype, gate_at) + p.dt_bias[h];
    in.decay[j] = expf(p.bounded ? p.lower_bound * sigmoid(a * x) : -a * softplus(x));
  }
  // x / sqrt(sum x^2 + 1e-6)
  const float nq = 1.f / sqrtf(warp_sum(sq) + 1e-6f), nk = 1.f / sqrtf(warp_sum(sk) + 1e-6f);
#pragma unroll
  for (int j = 0; j < KPL; ++j) in.q[j] *= nq, in.k[j] *= nk;
}

// Advances R rows held in s (values v[i] of the rows) and returns their outputs o[i] (unscaled, in
// every lane). The R rows' reductions run side by side: independent shuffle chains.
template <int R, int KPL>
__device__ __forceinline__ void advance_rows(const LaneInputs<KPL>& in, const float (&v)[R], float (&s)[R][KPL],
                                             float (&o)[R]) {
  float pred[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    pred[i] = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
      s[i][j] *= in.decay[j];
      pred[i] += s[i][j] * in.k[j];
    }
  }
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1)
#pragma unroll
    for (int i = 0; i < R; ++i) pred[i] += __shfl_xor_sync(0xffffffffu, pred[i], m);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float u = in.beta * (v[i] - pred[i]);
    o[i] = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
      s[i][j] += u * in.k[j];
      o[i] += s[i][j] * in.q[j];
    }
  }
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1)
#pragma unroll
    for (int i = 0; i < R; ++i) o[i] += __shfl_xor_sync(0xffffffffu, o[i], m);
}

// Lane i < R writes row v0 + i's output.
template <class T, int R>
__device__ __forceinline__ void write_outputs(T* out, int v0, int V, int lane, float scale, const float (&o)[R]) {
  float mine = 0.f;
#pragma unroll
  for (int i = 0; i < R; ++i) mine = lane == i ? o[i] : mine;
  if (lane < R && v0 + lane < V) out[v0 + lane] = from_float<T>(scale * mine);
}

}  // namespace ak::linear::cuda::paged
