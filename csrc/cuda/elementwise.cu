// CUDA element-wise work: copies (casts, permutes, strided views), fills and random numbers.
// Contiguous casts move 8 elements per thread with 16-byte accesses, since at 1 GiB they are
// bound by memory bandwidth alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

#include "arch/sm80.cuh"
#include "core/layout.h"
#include "core/numeric.h"
#include "core/random.h"
#include "cuda/backend.h"
#include "cuda/runtime.cuh"

namespace ak::cuda {
namespace {

// ---- element conversions (the same rounding as the CPU backend) ----

struct Bool8 {
  uint8_t v;
};
struct Float8 {  // e4m3 (numeric.h)
  uint8_t v;
};

template <class T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static double to_double(float x) { return x; }
  __device__ static float to_float(float x) { return x; }
  __device__ static float from_double(double d) { return static_cast<float>(d); }
  __device__ static float from_float(float f) { return f; }
  static constexpr bool kSmallFloat = true;
};
template <>
struct Elem<double> {
  __device__ static double to_double(double x) { return x; }
  __device__ static float to_float(double x) { return static_cast<float>(x); }
  __device__ static double from_double(double d) { return d; }
  __device__ static double from_float(float f) { return f; }
  static constexpr bool kSmallFloat = false;
};
// The 16-bit floats: read through fp32, written from fp64 with a single rounding (numeric.h).
template <class H>
struct Elem16 {
  __device__ static float to_float(H x) { return ::ak::arch::to_float(x); }
  __device__ static double to_double(H x) { return to_float(x); }
  __device__ static H from_float(float f) { return ::ak::arch::from_float<H>(f); }
  __device__ static H from_double(double d) {
    return bit_cast<H>(std::is_same_v<H, __half> ? double_to_f16(d) : double_to_bf16(d));
  }
  static constexpr bool kSmallFloat = true;
};
template <>
struct Elem<__half> : Elem16<__half> {};
template <>
struct Elem<__nv_bfloat16> : Elem16<__nv_bfloat16> {};
template <>
struct Elem<int32_t> {
  __device__ static double to_double(int32_t x) { return x; }
  __device__ static int32_t from_double(double d) { return double_to_i32(d); }
  static constexpr bool kSmallFloat = false;
};
template <>
struct Elem<int64_t> {
  __device__ static double to_double(int64_t x) { return static_cast<double>(x); }
  __device__ static int64_t from_double(double d) { return double_to_i64(d); }
  static constexpr bool kSmallFloat = false;
};
template <>
struct Elem<Float8> {
  __device__ static float to_float(Float8 x) { return e4m3_to_float(x.v); }
  __device__ static double to_double(Float8 x) { return to_float(x); }
  __device__ static Float8 from_float(float f) { return Float8{double_to_e4m3(f)}; }
  __device__ static Float8 from_double(double d) { return Float8{double_to_e4m3(d)}; }
  static constexpr bool kSmallFloat = true;
};
template <>
struct Elem<Bool8> {
  __device__ static double to_double(Bool8 x) { return x.v ? 1.0 : 0.0; }
  __device__ static Bool8 from_double(double d) { return Bool8{static_cast<uint8_t>(d != 0.0)}; }
  static constexpr bool kSmallFloat = false;
};

template <class S, class D>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<S, D>) {
    return x;  // a strided copy: the bits as they are (int64 would lose bits through a double)
  } else if constexpr (std::is_same_v<S, int64_t> && Elem<D>::kSmallFloat) {
    return Elem<D>::from_double(int64_to_double_odd(x));  // one rounding, as on the CPU
  } else if constexpr (Elem<S>::kSmallFloat && Elem<D>::kSmallFloat) {
    return Elem<D>::from_float(Elem<S>::to_float(x));  // float holds every such value exactly
  } else if constexpr (std::is_same_v<S, int64_t> && std::is_same_v<D, int32_t>) {
    return x > INT32_MAX ? INT32_MAX : (x < INT32_MIN ? INT32_MIN : static_cast<int32_t>(x));
  } else {
    return Elem<D>::from_double(Elem<S>::to_double(x));
  }
}

