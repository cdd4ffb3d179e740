// The varlen tables of ChunkMap (chunk_map.cuh). One block scans the per-sequence chunk counts
// ceil(len / C), 1024 sequences at a time, and each sequence's thread writes its entries; then the
// empty entries up to the capacity and the live count.
#include "cuda/runtime.cuh"
#include "linear/common/chunk_map.cuh"

namespace ak::linear::cuda {
namespace {

constexpr int kTableThreads = 1024;

__global__ void __launch_bounds__(kTableThreads)
    chunk_tables_kernel(const int32_t* cu, int N, int C, int capacity, int4* seq, int4* chunk,
                        const ak::cuda::DeviceCheck* check) {
  __shared__ int warp_total[kTableThreads / 32];
  __shared__ int carry;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const bool bad = ak::cuda::check_failed(check);
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < N; base += kTableThreads) {
    const int n = base + tid;
    const int b = n < N && !bad ? cu[n] : 0, e = n < N && !bad ? cu[n + 1] : 0;
    const int count = (e - b + C - 1) / C;
    int x = count;  // inclusive scan within the warp
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, m);
      if (lane >= m) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int s = warp_total[lane];
#pragma unroll
      for (int m = 1; m < 32; m <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, s, m);
        if (lane >= m) s += y;
      }
      warp_total[lane] = s;  // inclusive totals of warps 0..lane
    }
    __syncthreads();
    const int start = carry + (warp > 0 ? warp_total[warp - 1] : 0) + x - count;
    if (n < N) {
      seq[n] = make_int4(0, b, e, start);
      for (int j = 0; j < count && start + j < capacity; ++j) {
        chunk[start + j] = make_int4(0, b + j * C, min(C, e - b - j * C), n);
      }
    }
    __syncthreads();  // everyone has read carry
    if (tid == kTableThreads - 1) carry = start + count;
    __syncthreads();
  }
  const int live = min(carry, capacity);
  for (int g = live + tid; g < capacity; g += kTableThreads) chunk[g] = make_int4(0, 0, 0, 0);
  if (tid == 0) chunk[capacity] = make_int4(live, 0, 0, 0);
}

}  // namespace

void launch_chunk_tables(const int32_t* cu, int N, int C, int capacity, int4* seq, int4* chunk, cudaStream_t stream,
                         const ak::cuda::DeviceCheck* check) {
  if (N == 0) return;
  chunk_tables_kernel<<<1, kTableThreads, 0, stream>>>(cu, N, C, capacity, seq, chunk, check);
  ak::cuda::check_launch("chunk_tables_kernel");
}

}  // namespace ak::linear::cuda
