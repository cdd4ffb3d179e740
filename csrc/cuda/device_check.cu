// The device-side check of a captured pool call (device_check.h): a thread per state index compares
// it with the pool's size and with every earlier index through shared-memory tiles; block 0 also walks
// the offsets.
#include "cuda/backend.h"
#include "cuda/device_check.h"
#include "cuda/runtime.cuh"

namespace ak::cuda {
namespace {

constexpr int kCheckThreads = 256;

// The first failure of a replay wins: claim the record (-1 stops checked kernels at once), fill it, publish.
__device__ void report(DeviceCheck* c, int32_t label, int32_t code, int64_t entry, int64_t value, int64_t limit,
                       int64_t other) {
  if (atomicCAS(&c->code, kCheckPassed, -1) != kCheckPassed) return;
  c->label = label, c->entry = entry, c->value = value, c->limit = limit, c->other = other;
  __threadfence();
  atomicExch(&c->code, code);
  DeviceCheck* h = c->mirror;
  h->label = label, h->entry = entry, h->value = value, h->limit = limit, h->other = other;
  __threadfence_system();
  *reinterpret_cast<volatile int32_t*>(&h->code) = code;
}

__global__ void __launch_bounds__(kCheckThreads)
    pool_check_kernel(DeviceCheck* c, int32_t label, const int32_t* idx, int64_t n, int64_t slots,
                      const int32_t* offsets, int64_t offsets_count, int64_t T) {
  __shared__ int32_t tile[kCheckThreads];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kCheckThreads + threadIdx.x;
  const int32_t mine = i < n ? idx[i] : 0;
  if (i < n && mine >= slots) report(c, label, kCheckSlotPastPool, i, mine, slots, 0);
  int64_t twin = -1;  // the first earlier entry naming the same live slot
  const int64_t block_end = min(n, static_cast<int64_t>(blockIdx.x + 1) * kCheckThreads);
  for (int64_t base = 0; base < block_end; base += kCheckThreads) {
    __syncthreads();
    tile[threadIdx.x] = base + threadIdx.x < n ? idx[base + threadIdx.x] : 0;
    __syncthreads();
    if (mine > 0 && twin < 0) {
      const int64_t upto = min(static_cast<int64_t>(kCheckThreads), i - base);
      for (int64_t j = 0; j < upto; ++j) {
        if (tile[j] == mine) {
          twin = base + j;
          break;
        }
      }
    }
  }
  if (twin >= 0) report(c, label, kCheckSlotTwice, i, mine, slots, twin);
  if (blockIdx.x != 0 || offsets == nullptr) return;
  for (int64_t e = threadIdx.x; e < offsets_count; e += kCheckThreads) {
    const int64_t at = offsets[e];
    if (e == 0 && at != 0) report(c, label, kCheckOffsetsStart, 0, at, T, 0);
    if (e > 0 && at < offsets[e - 1]) report(c, label, kCheckOffsetsDecrease, e, at, T, offsets[e - 1]);
    if (e == offsets_count - 1 && at > T) report(c, label, kCheckOffsetsPastEnd, e, at, T, 0);
  }
}

}  // namespace

DeviceCheck* capture_pool_check(int device, const ak_tensor* indices, int64_t n, int64_t slots,
                                const ak_tensor* cu_seqlens, int64_t T, const char* label, bool trusted) {
  // Trusted indices go unchecked; offsets never do (a kernel would index rows with them).
  const bool checks = !trusted || cu_seqlens != nullptr;
  int32_t label_id = 0;
  DeviceCheck* c = capture_check(device, label, checks ? &label_id : nullptr);
  if (c == nullptr || !checks) return c;
  const int32_t* idx = indices != nullptr && !trusted ? static_cast<const int32_t*>(indices->data) : nullptr;
  const int64_t checked = idx != nullptr ? n : 0;
  const int32_t* offsets = cu_seqlens != nullptr ? static_cast<const int32_t*>(cu_seqlens->data) : nullptr;
  const int64_t count = offsets != nullptr ? cu_seqlens->shape[0] : 0;
  if (checked == 0 && count == 0) return c;
  const unsigned blocks = checked > 0 ? ceil_div(checked, kCheckThreads) : 1;
  pool_check_kernel<<<blocks, kCheckThreads, 0, stream(device)>>>(c, label_id, idx, checked, slots, offsets, count, T);
  check_launch("pool_check_kernel");
  return c;
}

}  // namespace ak::cuda
