// The CUDA backend of the fused bidirectional forward (bidirectional.h), two kernels:
// - sums: a block per (F tile of 64, V tile of 64 or 128, sequence and head, split of the tokens) walks its
//   tokens in chunks of 64, the features formed on the way into shared memory, and adds X^T V (tensor
//   cores) and the normaliser column (X's column sums) into the float32 workspace with atomics;
// - apply: a block per (V tile of 64 or 128, sequence and head, group of token tiles) holds its Y tile in
//   shared memory as two 16-bit terms (high and the rounding rest, so the products keep float32-like
//   sums) and, per tile of 64 queries, forms their features, multiplies and divides in the epilogue.
// Both prefetch the next chunk's raw rows into registers while the current one is multiplied.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/common/warp_tiles.cuh"
#include "linear/feature_map/backend.h"

namespace ak::linear::feature_map::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::stream;
using namespace ::ak::arch;
using ::ak::linear::cuda::warp_mma;

constexpr int kThreads = 256;
constexpr int kTile = 64;          // tokens per chunk, F and V columns per tile
constexpr int kLd = kTile + 8;     // shared row stride of a 64-column tile (conflict-free ldmatrix)
constexpr int kMaxApplyVectors = 8;  // raw 8-element vectors a thread loads per query tile (F <= 256)

struct Seq {
  const void* data;
  int64_t sb, st, sh;  // batch, token and head strides in elements
};

struct Params {
  Seq q, k, v;
  void* out;
  int64_t ob, ot, oh;
  float* sums;
  const float* cos;
  const float* sin;
  int64_t tokens, heads, k_dim, features, v_dim;
  int phi;
  bool normalised;
  float eps, scale;  // scale: the sums' factor before they become 16-bit (1 / T: fp16 keeps its range)
  int64_t chunks_per_split, tiles_per_group;
};

Seq seq_of(const BidirectionalArgs& a, const FloatView& t) {
  return {t.data, a.batch_stride(t), a.token_stride(t), a.head_stride(t)};
}

// phi with the fast exponential (the features are rounded to 16 bits right after).
__device__ __forceinline__ float fast_phi(int phi, float x) {
  if (phi == AK_FMAP_ELU1) return x > 0.f ? x + 1.f : __expf(x);
  if (phi == AK_FMAP_RELU) return fmaxf(x, 0.f);
  return x;
}

// Eight features of row `row` (token t) from its raw 16-bit columns c .. c + 7, as 16-bit.
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

// The raw vector of feature column f (a multiple of 8) of row (b, t, h) of x: its source column is
// f mod K (cosformer's two halves read the same columns).
__device__ __forceinline__ uint4 load_feature_source(const Params& p, const Seq& x, int64_t b, int64_t t, int64_t h,
                                                     int f) {
  const int c = p.cos != nullptr && f >= p.k_dim ? f - static_cast<int>(p.k_dim) : f;
  const uint16_t* row = static_cast<const uint16_t*>(x.data) + b * x.sb + t * x.st + h * x.sh;
  return __ldg(reinterpret_cast<const uint4*>(row + c));
}

__device__ __forceinline__ uint4 load_row8(const Seq& x, int64_t b, int64_t t, int64_t h, int c) {
  const uint16_t* row = static_cast<const uint16_t*>(x.data) + b * x.sb + t * x.st + h * x.sh;
  return __ldg(reinterpret_cast<const uint4*>(row + c));
}

