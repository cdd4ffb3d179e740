// The CUDA backend of the tensor math: simple kernels, correct before fast. Maps, selections and
// gathers run one thread per output element; a reduction gives each output a warp (or a whole block
// when it reduces many elements) and accumulates in double (int64 for integers); the matrix product
// is a 16 x 16 shared-memory tiling that accumulates in float (double for float64, int64 for integers).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "cuda/store_unit.cuh"
#include "math/backend.h"
#include "math/element.h"
#include "math/plans.h"

namespace ak::math::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::stream;

constexpr int kThreads = 256;

// What a thread computes in: float for 16- and 32-bit floats, double for float64, int64 for integers.
template <class S>
using DeviceCompute = typename Elem<S>::Wide;

// Enough blocks to fill the device, grid-stride loops for the rest.
unsigned grid_for(int device, int64_t items, int per_block = kThreads) {
  const int64_t wanted = (items + per_block - 1) / per_block;
  const int64_t cap = static_cast<int64_t>(ak::cuda::props(device).multiProcessorCount) * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <class S, class D>
__global__ void map_kernel(D* __restrict__ dst, const S* __restrict__ a, const S* __restrict__ b, double scalar,
                           int op, Walk<3> w) {
  using C = DeviceCompute<S>;
  const C s = static_cast<C>(scalar);
  for (int64_t i = thread_index(); i < w.numel; i += thread_count()) {
    int64_t o[3];
    w.offsets(i, o);
    const C x = Elem<S>::load(a[o[1]]);
    const C y = b != nullptr ? static_cast<C>(Elem<S>::load(b[o[2]])) : s;
    dst[o[0]] = map_value<S, D>(op, x, y);
  }
}

template <class T>
__global__ void where_kernel(T* __restrict__ dst, const uint8_t* __restrict__ cond, const T* __restrict__ a,
                             const T* __restrict__ b, Walk<4> w) {
  for (int64_t i = thread_index(); i < w.numel; i += thread_count()) {
    int64_t o[4];
    w.offsets(i, o);
    dst[o[0]] = cond[o[1]] ? a[o[2]] : b[o[3]];
  }
}

template <class A>
__device__ __forceinline__ A warp_reduce(int op, A v) {
  for (int offset = 16; offset > 0; offset /= 2) v = reduce_step(op, v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// kGroup threads (a warp, or the whole block) per output. The loop over outputs is uniform across a
// group, so the block-wide barriers of kGroup == kThreads are reached by every thread.
template <class S, class D, int kGroup>
__global__ void __launch_bounds__(kThreads) reduce_kernel(D* __restrict__ dst, const S* __restrict__ src,
                                                          ReducePlan p, int op) {
  using A = HostCompute<S>;
  constexpr int kGroups = kThreads / kGroup;
  __shared__ A partial[kThreads / 32];
  const int lane = threadIdx.x % kGroup, group = threadIdx.x / kGroup;
  for (int64_t out = static_cast<int64_t>(blockIdx.x) * kGroups + group; out < p.outer.numel;
       out += static_cast<int64_t>(gridDim.x) * kGroups) {
    int64_t o[2];
    p.outer.offsets(out, o);
    A acc = reduce_identity<A>(op);
    for (int64_t j = lane; j < p.inner.numel; j += kGroup) {
      int64_t e[1];
      p.inner.offsets(j, e);
      acc = reduce_step(op, acc, static_cast<A>(Elem<S>::load(src[o[1] + e[0]])));
    }
    acc = warp_reduce(op, acc);
    if constexpr (kGroup > 32) {
      if (lane % 32 == 0) partial[lane / 32] = acc;
      __syncthreads();
      if (lane < 32) acc = warp_reduce(op, lane < kGroup / 32 ? partial[lane] : reduce_identity<A>(op));
      __syncthreads();  // partial is rewritten by the next output
    }
    if (lane == 0) dst[o[0]] = Elem<D>::store(reduce_finish(op, acc, p.inner.numel));
  }
}

constexpr int kTile = 16;

// dst[z] = a[z] b[z], one output element per thread, tiles of a and b staged in shared memory. Tiles
// and batches past the grid are reached by loops that are uniform across the block.
template <class S>
__global__ void __launch_bounds__(kTile* kTile) matmul_kernel(S* __restrict__ dst, const S* __restrict__ a,
                                                              const S* __restrict__ b, MatmulPlan p) {
  using A = DeviceCompute<S>;
  __shared__ A ta[kTile][kTile + 1];
  __shared__ A tb[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row_tiles = (p.m + kTile - 1) / kTile;
  for (int64_t z = blockIdx.z; z < p.batches.numel; z += gridDim.z) {
    int64_t o[3];
    p.batches.offsets(z, o);
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      const int64_t row = rt * kTile + ty, col = static_cast<int64_t>(blockIdx.x) * kTile + tx;
      A acc = A(0);
      for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
        ta[ty][tx] = row < p.m && k0 + tx < p.k ? static_cast<A>(Elem<S>::load(a[o[1] + row * p.a_row + (k0 + tx) * p.a_col]))
                                                : A(0);
        tb[ty][tx] = k0 + ty < p.k && col < p.n ? static_cast<A>(Elem<S>::load(b[o[2] + (k0 + ty) * p.b_row + col * p.b_col]))
                                                : A(0);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile; ++kk) acc = mul_add(acc, ta[ty][kk], tb[kk][tx]);
        __syncthreads();
      }
      if (row < p.m && col < p.n) dst[o[0] + row * p.n + col] = Elem<S>::store(acc);
    }
  }
}

// An index outside [0, dim_size) gives zeros: the entry's caller checks indices, and this never
// reads outside src.
template <class T, class I>
__global__ void index_select_kernel(T* __restrict__ dst, const T* __restrict__ src, const I* __restrict__ index,
                                    IndexPlan p, int64_t total) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t row = i / p.inner.numel, e = i - row * p.inner.numel;
    const int64_t outer = row / p.selected;
    const int64_t at = static_cast<int64_t>(index[row - outer * p.selected]);
    if (at < 0 || at >= p.dim_size) {
      dst[i] = T(0);
      continue;
    }
    int64_t so[1], io[2];
    p.outer.offsets(outer, so);
    p.inner.offsets(e, io);
    dst[i] = src[so[0] + at * p.dim_stride + io[1]];
  }
}


}  // namespace

