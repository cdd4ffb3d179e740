// The kernels of the fused bidirectional feature map (bidirectional_cuda.cu runs them), each a pass
// over a sequence's tokens in tiles of 64, with X the features of a row (phi, then the cosformer
// weights) formed on the way into shared memory and M a float32 [F, V + 1] matrix per sequence:
// - sums:  M = X^T Z over the tokens, Z a tensor's rows of V columns, and column V the column sums
//          of X weighted per token (1, or a float32 per token); each split of the tokens writes its
//          own partial sums and `reduce` adds them in a fixed order (the same result every call).
// - apply: the rows X M[:, :V], divided by X M[:, V] + eps (the forward), scaled (a plain product),
//          or turned into the backward's rows r = dO / D and dD = -(r . o) (Grad).
// - trans: the rows A M[:, :V]^T + w_t M[:, V] (A a tensor's rows of V columns), then through phi and
//          the weights back to the columns of x: the gradient of q or k.
// M enters the products as two 16-bit terms (high and the rounding rest) scaled by m_scale, so float16
// keeps its range and the products keep float32-like sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "linear/common/warp_tiles.cuh"
#include "linear/feature_map/rows.h"

namespace ak::linear::feature_map::cuda {

using namespace ::ak::arch;
using ::ak::linear::cuda::warp_mma;

constexpr int kThreads = 256;
constexpr int kTile = 64;            // tokens per tile, feature columns per tile
constexpr int kLd = kTile + 8;       // shared row stride of a 64-column tile (conflict-free ldmatrix)
constexpr int kMaxRowVectors = 8;    // raw 8-element vectors a thread loads per tile of 64 rows (<= 256 columns)

struct Seq {
  const void* data = nullptr;
  int64_t sb = 0, st = 0, sh = 0;  // batch, token and head strides in elements

  __device__ __forceinline__ const uint16_t* row(int64_t b, int64_t t, int64_t h) const {
    return static_cast<const uint16_t*>(data) + b * sb + t * st + h * sh;
  }
  __device__ __forceinline__ uint16_t* mutable_row(int64_t b, int64_t t, int64_t h) const {
    return const_cast<uint16_t*>(row(b, t, h));
  }
};

struct Params {
  Seq x;          // the features' source (q or k; [.., K])
  Seq z;          // sums: the rows multiplied (v, r or dO; [.., V])
  Seq a;          // trans: the rows multiplied (r, dO or v; [.., V])
  Seq out;        // apply: the output rows ([.., V]); trans: the gradient of x ([.., K])
  Seq d_out;      // apply (Grad): dO
  Seq r_rows;     // apply (Grad): r = dO / D, written
  float* m = nullptr;               // [seq, F, V + 1]
  float* partial = nullptr;         // sums: [seq, splits, F, V + 1]
  int64_t splits = 1;
  float* dd = nullptr;              // apply (Grad): dD per (seq, token), written
  const float* weight = nullptr;    // sums, trans: the per-token weight of column V (null: 1)
  bool extra = true;                // sums: form column V; trans: add its term
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t tokens = 0, heads = 0, k_dim = 0, features = 0, v_dim = 0;
  int phi = 0;
  bool normalised = true;
  float eps = 0.f;
  float m_scale = 1.f, out_scale = 1.f;
  int64_t chunks_per_split = 1, tiles_per_group = 1;
};

// phi with the fast exponential (the features are rounded to 16 bits right after).
__device__ __forceinline__ float fast_phi(int phi, float x) {
  if (phi == AK_FMAP_ELU1) return x > 0.f ? x + 1.f : __expf(x);
  if (phi == AK_FMAP_RELU) return fmaxf(x, 0.f);
  return x;
}

// Eight features (columns f .. f + 7) of token t from their raw 16-bit source columns.
template <class T>
__device__ __forceinline__ uint4 features8(const Params& p, uint4 raw, int f, int64_t t) {
  float w = 1.f;
  if (p.cos != nullptr) w = f < p.k_dim ? p.cos[t] : p.sin[t];
  uint32_t* r = reinterpret_cast<uint32_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = unpack2<T>(r[i]);
    r[i] = pack2<T>(fast_phi(p.phi, x.x) * w, fast_phi(p.phi, x.y) * w);
  }
  return raw;
}

