// The pool copies and the padding rows on a CUDA device, one launch each over every sequence: a block
// reads its sequence's slot (and offsets) from device memory, so the call never waits on the host.
//   dense    a slot and its row of states are contiguous runs: 16-byte accesses on the fp32 side where
//            aligned, every thread issuing all of its loads before it converts and stores (bytes in
//            flight, as the contiguous casts do)
//   swapped  states [.., C, R] against slots [.., R, C]: 64 x 32 tiles through shared memory, so both
//            sides are read and written along their contiguous dim
//   padding  the rows of sequences with index <= 0 set to zero bits, grid-stride over each sequence's
//            rows (their extent is known only on the device)
// An index at or past the pool's slots counts as padding (a gather writes zeros, a scatter nothing): the
// entry refuses such calls before launching, this only keeps a kernel inside the pool.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "arch/sm80.cuh"
#include "cuda/runtime.cuh"
#include "cuda/store_unit.cuh"
#include "linear/decode/pool_cuda.h"
#include "linear/decode/slots.h"

namespace ak::linear::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;

constexpr int kThreads = 256;
constexpr int kTileDim = 32;                    // swapped: a warp's span
constexpr int kTileRows = kThreads / kTileDim;  // rows a pass of the block covers
constexpr int kTileR = 64, kTileC = 32;         // swapped: the tile of a slot's [R, C] per step
constexpr int64_t kMaxGridY = 65535;

struct CopyArgs {
  void* pool;
  int64_t slot_stride;  // elements between slots
  const int32_t* indices;
  const uint8_t* has_initial;  // or null
  float* states;
  int64_t N, slots, slot_size, outer, R, C;
  const ak::cuda::DeviceCheck* check;  // in a graph: write nothing once a check has failed
};

// Sequence n's slot when it takes part (live, inside the pool and, for a gather, resumed); else -1.
__device__ __forceinline__ int64_t slot_of(const CopyArgs& a, int64_t n, bool gather) {
  const int32_t s = a.indices[n];
  if (s <= 0 || s >= a.slots) return -1;
  if (gather && a.has_initial != nullptr && a.has_initial[n] == 0) return -1;
  return s;
}

template <class D, class S>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<D, float>) {
    return ak::arch::to_float(x);
  } else {
    return ak::arch::from_float<D>(x);  // round to nearest even
  }
}

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T e[V];
};

// V elements per access (4: 16 bytes of fp32, the wider side; 1 when unaligned); U accesses per thread,
// at least 64 bytes of loads in flight.
template <class S, int V>
constexpr int kUnroll = std::clamp(64 / (V * static_cast<int>(sizeof(S))), 4, 8);

template <class P, bool kGather, int V>
__global__ void __launch_bounds__(kThreads) dense_kernel(const CopyArgs a) {
  using S = std::conditional_t<kGather, P, float>;
  using D = std::conditional_t<kGather, float, P>;
  constexpr int U = kUnroll<S, V>;
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * U * V;
  const int64_t tiles = (a.slot_size + kTile - 1) / kTile;
  if (ak::cuda::check_failed(a.check)) return;
  for (int64_t n = blockIdx.y; n < a.N; n += gridDim.y) {
    const int64_t slot = slot_of(a, n, kGather);
    if (!kGather && slot < 0) continue;
    const bool zero = slot < 0;  // a gather of padding or a fresh slot
    P* pool = static_cast<P*>(a.pool) + (zero ? 0 : slot * a.slot_stride);
    float* states = a.states + n * a.slot_size;
    const S* src;
    D* dst;
    if constexpr (kGather) {
      src = pool, dst = states;
    } else {
      src = states, dst = pool;
    }
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int64_t base = t * kTile;
      if (base + kTile <= a.slot_size) {
        Vec<S, V> in[U];
        if (!zero) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t i = base + (static_cast<int64_t>(u) * kThreads + threadIdx.x) * V;
            in[u] = *reinterpret_cast<const Vec<S, V>*>(src + i);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Vec<D, V> out;
#pragma unroll
          for (int k = 0; k < V; ++k) out.e[k] = zero ? convert<D>(0.f) : convert<D>(in[u].e[k]);
          const int64_t i = base + (static_cast<int64_t>(u) * kThreads + threadIdx.x) * V;
          *reinterpret_cast<Vec<D, V>*>(dst + i) = out;
        }
      } else {
        for (int64_t i = base + threadIdx.x; i < a.slot_size; i += kThreads) {
          dst[i] = zero ? convert<D>(0.f) : convert<D>(src[i]);
        }
      }
    }
  }
}

