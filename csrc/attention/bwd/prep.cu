// The attention backward's small stages around the main kernel:
//   prep:    D_i = rowsum(dO_i * O_i) in fp32, the LSE in log2 units (+inf for empty rows), and the
//            dq_accum tiles zeroed; one block per (64-row query tile, head, sequence).
//   convert: dq = sm_scale * dq_accum, in q's dtype and strides.
#include <cmath>

#include "attention/bwd/launch.h"
#include "attention/bwd/mma.cuh"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda::bwd {
namespace {

constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;

template <class T>
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const uint32_t* x = reinterpret_cast<const uint32_t*>(&a);
  const uint32_t* y = reinterpret_cast<const uint32_t*>(&b);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 u = unpack2<T>(x[k]);
    const float2 w = unpack2<T>(y[k]);
    sum = fmaf(u.x, w.x, sum);
    sum = fmaf(u.y, w.y, sum);
  }
  return sum;
}

template <class T>
__global__ void __launch_bounds__(kThreads) bwd_prep_kernel(const BwdParams p) {
  const int m = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const BwdSeq s = bwd_seq(p, n);
  const int i0 = m * kBwdTileM;
  if (i0 >= s.q_len) return;
  const int64_t row0 = static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0;  // scratch row of i0

  // This tile of dq_accum is contiguous (64 x D floats) in every layout.
  float4* acc = reinterpret_cast<float4*>(p.dq_accum + row0 * p.d);
  for (int idx = threadIdx.x; idx < kBwdTileM * p.d / 4; idx += kThreads) acc[idx] = make_float4(0.f, 0.f, 0.f, 0.f);

  // G lanes (a power of two, at most 32) share a row, 8 elements each per step.
  const int chunks = p.d / 8;
  int lanes = 1;
  while (lanes < chunks) lanes <<= 1;
  const int rows_per_pass = kThreads / lanes;
  const int sub = threadIdx.x % lanes;
  const T* o = static_cast<const T*>(p.o);
  const T* dout = static_cast<const T*>(p.dout);
  // Every thread runs the same trip count, so the shuffles below see the whole warp.
  for (int base = 0; base < kBwdTileM; base += rows_per_pass) {
    const int r = base + static_cast<int>(threadIdx.x) / lanes;
    const int i = i0 + r;
    const bool valid = r < kBwdTileM && i < s.q_len;
    float sum = 0.0f;
    if (valid) {
      const int64_t row = s.q_off + i;
      const T* o_row = o + n * p.o_batch + row * p.o_row + h * p.o_head;
      const T* do_row = dout + n * p.do_batch + row * p.do_row + h * p.do_head;
      for (int c = sub; c < chunks; c += lanes) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(o_row) + c);
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(do_row) + c);
        sum += dot8<T>(a, b);
      }
    }
    for (int step = lanes >> 1; step > 0; step >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, step);
    if (sub == 0 && r < kBwdTileM) {
      float lse_log2 = INFINITY;  // padding rows and rows that saw no key: probabilities 0
      if (valid) {
        const float lse = p.lse[n * p.lse_batch + h * p.lse_head + s.q_off + i];
        if (lse != -INFINITY) lse_log2 = lse * kLog2e;
      }
      p.lse_log2[row0 + r] = lse_log2;
      p.dsum[row0 + r] = valid ? sum : 0.0f;
    }
  }
}

template <class T, DqLayout L>
__global__ void __launch_bounds__(kThreads) bwd_dq_convert_kernel(const BwdParams p) {
  const int m = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const BwdSeq s = bwd_seq(p, n);
  const int i0 = m * kBwdTileM;
  if (i0 >= s.q_len) return;
  const float* tile = p.dq_accum + (static_cast<int64_t>(h) * p.acc_rows + s.acc_row0 + i0) * p.d;
  T* dq = static_cast<T*>(p.dq);
  const int chunks = p.d / 8;
  for (int idx = threadIdx.x; idx < kBwdTileM * chunks; idx += kThreads) {
    const int r = idx / chunks, c = (idx - r * chunks) * 8;
    const int i = i0 + r;
    if (i >= s.q_len) continue;
    float v[8];
    if constexpr (L == DqLayout::kPlain) {
      const float4 a = *reinterpret_cast<const float4*>(tile + r * p.d + c);
      const float4 b = *reinterpret_cast<const float4*>(tile + r * p.d + c + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      // Hopper fragments: one chunk of D / 2 columns per consumer warpgroup (v1); Hopper full: one
      // chunk of D columns (v2).
      const int width = L == DqLayout::kHopperFull ? p.d : p.d / 2;
      const int ci = c / width, cc = c - ci * width;
      const float* chunk = tile + ci * (kBwdTileM * width);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = *reinterpret_cast<const float2*>(chunk + dq_frag_index(r, cc + 2 * e));
        v[2 * e] = x.x;
        v[2 * e + 1] = x.y;
      }
    }
    uint4 out;
    uint32_t* w = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = pack2<T>(v[2 * e] * p.sm_scale, v[2 * e + 1] * p.sm_scale);
    *reinterpret_cast<uint4*>(dq + n * p.dq_batch + (s.q_off + i) * p.dq_row + h * p.dq_head + c) = out;
  }
}

dim3 tile_grid(const BwdParams& p) {
  return dim3(ak::cuda::ceil_div(p.sq, kBwdTileM), static_cast<unsigned>(p.hq), static_cast<unsigned>(p.n_seq));
}

template <class F>
void with_elem(int32_t dtype, F&& f) {
  if (dtype == AK_BFLOAT16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}

}  // namespace

void launch_prep(const BwdParams& p, int32_t dtype, cudaStream_t stream) {
  if (p.sq == 0 || p.n_seq == 0 || p.hq == 0) return;
  with_elem(dtype, [&](auto tag) {
    using T = decltype(tag);
    bwd_prep_kernel<T><<<tile_grid(p), kThreads, 0, stream>>>(p);
  });
  ak::cuda::check_launch("attention backward: bwd_prep_kernel");
}

void launch_dq_convert(const BwdParams& p, int32_t dtype, cudaStream_t stream) {
  if (p.sq == 0 || p.n_seq == 0 || p.hq == 0) return;
  with_elem(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.dq_layout == DqLayout::kPlain) {
      bwd_dq_convert_kernel<T, DqLayout::kPlain><<<tile_grid(p), kThreads, 0, stream>>>(p);
    } else if (p.dq_layout == DqLayout::kHopperFull) {
      bwd_dq_convert_kernel<T, DqLayout::kHopperFull><<<tile_grid(p), kThreads, 0, stream>>>(p);
    } else {
      bwd_dq_convert_kernel<T, DqLayout::kHopperFragments><<<tile_grid(p), kThreads, 0, stream>>>(p);
    }
  });
  ak::cuda::check_launch("attention backward: bwd_dq_convert_kernel");
}

}  // namespace ak::attention::cuda::bwd
