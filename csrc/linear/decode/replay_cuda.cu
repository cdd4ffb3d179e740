// The replay plan on a CUDA device (replay_problem.h), read and written in device memory only:
//   plan   the offsets and lists set to "nothing" (zeros, new counts -1), one block scanning the sequences'
//          run lengths into run A's and run B's offsets, then a block per sequence writing its tokens' codes
//   rows   out[m] = the row a code names, of two sources, or zeros: grid-stride over rows x store units
//   keep   each live slot's kept rows from run B into its caches; the commit writes the new counts
// Inside a graph, every kernel returns at once when a check of the graph has failed, so a failed call
// writes nothing (its plan stays empty and the later steps of the call move nothing).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "arch/sm80.cuh"
#include "cuda/backend.h"
#include "cuda/device_check.h"
#include "cuda/runtime.cuh"
#include "cuda/store_unit.cuh"
#include "linear/decode/replay_cuda.h"
#include "linear/decode/slots.h"

namespace ak::linear::cuda {
namespace {

using ak::cuda::check_launch;
using ak::cuda::DeviceCheck;
using ak::cuda::DeviceGuard;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxGrid = 65535;

// The block's exclusive prefix of x, and in `total` the sum over the block.
__device__ int64_t block_exclusive(int64_t x, int64_t& total) {
  __shared__ int64_t warp_sums[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t inclusive = ak::arch::warp_inclusive_scan(x, lane);
  __syncthreads();  // warp_sums of the previous call has been read
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += warp_sums[w];
    total += warp_sums[w];
  }
  return before + inclusive - x;
}

// One block: run A's and run B's offsets (clamped to their capacities, so bad offsets give valid runs).
__global__ void __launch_bounds__(kThreads)
    scan_kernel(const ReplayInputs in, const ReplayLayout L, int32_t* cu_a, int32_t* cu_b, const DeviceCheck* check) {
  if (ak::cuda::check_failed(check)) return;
  int64_t a = 0, b = 0;
  for (int64_t base = 0; base < L.N; base += kThreads) {
    const int64_t n = base + threadIdx.x;
    int64_t full = 0, rest = 0;
    if (n < L.N) {
      const ReplaySequence s = replay_sequence(in, n);
      if (s.slot >= 0) full = s.full, rest = s.total - s.full;
    }
    int64_t sum_a, sum_b;
    const int64_t at_a = a + block_exclusive(full, sum_a);
    const int64_t at_b = b + block_exclusive(rest, sum_b);
    if (n < L.N) {
      cu_a[n] = static_cast<int32_t>(min(at_a, L.cap_a()));
      cu_b[n] = static_cast<int32_t>(min(at_b, L.cap_b()));
    }
    a += sum_a, b += sum_b;
  }
  if (threadIdx.x == 0) {
    cu_a[L.N] = static_cast<int32_t>(min(a, L.cap_a()));
    cu_b[L.N] = static_cast<int32_t>(min(b, L.cap_b()));
  }
}

// A block per sequence (grid-stride): its tokens' codes and its new count.
__global__ void __launch_bounds__(kThreads)
    fill_kernel(const ReplayInputs in, const ReplayLayout L, const int32_t* cu_a, const int32_t* cu_b, int32_t* plan,
                const DeviceCheck* check) {
  if (ak::cuda::check_failed(check)) return;
  for (int64_t n = blockIdx.x; n < L.N; n += gridDim.x) {
    const ReplaySequence s = replay_sequence(in, n);
    if (s.slot < 0) continue;
    const int64_t a0 = cu_a[n], a1 = cu_a[n + 1], b0 = cu_b[n];
    for (int64_t j = threadIdx.x; j < s.total; j += kThreads) replay_fill(s, n, j, a0, a1, b0, L, plan);
    if (threadIdx.x == 0) plan[L.count() + n] = static_cast<int32_t>(s.total - s.full);
  }
}

struct RowsArgs {
  const unsigned char* first;
  const unsigned char* second;
  const int32_t* codes;
  unsigned char* out;
  int64_t rows1, rows2, M, units;  // units: store units per row
  const DeviceCheck* check;
};

// W: the store unit, whose size divides every row's bytes and address.
template <class W>
__global__ void __launch_bounds__(kThreads) rows_kernel(const RowsArgs a) {
  if (ak::cuda::check_failed(a.check)) return;
  const int64_t all = a.M * a.units, step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < all; i += step) {
    const int64_t m = i / a.units, u = i - m * a.units;
    const int64_t c = a.codes[m];
    W v{};
    if (c > 0 && c - 1 < a.rows1) {
      v = reinterpret_cast<const W*>(a.first)[(c - 1) * a.units + u];
    } else if (c < 0 && -c - 1 < a.rows2) {
      v = reinterpret_cast<const W*>(a.second)[(-c - 1) * a.units + u];
    }
    reinterpret_cast<W*>(a.out)[i] = v;
  }
}

struct KeepArgs {
  const unsigned char* run;
  unsigned char* cache;
  const int32_t* plan;
  const int32_t* indices;
  int32_t* counts;  // the commit; else null
  ReplayLayout L;
  int64_t slots, run_rows, units;
  const DeviceCheck* check;
};

template <class W>
__global__ void __launch_bounds__(kThreads) keep_kernel(const KeepArgs a) {
  if (ak::cuda::check_failed(a.check)) return;
  const int64_t per_seq = kReplayChunk * a.units, all = a.L.N * per_seq;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < all; i += step) {
    const int64_t n = i / per_seq, r = (i - n * per_seq) / a.units, u = i - n * per_seq - r * a.units;
    const int64_t slot = a.indices[n];
    const int64_t c = a.plan[a.L.keep() + n * kReplayChunk + r];
    if (slot <= 0 || slot >= a.slots || c <= 0 || c > a.run_rows) continue;
    reinterpret_cast<W*>(a.cache)[(slot * kReplayChunk + r) * a.units + u] =
        reinterpret_cast<const W*>(a.run)[(c - 1) * a.units + u];
  }
}