// The raw vector behind feature columns f .. f + 7 (cosformer's two halves read the same columns).
__device__ __forceinline__ uint4 load_feature_source(const Params& p, int64_t b, int64_t t, int64_t h, int f) {
  const int c = p.cos != nullptr && f >= p.k_dim ? f - static_cast<int>(p.k_dim) : f;
  return __ldg(reinterpret_cast<const uint4*>(p.x.row(b, t, h) + c));
}

__device__ __forceinline__ uint4 load8(const Seq& s, int64_t b, int64_t t, int64_t h, int c) {
  return __ldg(reinterpret_cast<const uint4*>(s.row(b, t, h) + c));
}

// Rows [0, rows) x columns [0, width) of M (row stride V + 1) into shared memory as two 16-bit terms
// (row stride ld); `row_of` maps a shared row to M's.
template <class T, class RowOf>
__device__ __forceinline__ void load_m_terms(const Params& p, const float* m, int rows, int width, int col0, T* hi_s,
                                             T* lo_s, int ld, RowOf row_of) {
  const int64_t W = p.v_dim + 1;
  for (int idx = threadIdx.x; idx < rows * width; idx += kThreads) {
    const int r = idx / width, c = idx % width;
    const float y = m[row_of(r) * W + col0 + c] * p.m_scale;
    const T hi = from_float<T>(y);
    hi_s[r * ld + c] = hi;
    lo_s[r * ld + c] = from_float<T>(y - to_float(hi));
  }
}

// VT: the value columns of a block (64 or 128; each warp takes half of them).
template <class T, int VT>
__global__ void __launch_bounds__(kThreads) sums_kernel(const Params p) {
  constexpr int kLdz = VT + 8, NT = VT / 16, kZVectors = VT / 32;
  __shared__ alignas(16) T xs[kTile * kLd];   // [token][feature]
  __shared__ alignas(16) T zs[kTile * kLdz];  // [token][value column]
  __shared__ float wt[kTile];
  __shared__ float zpart[4][kTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ftiles = static_cast<int>(p.features / kTile), tiles = ftiles * static_cast<int>(p.v_dim / VT);
  const int tile = blockIdx.x % tiles;
  const int64_t seq = blockIdx.x / tiles, b = seq / p.heads, h = seq % p.heads;
  const int f0 = (tile % ftiles) * kTile, v0 = (tile / ftiles) * VT;
  const int64_t begin = blockIdx.y * p.chunks_per_split * kTile;
  const int64_t end = min(p.tokens, begin + p.chunks_per_split * kTile);
  const bool column_sums = p.extra && v0 == 0;

  float acc[1][NT][4];
  zero_acc(acc);
  float zsum = 0.f;
  uint4 xr[2], zr[kZVectors];
  auto load = [&](int64_t t0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + kThreads * i, r = idx >> 3, c = (idx & 7) * 8;
      if (t0 + r < end) xr[i] = load_feature_source(p, b, t0 + r, h, f0 + c);
    }
#pragma unroll
    for (int i = 0; i < kZVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
      if (t0 + r < end) zr[i] = load8(p.z, b, t0 + r, h, v0 + c);
    }
  };
  if (begin < end) load(begin);
  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + kThreads * i, r = idx >> 3, c = (idx & 7) * 8;
      *reinterpret_cast<uint4*>(xs + r * kLd + c) = t0 + r < end ? features8<T>(p, xr[i], f0 + c, t0 + r) : zero;
    }
