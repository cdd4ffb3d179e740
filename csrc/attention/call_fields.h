// What the CUDA forward and backward read alike from a validated call: tensor strides, the call's
// extents, scale, soft cap and window (CallParams), and the extents their planners decide on.
#pragma once

#include <cstdint>

#include "attention/fwd/params.h"
#include "attention/planner.h"
#include "attention/problem.h"

namespace ak::attention::cuda {

// Strides of one BSHD (or packed THD) tensor, in elements: batch (0 for varlen), row, head.
inline void bshd_strides(const ak_tensor& t, bool varlen, int64_t& batch, int64_t& row, int64_t& head) {
  batch = varlen ? 0 : t.strides[0];
  row = t.strides[varlen ? 0 : 1];
  head = t.strides[varlen ? 1 : 2];
}

// A window edge in the kernels' int: negative (none) or beyond the largest length means unlimited.
inline int clamp_window(int64_t w) { return w < 0 || w >= kWindowUnlimited ? kWindowUnlimited : static_cast<int>(w); }

inline void fill_call(CallParams& p, const AttnProblem& pr) {
  p.n_seq = static_cast<int>(pr.N);
  p.hq = static_cast<int>(pr.Hq);
  p.hkv = static_cast<int>(pr.Hkv);
  p.group = static_cast<int>(pr.group());
  p.d = static_cast<int>(pr.D);
  p.sq = static_cast<int>(pr.Sq);
  p.skv = static_cast<int>(pr.Skv);
  if (pr.varlen) {
    p.cu_q = static_cast<const int32_t*>(pr.cu_seqlens_q->data);
    p.cu_kv = static_cast<const int32_t*>(pr.cu_seqlens_kv->data);
  }
  p.sm_scale = pr.sm_scale;
  p.softcap = pr.softcap;
  p.window_left = clamp_window(pr.window_left);
  p.window_right = clamp_window(pr.window_right);
}

inline planning::CallShape call_shape(const AttnProblem& pr) {
  planning::CallShape s;
  s.dtype = pr.dtype;
  s.d = static_cast<int>(pr.D);
  s.n_seq = static_cast<int>(pr.N);
  s.hq = static_cast<int>(pr.Hq);
  s.hkv = static_cast<int>(pr.Hkv);
  s.sq = static_cast<int>(pr.Sq);
  s.skv = static_cast<int>(pr.Skv);
  return s;
}

}  // namespace ak::attention::cuda
