// CPU backward of the delta rule: exact reverse mode of the recurrence (BPTT). A first pass keeps
// the state at every chunk boundary; the reverse pass then recomputes one chunk's per-token states
// from its checkpoint and walks its tokens backwards, so memory stays O((T / C + C) K V) per worker.
// Parallel over (sequence, q/k head): the value heads of a group run in one worker, which sums their
// dq and dk before the L2 norm's reverse mode.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "linear/cpu/recurrent_step.h"
#include "linear/cpu/rows.h"
#include "linear/problem.h"

namespace ak::linear::cpu {
namespace {

void zero_rows(const ak_tensor* t, int64_t row, int64_t t_begin, int64_t t_end, int64_t heads, int64_t D) {
  if (!t) return;
  std::vector<float> zeros(D, 0.0f);
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) store_row(*t, row_offset(*t, row, tt, h), D, zeros.data());
  }
}

void zero_scalars(const ak_tensor* t, int64_t row, int64_t t_begin, int64_t t_end, int64_t heads) {
  if (!t) return;
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) set_scalar(*t, row_offset(*t, row, tt, h), 0.0f);
  }
}

// What one (sequence, q/k head) keeps: its normalised q and k rows (with the raw rows and norms for
// the L2 norm's reverse mode) and the gradients summed over its value heads.
struct QKRows {
  int64_t len, K;
  std::vector<float> q, k, q_raw, k_raw;
  std::vector<double> q_norm, k_norm, dq, dk;
  QKRows(int64_t len_, int64_t K_)
      : len(len_), K(K_), q(len_ * K_), k(len_ * K_), q_raw(), k_raw(), q_norm(), k_norm(), dq(len_ * K_, 0.0),
        dk(len_ * K_, 0.0) {}
};

void load_qk(const DeltaBwd& a, int64_t row, int64_t begin, int64_t hk, QKRows& rows) {
  const DeltaProblem& p = a.p;
  for (int64_t i = 0; i < rows.len; ++i) {
    load_row(*a.q, row_offset(*a.q, row, begin + i, hk), p.K, rows.q.data() + i * p.K);
    load_row(*a.k, row_offset(*a.k, row, begin + i, hk), p.K, rows.k.data() + i * p.K);
  }
  if (!p.l2norm) return;
  rows.q_raw = rows.q;
  rows.k_raw = rows.k;
  rows.q_norm.resize(rows.len);
  rows.k_norm.resize(rows.len);
  for (int64_t i = 0; i < rows.len; ++i) {
    rows.q_norm[i] = l2_normalize(rows.q.data() + i * p.K, p.K);
    rows.k_norm[i] = l2_normalize(rows.k.data() + i * p.K, p.K);
  }
}

void store_qk_grads(const DeltaBwd& a, int64_t row, int64_t begin, int64_t hk, QKRows& rows) {
  const DeltaProblem& p = a.p;
  std::vector<float> out(p.K);
  for (int64_t i = 0; i < rows.len; ++i) {
    double* dq = rows.dq.data() + i * p.K;
    double* dk = rows.dk.data() + i * p.K;
    if (p.l2norm) {
      l2_normalize_backward(rows.q_raw.data() + i * p.K, rows.q_norm[i], p.K, dq);
      l2_normalize_backward(rows.k_raw.data() + i * p.K, rows.k_norm[i], p.K, dk);
    }
    for (int64_t c = 0; c < p.K; ++c) out[c] = static_cast<float>(dq[c]);
    store_row(*a.dq, row_offset(*a.dq, row, begin + i, hk), p.K, out.data());
    for (int64_t c = 0; c < p.K; ++c) out[c] = static_cast<float>(dk[c]);
    store_row(*a.dk, row_offset(*a.dk, row, begin + i, hk), p.K, out.data());
  }
}

