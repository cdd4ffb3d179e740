// The general forward: the delta rule token by token, in fp32, for any dtype and K, V up to 256.
//
// One block owns (sequence n, value head h, a slice of 16 value columns); each of its 4 warps owns 4
// columns, and lane l holds rows l, l + 32, ... of those columns of the state S (K x V). Per token:
//   a = S^T k, b = S^T q   (per column: a lane-partial sum, then a butterfly over the warp)
//   u = beta (v - e^g a),  o = scale (e^g b + (q . k) u),  S <- e^g S + k u^T
// with q, k L2-normalised by scaling those sums (no extra pass). Inputs of token t + 1 are staged in
// shared memory while token t is computed: one barrier per token.
#pragma once

#include "cuda/runtime.cuh"
#include "linear/delta/fwd/params.h"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;

constexpr int kRecWarps = 4;
constexpr int kRecCols = 4;                        // columns per warp
constexpr int kRecSlice = kRecWarps * kRecCols;    // columns per block

template <class T, int KR>
__device__ __forceinline__ void recurrent_store_state(const RecurrentParams<T>& p, float* dst,
                                                      const float (&S)[KR][kRecCols], int c0, int lane) {
#pragma unroll
  for (int i = 0; i < KR; ++i) {
    const int r = lane + 32 * i;
    if (r >= p.K) continue;
#pragma unroll
    for (int j = 0; j < kRecCols; ++j) {
      if (c0 + j < p.V) dst[static_cast<int64_t>(r) * p.V + c0 + j] = S[i][j];
    }
  }
}

template <class T, int KR>
__global__ void __launch_bounds__(kRecWarps * 32) recurrent_fwd_kernel(const RecurrentParams<T> p) {
  constexpr int kThreads = kRecWarps * 32;
  constexpr int kRed = 2 * kRecCols + 3;  // a_j, b_j, |k|^2, |q|^2, q.k
  __shared__ float qs[2][KR * 32], ks[2][KR * 32], vs[2][kRecSlice], gb[2][2];

  const int slices = (p.V + kRecSlice - 1) / kRecSlice;
  const int n = blockIdx.x / slices, slice = blockIdx.x - n * slices;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int c0 = slice * kRecSlice + warp * kRecCols;  // this warp's first column
  int row, begin, end, first;
  p.map.sequence(n, row, begin, end, first);
  const int64_t KV = static_cast<int64_t>(p.K) * p.V;
  const int64_t state_off = (static_cast<int64_t>(n) * p.H + h) * KV;

  float S[KR][kRecCols];
#pragma unroll
  for (int i = 0; i < KR; ++i) {
    const int r = lane + 32 * i;
#pragma unroll
    for (int j = 0; j < kRecCols; ++j) {
      const int c = c0 + j;
      S[i][j] = (p.initial_state && r < p.K && c < p.V) ? p.initial_state[state_off + static_cast<int64_t>(r) * p.V + c]
                                                        : 0.f;
    }
  }

  // Token t's inputs are fetched into registers one step ahead (loads in flight during the
  // compute), then committed to shared buffer (t - begin) % 2.
  static_assert(KR * 32 <= 2 * kThreads, "two staged q/k elements per thread");
  float fq[2], fk[2], fv = 0.f, fg = 0.f, fb = 0.f;
  auto fetch = [&](int t) {
    const T* qrow = p.q.row(row, t, hk);
    const T* krow = p.k.row(row, t, hk);
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int e = tid + x * kThreads;
      fq[x] = e < p.K ? to_float(qrow[e]) : 0.f;
      fk[x] = e < p.K ? to_float(krow[e]) : 0.f;
    }
    const int c = slice * kRecSlice + tid;
    fv = (tid < kRecSlice && c < p.V) ? to_float(p.v.row(row, t, h)[c]) : 0.f;
    if (tid == 0) {
      fg = p.g.at(row, t, h);
      fb = p.beta.at(row, t, h);
    }
  };
  auto commit = [&](int buf) {
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int e = tid + x * kThreads;
      if (e < KR * 32) {
        qs[buf][e] = fq[x];
        ks[buf][e] = fk[x];
      }
    }
    if (tid < kRecSlice) vs[buf][tid] = fv;
    if (tid == 0) {
      gb[buf][0] = fg;
      gb[buf][1] = fb;
    }
  };

  float* chunk_states =
      p.chunk_states ? p.chunk_states + (static_cast<int64_t>(n) * p.H + h) * (p.NC + 1) * KV : nullptr;
  if (begin < end) {
    fetch(begin);
    commit(0);
  }
  __syncthreads();
  for (int t = begin; t < end; ++t) {
    const int cur = (t - begin) & 1;
    if (chunk_states && (t - begin) % p.C == 0) {
      recurrent_store_state<T, KR>(p, chunk_states + static_cast<int64_t>((t - begin) / p.C) * KV, S, c0, lane);
    }
    if (t + 1 < end) fetch(t + 1);

    float kr[KR], qr[KR];
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      const int r = lane + 32 * i;
      kr[i] = r < p.K ? ks[cur][r] : 0.f;
      qr[i] = r < p.K ? qs[cur][r] : 0.f;
    }
    float red[kRed];
