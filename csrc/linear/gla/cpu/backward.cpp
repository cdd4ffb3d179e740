// CPU backward of the gated linear family: the exact reverse mode of the recurrence
//   S_t = diag(a_t) S_{t-1} + k_t v_t^T,  o_t = scale S_t^T q_t,  a_t = exp(gk_t + g_t + g_gamma).
// A forward pass keeps the state every 64 tokens; the reverse pass recomputes one chunk's states from
// its checkpoint and walks its tokens backwards with dS (the gradient of the state after the token):
//   dq_t = scale S_t do_t;  dS += scale q_t do_t^T;  dv_t = dS^T k_t;  dk_t = dS v_t;
//   d(log a_t)_i = a_t,i sum_v dS_iv S_{t-1},iv;  then dS <- diag(a_t) dS for the token before.
// dgk is the per-channel log-decay gradient, dg its sum over K (g and g_gamma enter every channel).
// Normalised (linear attention, o_t = num_t / D_t with D_t = scale q_t . z_t + eps, z_t the sequence's
// key sum up to t): the recurrence's reverse mode runs from dnum_t = dO_t / D_t, and the normaliser adds
// dD_t = -(dO_t . num_t) / D_t^2 as dq_t += dD_t scale z_t and dk_j += sum_{t >= j} dD_t scale q_t.
// Parallel over (sequence, q/k head): the value heads of a group share one worker, which sums their
// dq and dk. The forward's chunk_states are not read: recomputing in double is as cheap here.
#include <algorithm>
#include <vector>

#include "linear/cpu/grouped_backward.h"
#include "linear/gla/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

// The normaliser's part of token t's reverse mode: d_out (dO_t) becomes dnum_t = dO_t / D_t, dq_t gets
// dD_t scale z_t, and dk_t the reverse sum `acc` of dD_u scale q_u over u >= t (updated here).
void normalised_output_backward(const double* S, const float* q, const double* z, double scale, double eps,
                                int64_t K, int64_t V, float* d_out, double* dq, double* acc, double* dk) {
  double D = 0;
  for (int64_t r = 0; r < K; ++r) D += q[r] * z[r];
  D = scale * D + eps;
  double dot = 0;  // dO_t . num_t, num_t = scale S_t^T q_t
  for (int64_t c = 0; c < V; ++c) {
    double num = 0;
    for (int64_t r = 0; r < K; ++r) num += S[r * V + c] * q[r];
    dot += d_out[c] * scale * num;
    d_out[c] = static_cast<float>(d_out[c] / D);
  }
  const double dD = -dot / (D * D);
  for (int64_t r = 0; r < K; ++r) {
    dq[r] += dD * scale * z[r];
    acc[r] += dD * scale * q[r];
    dk[r] += acc[r];
  }
}

// Reverse mode of value head h of sequence n; adds its q/k gradients to `rows`.
void value_head_backward(const GlaBwd& a, int64_t n, int64_t h, QKRows& rows) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), len = rows.len;
  const float* q = rows.q.data();
  const float* k = rows.k.data();

  std::vector<float> v(len * V);
  for (int64_t i = 0; i < len; ++i) load_row(*a.v, row_offset(*a.v, row, begin + i, h), V, v.data() + i * V);

  std::vector<double> S(KV, 0.0), dS(KV, 0.0);
  if (a.initial_state) widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  // Reverse: dS starts from d_final_state.
  if (a.d_final_state) widen(static_cast<const float*>(a.d_final_state->data) + (n * p.H + h) * KV, KV, dS.data());
  // Per slot of a chunk: the token's decays.
  std::vector<double> decays(kCheckpoint * K), dlog(K);
  std::vector<float> d_out(V), dv(V), dgk(K);
  // Normalised: the key sums z_t (double, [len, K]) and the reverse sum of dD_t scale q_t.
  std::vector<double> z(a.normalize ? len * K : 0), dk_norm(a.normalize ? K : 0, 0.0);
  for (int64_t t = 0; a.normalize && t < len; ++t) {
    for (int64_t r = 0; r < K; ++r) z[t * K + r] = (t > 0 ? z[(t - 1) * K + r] : 0.0) + k[t * K + r];
  }
  auto step = [&](int64_t t, double* state, int64_t slot) {
    double* decay = decays.data() + slot * K;
    token_log_decay(a, row, begin + t, h, decay);
    exp_in_place(decay, K);
    decay_and_add(state, decay, k + t * K, v.data() + t * V, K, V);
  };
  checkpointed_reverse(len, KV, S, step, [&](int64_t t, const double* before, const double* after, int64_t slot) {
    const int64_t token = begin + t;
    const double* at = decays.data() + slot * K;
    const float* kt = k + t * K;
    const float* vt = v.data() + t * V;
    load_row(*a.d_output, row_offset(*a.d_output, row, token, h), V, d_out.data());
    double* dk = rows.dk.data() + t * K;
    if (a.normalize) normalised_output_backward(after, q + t * K, z.data() + t * K, p.scale, a.normalize_eps, K, V,
                                                d_out.data(), rows.dq.data() + t * K, dk_norm.data(), dk);
    output_backward(dS.data(), after, q + t * K, d_out.data(), p.scale, K, V, rows.dq.data() + t * K);
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
  });
  if (a.d_initial_state) narrow(dS.data(), KV, static_cast<float*>(a.d_initial_state->data) + (n * p.H + h) * KV);
}

}  // namespace

void gla_bwd(const GlaBwd& a) {
  const DeltaProblem& p = a.p;
  const int64_t tail = zero_packed_tail(a);
  zero_rows(a.dgk, tail, p.T, p.H, p.K);
  zero_scalars(a.dg, tail, p.T, p.H);
  grouped_backward<QKRows>(a, [&](int64_t n, int64_t h, QKRows& rows) { value_head_backward(a, n, h, rows); });
}

}  // namespace ak::linear::cpu
