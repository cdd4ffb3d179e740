// What one block of a Hopper state kernel runs: a whole sequence (the plain recurrence), or one job of
// the passes of a state pass split into segments (StateParams::seg_pass, params.h; the algebra:
// linear/common/segments.h). Pass 1 runs every segment from zero (N) and from the identity with u = 0
// (M, where U = -W S makes each chunk apply e^gL I - K~^T W), a small sequential combine gives the
// entry states, and pass 2 reruns the segments from them for the output.
#pragma once

#include "linear/delta/fwd/state_at.cuh"

namespace ak::linear::cuda::fwd {

struct StateJob {
  int row = 0, begin = 0, end = 0, first = 0;  // tokens [begin, end) of batch row `row`; its first chunk
  StateIn init;                                 // start state; none: zeros (or the identity)
  StateOut fin;                                 // end state, or none
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
    j.init = sequence_state<true>(p, job, h, D);
    j.fin = sequence_state<false>(p, job, h, D);
    return j;
  }
  j.chunk_states = false;
  const int pm = p.seg_count - 1;
  const int per = p.seg_pass == 1 ? 2 * pm : pm;
  const int n = job / per, r = job - n * per;
  int seg;
  const int64_t seg_base = (static_cast<int64_t>(n) * p.H + h) * pm * DD;
  if (p.seg_pass == 1) {
    if (r < pm) {
      seg = r;
      if (seg == 0) j.init = sequence_state<true>(p, n, h, D);
      j.fin = dense_state(p.seg_fwd + seg_base + seg * DD, D);
      j.output = seg == 0;
    } else {
      seg = r - pm + 1;
      j.identity = true;
      j.zero_u = true;
      j.output = false;
      j.fin = dense_state(p.seg_tr + seg_base + (seg - 1) * DD, D);
    }
  } else {
    seg = r + 1;
    j.init = {p.seg_entry + seg_base + (seg - 1) * DD, D, 1};
    if (seg == pm) j.fin = sequence_state<false>(p, n, h, D);
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