// ---- contiguous casts ----
//
// A cast reads and writes each element once, so at 1 GiB only memory bandwidth matters. It needs
// (1) full-width accesses: each access moves 16 bytes of the wider type; (2) coalescing: lane i of
// a warp touches the i-th vector of a run, so every warp-wide load and store is one contiguous span
// (a thread loading 32 contiguous bytes as two 16-byte halves would split each warp access over
// twice the span); and (3) enough bytes in flight: a thread issues all of its loads, 64 bytes or
// more, before it converts and stores anything (one 16-byte load per thread reached only 57% of the
// copy ceiling on the H200 for bf16 -> f32).

template <int kBytes>
struct RawVec;
template <>
struct RawVec<16> {
  using type = uint4;
};
template <>
struct RawVec<8> {
  using type = uint2;
};
template <>
struct RawVec<4> {
  using type = unsigned int;
};
template <>
struct RawVec<2> {
  using type = unsigned short;
};

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T e[N];
};

template <class T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  using Raw = typename RawVec<sizeof(T) * N>::type;
  const Raw raw = __ldg(reinterpret_cast<const Raw*>(p));
  Vec<T, N> v;
  memcpy(&v, &raw, sizeof(Raw));
  return v;
}

template <class T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  using Raw = typename RawVec<sizeof(T) * N>::type;
  Raw raw;
  memcpy(&raw, &v, sizeof(Raw));
  *reinterpret_cast<Raw*>(p) = raw;
}

template <class S, class D>
struct CastTiling {
  static constexpr int kThreads = 256;
  // Elements per access: 16 bytes of the wider type.
  static constexpr int kVec = 16 / static_cast<int>(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));
  static constexpr int kLoadBytes = kVec * static_cast<int>(sizeof(S));
  // Accesses per thread: at least 64 bytes of loads in flight, 4 to 8 accesses.
  static constexpr int kUnroll = 64 / kLoadBytes < 4 ? 4 : (64 / kLoadBytes > 8 ? 8 : 64 / kLoadBytes);
  static constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kUnroll * kVec;
};

// One tile of kTile elements per block; every block but the last has a full tile.
template <class S, class D>
__global__ void __launch_bounds__(256) cast_contiguous_kernel(const S* __restrict__ src, D* __restrict__ dst,
                                                               int64_t n) {
  using T = CastTiling<S, D>;
  constexpr int V = T::kVec, U = T::kUnroll;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * T::kTile;
  if (base + T::kTile <= n) {
    Vec<S, V> in[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      in[u] = load_vec<S, V>(src + base + (static_cast<int64_t>(u) * T::kThreads + threadIdx.x) * V);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      Vec<D, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.e[k] = convert<S, D>(in[u].e[k]);
      store_vec<D, V>(dst + base + (static_cast<int64_t>(u) * T::kThreads + threadIdx.x) * V, out);
    }
    return;
  }
  // The last, partial tile: element by element (coalesced, at most kTile / 256 per thread).
  for (int64_t i = base + threadIdx.x; i < n; i += T::kThreads) dst[i] = convert<S, D>(src[i]);
}

// One element per thread, any strides (up to AK_MAX_RANK dims).
struct StridedArgs {
  int rank;
  int64_t shape[AK_MAX_RANK];
  int64_t dst_strides[AK_MAX_RANK];
  int64_t src_strides[AK_MAX_RANK];
  int64_t numel;
};

template <class S, class D>
__global__ void cast_strided_kernel(const S* __restrict__ src, D* __restrict__ dst, StridedArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += step) {
    int64_t rest = i, so = 0, d_off = 0;
    for (int k = a.rank - 1; k >= 0; --k) {
      const int64_t c = rest % a.shape[k];
      rest /= a.shape[k];
      so += c * a.src_strides[k];
      d_off += c * a.dst_strides[k];
    }
    dst[d_off] = convert<S, D>(src[so]);
  }
}