__global__ void __launch_bounds__(kThreads) commit_kernel(const KeepArgs a) {
  if (ak::cuda::check_failed(a.check)) return;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; n < a.L.N;
       n += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t slot = a.indices[n];
    const int32_t c = a.plan[a.L.count() + n];
    if (slot > 0 && slot < a.slots && c >= 0) a.counts[slot] = c;
  }
}

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxGrid));
}

// The graph's check record while capturing (nullptr otherwise), for a kernel that checks nothing itself.
const DeviceCheck* graph_check(int device, const char* label) {
  return ak::cuda::capture_check(device, label, nullptr);
}

}  // namespace

void replay_plan(const ReplayPlan& p) {
  const int device = p.plan->device_index;
  DeviceGuard guard(device);
  const cudaStream_t s = ak::cuda::stream(device);
  const ReplayLayout& L = p.layout;
  auto* plan = static_cast<int32_t*>(p.plan->data);
  auto* cu_a = static_cast<int32_t*>(p.cu_a->data);
  auto* cu_b = static_cast<int32_t*>(p.cu_b->data);
  const size_t offsets = static_cast<size_t>(L.N + 1) * sizeof(int32_t);
  AK_CUDA_CHECK(cudaMemsetAsync(cu_a, 0, offsets, s));
  AK_CUDA_CHECK(cudaMemsetAsync(cu_b, 0, offsets, s));
  AK_CUDA_CHECK(cudaMemsetAsync(plan, 0, static_cast<size_t>(L.count()) * sizeof(int32_t), s));
  AK_CUDA_CHECK(cudaMemsetAsync(plan + L.count(), 0xff, static_cast<size_t>(L.N) * sizeof(int32_t), s));
  if (L.N == 0) return;
  // In a capture the indices (unless trusted) and offsets are checked on the device; eagerly the entry has
  // checked them on the host, or the caller vouched for them.
  const DeviceCheck* check =
      ak::cuda::capture_pool_check(device, p.trusted ? nullptr : p.indices, L.N, p.in.slots, p.cu_seqlens, p.in.R,
                                   "replay plan", p.trusted);
  scan_kernel<<<1, kThreads, 0, s>>>(p.in, L, cu_a, cu_b, check);
  check_launch("replay_scan_kernel");
  fill_kernel<<<static_cast<unsigned>(std::min(L.N, kMaxGrid)), kThreads, 0, s>>>(p.in, L, cu_a, cu_b, plan,
                                                                                 check);
  check_launch("replay_fill_kernel");
}

void replay_rows(const ReplayRows& r) {
  const int device = r.out->device_index;
  DeviceGuard guard(device);
  RowsArgs a;
  a.first = static_cast<const unsigned char*>(r.first->data);
  a.second = static_cast<const unsigned char*>(r.second->data);
  a.codes = static_cast<const int32_t*>(r.codes->data);
  a.out = static_cast<unsigned char*>(r.out->data);
  a.rows1 = r.rows1, a.rows2 = r.rows2, a.M = r.M;
  a.check = graph_check(device, "replay rows");
  const int64_t unit = ak::cuda::widest_unit(r.row_bytes, {a.first, a.second, a.out});
  a.units = r.row_bytes / unit;
  const cudaStream_t s = ak::cuda::stream(device);
  ak::cuda::with_unit(unit, [&](auto w) {
    rows_kernel<decltype(w)><<<blocks_for(a.M * a.units), kThreads, 0, s>>>(a);
  });
  check_launch("replay_rows_kernel");
}

void replay_keep(const ReplayKeep& k) {
  const int device = k.plan->device_index;
  DeviceGuard guard(device);
  KeepArgs a{};
  a.plan = static_cast<const int32_t*>(k.plan->data);
  a.indices = static_cast<const int32_t*>(k.indices->data);
  a.L = k.layout, a.slots = k.slots;
  a.check = graph_check(device, "replay keep");
  const cudaStream_t s = ak::cuda::stream(device);
  if (k.counts != nullptr) {
    a.counts = static_cast<int32_t*>(k.counts->data);
    commit_kernel<<<blocks_for(k.layout.N), kThreads, 0, s>>>(a);
    return check_launch("replay_commit_kernel");
  }
  a.run = static_cast<const unsigned char*>(k.run->data);
  a.cache = static_cast<unsigned char*>(k.cache->data);
  a.run_rows = k.run_rows;
  const int64_t unit = ak::cuda::widest_unit(k.row_bytes, {a.run, a.cache});
  a.units = k.row_bytes / unit;
  ak::cuda::with_unit(unit, [&](auto w) {
    keep_kernel<decltype(w)><<<blocks_for(k.layout.N * kReplayChunk * a.units), kThreads, 0, s>>>(a);
  });
  check_launch("replay_keep_kernel");
}

}  // namespace ak::linear::cuda
