// Decode: one step of the (gated) delta rule per sequence and head, bound by the state's bytes.
//
// A block owns 128 value columns of one (sequence, head) state S (K x V) and reads that slice once:
// lane l holds columns 4l .. 4l + 3 (one 16-byte load for fp32 states, 8 bytes for 16-bit ones) and
// warp w rows 8w .. 8w + 7, so 32 * ceil(K / 8) threads cover all K rows. Every load is issued before
// any arithmetic. Then
//   a = S^T k, b = S^T q    (per-warp partial sums over its rows, summed across warps in shared memory)
//   u = beta (v - e^g a),  o = scale (e^g b + (q . k) u),  S' = e^g S + k u^T
// and each thread writes back the elements it read (so new_state may be the state itself).
// fp32 inputs stay fp32 throughout (plain FMAs, never TF32).
#pragma once

#include <type_traits>

#include "cuda/runtime.cuh"
#include "linear/delta/decode_shared.cuh"
#include "linear/delta/fwd/params.h"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::fwd {

using namespace ::ak::arch;


constexpr int kDecRows = 8;                  // state rows per warp
constexpr int kDecCols = 4;                  // state columns per lane
constexpr int kDecSlice = 32 * kDecCols;     // columns per block
constexpr int kDecMaxWarps = 256 / kDecRows;  // K <= 256

// kVec: V % 4 == 0 and 16-byte (fp32) / 8-byte (16-bit) aligned state rows: vector accesses.
template <class T, class S, bool kVec>
__global__ void __launch_bounds__(32 * kDecMaxWarps) decode_kernel(const DecodeParams<T, S> p) {
  __shared__ float qs[kDecMaxWarps * kDecRows], ks[kDecMaxWarps * kDecRows], vs[kDecSlice];
  __shared__ __align__(16) float partial[kDecMaxWarps][2][kDecSlice];
  __shared__ float total[2][kDecSlice];

  const int slices = (p.V + kDecSlice - 1) / kDecSlice;
  const int b = blockIdx.x / slices, slice = blockIdx.x - b * slices;
  const int h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, warps = blockDim.x >> 5;
  const int c0 = slice * kDecSlice + lane * kDecCols;  // this lane's first column
  const int r0 = warp * kDecRows;                      // this warp's first row
  const int64_t state_off = (static_cast<int64_t>(b) * p.H + h) * p.K * p.V;

  // 1. The state slice, all loads in flight at once.
  float st[kDecRows][kDecCols];
#pragma unroll
  for (int i = 0; i < kDecRows; ++i) {
    const int r = r0 + i;
    const S* src = p.state + state_off + static_cast<int64_t>(r) * p.V + c0;
    if constexpr (kVec) {
      if (r < p.K && c0 < p.V) {
        Quad<S>::load(src, st[i]);
      } else {
#pragma unroll
        for (int j = 0; j < kDecCols; ++j) st[i][j] = 0.f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < kDecCols; ++j) st[i][j] = (r < p.K && c0 + j < p.V) ? to_float(src[j]) : 0.f;
    }
  }

  // 2. This token's q, k and v slice.
  const T* q = p.q + b * p.q_sb + hk * p.q_sh;
  const T* k = p.k + b * p.k_sb + hk * p.k_sh;
  for (int e = tid; e < p.K; e += blockDim.x) {
    qs[e] = to_float(q[e]);
    ks[e] = to_float(k[e]);
  }
  for (int e = tid; e < kDecSlice; e += blockDim.x) {
    const int c = slice * kDecSlice + e;
    vs[e] = c < p.V ? to_float(p.v[b * p.v_sb + h * p.v_sh + c]) : 0.f;
  }
  __syncthreads();

  // 3. Per-warp partial sums of S^T k and S^T q over this warp's rows.
  float a[kDecCols] = {}, bq[kDecCols] = {};
#pragma unroll
  for (int i = 0; i < kDecRows; ++i) {
    const int r = r0 + i;
    const float kr = r < p.K ? ks[r] : 0.f, qr = r < p.K ? qs[r] : 0.f;
#pragma unroll
    for (int j = 0; j < kDecCols; ++j) {
      a[j] = fmaf(kr, st[i][j], a[j]);
      bq[j] = fmaf(qr, st[i][j], bq[j]);
    }
  }
  *reinterpret_cast<float4*>(&partial[warp][0][lane * kDecCols]) = make_float4(a[0], a[1], a[2], a[3]);
  *reinterpret_cast<float4*>(&partial[warp][1][lane * kDecCols]) = make_float4(bq[0], bq[1], bq[2], bq[3]);
  // The norms and q . k, every warp for itself (K is small).
  const auto [kk, qq, qk] = qk_sums(qs, ks, p.K, lane);
  __syncthreads();

  // 4. Sum the partials across warps.
  for (int e = tid; e < 2 * kDecSlice; e += blockDim.x) {
    const int x = e / kDecSlice, c = e - x * kDecSlice;
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += partial[w][x][c];
    total[x][c] = s;
  }
  __syncthreads();

  // 5. The update, written where it was read.
  const float rk = p.l2norm ? rsqrtf(kk + kL2NormEps) : 1.f;
  const float rq = p.l2norm ? rsqrtf(qq + kL2NormEps) : 1.f;
  const float decay = p.g ? expf(p.g[b * p.g_sb + h * p.g_sh]) : 1.f;
  const float beta = p.beta[b * p.beta_sb + h * p.beta_sh];
  float u[kDecCols], o[kDecCols];
#pragma unroll
  for (int j = 0; j < kDecCols; ++j) {
    const int c = lane * kDecCols + j;
    u[j] = beta * (vs[c] - decay * rk * total[0][c]);
    o[j] = p.scale * (decay * rq * total[1][c] + qk * rq * rk * u[j]);
  }
#pragma unroll
  for (int i = 0; i < kDecRows; ++i) {
    const int r = r0 + i;
    if (r >= p.K) continue;
    const float kh = ks[r] * rk;
#pragma unroll
    for (int j = 0; j < kDecCols; ++j) st[i][j] = fmaf(kh, u[j], decay * st[i][j]);
    S* dst = p.new_state + state_off + static_cast<int64_t>(r) * p.V + c0;
    if constexpr (kVec) {
      if (c0 < p.V) Quad<S>::store(dst, st[i]);
    } else {
#pragma unroll
      for (int j = 0; j < kDecCols; ++j) {
        if (c0 + j < p.V) dst[j] = from_float<S>(st[i][j]);
      }
    }
  }
  if (warp == 0) {
    T* out = p.o + b * p.o_sb + h * p.o_sh;
#pragma unroll
    for (int j = 0; j < kDecCols; ++j) {
      if (c0 + j < p.V) out[c0 + j] = from_float<T>(o[j]);
    }
  }
}

