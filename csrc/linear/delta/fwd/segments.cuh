// What one block of a Hopper state kernel runs: a whole sequence (the plain recurrence), or one job of
// the passes of a state pass split into segments (StateParams::seg_pass, params.h; the algebra:
// linear/common/segments.h). Pass 1 runs every segment from zero (N) and from the identity with u = 0
// (M, where U = -W S makes each chunk apply e^gL I - K~^T W), a small sequential combine gives the
// entry states, and pass 2 reruns the segments from them for the output.
#pragma once

#include "linear/delta/fwd/params.h"

namespace ak::linear::cuda::fwd {

struct StateJob {
  int row = 0, begin = 0, end = 0, first = 0;  // tokens [begin, end) of batch row `row`; its first chunk
  const float* init = nullptr;                  // [D, D] start state; nullptr: zeros (or the identity)
  float* fin = nullptr;                         // [D, D] end state, or nullptr
  bool identity = false;                        // start from I (the transition runs)
  bool zero_u = false;                          // u = 0 (the transition runs)
  bool output = true;                           // write o
  bool chunk_states = true;                     // chunk_states allowed (plain runs only)
};

// The job of block-row `job` (blockIdx.x / V tiles) for head h.
template <class T>
__device__ __forceinline__ StateJob state_job(const StateParams<T>& p, int job, int h, int D) {
  StateJob j;
  const int64_t DD = static_cast<int64_t>(D) * D;
  if (p.seg_pass == 0) {
    p.map.sequence(job, j.row, j.begin, j.end, j.first);
    const int64_t off = (static_cast<int64_t>(job) * p.H + h) * DD;
    j.init = p.initial_state ? p.initial_state + off : nullptr;
    j.fin = p.final_state ? p.final_state + off : nullptr;
    return j;
  }
  j.chunk_states = false;
  const int pm = p.seg_count - 1;
  const int per = p.seg_pass == 1 ? 2 * pm : pm;
  const int n = job / per, r = job - n * per;
  int seg;
  const int64_t seq_off = (static_cast<int64_t>(n) * p.H + h) * DD;
  const int64_t seg_base = (static_cast<int64_t>(n) * p.H + h) * pm * DD;
  if (p.seg_pass == 1) {
    if (r < pm) {
      seg = r;
      j.init = seg == 0 && p.initial_state ? p.initial_state + seq_off : nullptr;
      j.fin = p.seg_fwd + seg_base + seg * DD;
      j.output = seg == 0;
    } else {
      seg = r - pm + 1;
      j.identity = true;
      j.zero_u = true;
      j.output = false;
      j.fin = p.seg_tr + seg_base + (seg - 1) * DD;
    }
  } else {
    seg = r + 1;
    j.init = p.seg_entry + seg_base + (seg - 1) * DD;
    j.fin = seg == pm && p.final_state ? p.final_state + seq_off : nullptr;
  }
  int b0, e0;
  p.map.sequence(n, j.row, b0, e0, j.first);
  const int span = 64 * p.seg_chunks;
  j.begin = min(e0, b0 + seg * span);
  j.end = min(e0, j.begin + span);
  j.first += seg * p.seg_chunks;
  return j;
}

}  // namespace ak::linear::cuda::fwd