#pragma unroll
    for (int i = 0; i < kZVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
      *reinterpret_cast<uint4*>(zs + r * kLdz + c) = t0 + r < end ? zr[i] : zero;
    }
    if (column_sums && tid < kTile) {
      wt[tid] = t0 + tid >= end ? 0.f : p.weight != nullptr ? p.weight[seq * p.tokens + t0 + tid] : 1.f;
    }
    __syncthreads();
    if (t0 + kTile < end) load(t0 + kTile);
    warp_mma<T, 1, NT, true, true>(acc, xs, kLd, 16 * (warp & 3), zs, kLdz, (VT / 2) * (warp >> 2), kTile, lane);
    if (column_sums) {
      const int f = tid & 63, part = tid >> 6;
#pragma unroll 4
      for (int j = 0; j < 16; ++j) zsum += to_float(xs[(part * 16 + j) * kLd + f]) * wt[part * 16 + j];
    }
    __syncthreads();
  }
  const int64_t W = p.v_dim + 1;
  float* m = p.partial + (seq * p.splits + blockIdx.y) * p.features * W;
  for_acc_pairs(acc, 16 * (warp & 3), (VT / 2) * (warp >> 2), lane, [&](int r, int c, const float* v) {
    m[(f0 + r) * W + v0 + c] = v[0];
    m[(f0 + r) * W + v0 + c + 1] = v[1];
  });
  if (column_sums) {
    zpart[tid >> 6][tid & 63] = zsum;
    __syncthreads();
    if (tid < kTile) m[(f0 + tid) * W + p.v_dim] = zpart[0][tid] + zpart[1][tid] + zpart[2][tid] + zpart[3][tid];
  }
}

// M = the splits' partial sums added in order; column V is 0 without it.
__global__ void __launch_bounds__(kThreads) reduce_kernel(const Params p, int64_t seqs) {
  const int64_t W = p.v_dim + 1, per_seq = p.features * W, n = seqs * per_seq;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t seq = i / per_seq, at = i % per_seq;
    float s = 0.f;
    if (p.extra || at % W != p.v_dim) {
      const float* part = p.partial + seq * p.splits * per_seq + at;
      for (int64_t k = 0; k < p.splits; ++k) s += part[k * per_seq];
    }
    p.m[i] = s;
  }
}

// Dynamic shared memory of the apply kernel: M's two terms, the features, column V of M, the
// denominators and (Grad) the two halves' partial dots.
inline size_t apply_smem(int64_t features, int vt) {
  return (2 * features * (vt + 8) + kTile * (features + 8)) * sizeof(uint16_t) +
         (features + 3 * kTile) * sizeof(float);
}