#pragma unroll
    for (int j = 0; j < kRecCols; ++j) {
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int i = 0; i < KR; ++i) {
        a = fmaf(kr[i], S[i][j], a);
        b = fmaf(qr[i], S[i][j], b);
      }
      red[j] = a;
      red[kRecCols + j] = b;
    }
    float kk = 0.f, qq = 0.f, qk = 0.f;
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      kk = fmaf(kr[i], kr[i], kk);
      qq = fmaf(qr[i], qr[i], qq);
      qk = fmaf(qr[i], kr[i], qk);
    }
    red[2 * kRecCols] = kk;
    red[2 * kRecCols + 1] = qq;
    red[2 * kRecCols + 2] = qk;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
#pragma unroll
      for (int x = 0; x < kRed; ++x) red[x] += __shfl_xor_sync(0xffffffffu, red[x], m);
    }
    const float rk = p.l2norm ? rsqrtf(red[2 * kRecCols] + kL2NormEps) : 1.f;
    const float rq = p.l2norm ? rsqrtf(red[2 * kRecCols + 1] + kL2NormEps) : 1.f;
    const float qk_hat = red[2 * kRecCols + 2] * rq * rk;
    const float decay = p.g.p ? expf(gb[cur][0]) : 1.f;
    const float beta = gb[cur][1];
    float u[kRecCols], o[kRecCols];
#pragma unroll
    for (int j = 0; j < kRecCols; ++j) {
      u[j] = beta * (vs[cur][warp * kRecCols + j] - decay * rk * red[j]);
      o[j] = p.scale * (decay * rq * red[kRecCols + j] + qk_hat * u[j]);
    }
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      const float kh = kr[i] * rk;
#pragma unroll
      for (int j = 0; j < kRecCols; ++j) S[i][j] = fmaf(kh, u[j], decay * S[i][j]);
    }
    // Lane j writes column c0 + j (o[] is the same in every lane after the butterfly).
    if (lane < kRecCols && c0 + lane < p.V) {
      float mine = o[0];
#pragma unroll
      for (int j = 1; j < kRecCols; ++j) mine = lane == j ? o[j] : mine;
      p.o.row(row, t, h)[c0 + lane] = from_float<T>(mine);
    }
    if (t + 1 < end) commit(cur ^ 1);
    __syncthreads();
  }
  if (chunk_states) recurrent_store_state<T, KR>(p, chunk_states + static_cast<int64_t>(p.NC) * KV, S, c0, lane);
  if (p.final_state) recurrent_store_state<T, KR>(p, p.final_state + state_off, S, c0, lane);
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

template <class T, int D, int Tile>
void FwdRecurrent<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  using namespace fwd;
  if (p.N == 0 || p.H == 0) return;
  const int slices = (p.V + kRecSlice - 1) / kRecSlice;
  const dim3 grid(static_cast<unsigned>(p.N * slices), static_cast<unsigned>(p.H));
  if (p.K <= 64) {
    recurrent_fwd_kernel<T, 2><<<grid, kRecWarps * 32, 0, stream>>>(p);
  } else if (p.K <= 128) {
    recurrent_fwd_kernel<T, 4><<<grid, kRecWarps * 32, 0, stream>>>(p);
  } else {
    recurrent_fwd_kernel<T, 8><<<grid, kRecWarps * 32, 0, stream>>>(p);
  }
  ak::cuda::check_launch("recurrent_fwd_kernel");
}

}  // namespace ak::linear::cuda
