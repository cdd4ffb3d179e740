// CPU backward of the gated linear family: the exact reverse mode of the recurrence
//   S_t = diag(a_t) S_{t-1} + k_t v_t^T,  o_t = scale S_t^T q_t,  a_t = exp(gk_t + g_t + g_gamma).
// A forward pass keeps the state every 64 tokens; the reverse pass recomputes one chunk's states from
// its checkpoint and walks its tokens backwards with dS (the gradient of the state after the token):
//   dq_t = scale S_t do_t;  dS += scale q_t do_t^T;  dv_t = dS^T k_t;  dk_t = dS v_t;
//   d(log a_t)_i = a_t,i sum_v dS_iv S_{t-1},iv;  then dS <- diag(a_t) dS for the token before.
// dgk is the per-channel log-decay gradient, dg its sum over K (g and g_gamma enter every channel).
// Parallel over (sequence, q/k head): the value heads of a group share one worker, which sums their
// dq and dk. The forward's chunk_states are not read: recomputing in double is as cheap here.
#include <algorithm>
#include <vector>

#include "linear/gla/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

constexpr int64_t kCheckpoint = 64;

void zero_rows(const ak_tensor* t, int64_t t_begin, int64_t t_end, int64_t heads, int64_t D) {
  if (!t) return;
  std::vector<float> zeros(D, 0.0f);
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) store_row(*t, row_offset(*t, 0, tt, h), D, zeros.data());
  }
}

void zero_scalars(const ak_tensor* t, int64_t t_begin, int64_t t_end, int64_t heads) {
  if (!t) return;
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) set_scalar(*t, row_offset(*t, 0, tt, h), 0.0f);
  }
}

// One (sequence, q/k head): its q and k rows and the gradients summed over its value heads.
struct QKRows {
  int64_t len, K;
  std::vector<float> q, k;
  std::vector<double> dq, dk;
  QKRows(int64_t len_, int64_t K_) : len(len_), K(K_), q(len_ * K_), k(len_ * K_), dq(len_ * K_, 0.0), dk(len_ * K_, 0.0) {}
};