// Same dtype, innermost dimension contiguous on both sides, rows a multiple of 16 bytes: copy rows
// with 16-byte accesses (the BTHD <-> BHTD permutes the ops use). This general form serves 2^31
// chunks (32 GiB) and more; copy_rows_fast_kernel below serves the rest.
template <class Index>
__global__ void copy_rows_kernel(const char* __restrict__ src, char* __restrict__ dst, StridedArgs a,
                                 Index chunks_per_row, Index total_chunks, int esize) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index c = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; c < total_chunks; c += step) {
    Index row = c / chunks_per_row;
    const Index chunk = c - row * chunks_per_row;
    int64_t so = 0, d_off = 0;
    for (int k = a.rank - 2; k >= 0; --k) {
      const Index extent = static_cast<Index>(a.shape[k]);
      const Index coord = row % extent;
      row /= extent;
      so += static_cast<int64_t>(coord) * a.src_strides[k];
      d_off += static_cast<int64_t>(coord) * a.dst_strides[k];
    }
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(src + so * esize) + chunk);
    reinterpret_cast<uint4*>(dst + d_off * esize)[chunk] = v;
  }
}

// Division by a run-time constant without a divide instruction (Granlund and Montgomery, 1994):
// q = hi32(n * m) >> s with m = ceil(2^(31 + l) / d), l = ceil(log2 d); exact for n < 2^31.
struct FastDiv {
  uint32_t d = 1, m = 0, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    if (d <= 1) return;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    m = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / d);
    s = l - 1;
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return d == 1 ? n : __umulhi(n, m) >> s; }
};

// The row copy for fewer than 2^31 chunks: index arithmetic with FastDiv (a 32-bit divide costs
// tens of instructions, and at 16 bytes per chunk that would bound the kernel), and four chunks in
// flight per thread.
struct RowArgs {
  int outer_rank;  // dimensions above the contiguous row
  FastDiv extent[AK_MAX_RANK];
  int64_t src_strides[AK_MAX_RANK];
  int64_t dst_strides[AK_MAX_RANK];
  FastDiv chunks_per_row;
  uint32_t total_chunks;
  int esize;
};

constexpr int kRowUnroll = 4;

__global__ void __launch_bounds__(256) copy_rows_fast_kernel(const char* __restrict__ src, char* __restrict__ dst,
                                                              RowArgs a) {
  const uint32_t first = blockIdx.x * (blockDim.x * kRowUnroll) + threadIdx.x;
  uint4 v[kRowUnroll];
  int64_t d_off[kRowUnroll];
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    const uint32_t c = first + u * blockDim.x;
    if (c >= a.total_chunks) break;
    uint32_t row = a.chunks_per_row.div(c);
    const uint32_t chunk = c - row * a.chunks_per_row.d;
    int64_t so = 0, dof = 0;
    for (int k = a.outer_rank - 1; k >= 0; --k) {
      const uint32_t next = a.extent[k].div(row);
      const uint32_t coord = row - next * a.extent[k].d;
      row = next;
      so += static_cast<int64_t>(coord) * a.src_strides[k];
      dof += static_cast<int64_t>(coord) * a.dst_strides[k];
    }
    v[u] = __ldg(reinterpret_cast<const uint4*>(src + so * a.esize) + chunk);
    d_off[u] = dof * a.esize + static_cast<int64_t>(chunk) * 16;
  }
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    if (first + u * blockDim.x >= a.total_chunks) break;
    *reinterpret_cast<uint4*>(dst + d_off[u]) = v[u];
  }
}

template <class D>
__global__ void random_kernel(D* __restrict__ dst, int64_t n, uint64_t seed, uint64_t offset, int kind, double a,
                              double b) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    dst[i] = Elem<D>::from_double(random_value(seed, offset + static_cast<uint64_t>(i), kind, a, b));
  }
}

__global__ void fill_kernel(uint4* __restrict__ dst, int64_t vectors, uint4 pattern) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += step) {
    dst[i] = pattern;
  }
}

__global__ void fill_bytes_kernel(unsigned char* __restrict__ dst, int64_t bytes, uint4 pattern) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < bytes) dst[i] = reinterpret_cast<const unsigned char*>(&pattern)[i % 16];
}

// ---- dtype dispatch ----

template <class F>
void with_type(int32_t dtype, F&& f) {
  switch (dtype) {
    case AK_FLOAT32: f(float{}); break;
    case AK_FLOAT64: f(double{}); break;
    case AK_FLOAT16: f(__half{}); break;
    case AK_BFLOAT16: f(__nv_bfloat16{}); break;
    case AK_INT32: f(int32_t{}); break;
    case AK_INT64: f(int64_t{}); break;
    case AK_BOOL: f(Bool8{}); break;
    case AK_FLOAT8_E4M3: f(Float8{}); break;
    default: fail(AK_ERR_INVALID_ARGUMENT, "dtype: unknown code " + std::to_string(dtype));
  }
}