// Reverse mode of one value head h of sequence n; adds its q/k gradients to `rows`.
void value_head_backward(const DeltaBwd& a, int64_t n, int64_t h, QKRows& rows) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), len = rows.len;
  const int64_t C = p.recurrent ? 64 : p.chunk_size;  // checkpoint interval
  const int64_t NC = (len + C - 1) / C;

  std::vector<float> v(len * V), beta(len);
  std::vector<double> gate(len, 0.0);
  for (int64_t i = 0; i < len; ++i) {
    load_row(*a.v, row_offset(*a.v, row, begin + i, h), V, v.data() + i * V);
    beta[i] = scalar_at(*a.beta, row_offset(*a.beta, row, begin + i, h));
    if (p.gated) gate[i] = scalar_at(*a.g, row_offset(*a.g, row, begin + i, h));
  }
  auto decay_of = [&](int64_t i) { return p.gated ? std::exp(gate[i]) : 1.0; };

  // Forward: the state before each chunk.
  std::vector<float> checkpoints(NC * KV), S(KV), o(V);
  if (a.initial_state) {
    std::memcpy(S.data(), static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV * sizeof(float));
  } else {
    std::fill(S.begin(), S.end(), 0.0f);
  }
  for (int64_t i = 0; i < len; ++i) {
    if (i % C == 0) std::memcpy(checkpoints.data() + (i / C) * KV, S.data(), KV * sizeof(float));
    recurrent_step(S.data(), rows.q.data() + i * K, rows.k.data() + i * K, v.data() + i * V, beta[i], decay_of(i),
                   p.scale, K, V, o.data());
  }

  // Reverse: dS starts from d_final_state.
  std::vector<double> dS(KV, 0.0);
  if (a.d_final_state) {
    const float* src = static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV;
    for (int64_t e = 0; e < KV; ++e) dS[e] = src[e];
  }
  std::vector<float> states(C * KV), r(C * V), u(C * V), d_out(V), dv(V);
  for (int64_t c = NC - 1; c >= 0; --c) {
    const int64_t t0 = c * C, L = std::min(C, len - t0);
    // Recompute the chunk's per-token states (each one the state before its token).
    std::memcpy(S.data(), checkpoints.data() + c * KV, KV * sizeof(float));
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = t0 + i;
      std::memcpy(states.data() + i * KV, S.data(), KV * sizeof(float));
      recurrent_step(S.data(), rows.q.data() + t * K, rows.k.data() + t * K, v.data() + t * V, beta[t],
                     decay_of(t), p.scale, K, V, o.data(), r.data() + i * V, u.data() + i * V);
    }
    for (int64_t i = L - 1; i >= 0; --i) {
      const int64_t t = t0 + i, token = begin + t;
      load_row(*a.d_output, row_offset(*a.d_output, row, token, h), V, d_out.data());
      double dbeta = 0, dg = 0;
      recurrent_step_backward(dS.data(), states.data() + i * KV, rows.q.data() + t * K, rows.k.data() + t * K,
                              r.data() + i * V, u.data() + i * V, beta[t], decay_of(t), p.scale, d_out.data(), K,
                              V, rows.dq.data() + t * K, rows.dk.data() + t * K, dv.data(), &dbeta, &dg);
      store_row(*a.dv, row_offset(*a.dv, row, token, h), V, dv.data());
      set_scalar(*a.dbeta, row_offset(*a.dbeta, row, token, h), static_cast<float>(dbeta));
      if (a.dg) set_scalar(*a.dg, row_offset(*a.dg, row, token, h), static_cast<float>(dg));
    }
  }
  if (a.d_initial_state) {
    float* dst = static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV;
    for (int64_t e = 0; e < KV; ++e) dst[e] = static_cast<float>(dS[e]);
  }
}

}  // namespace

void delta_bwd(const DeltaBwd& a) {
  const DeltaProblem& p = a.p;
  // Packed input: tokens past the last sequence influence nothing, so their gradients are zero.
  if (p.varlen) {
    const int64_t tail = p.seq_start[p.N];
    zero_rows(a.dq, 0, tail, p.T, p.HK, p.K);
    zero_rows(a.dk, 0, tail, p.T, p.HK, p.K);
    zero_rows(a.dv, 0, tail, p.T, p.H, p.V);
    zero_scalars(a.dbeta, 0, tail, p.T, p.H);
    zero_scalars(a.dg, 0, tail, p.T, p.H);
  }
  const int64_t G = p.group();
  parallel_for(p.N * p.HK, [&](int64_t unit) {
    const int64_t n = unit / p.HK, hk = unit % p.HK;
    const int64_t row = p.row(n), begin = p.begin(n);
    QKRows rows(p.end(n) - begin, p.K);
    load_qk(a, row, begin, hk, rows);
    for (int64_t j = 0; j < G; ++j) value_head_backward(a, n, hk * G + j, rows);
    store_qk_grads(a, row, begin, hk, rows);
  });
}

}  // namespace ak::linear::cpu
