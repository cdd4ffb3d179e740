// CPU backward of the delta rule: exact reverse mode of the recurrence (BPTT). A first pass keeps
// the state at every chunk boundary; the reverse pass then recomputes one chunk's per-token states
// from its checkpoint and walks its tokens backwards, so memory stays O((T / C + C) K V) per worker.
// Parallel over (sequence, q/k head): the value heads of a group run in one worker, which sums their
// dq and dk before the L2 norm's reverse mode.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "linear/cpu/grouped_backward.h"
#include "linear/cpu/recurrent_step.h"
#include "linear/cpu/rows.h"
#include "linear/problem.h"

namespace ak::linear::cpu {
namespace {

// What one (sequence, q/k head) keeps beyond QKRows when the keys and queries are L2-normalised in
// the kernel: the raw rows and norms for the norm's reverse mode (q and k hold the normalised rows).
struct NormedQKRows : QKRows {
  std::vector<float> q_raw, k_raw;
  std::vector<double> q_norm, k_norm;
  NormedQKRows(int64_t len_, int64_t K_) : QKRows(len_, K_) {}

  void load(const DeltaBwd& a, int64_t row, int64_t begin, int64_t hk) {
    QKRows::load(a, row, begin, hk);
    if (!a.p.l2norm) return;
    q_raw = q;
    k_raw = k;
    q_norm.resize(len);
    k_norm.resize(len);
    for (int64_t i = 0; i < len; ++i) {
      q_norm[i] = l2_normalize(q.data() + i * K, K);
      k_norm[i] = l2_normalize(k.data() + i * K, K);
    }
  }

  void store(const DeltaBwd& a, int64_t row, int64_t begin, int64_t hk) {
    if (a.p.l2norm) {
      for (int64_t i = 0; i < len; ++i) {
        l2_normalize_backward(q_raw.data() + i * K, q_norm[i], K, dq.data() + i * K);
        l2_normalize_backward(k_raw.data() + i * K, k_norm[i], K, dk.data() + i * K);
      }
    }
    QKRows::store(a, row, begin, hk);
  }
};

// Reverse mode of one value head h of sequence n; adds its q/k gradients to `rows`.
void value_head_backward(const DeltaBwd& a, int64_t n, int64_t h, NormedQKRows& rows) {
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
  if (a.d_final_state) widen(static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV, KV, dS.data());
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
  if (a.d_initial_state) narrow(dS.data(), KV, static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV);
}

}  // namespace

void delta_bwd(const DeltaBwd& a) {
  const DeltaProblem& p = a.p;
  const int64_t tail = zero_packed_tail(a);
  zero_scalars(a.dbeta, tail, p.T, p.H);
  zero_scalars(a.dg, tail, p.T, p.H);
  grouped_backward<NormedQKRows>(
      a, [&](int64_t n, int64_t h, NormedQKRows& rows) { value_head_backward(a, n, h, rows); });
}

}  // namespace ak::linear::cpu