unsigned grid_for(int device, int64_t work_items, int threads) {
  const int64_t wanted = (work_items + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(props(device).multiProcessorCount) * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

StridedArgs strided_args(const CopyPlan& p) {
  StridedArgs a{};
  a.rank = p.rank;
  a.numel = p.numel;
  for (int i = 0; i < p.rank; ++i) {
    a.shape[i] = p.shape[i];
    a.dst_strides[i] = p.dst_strides[i];
    a.src_strides[i] = p.src_strides[i];
  }
  return a;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void copy_strided(const ak_tensor& dst, const ak_tensor& src) {
  const CopyPlan plan = make_copy_plan(dst, src);
  if (plan.numel == 0) return;
  DeviceGuard guard(dst.device_index);
  cudaStream_t s = stream(dst.device_index);
  const int device = dst.device_index;
  const int threads = 256;
  const size_t esize = dtype_size(src.dtype);

  if (plan.flat() && dst.dtype == src.dtype) {
    AK_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(plan.numel) * esize,
                                  cudaMemcpyDeviceToDevice, s));
    return;
  }
  if (plan.flat() && aligned16(dst.data) && aligned16(src.data)) {
    with_type(src.dtype, [&](auto s_tag) {
      with_type(dst.dtype, [&](auto d_tag) {
        using S = decltype(s_tag);
        using D = decltype(d_tag);
        using T = CastTiling<S, D>;
        const int64_t blocks = (plan.numel + T::kTile - 1) / T::kTile;
        require(blocks < (int64_t{1} << 31), "src: too many elements for one cast");
        cast_contiguous_kernel<S, D><<<static_cast<unsigned>(blocks), T::kThreads, 0, s>>>(
            static_cast<const S*>(src.data), static_cast<D*>(dst.data), plan.numel);
      });
    });
    check_launch("cast_contiguous_kernel");
    return;
  }
  const StridedArgs args = strided_args(plan);
  const int inner = plan.rank - 1;
  const int64_t row_bytes = plan.rank > 0 ? plan.shape[inner] * static_cast<int64_t>(esize) : 0;
  if (dst.dtype == src.dtype && plan.rank >= 2 && plan.dst_strides[inner] == 1 && plan.src_strides[inner] == 1 &&
      row_bytes % 16 == 0 && aligned16(dst.data) && aligned16(src.data)) {
    bool strides_aligned = true;
    for (int k = 0; k < inner; ++k) {
      strides_aligned &= (plan.dst_strides[k] * static_cast<int64_t>(esize)) % 16 == 0;
      strides_aligned &= (plan.src_strides[k] * static_cast<int64_t>(esize)) % 16 == 0;
    }
    if (strides_aligned) {
      const int64_t chunks_per_row = row_bytes / 16;
      const int64_t total = plan.numel / plan.shape[inner] * chunks_per_row;
      if (total < (int64_t{1} << 31)) {
        RowArgs rows{};
        rows.outer_rank = inner;
        for (int k = 0; k < inner; ++k) {
          rows.extent[k] = FastDiv(static_cast<uint32_t>(plan.shape[k]));
          rows.src_strides[k] = plan.src_strides[k];
          rows.dst_strides[k] = plan.dst_strides[k];
        }
        rows.chunks_per_row = FastDiv(static_cast<uint32_t>(chunks_per_row));
        rows.total_chunks = static_cast<uint32_t>(total);
        rows.esize = static_cast<int>(esize);
        const int64_t per_block = int64_t{threads} * kRowUnroll;
        copy_rows_fast_kernel<<<static_cast<unsigned>((total + per_block - 1) / per_block), threads, 0, s>>>(
            static_cast<const char*>(src.data), static_cast<char*>(dst.data), rows);
      } else {
        copy_rows_kernel<uint64_t><<<grid_for(device, total, threads), threads, 0, s>>>(
            static_cast<const char*>(src.data), static_cast<char*>(dst.data), args,
            static_cast<uint64_t>(chunks_per_row), static_cast<uint64_t>(total), static_cast<int>(esize));
      }
      check_launch("copy_rows_kernel");
      return;
    }
  }
  with_type(src.dtype, [&](auto s_tag) {
    with_type(dst.dtype, [&](auto d_tag) {
      using S = decltype(s_tag);
      using D = decltype(d_tag);
      cast_strided_kernel<S, D><<<grid_for(device, plan.numel, threads), threads, 0, s>>>(
          static_cast<const S*>(src.data), static_cast<D*>(dst.data), args);
    });
  });
  check_launch("cast_strided_kernel");
}

void fill(const ak_tensor& dst, double value) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  DeviceGuard guard(dst.device_index);
  const size_t esize = dtype_size(dst.dtype);
  // Convert on the host with the CPU backend's rounding, then replicate into a 16-byte pattern.
  unsigned char one[8] = {};
  switch (dst.dtype) {
    case AK_FLOAT32: { const float v = static_cast<float>(value); std::memcpy(one, &v, 4); break; }
    case AK_FLOAT64: std::memcpy(one, &value, 8); break;
    case AK_FLOAT16: { const uint16_t v = double_to_f16(value); std::memcpy(one, &v, 2); break; }
    case AK_BFLOAT16: { const uint16_t v = double_to_bf16(value); std::memcpy(one, &v, 2); break; }
    case AK_INT32: { const int32_t v = double_to_i32(value); std::memcpy(one, &v, 4); break; }
    case AK_INT64: { const int64_t v = double_to_i64(value); std::memcpy(one, &v, 8); break; }
    case AK_FLOAT8_E4M3: one[0] = double_to_e4m3(value); break;
    default: one[0] = value != 0.0 ? 1 : 0; break;
  }
  uint4 pattern;
  unsigned char* pb = reinterpret_cast<unsigned char*>(&pattern);
  for (size_t i = 0; i < 16; ++i) pb[i] = one[i % esize];
  const int64_t bytes = n * static_cast<int64_t>(esize);
  const int64_t vectors = bytes / 16;
  cudaStream_t s = stream(dst.device_index);
  const int threads = 256;
  if (vectors > 0) {
    fill_kernel<<<grid_for(dst.device_index, vectors, threads), threads, 0, s>>>(static_cast<uint4*>(dst.data),
                                                                                vectors, pattern);
    check_launch("fill_kernel");
  }
  const int64_t tail = bytes - vectors * 16;
  if (tail > 0) {
    fill_bytes_kernel<<<1, 16, 0, s>>>(static_cast<unsigned char*>(dst.data) + vectors * 16, tail, pattern);
    check_launch("fill_bytes_kernel");
  }
}