template <class T, class S>
void launch_decode(const DecodeParams<T, S>& p, cudaStream_t stream) {
  if (p.B == 0 || p.H == 0) return;
  const int slices = (p.V + kDecSlice - 1) / kDecSlice;
  const dim3 grid(static_cast<unsigned>(p.B * slices), static_cast<unsigned>(p.H));
  const int threads = 32 * ((p.K + kDecRows - 1) / kDecRows);
  const size_t align = sizeof(S) * kDecCols;
  const bool vec = p.V % kDecCols == 0 && reinterpret_cast<uintptr_t>(p.state) % align == 0 &&
                   reinterpret_cast<uintptr_t>(p.new_state) % align == 0;
  if (vec) {
    decode_kernel<T, S, true><<<grid, threads, 0, stream>>>(p);
  } else {
    decode_kernel<T, S, false><<<grid, threads, 0, stream>>>(p);
  }
  ak::cuda::check_launch("decode_kernel");
}

}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda {

// The state in fp32, or in the inputs' dtype (its pointers then read as T; fp32 inputs keep fp32).
template <class T, int D, int Tile>
void Decode<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  if (a.state_f32 || std::is_same_v<T, float>) return fwd::launch_decode<T, float>(a.p, stream);
  fwd::launch_decode<T, T>(fwd::state_in_input_dtype(a.p), stream);
}

}  // namespace ak::linear::cuda