// VT: the value columns of a block (64 or 128; each warp takes half of them).
template <class T, int VT>
__global__ void __launch_bounds__(kThreads) sums_kernel(const Params p) {
  constexpr int kLdz = VT + 8, NT = VT / 16, kZVectors = VT / 32;
  __shared__ alignas(16) T xs[kTile * kLd];   // [token][feature]
  __shared__ alignas(16) T zs[kTile * kLdz];  // [token][value column]
  __shared__ float zpart[4][kTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ftiles = static_cast<int>(p.features / kTile), tiles = ftiles * static_cast<int>(p.v_dim / VT);
  const int tile = blockIdx.x % tiles;
  const int64_t seq = blockIdx.x / tiles, b = seq / p.heads, h = seq % p.heads;
  const int f0 = (tile % ftiles) * kTile, v0 = (tile / ftiles) * VT;
  const int64_t begin = blockIdx.y * p.chunks_per_split * kTile;
  const int64_t end = min(p.tokens, begin + p.chunks_per_split * kTile);
  const bool column_sums = v0 == 0;

  float acc[1][NT][4];
  zero_acc(acc);
  float zsum = 0.f;
  uint4 xr[2], zr[kZVectors];
  auto load = [&](int64_t t0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + kThreads * i, r = idx >> 3, c = (idx & 7) * 8;
      if (t0 + r < end) xr[i] = load_feature_source(p, p.k, b, t0 + r, h, f0 + c);
    }
#pragma unroll
    for (int i = 0; i < kZVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
      if (t0 + r < end) zr[i] = load_row8(p.v, b, t0 + r, h, v0 + c);
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
    __syncthreads();
    if (t0 + kTile < end) load(t0 + kTile);
    warp_mma<T, 1, NT, true, true>(acc, xs, kLd, 16 * (warp & 3), zs, kLdz, (VT / 2) * (warp >> 2), kTile, lane);
    if (column_sums) {
      const int f = tid & 63, part = tid >> 6;
#pragma unroll 4
      for (int j = 0; j < 16; ++j) zsum += to_float(xs[(part * 16 + j) * kLd + f]);
    }
    __syncthreads();
  }
  const int64_t W = p.v_dim + 1;
  float* sums = p.sums + seq * p.features * W;
  for_acc_pairs(acc, 16 * (warp & 3), (VT / 2) * (warp >> 2), lane, [&](int r, int c, const float* v) {
    atomicAdd(sums + (f0 + r) * W + v0 + c, v[0]);
    atomicAdd(sums + (f0 + r) * W + v0 + c + 1, v[1]);
  });
  if (column_sums) {
    zpart[tid >> 6][tid & 63] = zsum;
    __syncthreads();
    if (tid < kTile) {
      atomicAdd(sums + (f0 + tid) * W + p.v_dim, zpart[0][tid] + zpart[1][tid] + zpart[2][tid] + zpart[3][tid]);
    }
  }
}

// Dynamic shared memory of the apply kernel: the Y tile's two terms, the query features, the
// normaliser column and each query's denominator.
size_t apply_smem(int64_t features, int vt) {
  return (2 * features * (vt + 8) + kTile * (features + 8)) * sizeof(uint16_t) + (features + kTile) * sizeof(float);
}

template <class T, int VT>
__global__ void __launch_bounds__(kThreads) apply_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kLdy = VT + 8, NT = VT / 16;
  const int F = static_cast<int>(p.features), ldx = F + 8;
  T* yh = reinterpret_cast<T*>(smem);
  T* yl = yh + F * kLdy;
  T* xs = yl + F * kLdy;
  float* zf = reinterpret_cast<float*>(xs + kTile * ldx);
  float* den = zf + F;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vtiles = static_cast<int>(p.v_dim / VT);
  const int v0 = (blockIdx.x % vtiles) * VT;
  const int64_t seq = blockIdx.x / vtiles, b = seq / p.heads, h = seq % p.heads;
  const int64_t W = p.v_dim + 1;
  const float* sums = p.sums + seq * p.features * W;
  for (int idx = tid; idx < F * VT; idx += kThreads) {
    const int f = idx / VT, c = idx % VT;
    const float y = sums[f * W + v0 + c] * p.scale;
    const T hi = from_float<T>(y);
    yh[f * kLdy + c] = hi;
    yl[f * kLdy + c] = from_float<T>(y - to_float(hi));
  }
  for (int f = tid; f < F; f += kThreads) zf[f] = sums[f * W + p.v_dim];

  const int vectors = F / 32;  // 64 rows x F / 8 vectors over 256 threads
  const int64_t first = blockIdx.y * p.tiles_per_group * kTile;
  const int64_t last = min(p.tokens, first + p.tiles_per_group * kTile);
  uint4 xr[kMaxApplyVectors];
  auto load = [&](int64_t t0) {
#pragma unroll
    for (int i = 0; i < kMaxApplyVectors; ++i) {
      const int idx = tid + kThreads * i, r = idx / (F / 8), c = (idx % (F / 8)) * 8;
      if (i < vectors && t0 + r < p.tokens) xr[i] = load_feature_source(p, p.q, b, t0 + r, h, c);
    }
  };
  if (first < last) load(first);
  const float inv_scale = 1.f / p.scale;
  for (int64_t t0 = first; t0 < last; t0 += kTile) {
    __syncthreads();  // the previous tile's products and denominators are read
#pragma unroll
    for (int i = 0; i < kMaxApplyVectors; ++i) {
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
    const int m0 = 16 * (warp & 3), n0 = (VT / 2) * (warp >> 2);
    warp_mma<T, 1, NT, false, true>(acc, xs, ldx, m0, yh, kLdy, n0, F, lane);
    warp_mma<T, 1, NT, false, true>(acc, xs, ldx, m0, yl, kLdy, n0, F, lane);
    __syncthreads();  // den
    for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, const float* v) {
      const int64_t t = t0 + r;
      if (t >= p.tokens) return;
      const float k = p.normalised ? inv_scale / den[r] : inv_scale;
      T* o = static_cast<T*>(p.out) + b * p.ob + t * p.ot + h * p.oh + v0 + c;
      *reinterpret_cast<uint32_t*>(o) = pack2<T>(v[0] * k, v[1] * k);
    });
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class T, int VT>
void run(const BidirectionalArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t s = stream(a.device);
  const int64_t bh = a.batch * a.heads, W = a.v_dim + 1;
  ak::cuda::check(cudaMemsetAsync(a.sums, 0, static_cast<size_t>(bh * a.features * W) * sizeof(float), s),
                  "fmap_bidirectional memset");
  const int64_t sms = ak::cuda::props(a.device).multiProcessorCount;
  Params p{};
  p.q = seq_of(a, a.q);
  p.k = seq_of(a, a.k);
  p.v = seq_of(a, a.v);
  p.out = a.out.data;
  p.ob = a.batch_stride(a.out);
  p.ot = a.token_stride(a.out);
  p.oh = a.head_stride(a.out);
  p.sums = a.sums;
  p.cos = a.cos;
  p.sin = a.sin;
  p.tokens = a.tokens;
  p.heads = a.heads;
  p.k_dim = a.k_dim;
  p.features = a.features;
  p.v_dim = a.v_dim;
  p.phi = a.phi;
  p.normalised = a.normalised;
  p.eps = a.eps;
  p.scale = 1.f / static_cast<float>(std::max<int64_t>(1, a.tokens));
  // Enough blocks for several waves, each with at least one chunk or tile.
  const int64_t chunks = ceil_div(a.tokens, kTile);
  const int64_t tiles = (a.features / kTile) * (a.v_dim / VT);
  const int64_t splits = std::clamp<int64_t>(ceil_div(8 * sms, tiles * bh), 1, chunks);
  p.chunks_per_split = ceil_div(chunks, splits);
  const int64_t vtiles = a.v_dim / VT;
  const int64_t groups = std::clamp<int64_t>(ceil_div(4 * sms, vtiles * bh), 1, chunks);
  p.tiles_per_group = ceil_div(chunks, groups);
  const dim3 sums_grid(static_cast<unsigned>(tiles * bh), static_cast<unsigned>(ceil_div(chunks, p.chunks_per_split)));
  sums_kernel<T, VT><<<sums_grid, kThreads, 0, s>>>(p);
  check_launch("fmap_bidirectional_sums");
  const size_t smem = apply_smem(a.features, VT);
  ak::cuda::check(cudaFuncSetAttribute(apply_kernel<T, VT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)),
                  "fmap_bidirectional_apply smem");
  const dim3 apply_grid(static_cast<unsigned>(vtiles * bh), static_cast<unsigned>(ceil_div(chunks, p.tiles_per_group)));
  apply_kernel<T, VT><<<apply_grid, kThreads, smem, s>>>(p);
  check_launch("fmap_bidirectional_apply");
}

}  // namespace

// Value tiles of 128 where V allows (the features are formed once per 128 columns instead of 64).
template <class T>
void run_dtype(const BidirectionalArgs& a) {
  if (a.v_dim % 128 == 0) {
    run<T, 128>(a);
  } else {
    run<T, 64>(a);
  }
}

void bidirectional(const BidirectionalArgs& a) {
  if (a.q.dtype == AK_FLOAT16) {
    run_dtype<__half>(a);
  } else {
    run_dtype<__nv_bfloat16>(a);
  }
}

}  // namespace ak::linear::feature_map::cuda