template <class T, int VT, bool Grad>
__global__ void __launch_bounds__(kThreads) apply_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kLdy = VT + 8, NT = VT / 16;
  const int F = static_cast<int>(p.features), ldx = F + 8;
  T* yh = reinterpret_cast<T*>(smem);
  T* yl = yh + F * kLdy;
  T* xs = yl + F * kLdy;
  float* zf = reinterpret_cast<float*>(xs + kTile * ldx);
  float* den = zf + F;
  float* dots = den + kTile;  // [2][kTile]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vtiles = static_cast<int>(p.v_dim / VT);
  const int v0 = (blockIdx.x % vtiles) * VT;
  const int64_t seq = blockIdx.x / vtiles, b = seq / p.heads, h = seq % p.heads;
  const int64_t W = p.v_dim + 1;
  const float* m = p.m + seq * p.features * W;
  load_m_terms<T>(p, m, F, VT, v0, yh, yl, kLdy, [](int r) { return r; });
  for (int f = tid; f < F; f += kThreads) zf[f] = m[f * W + p.v_dim];

  const int vectors = F / 32;  // 64 rows x F / 8 vectors over 256 threads
  const int64_t first = blockIdx.y * p.tiles_per_group * kTile;
  const int64_t last = min(p.tokens, first + p.tiles_per_group * kTile);
  uint4 xr[kMaxRowVectors];
  auto load = [&](int64_t t0) {
#pragma unroll
    for (int i = 0; i < kMaxRowVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (F / 8), c = (idx % (F / 8)) * 8;
      if (i < vectors && t0 + r < p.tokens) xr[i] = load_feature_source(p, b, t0 + r, h, c);
    }
  };
  if (first < last) load(first);
  const int m0 = 16 * (warp & 3), n0 = (VT / 2) * (warp >> 2);
  for (int64_t t0 = first; t0 < last; t0 += kTile) {
    __syncthreads();  // the previous tile's products, denominators and dots are read
#pragma unroll
    for (int i = 0; i < kMaxRowVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (F / 8), c = (idx % (F / 8)) * 8;
      if (i < vectors) {
        const bool valid = t0 + r < p.tokens;
        *reinterpret_cast<uint4*>(xs + r * ldx + c) =
            valid ? features8<T>(p, xr[i], c, t0 + r) : make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();
    if (t0 + kTile < last) load(t0 + kTile);
    if (p.normalised) {
      const int r = tid >> 2, part = tid & 3;
      float d = 0.f;
      for (int c = part * 8; c < F; c += 32) {
        const uint4 raw = *reinterpret_cast<const uint4*>(xs + r * ldx + c);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 x = unpack2<T>(w[e]);
          d += x.x * zf[c + 2 * e] + x.y * zf[c + 2 * e + 1];
        }
      }
      d = quad_sum(d);
      if (part == 0) den[r] = d + p.eps;
    }
    float acc[1][NT][4];
    zero_acc(acc);
    warp_mma<T, 1, NT, false, true>(acc, xs, ldx, m0, yh, kLdy, n0, F, lane);
    warp_mma<T, 1, NT, false, true>(acc, xs, ldx, m0, yl, kLdy, n0, F, lane);
    __syncthreads();  // den
    if constexpr (!Grad) {
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
        const int64_t t = t0 + r;
        if (t >= p.tokens) return;
        const float k = p.normalised ? 1.f / (p.m_scale * den[r]) : p.out_scale;
        *reinterpret_cast<uint32_t*>(p.out.mutable_row(b, t, h) + v0 + c) = pack2<T>(v[0] * k, v[1] * k);
      });
    } else {
      // r = dO / D in 16 bits (times 1 / m_scale, which the products with M undo), dD = -(r . o).
      float part[2] = {0.f, 0.f};
      for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
        const int64_t t = t0 + r;
        if (t >= p.tokens) return;
        const float2 g = unpack2<T>(*reinterpret_cast<const uint32_t*>(p.d_out.row(b, t, h) + c));
        const float inv = 1.f / (p.m_scale * den[r]);
        const uint32_t packed = pack2<T>(g.x * inv, g.y * inv);
        *reinterpret_cast<uint32_t*>(p.r_rows.mutable_row(b, t, h) + c) = packed;
        const float2 rr = unpack2<T>(packed);
        part[(r - m0) >> 3] += rr.x * (v[0] * inv) + rr.y * (v[1] * inv);
      });
      for (int i = 0; i < 2; ++i) {
        float s = quad_sum(part[i]);
        if ((lane & 3) == 0) dots[(warp >> 2) * kTile + m0 + (lane >> 2) + 8 * i] = s;
      }
      __syncthreads();
      if (tid < kTile && t0 + tid < p.tokens) p.dd[seq * p.tokens + t0 + tid] = -(dots[tid] + dots[kTile + tid]);
    }
  }
}

// Dynamic shared memory of the trans kernel: M's two terms for the block's features (64, or 128 with
// weights), the A tile, the gradient tile in float32, column V of M and the per-token weights.
inline size_t trans_smem(int64_t v_dim, bool weighted) {
  const int64_t nf = weighted ? 128 : 64;
  return (2 * nf * (v_dim + 8) + kTile * (v_dim + 8)) * sizeof(uint16_t) + kTile * (nf + 4) * sizeof(float) +
         (nf + kTile) * sizeof(float);
}

