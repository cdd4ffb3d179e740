// The replay plan of a paged chunked call with a replay state (ak_replay_plan, ak_replay_rows,
// ak_replay_keep, ak_replay_commit): its int32 layout, the per-sequence arithmetic both backends share,
// and the calls as the backends see them after their entries checked them.
//
// Sequence n (live when 0 < slot < slots) holds `held` cached tokens (its slot's count, clamped to
// 0..63; 0 when it starts fresh) and brings `len` new ones. Of its `total = held + len` tokens the first
// `full` (total rounded down to 64) form run A, the rest run B. Codes name rows of two sources: c > 0 is
// row c - 1 of the first (the caches, or run A), c < 0 row -c - 1 of the second (the call's inputs, or
// run B), 0 a zero row.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/numeric.h"

namespace ak::linear {

constexpr int64_t kReplayChunk = 64;

// Where each list of the plan starts, for N sequences over R = B T input rows (run A's and run B's
// offsets, [N + 1] each, are tensors of their own: the chunked forwards take them as cu_seqlens).
struct ReplayLayout {
  int64_t N = 0, R = 0;
  AK_HD int64_t cap_a() const { return R + (kReplayChunk - 1) * N; }  // run A's rows at most
  AK_HD int64_t cap_b() const { return (kReplayChunk - 1) * N; }      // run B's rows at most
  AK_HD int64_t src_a() const { return 0; }                           // [cap_a] codes: caches | inputs
  AK_HD int64_t src_b() const { return cap_a(); }                     // [cap_b] codes: caches | inputs
  AK_HD int64_t out() const { return src_b() + cap_b(); }             // [R] codes: run A | run B
  AK_HD int64_t keep() const { return out() + R; }                    // [N, 64] 1 + run B row, or 0
  AK_HD int64_t count() const { return keep() + kReplayChunk * N; }   // [N] new count, or -1
  AK_HD int64_t size() const { return count() + N; }                  // 2 R + 191 N
};

// A sequence's part of the plan.
struct ReplaySequence {
  int64_t slot = -1;  // -1: padding (or a slot outside the pool), nothing planned
  int64_t start = 0;  // its first input row
  int64_t held = 0, len = 0, full = 0, total = 0;
};

// The inputs of the plan as either backend reads them.
struct ReplayInputs {
  const int32_t* indices = nullptr;
  const uint8_t* has_initial = nullptr;  // or null: every live slot resumes
  const int32_t* counts = nullptr;       // [slots]
  const int32_t* cu = nullptr;           // [N + 1], or null: sequence n is batch row n of T
  int64_t N = 0, T = 0, R = 0, slots = 0;
};

// Sequence n's counts. Offsets are clamped into [0, R] and counts into 0..63 (the entry refused bad ones
// unless the caller vouched for them): bad values plan other tokens, never rows outside the tensors.
AK_HD ReplaySequence replay_sequence(const ReplayInputs& in, int64_t n) {
  ReplaySequence s;
  const int32_t slot = in.indices[n];
  if (slot <= 0 || slot >= in.slots) return s;
  s.slot = slot;
  int64_t begin = n * in.T, end = begin + in.T;
  if (in.cu != nullptr) {
    begin = in.cu[n], end = in.cu[n + 1];
    begin = begin < 0 ? 0 : (begin > in.R ? in.R : begin);
    end = end < begin ? begin : (end > in.R ? in.R : end);
  }
  const bool fresh = in.has_initial != nullptr && in.has_initial[n] == 0;
  int64_t held = fresh ? 0 : in.counts[slot];
  held = held < 0 ? 0 : (held > kReplayChunk - 1 ? kReplayChunk - 1 : held);
  s.start = begin, s.len = end - begin, s.held = held, s.total = held + s.len;
  s.full = s.total / kReplayChunk * kReplayChunk;
  return s;
}

// The codes of token j (0 <= j < total) of sequence s, given its runs' first rows: where it comes from,
// and, for a new token, the code of its output row.
AK_HD int32_t replay_source(const ReplaySequence& s, int64_t j) {
  return j < s.held ? static_cast<int32_t>(s.slot * kReplayChunk + j + 1)
                    : -static_cast<int32_t>(s.start + j - s.held + 1);
}

// Token j of sequence n (whose run A rows are [a0, a1) and run B rows start at b0) into the plan: its
// source code, its output row's code when it is new, and the slot's cache row it becomes when in run B.
AK_HD void replay_fill(const ReplaySequence& s, int64_t n, int64_t j, int64_t a0, int64_t a1, int64_t b0,
                       const ReplayLayout& L, int32_t* plan) {
  const int32_t src = replay_source(s, j);
  if (j < s.full) {
    const int64_t pos = a0 + j;
    if (pos >= a1) return;  // past a run A cut short by bad offsets
    plan[L.src_a() + pos] = src;
    if (j >= s.held) plan[L.out() + s.start + j - s.held] = static_cast<int32_t>(pos + 1);
    return;
  }
  const int64_t pos = b0 + j - s.full;
  plan[L.src_b() + pos] = src;
  if (j >= s.held) plan[L.out() + s.start + j - s.held] = -static_cast<int32_t>(pos + 1);
  plan[L.keep() + n * kReplayChunk + j - s.full] = static_cast<int32_t>(pos + 1);
}

struct ReplayPlan {
  ReplayInputs in;
  ReplayLayout layout;
  const ak_tensor* cu_a = nullptr;  // int32 [N + 1], written
  const ak_tensor* cu_b = nullptr;  // int32 [N + 1], written
  const ak_tensor* plan = nullptr;  // int32 [layout.size()], written
  bool trusted = false;             // CUDA: the caller checked indices, counts and offsets
  const ak_tensor* indices = nullptr;
  const ak_tensor* cu_seqlens = nullptr;
};

// out[m] = the row codes[m] names, of first or second (same dtype and row), or zeros.
struct ReplayRows {
  const ak_tensor* first = nullptr;   // [R1, ...]
  const ak_tensor* second = nullptr;  // [R2, ...]
  const ak_tensor* codes = nullptr;   // [M] int32
  const ak_tensor* out = nullptr;     // [M, ...]
  int64_t rows1 = 0, rows2 = 0, M = 0, row_bytes = 0;
};

// cache[slot, r] = run[keep[n, r] - 1] for each live sequence n and each r with keep[n, r] > 0; and with
// counts, counts[slot] = the plan's new count.
struct ReplayKeep {
  const ak_tensor* run = nullptr;     // [cap_b, ...] run B's inputs (null: the counts only)
  const ak_tensor* cache = nullptr;   // [slots, 64, ...] same dtype and row
  const ak_tensor* plan = nullptr;    // int32 [layout.size()]
  const ak_tensor* indices = nullptr; // [N] int32
  const ak_tensor* counts = nullptr;  // [slots] int32 (commit)
  ReplayLayout layout;
  int64_t slots = 0, run_rows = 0, row_bytes = 0;
};

}  // namespace ak::linear