void map(const ak_tensor& dst, const ak_tensor& a, const ak_tensor* b, double scalar, int op) {
  DeviceGuard guard(dst.device_index);
  const ak_tensor* views[3] = {&dst, &a, b != nullptr ? b : &a};
  const Walk<3> w = make_walk(views);
  const unsigned grid = grid_for(dst.device_index, w.numel);
  cudaStream_t s = stream(dst.device_index);
  with_storage(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* pb = b != nullptr ? data_of<S>(*b) : nullptr;
    if (is_predicate(op)) {
      map_kernel<S, uint8_t><<<grid, kThreads, 0, s>>>(out_of<uint8_t>(dst), data_of<S>(a), pb, scalar, op, w);
    } else {
      map_kernel<S, S><<<grid, kThreads, 0, s>>>(out_of<S>(dst), data_of<S>(a), pb, scalar, op, w);
    }
  });
  check_launch("map_kernel");
}

void where(const ak_tensor& dst, const ak_tensor& cond, const ak_tensor& a, const ak_tensor& b) {
  DeviceGuard guard(dst.device_index);
  const ak_tensor* views[4] = {&dst, &cond, &a, &b};
  const Walk<4> w = make_walk(views);
  with_bits(dtype_size(dst.dtype), [&](auto tag) {
    using T = decltype(tag);
    where_kernel<T><<<grid_for(dst.device_index, w.numel), kThreads, 0, stream(dst.device_index)>>>(
        out_of<T>(dst), data_of<uint8_t>(cond), data_of<T>(a), data_of<T>(b), w);
  });
  check_launch("where_kernel");
}

void reduce(const ak_tensor& dst, const ak_tensor& src, int reduced_dims, int op) {
  DeviceGuard guard(dst.device_index);
  const ReducePlan p = make_reduce_plan(dst, src, reduced_dims);
  cudaStream_t s = stream(dst.device_index);
  // A warp per output for short reductions, the whole block for long ones.
  const bool long_rows = p.inner.numel >= 4096;
  const unsigned grid = grid_for(dst.device_index, p.outer.numel, long_rows ? 1 : kThreads / 32);
  auto launch = [&](auto s_tag, auto d_tag) {
    using S = decltype(s_tag);
    using D = decltype(d_tag);
    if (long_rows) {
      reduce_kernel<S, D, kThreads><<<grid, kThreads, 0, s>>>(out_of<D>(dst), data_of<S>(src), p, op);
    } else {
      reduce_kernel<S, D, 32><<<grid, kThreads, 0, s>>>(out_of<D>(dst), data_of<S>(src), p, op);
    }
  };
  with_storage(src.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!Elem<S>::kFloat) {
      if (dst.dtype != src.dtype) return launch(S{}, int64_t{});  // an integer or bool sum
    }
    launch(S{}, S{});
  });
  check_launch("reduce_kernel");
}

