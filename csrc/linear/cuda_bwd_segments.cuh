// Context parallelism (segments) for the two sequential stages of the fast backward, opt-in with
// ATTNKIT_LINEAR_BWD_CP (cuda_bwd_variants.h). The forward's scheme (cuda_fwd_segments.cuh), run on
// the backward's recurrences. Per sequence and value head, with e = e^gl, dec = diag(e^(gl - gc)),
// K~ = dec K, Q~ = scale diag(e^gc) Q (K = V = D on the fast path):
//
//   states  (forward in time), h [K, V]:
//     v_new = u - w h,   h' = e h + K~^T v_new = (e I - K~^T w) h + K~^T u
//   dstates (backward in time), dh' = dL/dh after the chunk, [K, V]:
//     dv_new = K~ dh' + P^T dO,   dh = e dh' + Q~^T dO - w^T dv_new
//                                    = (e I - w^T K~) dh' + (Q~^T - w^T P^T) dO
//
// Both are affine in the carried state with a K x K factor acting from the LEFT (on the state's K
// rows, the same for every value column), so over a segment of chunks
//   S_end = M S_start + N,   M = prod of the per-chunk (e I - ...) in the stage's order (K x K),
//                            N = the segment run from S_start = 0 with the real u / dO (K x V).
// M is what the same kernel computes when it starts from the identity with u = 0 / dO = 0: the
// identity "state" has K rows and K columns, which the kernel's V columns can hold only because
// K = V = D here; each V-slice block of VS columns then computes the columns vs .. vs + VS - 1 of M.
//
// Segments: sequence n's nch chunks split into P runs of S = ceil(nch / P) chunks in the stage's
// order (states: chunks 0, 1, ...; dstates: chunks nch - 1, nch - 2, ...); segment j covers loop
// steps [j S, min(nch, (j + 1) S)) (the last also takes whatever remains; short sequences have empty
// segments, for which N = 0 and M = I come out of the same code). Per pass, for every (sequence,
// head, V slice):
//   pass 1, 2P - 3 jobs: segments 0 .. P - 2 from zero with the real inputs -> N_j (segment 0 starts
//           from the true start state -- initial_state / d_final_state -- and writes its outputs, so
//           its N_0 is already the entry state E_1); segments 1 .. P - 2 from I with u / dO = 0 -> M_j
//   combine: E_1 = N_0, E_(j+1) = M_j E_j + N_j (fp32, the forward's launch_segment_combine)
//   pass 2, P - 1 jobs: segments 1 .. P - 1 from E_j, writing the per-chunk h / dh and v_new /
//           dv_new in the same layout as the plain run (and, for dstates, d_initial_state at the end
//           of segment P - 1).
// The summaries are fp32 [N * H][P - 1][D][D] (row index nh = n H + h), as the combine expects.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda_bwd_fast.cuh"

namespace ak::linear::cuda::fwd {
// cuda_fwd_segment_combine.cu: entry[j - 1] (j = 1 .. Pm) = fwd[0] for j = 1, tr[j - 2] entry[j - 2] +
// fwd[j - 1] after (fp32 D x D per sequence and head, products with the left factor from tr).
void launch_segment_combine(const float* fwd, const float* tr, float* entry, int N, int H, int D, int Pm,
                            cudaStream_t stream);
}  // namespace ak::linear::cuda::fwd

