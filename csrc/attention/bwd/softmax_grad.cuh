// The softmax gradient of the Hopper attention backward kernels (sm90.cuh, sm90_v2.cuh), for one
// 64-key x 64-query tile of a consumer warpgroup held as the S^T and dP^T wgmma accumulators.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#include "attention/bwd/mma.cuh"
#include "attention/bwd/params.h"

namespace ak::attention::cuda::bwd {

using namespace ::ak::arch;

// The softmax gradient of one 64-key x 64-query tile, with keys as rows (the S^T accumulator
// layout: register 4 j + 2 half + e holds key key0 + 8 half, query i0 + 8 j + 2 t + e). P^T and dS^T
// leave packed as the A fragments of the rs wgmmas: register 2 j + half holds keys key0 + 8 half,
// queries i0 + 8 j + 2 t + {0, 1} (k-steps of 16 queries).

// Whether (key, query) is admitted: inside both sequences and the window.
__device__ __forceinline__ bool admitted(const BwdParams& p, const BwdSeq& s, int key, int query) {
  const int dist = key - (query + s.kv_len - s.q_len);
  return query < s.q_len && key < s.kv_len && dist >= -p.window_left && dist <= p.window_right;
}

// Without softcap, in two halves, so that the exponentials overlap the dP^T product: probs_of turns
// S^T into P^T = exp2(S^T c - LSE) (0 where masked) before dP^T is complete; grads_from_probs then
// forms dS^T = P^T (dP^T - D) and packs both. prob may be acc_s itself, except where a wgmma whose
// accumulators are S^T's registers (the next tile's S^T) is in flight: writing them then makes ptxas
// serialise every wgmma of the kernel.
__device__ __forceinline__ void probs_of(const BwdParams& p, const BwdSeq& s, const float (&acc_s)[32],
                                         float (&prob)[32], const float* lse_st, bool full, int key0, int i0,
                                         int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 lse = *reinterpret_cast<const float2*>(lse_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int idx = 4 * j + 2 * half + e;
        float pr = fast_exp2(acc_s[idx] * p.exp_scale - (e ? lse.y : lse.x));
        if (!full && !admitted(p, s, key0 + 8 * half, i0 + 8 * j + 2 * t + e)) pr = 0.0f;
        prob[idx] = pr;
      }
    }
  }
}

template <class T>
__device__ __forceinline__ void grads_from_probs(const float (&prob)[32], const float (&acc_dp)[32],
                                                 const float* dsum_st, int t, uint32_t (&p_frag)[16],
                                                 uint32_t (&ds_frag)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 dsum = *reinterpret_cast<const float2*>(dsum_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int idx = 4 * j + 2 * half;
      p_frag[2 * j + half] = pack2<T>(prob[idx], prob[idx + 1]);
      ds_frag[2 * j + half] =
          pack2<T>(prob[idx] * (acc_dp[idx] - dsum.x), prob[idx + 1] * (acc_dp[idx + 1] - dsum.y));
    }
  }
}

// In one pass after dP^T: P^T and dS^T = P^T (dP^T - D), packed. With softcap (z = c tanh(S / c)),
// dS^T also takes 1 - tanh^2 of every element.
template <class T>
__device__ __forceinline__ void probs_and_grads(const BwdParams& p, const BwdSeq& s, bool softcapped,
                                                const float (&acc_s)[32], const float (&acc_dp)[32],
                                                const float* lse_st, const float* dsum_st, bool full, int key0,
                                                int i0, int t, uint32_t (&p_frag)[16], uint32_t (&ds_frag)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 lse = *reinterpret_cast<const float2*>(lse_st + 8 * j + 2 * t);
    const float2 dsum = *reinterpret_cast<const float2*>(dsum_st + 8 * j + 2 * t);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float pr[2], ds[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int idx = 4 * j + 2 * half + e;
        const float lse_e = e ? lse.y : lse.x;
        float tanh_v = 0.0f, prob;
        if (softcapped) {
          tanh_v = accurate_tanh(acc_s[idx] * p.softcap_mul);
          prob = fast_exp2(tanh_v * p.exp_scale - lse_e);
        } else {
          prob = fast_exp2(acc_s[idx] * p.exp_scale - lse_e);
        }
        if (!full && !admitted(p, s, key0 + 8 * half, i0 + 8 * j + 2 * t + e)) prob = 0.0f;
        float d = prob * (acc_dp[idx] - (e ? dsum.y : dsum.x));
        if (softcapped) d *= 1.0f - tanh_v * tanh_v;
        pr[e] = prob;
        ds[e] = d;
      }
      p_frag[2 * j + half] = pack2<T>(pr[0], pr[1]);
      ds_frag[2 * j + half] = pack2<T>(ds[0], ds[1]);
    }
  }
}

}  // namespace ak::attention::cuda::bwd