// A block per (source-column tile of 64 of x, sequence and head, group of token tiles): the features
// of those columns (64, or 128 with the cosformer halves), their gradients, then x's.
template <class T, bool Weighted>
__global__ void __launch_bounds__(kThreads) trans_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kNf = Weighted ? 128 : 64, NT = kNf / 16, kLdg = kNf + 4;
  const int V = static_cast<int>(p.v_dim), lda = V + 8;
  T* mh = reinterpret_cast<T*>(smem);
  T* ml = mh + kNf * lda;
  T* as = ml + kNf * lda;
  float* gs = reinterpret_cast<float*>(as + kTile * lda);
  float* ef = gs + kTile * kLdg;
  float* wt = ef + kNf;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ctiles = static_cast<int>(p.k_dim / kTile);
  const int c0 = (blockIdx.x % ctiles) * kTile;
  const int64_t seq = blockIdx.x / ctiles, b = seq / p.heads, h = seq % p.heads;
  const int64_t W = p.v_dim + 1;
  const float* m = p.m + seq * p.features * W;
  const auto feature_of = [&](int j) -> int64_t { return j < kTile ? c0 + j : p.k_dim + c0 + (j - kTile); };
  load_m_terms<T>(p, m, kNf, V, 0, mh, ml, lda, feature_of);
  for (int j = tid; j < kNf; j += kThreads) ef[j] = p.extra ? m[feature_of(j) * W + p.v_dim] * p.m_scale : 0.f;

  const int per_row = V / 8, vectors = V / 32;
  const int64_t first = blockIdx.y * p.tiles_per_group * kTile;
  const int64_t last = min(p.tokens, first + p.tiles_per_group * kTile);
  const int m0 = 16 * (warp & 3), n0 = (kNf / 2) * (warp >> 2);
  for (int64_t t0 = first; t0 < last; t0 += kTile) {
    __syncthreads();  // the previous tile's A rows and gradients are read
#pragma unroll
    for (int i = 0; i < kMaxRowVectors / 2; ++i) {
      const int idx = tid + kThreads * i, r = idx / per_row, c = (idx % per_row) * 8;
      if (i < vectors) {
        *reinterpret_cast<uint4*>(as + r * lda + c) =
            t0 + r < p.tokens ? load8(p.a, b, t0 + r, h, c) : make_uint4(0, 0, 0, 0);
      }
    }
    if (tid < kTile) {
      const bool none = !p.extra || t0 + tid >= p.tokens;
      wt[tid] = none ? 0.f : p.weight != nullptr ? p.weight[seq * p.tokens + t0 + tid] : 1.f;
    }
    __syncthreads();
    float acc[1][NT][4];
    zero_acc(acc);
    warp_mma<T, 1, NT, false, false>(acc, as, lda, m0, mh, lda, n0, V, lane);
    warp_mma<T, 1, NT, false, false>(acc, as, lda, m0, ml, lda, n0, V, lane);
    for_acc_pairs(acc, m0, n0, lane, [&](int r, int j, const float* v) {
      gs[r * kLdg + j] = v[0] * p.out_scale + wt[r] * ef[j];
      gs[r * kLdg + j + 1] = v[1] * p.out_scale + wt[r] * ef[j + 1];
    });
    __syncthreads();
    const int c = tid & 63;
    for (int r = tid >> 6; r < kTile; r += kThreads / kTile) {
      const int64_t t = t0 + r;
      if (t >= p.tokens) break;
      float g = gs[r * kLdg + c];
      if constexpr (Weighted) g = g * p.cos[t] + gs[r * kLdg + kTile + c] * p.sin[t];
      const uint16_t raw = p.x.row(b, t, h)[c0 + c];
      const float x = to_float(*reinterpret_cast<const T*>(&raw));
      const float dx = through_phi(p.phi, x, g);
      const T out = from_float<T>(dx);
      p.out.mutable_row(b, t, h)[c0 + c] = *reinterpret_cast<const uint16_t*>(&out);
    }
  }
}

}  // namespace ak::linear::feature_map::cuda
