// The decay policy of the chunked linear-attention family: how the state decays between tokens. A
// scalar decay (a log-decay g per head and token, as in Gated DeltaNet; none, as in DeltaNet, reads as
// g = 0) enters every stage through the chunk's cumulated log-decay gc, gc_i = g_0 + ... + g_i within
// the chunk: the state decays by exp(gc_63) across a chunk, and token j's contribution to token i
// by exp(gc_i - gc_j). This file holds that cumulation; the stages apply the factors.
#pragma once

#include "arch/sm80.cuh"

namespace ak::linear::cuda {

// gc <- the inclusive prefix sums of the chunk's 64 gates, in shared memory (one warp, two gates a
// lane; the sums accumulate left to right in fp32).
__device__ __forceinline__ void chunk_cumsum64(float* g, int lane) {
  const float a = g[2 * lane], b = g[2 * lane + 1];
  // The sum of the lanes before, as the scan formed it there: a row's cumsum reads no later row (an
  // inclusive sum minus this lane's pair would read row 2 lane + 1 into row 2 lane), so a chunk cut
  // short after any row gives that row the bits it has in the whole chunk.
  const float upto = ::ak::arch::warp_inclusive_scan(a + b, lane);
  const float shifted = __shfl_up_sync(0xffffffffu, upto, 1);
  const float before = lane == 0 ? 0.f : shifted;
  g[2 * lane] = before + a;
  g[2 * lane + 1] = before + a + b;
}

}  // namespace ak::linear::cuda
