// The normaliser's share of linear attention's normalised backward, as scans over each sequence's
// chunks. With D_t = scale q_t . z_t + eps, z_t the sequence's key sum up to token t, and
// dD_t = -(dO_t . o_t) / D_t for the normalised output o_t:
//   dq_t += sD_t z_t,  dk_j += sum_{t >= j} sD_t q_t,  with sD_t = scale * sum over the group's value
//   heads of dD_t,
// written as fp32 addends [B, T, HK, K] that the chunk kernels add to their own dq and dk before rounding
// (the two shares cancel, so they meet in fp32), and the chunk kernels run from dnum_t = dO_t / D_t.
// Three kernels a chunk and key head each: the chunk's key sums; the rows (z, D, dnum, sD, the dq
// addend, the chunk's sums of sD q); the dk addend as a reverse scan.
#pragma once

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "linear/common/chunk_map.cuh"
#include "linear/common/views.cuh"

namespace ak::linear::cuda::gla {

constexpr int kNormChunk = 64;  // tokens a chunk (the chunk kernels')
constexpr int kNormMaxK = 128;  // key columns the scans hold in shared memory

template <class T>
struct NormaliserParams {
  Rows<const T> q, k;        // [B, T, HK, K]
  Rows<const T> dout, o;     // [B, T, H, V]: the output's gradient and the normalised output
  Rows<T> dnum;              // [B, T, H, V]: dO / D, the chunk kernels' output gradient
  ChunkMap map;
  float* key_sums = nullptr;    // [chunks][HK][K]: column sums of k per chunk
  float* query_sums = nullptr;  // [chunks][HK][K]: column sums of sD q per chunk
  float* sd = nullptr;          // [chunks * 64][HK]: sD per token slot
  float *add_dq = nullptr, *add_dk = nullptr;  // [B, T, HK, K]
  int HK = 0, group = 1, K = 0, V = 0;
  float scale = 1.f, eps = 0.f;
  __device__ __forceinline__ int64_t addend(int row, int t, int hk) const {
    return ((static_cast<int64_t>(row) * map.T + t) * HK + hk) * K;
  }
};

// Per chunk and key head: the column sums of k.
template <class T>
__global__ void gla_norm_key_sums_kernel(const NormaliserParams<T> p) {
  const int g = blockIdx.x, hk = blockIdx.y;
  const int4 ci = p.map.chunk_of(g);
  if (ci.z == 0) return;  // an empty chunk past a packed call's live ones
  for (int col = threadIdx.x; col < p.K; col += blockDim.x) {
    float s = 0.f;
    for (int r = 0; r < ci.z; ++r) s += to_float(p.k.row(ci.x, ci.y + r, hk)[col]);
    p.key_sums[(static_cast<int64_t>(g) * p.HK + hk) * p.K + col] = s;
  }
}

__device__ __forceinline__ float norm_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Per chunk and key head (128 threads): z_t from the earlier chunks' key sums, D_t, then per value head
// dnum_t and dD_t (a warp a token, four columns a lane), sD_t, the dq addend sD_t z_t and the chunk's
// column sums of sD_t q_t.
template <class T>
__global__ void __launch_bounds__(128) gla_norm_rows_kernel(const NormaliserParams<T> p) {
  __shared__ float zs[kNormChunk][kNormMaxK + 1];
  __shared__ float sdr[kNormChunk];
  const int g = blockIdx.x, hk = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z, t0 = ci.y, row = ci.x;
  if (len == 0) return;
  int srow, begin, end, first;
  p.map.sequence(ci.w, srow, begin, end, first);
  const int c = (t0 - begin) / kNormChunk;
  for (int col = tid; col < p.K; col += blockDim.x) {
    float z = 0.f;
    for (int e = first; e < first + c; ++e) z += p.key_sums[(static_cast<int64_t>(e) * p.HK + hk) * p.K + col];
    for (int r = 0; r < len; ++r) {
      z += to_float(p.k.row(row, t0 + r, hk)[col]);
      zs[r][col] = z;
    }
  }
  __syncthreads();
  for (int r = warp; r < len; r += 4) {
    const T* qr = p.q.row(row, t0 + r, hk);
    float dot = 0.f;
    for (int col = lane; col < p.K; col += 32) dot += to_float(qr[col]) * zs[r][col];
    const float inv = 1.f / (p.scale * norm_warp_sum(dot) + p.eps);
    float s = 0.f;
    for (int gi = 0; gi < p.group; ++gi) {
      const int h = hk * p.group + gi;
      const T* dor = p.dout.row(row, t0 + r, h);
      const T* orow = p.o.row(row, t0 + r, h);
      T* dn = p.dnum.row(row, t0 + r, h);
      float x = 0.f;
      for (int col = 4 * lane; col < p.V; col += 128) {  // V % 8 == 0: 8-byte pieces
        const uint2 d = *reinterpret_cast<const uint2*>(dor + col);
        const uint2 y = *reinterpret_cast<const uint2*>(orow + col);
        const float2 d0 = unpack2<T>(d.x), d1 = unpack2<T>(d.y), y0 = unpack2<T>(y.x), y1 = unpack2<T>(y.y);
        x += d0.x * y0.x + d0.y * y0.y + d1.x * y1.x + d1.y * y1.y;
        *reinterpret_cast<uint2*>(dn + col) = make_uint2(pack2<T>(d0.x * inv, d0.y * inv), pack2<T>(d1.x * inv, d1.y * inv));
      }
      s -= norm_warp_sum(x) * inv;
    }
    if (lane == 0) sdr[r] = p.scale * s;
  }
  __syncthreads();
  for (int col = tid; col < p.K; col += blockDim.x) {
    float qsum = 0.f;
    for (int r = 0; r < len; ++r) {
      p.add_dq[p.addend(row, t0 + r, hk) + col] = sdr[r] * zs[r][col];
      qsum += sdr[r] * to_float(p.q.row(row, t0 + r, hk)[col]);
    }
    p.query_sums[(static_cast<int64_t>(g) * p.HK + hk) * p.K + col] = qsum;
  }
  if (tid < len) p.sd[(static_cast<int64_t>(g) * kNormChunk + tid) * p.HK + hk] = sdr[tid];
}

// Per chunk and key head: the dk addend sum_{t >= j} sD_t q_t, from the later chunks' sums and the
// chunk's own tokens in reverse.
template <class T>
__global__ void gla_norm_dk_kernel(const NormaliserParams<T> p) {
  const int g = blockIdx.x, hk = blockIdx.y;
  const int4 ci = p.map.chunk_of(g);
  const int len = ci.z, t0 = ci.y, row = ci.x;
  if (len == 0) return;
  int srow, begin, end, first;
  p.map.sequence(ci.w, srow, begin, end, first);
  const int c = (t0 - begin) / kNormChunk, chunks = (end - begin + kNormChunk - 1) / kNormChunk;
  for (int col = threadIdx.x; col < p.K; col += blockDim.x) {
    float acc = 0.f;
    for (int e = first + c + 1; e < first + chunks; ++e) acc += p.query_sums[(static_cast<int64_t>(e) * p.HK + hk) * p.K + col];
    for (int r = len - 1; r >= 0; --r) {
      acc += p.sd[(static_cast<int64_t>(g) * kNormChunk + r) * p.HK + hk] * to_float(p.q.row(row, t0 + r, hk)[col]);
      p.add_dk[p.addend(row, t0 + r, hk) + col] = acc;
    }
  }
}

// The three in order over a call's chunks (a grid of chunks x key heads).
template <class T>
void launch_normaliser(const NormaliserParams<T>& p, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(p.HK));
  gla_norm_key_sums_kernel<T><<<grid, 128, 0, stream>>>(p);
  gla_norm_rows_kernel<T><<<grid, 128, 0, stream>>>(p);
  gla_norm_dk_kernel<T><<<grid, 128, 0, stream>>>(p);
  ak::cuda::check_launch("gla normaliser scans");
}

}  // namespace ak::linear::cuda::gla
