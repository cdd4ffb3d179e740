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

#include "linear/cpu/grouped_backward.h"
#include "linear/kda/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

// Reverse mode of value head h of sequence n; adds its q/k gradients to `rows`.
void value_head_backward(const KdaBwd& a, int64_t n, int64_t h, QKRows& rows) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), len = rows.len;
  const float* q = rows.q.data();
  const float* k = rows.k.data();

  std::vector<float> v(len * V);
  std::vector<double> beta(len);
  for (int64_t i = 0; i < len; ++i) {
    load_row(*a.v, row_offset(*a.v, row, begin + i, h), V, v.data() + i * V);
    beta[i] = scalar_at(*a.beta, row_offset(*a.beta, row, begin + i, h));
  }

  std::vector<double> S(KV, 0.0), dS(KV, 0.0);
  if (a.initial_state) widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  // Reverse: dS starts from d_final_state.
  if (a.d_final_state) widen(static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV, KV, dS.data());
  // Per slot of a chunk: the token's decays, r and u.
  std::vector<double> decays(kCheckpoint * K), rs(kCheckpoint * V), us(kCheckpoint * V), du(V), dvd(V);
  std::vector<float> d_out(V), dv(V), dgate(K);
  auto step = [&](int64_t t, double* state, int64_t slot) {
    kda_decays(*a.gate, row, begin + t, h, K, decays.data() + slot * K);
    kda_step(state, decays.data() + slot * K, k + t * K, v.data() + t * V, beta[t], K, V, rs.data() + slot * V,
             us.data() + slot * V);
  };
  checkpointed_reverse(len, KV, S, step, [&](int64_t t, const double* before, const double* after, int64_t slot) {
    const int64_t token = begin + t;
    const double* at = decays.data() + slot * K;
    const double* rt = rs.data() + slot * V;
    const double* ut = us.data() + slot * V;
    const float* kt = k + t * K;
    load_row(*a.d_output, row_offset(*a.d_output, row, token, h), V, d_out.data());
    double* dk = rows.dk.data() + t * K;
    output_backward(dS.data(), after, q + t * K, d_out.data(), p.scale, K, V, rows.dq.data() + t * K);
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
  });
  if (a.d_initial_state) narrow(dS.data(), KV, static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV);
}

}  // namespace

void kda_bwd(const KdaBwd& a) {
  const DeltaProblem& p = a.p;
  const int64_t tail = zero_packed_tail(a);
  zero_rows(a.dgate, tail, p.T, p.H, p.K);
  zero_scalars(a.dbeta, tail, p.T, p.H);
  grouped_backward<QKRows>(a, [&](int64_t n, int64_t h, QKRows& rows) { value_head_backward(a, n, h, rows); });
}

}  // namespace ak::linear::cpu
