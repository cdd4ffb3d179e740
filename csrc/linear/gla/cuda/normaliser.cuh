// The normaliser's share of linear attention's normalised backward. With D_t = scale q_t . z_t + eps,
// z_t the sequence's key sum up to token t, and dD_t = -(dnum_t . o_t) for the normalised output o_t and
// dnum_t = dO_t / D_t, the normaliser is the values' ones column: its gradient enters the chunk kernels'
// dP as dD_i (every causal entry of row i) and their state parts as scale dD_t z_c (dq, z_c the keys
// before chunk c) and sum_{later t} scale dD_t q_t (dk), all in fp32 where they cancel against the value
// columns' share (bwd.cuh, BwdParams::norm_*). What those read is made here, per chunk and head:
// the chunk's key sums, scanned over the sequence's chunks; the rows (dnum, dD from the forward's 1 / D,
// the chunk's scaled sums of dD q per value head), scanned in reverse.
#pragma once

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "linear/common/chunk_map.cuh"
#include "linear/common/views.cuh"
#include "linear/gla/cuda/dgates.cuh"
#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::gla {

template <class T>
struct NormaliserParams {
  Rows<const T> q, k;        // [B, T, HK, K]
  Rows<const T> dout, o;     // [B, T, H, V]: the output's gradient and the normalised output
  Rows<T> dnum;              // [B, T, H, V]: dO / D, the chunk kernels' output gradient
  ChunkMap map;
  float* key_sums = nullptr;    // [chunks][HK][K]: column sums of k per chunk, then of the earlier chunks
  float* query_sums = nullptr;  // [chunks][H][K]: scale sum dD q per chunk, then of the later chunks
  const float* inv_den = nullptr;  // [B, T, H]: 1 / D, as the split state kernel divided by it
  float* dd = nullptr;          // [B, T, H]: dD
  int H = 0, HK = 0, group = 1, K = 0, V = 0;
  float scale = 1.f;
};

// Per sequence and head: each chunk's column sums [chunks][heads][K] replaced by the sum over the
// sequence's earlier chunks (or, reverse, its later ones).
__global__ void gla_norm_chunk_scan_kernel(ChunkMap map, float* sums, int heads, int K, bool reverse) {
  const int n = blockIdx.x, hh = blockIdx.y;
  int row, begin, end, first;
  map.sequence(n, row, begin, end, first);
  const int chunks = (end - begin + kChunk - 1) / kChunk;
  for (int col = threadIdx.x; col < K; col += blockDim.x) {
    float acc = 0.f;
#pragma unroll 4
    for (int i = 0; i < chunks; ++i) {
      float* x = sums + (static_cast<int64_t>(first + (reverse ? chunks - 1 - i : i)) * heads + hh) * K + col;
      const float own = *x;
      *x = acc;
      acc += own;
    }
  }
}

// Four 16-bit values at `at` (8-byte aligned) as floats.
template <class T>
__device__ __forceinline__ float4 norm_load4(const T* at) {
  const uint2 u = *reinterpret_cast<const uint2*>(at);
  const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y);
  return make_float4(a.x, a.y, b.x, b.y);
}

// Per chunk and value head (128 threads): dnum_t = dO_t / D_t (rounded as the chunk kernels read it,
// 1 / D_t as the forward divided by it) and dD_t = -(dnum_t . o_t) from that rounded dnum, so that the
// two shares cancel as the exact ones do (a warp a token, four columns a lane); then the chunk's column
// sums of scale dD_t q_t.
template <class T>
__global__ void __launch_bounds__(128) gla_norm_rows_kernel(const NormaliserParams<T> p) {
  __shared__ float ddr[kChunk];
  const int g = blockIdx.x, h = blockIdx.y, hk = h / p.group, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z, t0 = ci.y, row = ci.x;
  if (len == 0) return;
  for (int r = warp; r < len; r += 4) {
    const int64_t at = (static_cast<int64_t>(row) * p.map.T + t0 + r) * p.H + h;
    const float inv = p.inv_den[at];
    const T* dor = p.dout.row(row, t0 + r, h);
    const T* orow = p.o.row(row, t0 + r, h);
    T* dn = p.dnum.row(row, t0 + r, h);
    float x = 0.f;
    for (int col = 4 * lane; col < p.V; col += 128) {  // V % 8 == 0: 8-byte pieces
      const float4 d = norm_load4(dor + col), y = norm_load4(orow + col);
      const uint2 u = make_uint2(pack2<T>(d.x * inv, d.y * inv), pack2<T>(d.z * inv, d.w * inv));
      *reinterpret_cast<uint2*>(dn + col) = u;
      const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y);
      x += a.x * y.x + a.y * y.y + b.x * y.z + b.y * y.w;
    }
    x = -warp_sum(x);
    if (lane == 0) {
      ddr[r] = x;
      p.dd[at] = x;
    }
  }
  __syncthreads();
  for (int col = tid; col < p.K; col += blockDim.x) {
    float qsum = 0.f;
#pragma unroll 8
    for (int r = 0; r < len; ++r) qsum += ddr[r] * to_float(p.q.row(row, t0 + r, hk)[col]);
    p.query_sums[(static_cast<int64_t>(g) * p.H + h) * p.K + col] = p.scale * qsum;
  }
}

// In order over a call's chunks (grids of chunks, or sequences, x heads).
template <class T>
void launch_normaliser(const NormaliserParams<T>& p, int chunks, int sequences, cudaStream_t stream) {
  if (chunks == 0) return;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(p.HK));
  gla_chunk_sums_kernel<<<grid, 128, 0, stream>>>(p.k, p.map, p.key_sums, p.HK, p.K);
  gla_norm_chunk_scan_kernel<<<dim3(sequences, p.HK), 128, 0, stream>>>(p.map, p.key_sums, p.HK, p.K, false);
  gla_norm_rows_kernel<T><<<dim3(chunks, p.H), 128, 0, stream>>>(p);
  gla_norm_chunk_scan_kernel<<<dim3(sequences, p.H), 128, 0, stream>>>(p.map, p.query_sums, p.H, p.K, true);
  ak::cuda::check_launch("gla normaliser scans");
}

}  // namespace ak::linear::cuda::gla