namespace ak::linear::cuda::bwd {

// One pass of the segment scheme; pass 0 is the plain run (whole sequences, what the kernels did
// before, compiled separately so that the default code is unchanged).
struct SegParams {
  int pass = 0;
  int count = 1;               // P (>= 3 in passes 1 and 2)
  float* fwd = nullptr;        // N_j at slot j, j = 0 .. P - 2
  float* tr = nullptr;         // M_j at slot j - 1, j = 1 .. P - 2
  const float* entry = nullptr;  // E_j at slot j - 1, j = 1 .. P - 1
};

// Blocks per (sequence, head, V slice) in a pass.
__host__ __device__ inline int seg_jobs(int pass, int P) { return pass == 1 ? 2 * P - 3 : pass == 2 ? P - 1 : 1; }

// The cost model of the segment plan and of the segment passes' slice widths (host side).
// Microseconds one chunk step of a sequential stage takes on a multiprocessor that holds `per_sm`
// blocks of `vs` state columns (D rows): latency plus work, fitted to the two H200 measurements of
// each stage (NOTES_linear_bwd.md, round 2: B2_T16384_H16_D128, one block of 32 columns per SM, and
// B1_T8192_H96_D128, two blocks of 64 (states) / one of 128 (dstates v2)): states 2.3 and 4.4 us,
// dstates 3.0 and 5.6 us.
inline double seg_step_us(bool dstates, int D, int64_t per_sm, int vs) {
  const double latency = dstates ? 2.1 : 1.6, cols_per_us = (dstates ? 37.0 : 46.0) * 128.0 / D;
  return latency + static_cast<double>(per_sm * vs) / cols_per_us;
}

// Microseconds per chunk step of a pass of `chains` chains at slice width `vs`, `res` blocks resident
// per multiprocessor: the waves of blocks times the step of a multiprocessor holding as many blocks as
// the pass gives it.
inline double seg_waves_us(bool dstates, int D, int64_t chains, int vs, int64_t res, int64_t sms) {
  const int64_t blocks = chains * (D / vs);
  const int64_t waves = (blocks + sms * res - 1) / (sms * res);
  const int64_t per_sm = std::min(res, (blocks + sms - 1) / sms);
  return static_cast<double>(waves) * seg_step_us(dstates, D, per_sm, vs);
}

struct SegJob {
  int it0 = 0, it1 = 0;           // loop steps [it0, it1) of the stage's order (dstates: chunk nch-1-it)
  const float* init = nullptr;    // fp32 [D][D] start state (row stride D); null: zeros (or identity)
  float* fin = nullptr;           // fp32 [D][D] end state, or null
  bool identity = false;          // start from I, inputs u / dO taken as zero (M)
  bool output = true;             // write the per-chunk states and v_new / dv_new
  bool last = true;               // ends the sequence's chain (dstates: write d_initial_state)
};

// Job r (0 .. seg_jobs - 1) of sequence-head nh whose sequence has nch chunks; `start` is the true
// start state of the chain (initial_state / d_final_state at this sequence and head, or null).
__device__ __forceinline__ SegJob seg_job(const SegParams& sg, int r, int64_t nh, int nch, int D,
                                          const float* start) {
  SegJob j;
  const int P = sg.count, pm = P - 1;
  const int64_t DD = static_cast<int64_t>(D) * D;
  const int64_t base = nh * pm * DD;
  int seg;
  if (sg.pass == 1) {
    if (r < pm) {
      seg = r;
      j.init = seg == 0 ? start : nullptr;
      j.fin = sg.fwd + base + seg * DD;
      j.output = seg == 0;
    } else {
      seg = r - pm + 1;
      j.identity = true;
      j.output = false;
      j.fin = sg.tr + base + (seg - 1) * DD;
    }
    j.last = false;
  } else {
    seg = r + 1;
    j.init = sg.entry + base + (seg - 1) * DD;
    j.last = seg == pm;
  }
  const int S = (nch + P - 1) / P;
  j.it0 = min(nch, seg * S);
  j.it1 = seg == pm ? nch : min(nch, j.it0 + S);
  return j;
}

// The start value of state element (d, e): identity, a given fp32 state, or zero.
__device__ __forceinline__ float seg_start_value(const SegJob& j, int d, int e, int D) {
  if (j.identity) return d == e ? 1.f : 0.f;
  return j.init != nullptr ? j.init[static_cast<int64_t>(d) * D + e] : 0.f;
}

// Launchers of the segment passes (pass 1 or 2; plain runs use launch_fast_states/_dstates8).
template <class T, int D>
void launch_fast_states_seg(const Problem& p, const FastWork<T>& w, int vs, const SegParams& sg, cudaStream_t s);
template <class T, int D>
void launch_fast_dstates8_seg(const Problem& p, const FastWork<T>& w, int vs, const SegParams& sg,
                              cudaStream_t s);

}  // namespace ak::linear::cuda::bwd
