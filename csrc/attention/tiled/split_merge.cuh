// The merge of a split-key kernel's partial results on the device: one block per output row. The splits'
// log-sum-exps are read once, side by side (a thread per split), their maximum and weights reduced in shared
// memory, and each column's partial results summed with no load waiting on another (the per-element loop
// of the host's merge reads the splits one after another, twice: 18 us for 33 splits at batch 1).
#pragma once

#include <cmath>
#include <cstdint>

namespace ak::attention::tiled {

// The dynamic shared memory merge_split_row needs: a weight per split and a slot per warp.
inline int split_merge_bytes(int64_t splits) { return static_cast<int>((splits + 32) * sizeof(float)); }

namespace split_merge_detail {

// The block's reduction of `x` by `op` (blockDim.x a multiple of 32, at most 1024), returned to every thread.
template <class Op>
__device__ float reduce(float x, float* slots, Op op) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  __syncthreads();  // the slots' previous use is over
  if (lane == 0) slots[warp] = x;
  __syncthreads();
  float all = slots[0];
  for (int w = 1; w < warps; w++) all = op(all, slots[w]);
  return all;
}

}  // namespace split_merge_detail

// Merges one output row: split s's log-sum-exp at lse[s * stride] (-inf: it saw no key) and its normalised
// partial row at partial + s * stride * D; `store(c, value)` writes column c (0 where no split saw a key).
// `smem` holds split_merge_bytes(splits).
template <class Store>
__device__ void merge_split_row(const float* lse, const float* partial, int64_t stride, int64_t splits, int64_t D,
                                float* smem, Store&& store) {
  float* weight = smem;
  float* slots = smem + splits;
  const auto max_op = [](float a, float b) { return b > a ? b : a; };
  const auto sum_op = [](float a, float b) { return a + b; };
  float top = -INFINITY;
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) top = max_op(top, lse[s * stride]);
  top = split_merge_detail::reduce(top, slots, max_op);
  float den = 0.f;
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    const float x = lse[s * stride];
    const float w = top == -INFINITY || x == -INFINITY ? 0.f : expf(x - top);
    weight[s] = w;
    den += w;
  }
  den = split_merge_detail::reduce(den, slots, sum_op);  // its barriers also publish the weights
  const float inv = den > 0.f ? 1.f / den : 0.f;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float num = 0.f;
#pragma unroll 8
    for (int64_t s = 0; s < splits; s++) {
      const float w = weight[s];  // a split that saw no key may have left its row unwritten
      if (w != 0.f) num += w * partial[s * stride * D + c];
    }
    store(c, num * inv);
  }
}

}  // namespace ak::attention::tiled