// Slot [outer, R, C] against states [outer, C, R], a 64 x 32 tile [r][c] per step; blockDim (32, 8): each
// thread has 8 loads in flight, and every warp access runs along the contiguous dim of its side.
template <class P, bool kGather>
__global__ void __launch_bounds__(kThreads) swapped_kernel(const CopyArgs a) {
  __shared__ float tile[kTileR][kTileC + 1];  // + 1: a column read touches every bank once
  const int64_t R = a.R, C = a.C;
  // 32-bit tile arithmetic: the host keeps a slot's tiles below 2^31.
  const uint32_t tc = static_cast<uint32_t>((C + kTileC - 1) / kTileC);
  const uint32_t per_plane = static_cast<uint32_t>((R + kTileR - 1) / kTileR) * tc;
  const uint32_t tiles = static_cast<uint32_t>(a.outer) * per_plane;
  const int tx = threadIdx.x, ty = threadIdx.y;
  if (ak::cuda::check_failed(a.check)) return;
  for (int64_t n = blockIdx.y; n < a.N; n += gridDim.y) {
    const int64_t slot = slot_of(a, n, kGather);
    if (!kGather && slot < 0) continue;  // the whole block: slot depends on n only
    P* pool = static_cast<P*>(a.pool) + (slot < 0 ? 0 : slot * a.slot_stride);
    float* states = a.states + n * a.slot_size;
    for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const uint32_t o = t / per_plane, rest = t - o * per_plane;
      const int64_t r0 = static_cast<int64_t>(rest / tc) * kTileR, c0 = static_cast<int64_t>(rest % tc) * kTileC;
      P* ps = pool + o * R * C;        // [R, C]
      float* ss = states + o * R * C;  // [C, R]
      if (kGather && slot < 0) {
#pragma unroll
        for (int j = ty; j < kTileC; j += kTileRows) {
#pragma unroll
          for (int h = 0; h < kTileR; h += kTileDim) {
            const int64_t c = c0 + j, r = r0 + h + tx;
            if (c < C && r < R) ss[c * R + r] = 0.f;
          }
        }
        continue;
      }
      if constexpr (kGather) {
#pragma unroll
        for (int j = ty; j < kTileR; j += kTileRows) {
          const int64_t r = r0 + j, c = c0 + tx;
          if (r < R && c < C) tile[j][tx] = ak::arch::to_float(ps[r * C + c]);
        }
        __syncthreads();
#pragma unroll
        for (int j = ty; j < kTileC; j += kTileRows) {
#pragma unroll
          for (int h = 0; h < kTileR; h += kTileDim) {
            const int64_t c = c0 + j, r = r0 + h + tx;
            if (c < C && r < R) ss[c * R + r] = tile[h + tx][j];
          }
        }
      } else {
#pragma unroll
        for (int j = ty; j < kTileC; j += kTileRows) {
#pragma unroll
          for (int h = 0; h < kTileR; h += kTileDim) {
            const int64_t c = c0 + j, r = r0 + h + tx;
            if (c < C && r < R) tile[h + tx][j] = ss[c * R + r];
          }
        }
        __syncthreads();
#pragma unroll
        for (int j = ty; j < kTileR; j += kTileRows) {
          const int64_t r = r0 + j, c = c0 + tx;
          if (r < R && c < C) ps[r * C + c] = ak::arch::from_float<P>(tile[j][tx]);
        }
      }
      __syncthreads();  // the tile is read before the next step writes it
    }
  }
}

struct PadArgs {
  unsigned char* out;
  int64_t row_bytes, T, N;
  const int32_t* indices;
  const void* cu;  // or null
  bool cu64;
};

// Sequence n's rows [begin, end) of the output as [B T, row]: its offsets, or batch row n.
__device__ __forceinline__ void rows_of(const PadArgs& a, int64_t n, int64_t& begin, int64_t& end) {
  if (a.cu == nullptr) {
    begin = n * a.T, end = begin + a.T;
    return;
  }
  const auto at = [&](int64_t i) -> int64_t {
    return a.cu64 ? static_cast<const int64_t*>(a.cu)[i] : static_cast<const int32_t*>(a.cu)[i];
  };
  begin = at(n), end = at(n + 1);
  clamp_rows(a.T, begin, end);
}

// W: the store unit, whose size divides both the output's address and a row's bytes.
template <class W>
__global__ void __launch_bounds__(kThreads) zero_rows_kernel(const PadArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t n = blockIdx.y; n < a.N; n += gridDim.y) {
    if (a.indices[n] > 0) continue;
    int64_t begin, end;
    rows_of(a, n, begin, end);
    W* rows = reinterpret_cast<W*>(a.out + begin * a.row_bytes);
    const int64_t units = (end - begin) * (a.row_bytes / static_cast<int64_t>(sizeof(W)));
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < units; i += step) {
      rows[i] = W{};
    }
  }
}