// Reverse mode of value head h of sequence n; adds its q/k gradients to `rows`.
void value_head_backward(const GlaBwd& a, int64_t n, int64_t h, QKRows& rows) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), len = rows.len;
  const int64_t NC = (len + kCheckpoint - 1) / kCheckpoint;
  const float* q = rows.q.data();
  const float* k = rows.k.data();

  std::vector<float> v(len * V);
  for (int64_t i = 0; i < len; ++i) load_row(*a.v, row_offset(*a.v, row, begin + i, h), V, v.data() + i * V);
  auto decay_of = [&](int64_t i, double* out) {
    token_log_decay(a, row, begin + i, h, out);
    exp_in_place(out, K);
  };

  // Forward: the state before each chunk.
  std::vector<double> checkpoints(NC * KV), S(KV, 0.0), decay(K);
  if (a.initial_state) widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  for (int64_t i = 0; i < len; ++i) {
    if (i % kCheckpoint == 0) std::copy(S.begin(), S.end(), checkpoints.begin() + (i / kCheckpoint) * KV);
    decay_of(i, decay.data());
    decay_and_add(S.data(), decay.data(), k + i * K, v.data() + i * V, K, V);
  }

  // Reverse: dS starts from d_final_state.
  std::vector<double> dS(KV, 0.0);
  if (a.d_final_state) widen(static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV, KV, dS.data());
  // states[i] is the state before token i of the chunk, states[i + 1] the one after it.
  std::vector<double> states((kCheckpoint + 1) * KV), decays(kCheckpoint * K), dlog(K);
  std::vector<float> d_out(V), dv(V), dgk(K);
  for (int64_t c = NC - 1; c >= 0; --c) {
    const int64_t t0 = c * kCheckpoint, L = std::min(kCheckpoint, len - t0);
    std::copy(checkpoints.begin() + c * KV, checkpoints.begin() + (c + 1) * KV, states.begin());
    for (int64_t i = 0; i < L; ++i) {
      double* next = states.data() + (i + 1) * KV;
      std::copy(states.begin() + i * KV, states.begin() + (i + 1) * KV, next);
      decay_of(t0 + i, decays.data() + i * K);
      decay_and_add(next, decays.data() + i * K, k + (t0 + i) * K, v.data() + (t0 + i) * V, K, V);
    }
    for (int64_t i = L - 1; i >= 0; --i) {
      const int64_t t = t0 + i, token = begin + t;
      const double* before = states.data() + i * KV;
      const double* after = states.data() + (i + 1) * KV;
      const double* at = decays.data() + i * K;
      const float* qt = q + t * K;
      const float* kt = k + t * K;
      const float* vt = v.data() + t * V;
      load_row(*a.d_output, row_offset(*a.d_output, row, token, h), V, d_out.data());
      double* dq = rows.dq.data() + t * K;
      double* dk = rows.dk.data() + t * K;
      // o_t = scale S_t^T q_t.
      for (int64_t r = 0; r < K; ++r) {
        double acc = 0;
        double* ds = dS.data() + r * V;
        const double sq = p.scale * qt[r];
        for (int64_t col = 0; col < V; ++col) {
          acc += after[r * V + col] * d_out[col];
          ds[col] += sq * d_out[col];
        }
        dq[r] += p.scale * acc;
      }
      // S_t = diag(a_t) S_{t-1} + k_t v_t^T.
      for (int64_t col = 0; col < V; ++col) {
        double acc = 0;
        for (int64_t r = 0; r < K; ++r) acc += dS[r * V + col] * kt[r];
        dv[col] = static_cast<float>(acc);
      }
      double dlog_sum = 0;
      for (int64_t r = 0; r < K; ++r) {
        double* ds = dS.data() + r * V;
        const double* sp = before + r * V;
        double dki = 0, dsp = 0;
        for (int64_t col = 0; col < V; ++col) {
          dki += ds[col] * vt[col];
          dsp += ds[col] * sp[col];
          ds[col] *= at[r];
        }
        dk[r] += dki;
        dlog[r] = at[r] * dsp;
        dlog_sum += dlog[r];
      }
      store_row(*a.dv, row_offset(*a.dv, row, token, h), V, dv.data());
      if (a.dgk) {
        for (int64_t r = 0; r < K; ++r) dgk[r] = static_cast<float>(dlog[r]);
        store_row(*a.dgk, row_offset(*a.dgk, row, token, h), K, dgk.data());
      }
      if (a.dg) set_scalar(*a.dg, row_offset(*a.dg, row, token, h), static_cast<float>(dlog_sum));
    }
  }
  if (a.d_initial_state) narrow(dS.data(), KV, static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV);
}

void store_qk_grads(const GlaBwd& a, int64_t row, int64_t begin, int64_t hk, const QKRows& rows) {
  const int64_t K = a.p.K;
  std::vector<float> out(K);
  for (int64_t i = 0; i < rows.len; ++i) {
    narrow(rows.dq.data() + i * K, K, out.data());
    store_row(*a.dq, row_offset(*a.dq, row, begin + i, hk), K, out.data());
    narrow(rows.dk.data() + i * K, K, out.data());
    store_row(*a.dk, row_offset(*a.dk, row, begin + i, hk), K, out.data());
  }
}

}  // namespace

void gla_bwd(const GlaBwd& a) {
  const DeltaProblem& p = a.p;
  // Packed input: tokens past the last sequence influence nothing, so their gradients are zero.
  if (p.varlen) {
    const int64_t tail = p.seq_start[p.N];
    zero_rows(a.dq, tail, p.T, p.HK, p.K);
    zero_rows(a.dk, tail, p.T, p.HK, p.K);
    zero_rows(a.dv, tail, p.T, p.H, p.V);
    zero_rows(a.dgk, tail, p.T, p.H, p.K);
    zero_scalars(a.dg, tail, p.T, p.H);
  }
  const int64_t G = p.group();
  parallel_for(p.N * p.HK, [&](int64_t unit) {
    const int64_t n = unit / p.HK, hk = unit % p.HK;
    const int64_t row = p.row(n), begin = p.begin(n);
    QKRows rows(p.end(n) - begin, p.K);
    for (int64_t i = 0; i < rows.len; ++i) {
      load_row(*a.q, row_offset(*a.q, row, begin + i, hk), p.K, rows.q.data() + i * p.K);
      load_row(*a.k, row_offset(*a.k, row, begin + i, hk), p.K, rows.k.data() + i * p.K);
    }
    for (int64_t j = 0; j < G; ++j) value_head_backward(a, n, hk * G + j, rows);
    store_qk_grads(a, row, begin, hk, rows);
  });
}

}  // namespace ak::linear::cpu
