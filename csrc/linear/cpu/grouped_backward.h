// The parts of a CPU backward shared by the recurrent linear families (delta rule, gated linear, KDA):
// zero gradients past the last packed sequence, one worker per (sequence, q/k head) whose value heads
// sum their dq and dk, the checkpointed reverse walk over one value head's tokens and the reverse mode
// of the output o_t = scale S_t^T q_t. Each family keeps its own token step and its reverse.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "linear/cpu/rows.h"
#include "linear/problem.h"

namespace ak::linear::cpu {

// Writes zero rows of D elements for tokens [t_begin, t_end) of every head (batch row 0); none if t is absent.
inline void zero_rows(const ak_tensor* t, int64_t t_begin, int64_t t_end, int64_t heads, int64_t D) {
  if (!t) return;
  std::vector<float> zeros(D, 0.0f);
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) store_row(*t, row_offset(*t, 0, tt, h), D, zeros.data());
  }
}

// The same for an fp32 [B, T, H] tensor of one scalar per token and head.
inline void zero_scalars(const ak_tensor* t, int64_t t_begin, int64_t t_end, int64_t heads) {
  if (!t) return;
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) set_scalar(*t, row_offset(*t, 0, tt, h), 0.0f);
  }
}

// Packed input: tokens past the last sequence influence nothing, so their gradients are zero. Zeroes
// dq, dk and dv there and returns the first such token (T when the input is not packed), from which
// the caller zeroes its family's other gradients.
template <class Call>
int64_t zero_packed_tail(const Call& a) {
  const DeltaProblem& p = a.p;
  if (!p.varlen) return p.T;
  const int64_t tail = p.seq_start[p.N];
  zero_rows(a.dq, tail, p.T, p.HK, p.K);
  zero_rows(a.dk, tail, p.T, p.HK, p.K);
  zero_rows(a.dv, tail, p.T, p.H, p.V);
  return tail;
}

// One (sequence, q/k head): its q and k rows and the gradients summed over its value heads.
struct QKRows {
  int64_t len, K;
  std::vector<float> q, k;
  std::vector<double> dq, dk;
  QKRows(int64_t len_, int64_t K_) : len(len_), K(K_), q(len_ * K_), k(len_ * K_), dq(len_ * K_, 0.0), dk(len_ * K_, 0.0) {}

  // Reads the sequence's q and k rows of head hk (tokens begin.. of batch row `row`).
  template <class Call>
  void load(const Call& a, int64_t row, int64_t begin, int64_t hk) {
    for (int64_t i = 0; i < len; ++i) {
      load_row(*a.q, row_offset(*a.q, row, begin + i, hk), K, q.data() + i * K);
      load_row(*a.k, row_offset(*a.k, row, begin + i, hk), K, k.data() + i * K);
    }
  }

  // Writes the summed dq and dk rows, rounded to the tensors' dtype.
  template <class Call>
  void store(const Call& a, int64_t row, int64_t begin, int64_t hk) const {
    std::vector<float> out(K);
    for (int64_t i = 0; i < len; ++i) {
      narrow(dq.data() + i * K, K, out.data());
      store_row(*a.dq, row_offset(*a.dq, row, begin + i, hk), K, out.data());
      narrow(dk.data() + i * K, K, out.data());
      store_row(*a.dk, row_offset(*a.dk, row, begin + i, hk), K, out.data());
    }
  }
};

// Runs the backward in parallel over (sequence n, q/k head hk): one worker loads the rows, lets each
// value head h of the group add its gradients through value_head(n, h, rows), then stores the sums.
// Rows is QKRows or a type derived from it with its own load and store.
template <class Rows, class Call, class ValueHead>
void grouped_backward(const Call& a, ValueHead value_head) {
  const DeltaProblem& p = a.p;
  const int64_t G = p.group();
  parallel_for(p.N * p.HK, [&](int64_t unit) {
    const int64_t n = unit / p.HK, hk = unit % p.HK;
    const int64_t row = p.row(n), begin = p.begin(n);
    Rows rows(p.end(n) - begin, p.K);
    rows.load(a, row, begin, hk);
    for (int64_t j = 0; j < G; ++j) value_head(n, hk * G + j, rows);
    rows.store(a, row, begin, hk);
  });
}

// Tokens between two kept states of the checkpointed walk.
constexpr int64_t kCheckpoint = 64;

// The reverse walk of one value head over its len tokens, S ([K, V] double, KV elements) holding the
// initial state on entry. A forward pass keeps the state before every kCheckpoint-th token; then, from
// the last chunk to the first, the chunk's states are recomputed from its checkpoint and its tokens are
// visited backwards. step(t, S, slot) advances S by token t, keeping what the reverse needs in its
// slot (< kCheckpoint); reverse(t, before, after, slot) gets the states before and after token t.
template <class Step, class Reverse>
void checkpointed_reverse(int64_t len, int64_t KV, std::vector<double>& S, Step step, Reverse reverse) {
  const int64_t NC = (len + kCheckpoint - 1) / kCheckpoint;
  std::vector<double> checkpoints(NC * KV);
  for (int64_t i = 0; i < len; ++i) {
    if (i % kCheckpoint == 0) std::copy(S.begin(), S.end(), checkpoints.begin() + (i / kCheckpoint) * KV);
    step(i, S.data(), i % kCheckpoint);
  }
  // states[i] is the state before token i of the chunk, states[i + 1] the one after it.
  std::vector<double> states((kCheckpoint + 1) * KV);
  for (int64_t c = NC - 1; c >= 0; --c) {
    const int64_t t0 = c * kCheckpoint, L = std::min(kCheckpoint, len - t0);
    std::copy(checkpoints.begin() + c * KV, checkpoints.begin() + (c + 1) * KV, states.begin());
    for (int64_t i = 0; i < L; ++i) {
      double* next = states.data() + (i + 1) * KV;
      std::copy(states.begin() + i * KV, states.begin() + (i + 1) * KV, next);
      step(t0 + i, next, i);
    }
    for (int64_t i = L - 1; i >= 0; --i) reverse(t0 + i, states.data() + i * KV, states.data() + (i + 1) * KV, i);
  }
}

// Reverse mode of o_t = scale S_t^T q_t: dq += scale S_t dO and dS += scale q dO^T.
inline void output_backward(double* dS, const double* after, const float* q, const float* d_out, double scale,
                            int64_t K, int64_t V, double* dq) {
  for (int64_t j = 0; j < K; ++j) {
    double acc = 0;
    double* ds = dS + j * V;
    const double sq = scale * q[j];
    for (int64_t col = 0; col < V; ++col) {
      acc += after[j * V + col] * d_out[col];
      ds[col] += sq * d_out[col];
    }
    dq[j] += scale * acc;
  }
}

}  // namespace ak::linear::cpu