void matmul(const ak_tensor& dst, const ak_tensor& a, const ak_tensor& b) {
  DeviceGuard guard(dst.device_index);
  const MatmulPlan p = make_matmul_plan(dst, a, b);
  const int64_t col_tiles = (p.n + kTile - 1) / kTile, row_tiles = (p.m + kTile - 1) / kTile;
  require(col_tiles < (int64_t{1} << 31), "b: too many columns for one product");
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min<int64_t>(row_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(p.batches.numel, 65535)));
  with_storage(dst.dtype, [&](auto tag) {
    using S = decltype(tag);
    matmul_kernel<S><<<grid, dim3(kTile, kTile), 0, stream(dst.device_index)>>>(out_of<S>(dst), data_of<S>(a),
                                                                               data_of<S>(b), p);
  });
  check_launch("matmul_kernel");
}

namespace {

// dst row m = src row index[m] (zeros for an index outside src's rows: the caller checks indices, and this
// never reads outside src).
template <class U, class I>
__global__ void gather_rows_kernel(U* __restrict__ dst, const U* __restrict__ src, const I* __restrict__ index,
                                   int64_t rows, int64_t row, int64_t total) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t m = i / row, at = static_cast<int64_t>(index[m]);
    dst[i] = at >= 0 && at < rows ? src[at * row + (i - m * row)] : U{};
  }
}

// dst[index[m]] = src[m] row by row; an index outside dst's rows is skipped (the caller checks).
template <class U>
__global__ void scatter_rows_kernel(U* __restrict__ dst, const U* __restrict__ src, const int32_t* __restrict__ index,
                                    int64_t rows, int64_t row, int64_t total) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t m = i / row, at = index[m];
    if (at >= 0 && at < rows) dst[at * row + (i - m * row)] = src[i];
  }
}

}  // namespace

void index_select(const ak_tensor& dst, const ak_tensor& src, int dim, const ak_tensor& index) {
  DeviceGuard guard(dst.device_index);
  const IndexPlan p = make_index_plan(dst, src, dim, index);
  const int64_t total = numel(dst);
  cudaStream_t s = stream(dst.device_index);
  if (p.outer.numel == 1 && is_contiguous(src) && total > 0) {  // whole rows of a contiguous src
    const int64_t row_bytes = p.inner.numel * static_cast<int64_t>(dtype_size(src.dtype));
    // Whole rows in the widest unit that divides the row and both addresses: 16-byte moves for rows of KB.
    const int64_t unit = ak::cuda::widest_unit(row_bytes, {dst.data, src.data});
    const int64_t row = row_bytes / unit, units = p.selected * row;
    ak::cuda::with_unit(unit, [&](auto tag) {
      using U = decltype(tag);
      const unsigned grid = grid_for(dst.device_index, units);
      if (index.dtype == AK_INT32) {
        gather_rows_kernel<U, int32_t><<<grid, kThreads, 0, s>>>(out_of<U>(dst), data_of<U>(src),
                                                                 data_of<int32_t>(index), p.dim_size, row, units);
      } else {
        gather_rows_kernel<U, int64_t><<<grid, kThreads, 0, s>>>(out_of<U>(dst), data_of<U>(src),
                                                                 data_of<int64_t>(index), p.dim_size, row, units);
      }
    });
    check_launch("gather_rows_kernel");
    return;
  }
  const unsigned grid = grid_for(dst.device_index, total);
  with_bits(dtype_size(src.dtype), [&](auto tag) {
    using T = decltype(tag);
    if (index.dtype == AK_INT32) {
      index_select_kernel<T, int32_t><<<grid, kThreads, 0, s>>>(out_of<T>(dst), data_of<T>(src),
                                                                data_of<int32_t>(index), p, total);
    } else {
      index_select_kernel<T, int64_t><<<grid, kThreads, 0, s>>>(out_of<T>(dst), data_of<T>(src),
                                                                data_of<int64_t>(index), p, total);
    }
  });
  check_launch("index_select_kernel");
}

void scatter_rows(const ak_tensor& dst, const ak_tensor& src, const ak_tensor& index) {
  DeviceGuard guard(dst.device_index);
  const int64_t total = numel(src);
  if (total == 0) return;
  const int64_t row_bytes = total / src.shape[0] * static_cast<int64_t>(dtype_size(src.dtype));
  const int64_t unit = ak::cuda::widest_unit(row_bytes, {dst.data, src.data});
  const int64_t row = row_bytes / unit, units = src.shape[0] * row;
  ak::cuda::with_unit(unit, [&](auto tag) {
    using U = decltype(tag);
    scatter_rows_kernel<U><<<grid_for(dst.device_index, units), kThreads, 0, stream(dst.device_index)>>>(
        out_of<U>(dst), data_of<U>(src), data_of<int32_t>(index), dst.shape[0], row, units);
  });
  check_launch("scatter_rows_kernel");
}

}  // namespace ak::math::cuda