unsigned grid_x(int64_t wanted) {
  return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, INT32_MAX));
}

template <class P, bool kGather>
void launch_copy(const CopyArgs& a, bool swapped, bool vector, cudaStream_t s) {
  const unsigned y = static_cast<unsigned>(std::min(a.N, kMaxGridY));
  if (swapped) {
    const int64_t tiles = a.outer * ((a.R + kTileR - 1) / kTileR) * ((a.C + kTileC - 1) / kTileC);
    if (tiles > INT32_MAX) fail(AK_ERR_INVALID_ARGUMENT, "states: a slot too large for the swapped layout");
    swapped_kernel<P, kGather><<<dim3(grid_x(tiles), y), dim3(kTileDim, kTileRows), 0, s>>>(a);
    return check_launch("pool_copy_swapped_kernel");
  }
  auto go = [&](auto kernel, int64_t tile) {
    kernel<<<dim3(grid_x((a.slot_size + tile - 1) / tile), y), kThreads, 0, s>>>(a);
  };
  using S = std::conditional_t<kGather, P, float>;
  if (vector) {
    go(dense_kernel<P, kGather, 4>, int64_t{kThreads} * kUnroll<S, 4> * 4);
  } else {
    go(dense_kernel<P, kGather, 1>, int64_t{kThreads} * kUnroll<S, 1>);
  }
  check_launch("pool_copy_dense_kernel");
}

}  // namespace

void pool_copy(const PoolCopy& p) {
  if (p.N == 0 || p.slot_size == 0) return;
  const int device = p.pool->device_index;
  DeviceGuard guard(device);
  CopyArgs a;
  a.pool = p.pool->data, a.slot_stride = p.pool->strides[0];
  a.indices = static_cast<const int32_t*>(p.indices->data);
  a.has_initial = p.gather && p.has_initial ? static_cast<const uint8_t*>(p.has_initial->data) : nullptr;
  a.states = static_cast<float*>(p.states->data);
  a.N = p.N, a.slots = p.slots, a.slot_size = p.slot_size, a.outer = p.outer, a.R = p.R, a.C = p.C;
  // Refused before anything is written (a small read-back) unless trusted; checked on the device in a capture.
  a.check = require_slots_on_device(device, p.indices, p.N, p.slots, p.trusted, "ak_state_pool_copy");
  const bool bf16 = p.pool->dtype == AK_BFLOAT16;
  const int64_t access = bf16 ? 8 : 16;  // 4 pool elements
  const bool vector = p.slot_size % 4 == 0 && ak::cuda::aligned_to(a.pool, access) &&
                      (a.slot_stride * (bf16 ? 2 : 4)) % access == 0 && ak::cuda::aligned_to(a.states, 16);
  const cudaStream_t s = ak::cuda::stream(device);
  if (bf16) {
    p.gather ? launch_copy<__nv_bfloat16, true>(a, p.swapped, vector, s)
             : launch_copy<__nv_bfloat16, false>(a, p.swapped, vector, s);
  } else {
    p.gather ? launch_copy<float, true>(a, p.swapped, vector, s) : launch_copy<float, false>(a, p.swapped, vector, s);
  }
}

void zero_padding_rows(const PaddingRows& p) {
  if (p.N == 0 || p.T == 0 || p.row_bytes == 0) return;
  const int device = p.output->device_index;
  DeviceGuard guard(device);
  PadArgs a;
  a.out = static_cast<unsigned char*>(p.output->data);
  a.row_bytes = p.row_bytes, a.T = p.T, a.N = p.N;
  a.indices = static_cast<const int32_t*>(p.indices->data);
  a.cu = p.cu_seqlens ? p.cu_seqlens->data : nullptr;
  a.cu64 = p.cu_seqlens && p.cu_seqlens->dtype == AK_INT64;
  // Enough blocks to fill the device when every sequence is padding, few when none is.
  const int64_t y = std::min(p.N, kMaxGridY);
  const int64_t fill = static_cast<int64_t>(ak::cuda::props(device).multiProcessorCount) * 8;
  const cudaStream_t s = ak::cuda::stream(device);
  const int64_t unit = ak::cuda::widest_unit(p.row_bytes, {a.out});
  ak::cuda::with_unit(unit, [&](auto w) {
    const int64_t wanted = (p.T * (p.row_bytes / unit) + kThreads - 1) / kThreads;
    const int64_t x = std::clamp<int64_t>(std::min(wanted, fill / y), 1, INT32_MAX);
    zero_rows_kernel<decltype(w)><<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), kThreads, 0, s>>>(a);
  });
  check_launch("zero_rows_kernel");
}

}  // namespace ak::linear::cuda
