// CPU backward of KDA: the exact reverse mode of the recurrence
//   S' = diag(a_t) S_{t-1},  r = v_t - S'^T k_t,  u = beta_t r,  S_t = S' + k_t u^T,  o_t = scale S_t^T q_t
// with a_t = exp(gate_t). A forward pass keeps the state every 64 tokens; the reverse pass recomputes
// one chunk's states from its checkpoint and walks its tokens backwards with dS (the gradient of the
// state after the token):
//   dq = scale S_t dO;  dS += scale q dO^T;  dk += dS u;  du = dS^T k;  dbeta = du . r;  dv = beta du;
//   dS' = dS - k dv^T;  dk -= S' dv;  dgate_i = a_i sum_c dS'_ic S_{t-1},ic;  dS <- diag(a_t) dS'.
// Parallel over (sequence, q/k head): the value heads of a group share one worker, which sums their
// dq and dk. Tokens past the last packed sequence get zero gradients.
#include <algorithm>
#include <vector>

#include "linear/kda/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

constexpr int64_t kCheckpoint = 64;

void zero_rows(const ak_tensor* t, int64_t t_begin, int64_t t_end, int64_t heads, int64_t D) {
  std::vector<float> zeros(D, 0.0f);
  for (int64_t tt = t_begin; tt < t_end; ++tt) {
    for (int64_t h = 0; h < heads; ++h) store_row(*t, row_offset(*t, 0, tt, h), D, zeros.data());
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
void value_head_backward(const KdaBwd& a, int64_t n, int64_t h, QKRows& rows) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), len = rows.len;
  const int64_t NC = (len + kCheckpoint - 1) / kCheckpoint;
  const float* q = rows.q.data();
  const float* k = rows.k.data();

  std::vector<float> v(len * V);
  std::vector<double> beta(len);
  for (int64_t i = 0; i < len; ++i) {
    load_row(*a.v, row_offset(*a.v, row, begin + i, h), V, v.data() + i * V);
    beta[i] = scalar_at(*a.beta, row_offset(*a.beta, row, begin + i, h));
  }

  // Forward: the state before each chunk.
  std::vector<double> checkpoints(NC * KV), S(KV, 0.0), decay(K), r(V), u(V);
  if (a.initial_state) kda_widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  for (int64_t i = 0; i < len; ++i) {
    if (i % kCheckpoint == 0) std::copy(S.begin(), S.end(), checkpoints.begin() + (i / kCheckpoint) * KV);
    kda_decays(*a.gate, row, begin + i, h, K, decay.data());
    kda_step(S.data(), decay.data(), k + i * K, v.data() + i * V, beta[i], K, V, r.data(), u.data());
  }

  // Reverse: dS starts from d_final_state.
  std::vector<double> dS(KV, 0.0);
  if (a.d_final_state) kda_widen(static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV, KV, dS.data());
  // states[i]: the state before token i of the chunk, states[i + 1] the one after it; rs, us per token.
  std::vector<double> states((kCheckpoint + 1) * KV), decays(kCheckpoint * K);
  std::vector<double> rs(kCheckpoint * V), us(kCheckpoint * V), du(V), dvd(V);
  std::vector<float> d_out(V), dv(V), dgate(K);
  for (int64_t c = NC - 1; c >= 0; --c) {
    const int64_t t0 = c * kCheckpoint, L = std::min(kCheckpoint, len - t0);
    std::copy(checkpoints.begin() + c * KV, checkpoints.begin() + (c + 1) * KV, states.begin());
    for (int64_t i = 0; i < L; ++i) {
      double* next = states.data() + (i + 1) * KV;
      std::copy(states.begin() + i * KV, states.begin() + (i + 1) * KV, next);
      kda_decays(*a.gate, row, begin + t0 + i, h, K, decays.data() + i * K);
      kda_step(next, decays.data() + i * K, k + (t0 + i) * K, v.data() + (t0 + i) * V, beta[t0 + i], K, V,
               rs.data() + i * V, us.data() + i * V);
    }
    for (int64_t i = L - 1; i >= 0; --i) {
      const int64_t t = t0 + i, token = begin + t;
      const double* before = states.data() + i * KV;
      const double* after = states.data() + (i + 1) * KV;
      const double* at = decays.data() + i * K;
      const double* rt = rs.data() + i * V;
      const double* ut = us.data() + i * V;
      const float* qt = q + t * K;
      const float* kt = k + t * K;
      load_row(*a.d_output, row_offset(*a.d_output, row, token, h), V, d_out.data());
      double* dq = rows.dq.data() + t * K;
      double* dk = rows.dk.data() + t * K;
      // o_t = scale S_t^T q_t.
      for (int64_t j = 0; j < K; ++j) {
        double acc = 0;
        double* ds = dS.data() + j * V;
        const double sq = p.scale * qt[j];
        for (int64_t col = 0; col < V; ++col) {
          acc += after[j * V + col] * d_out[col];
          ds[col] += sq * d_out[col];
        }
        dq[j] += p.scale * acc;
      }
      // S_t = S' + k u^T: dk += dS u, du = dS^T k.
      std::fill(du.begin(), du.end(), 0.0);
      for (int64_t j = 0; j < K; ++j) {
        const double* ds = dS.data() + j * V;
        double acc = 0;
        for (int64_t col = 0; col < V; ++col) {
          du[col] += ds[col] * kt[j];
          acc += ds[col] * ut[col];
        }
        dk[j] += acc;
      }
      // u = beta r, r = v - S'^T k.
      double dbeta = 0;
      for (int64_t col = 0; col < V; ++col) {
        dbeta += du[col] * rt[col];
        dvd[col] = beta[t] * du[col];
        dv[col] = static_cast<float>(dvd[col]);
      }
      // dS' = dS - k dv^T; dk -= S' dv with S' = diag(a) S_{t-1}; then back through the decay.
      for (int64_t j = 0; j < K; ++j) {
        double* ds = dS.data() + j * V;
        const double* sp = before + j * V;
        double dot = 0, dlog = 0;
        for (int64_t col = 0; col < V; ++col) {
          const double decayed = ds[col] - kt[j] * dvd[col];
          dot += sp[col] * dvd[col];
          dlog += decayed * sp[col];
          ds[col] = at[j] * decayed;
        }
        dk[j] -= at[j] * dot;
        dgate[j] = static_cast<float>(at[j] * dlog);
      }
      store_row(*a.dv, row_offset(*a.dv, row, token, h), V, dv.data());
      store_row(*a.dgate, row_offset(*a.dgate, row, token, h), K, dgate.data());
      set_scalar(*a.dbeta, row_offset(*a.dbeta, row, token, h), static_cast<float>(dbeta));
    }
  }
  if (a.d_initial_state) kda_narrow(dS.data(), KV, static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV);
}