template <class D>
__global__ void arange_kernel(D* __restrict__ dst, int64_t n, double start, double step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = Elem<D>::from_double(start + static_cast<double>(i) * step);
  }
}

// One grid-stride launch over dst's elements on its device's stream: launch(n, grid, threads, stream).
template <class F>
void over_elements(const ak_tensor& dst, F&& launch) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  DeviceGuard guard(dst.device_index);
  const int threads = 256;
  launch(n, grid_for(dst.device_index, n, threads), threads, stream(dst.device_index));
}

void arange(const ak_tensor& dst, double start, double step) {
  require(dst.dtype != AK_BOOL, "dst: a sequence needs a numeric dtype, got bool");
  over_elements(dst, [&](int64_t n, unsigned grid, int threads, cudaStream_t s) {
    with_type(dst.dtype, [&](auto tag) {
      using D = decltype(tag);
      arange_kernel<<<grid, threads, 0, s>>>(static_cast<D*>(dst.data), n, start, step);
    });
    check_launch("arange_kernel");
  });
}

void random(const ak_tensor& dst, uint64_t seed, uint64_t offset, int kind, double a, double b) {
  require(is_float_dtype(dst.dtype) || dst.dtype == AK_FLOAT8_E4M3, "dst: random numbers need a floating dtype");
  over_elements(dst, [&](int64_t n, unsigned grid, int threads, cudaStream_t s) {
    with_type(dst.dtype, [&](auto tag) {
      using D = decltype(tag);
      if constexpr (std::is_same_v<D, float> || std::is_same_v<D, double> || std::is_same_v<D, __half> ||
                    std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, Float8>) {
        random_kernel<<<grid, threads, 0, s>>>(static_cast<D*>(dst.data), n, seed, offset, kind, a, b);
      }
    });
    check_launch("random_kernel");
  });
}

}  // namespace ak::cuda
