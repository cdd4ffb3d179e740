// What the delta rule's two decode kernels (decode.cuh, decode_tile.cuh) share: four consecutive elements of
// a state (fp32 or 16-bit) as floats, streamed from and to global memory (one 16-byte access for fp32, 8
// bytes for 16-bit states) or read from shared memory; and the sums of k . k, q . q and q . k over a warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;

// Four values as floats, from one 16-byte fp32 load or one 8-byte load of 16-bit ones.
__device__ __forceinline__ void quad_of(float4 v, float (&x)[4]) { x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w; }
template <class H>
__device__ __forceinline__ void quad_of(uint2 v, float (&x)[4]) {
  const float2 lo = unpack2<H>(v.x), hi = unpack2<H>(v.y);
  x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
}

// Four consecutive state elements as floats, and back.
template <class S>
struct Quad;
template <>
struct Quad<float> {
  __device__ static __forceinline__ void load(const float* p, float (&x)[4]) {
    quad_of(__ldcs(reinterpret_cast<const float4*>(p)), x);
  }
  __device__ static __forceinline__ void store(float* p, const float (&x)[4]) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(x[0], x[1], x[2], x[3]));
  }
};
template <class H>
struct Quad16 {
  __device__ static __forceinline__ void load(const H* p, float (&x)[4]) {
    quad_of<H>(__ldcs(reinterpret_cast<const uint2*>(p)), x);
  }
  __device__ static __forceinline__ void store(H* p, const float (&x)[4]) {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(pack2<H>(x[0], x[1]), pack2<H>(x[2], x[3])));
  }
};
template <>
struct Quad<__nv_bfloat16> : Quad16<__nv_bfloat16> {};
template <>
struct Quad<__half> : Quad16<__half> {};

// Four consecutive state values in shared memory as floats.
__device__ __forceinline__ void smem_quad(const float* p, float (&x)[4]) {
  quad_of(*reinterpret_cast<const float4*>(p), x);
}
template <class H>
__device__ __forceinline__ void smem_quad(const H* p, float (&x)[4]) {
  quad_of<H>(*reinterpret_cast<const uint2*>(p), x);
}

// k . k, q . q and q . k over the K channels of q and k in shared memory, summed by one warp (every lane
// returns the sums).
struct QkSums {
  float kk, qq, qk;
};
__device__ __forceinline__ QkSums qk_sums(const float* qs, const float* ks, int K, int lane) {
  float kk = 0.f, qq = 0.f, qk = 0.f;
  for (int d = lane; d < K; d += 32) {
    kk = fmaf(ks[d], ks[d], kk);
    qq = fmaf(qs[d], qs[d], qq);
    qk = fmaf(qs[d], ks[d], qk);
  }
  return {warp_sum(kk), warp_sum(qq), warp_sum(qk)};
}

}  // namespace ak::linear::cuda::fwd