void store_qk_grads(const KdaBwd& a, int64_t row, int64_t begin, int64_t hk, const QKRows& rows) {
  const int64_t K = a.p.K;
  std::vector<float> out(K);
  for (int64_t i = 0; i < rows.len; ++i) {
    kda_narrow(rows.dq.data() + i * K, K, out.data());
    store_row(*a.dq, row_offset(*a.dq, row, begin + i, hk), K, out.data());
    kda_narrow(rows.dk.data() + i * K, K, out.data());
    store_row(*a.dk, row_offset(*a.dk, row, begin + i, hk), K, out.data());
  }
}

}  // namespace

void kda_bwd(const KdaBwd& a) {
  const DeltaProblem& p = a.p;
  // Packed input: tokens past the last sequence influence nothing, so their gradients are zero.
  if (p.varlen) {
    const int64_t tail = p.seq_start[p.N];
    zero_rows(a.dq, tail, p.T, p.HK, p.K);
    zero_rows(a.dk, tail, p.T, p.HK, p.K);
    zero_rows(a.dv, tail, p.T, p.H, p.V);
    zero_rows(a.dgate, tail, p.T, p.H, p.K);
    for (int64_t t = tail; t < p.T; ++t) {
      for (int64_t h = 0; h < p.H; ++h) set_scalar(*a.dbeta, row_offset(*a.dbeta, 0, t, h), 0.0f);
    }
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
