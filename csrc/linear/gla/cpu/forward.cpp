// CPU forward of the gated linear family: the plain token-by-token recurrence in double, parallel
// over (sequence, value head). The chunked and recurrent algorithms are the same computation here.
#include <algorithm>
#include <vector>

#include "linear/gla/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

void forward_sequence(const GlaFwd& a, int64_t n, int64_t h) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V, hk = h / p.group();
  const int64_t row = p.row(n), begin = p.begin(n), end = p.end(n);
  std::vector<double> S(KV, 0.0), decay(K);
  if (a.initial_state) widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  // chunk_states [B, NT + 1, H, K, V] (fixed length: sequence n is batch row n, from token 0).
  const int64_t NT = (p.T + 63) / 64;
  auto keep = [&](int64_t c) {
    if (!a.chunk_states) return;
    narrow(S.data(), KV, static_cast<float*>(a.chunk_states->data) + ((n * (NT + 1) + c) * p.H + h) * KV);
  };
  std::vector<float> q(K), k(K), v(V), o(V);
  std::vector<double> keys(a.normalize ? K : 0, 0.0);  // the sum of this call's keys (no decays)
  for (int64_t t = begin; t < end; ++t) {
    if ((t - begin) % 64 == 0) keep((t - begin) / 64);
    load_row(*a.q, row_offset(*a.q, row, t, hk), K, q.data());
    load_row(*a.k, row_offset(*a.k, row, t, hk), K, k.data());
    load_row(*a.v, row_offset(*a.v, row, t, h), V, v.data());
    token_log_decay(a, row, t, h, decay.data());
    exp_in_place(decay.data(), K);
    decay_and_add(S.data(), decay.data(), k.data(), v.data(), K, V);
    if (a.normalize) {
      double z = 0.0;
      for (int64_t i = 0; i < K; ++i) keys[i] += k[i], z += p.scale * q[i] * keys[i];
      state_output(S.data(), q.data(), p.scale, K, V, o.data(), z + a.normalize_eps);
    } else {
      state_output(S.data(), q.data(), p.scale, K, V, o.data());
    }
    store_row(*a.output, row_offset(*a.output, row, t, h), V, o.data());
  }
  keep(NT);
  if (a.final_state) narrow(S.data(), KV, static_cast<float*>(a.final_state->data) + (n * p.H + h) * KV);
}

}  // namespace

void gla_fwd(const GlaFwd& a) {
  const DeltaProblem& p = a.p;
  parallel_for(p.N * p.H, [&](int64_t unit) { forward_sequence(a, unit / p.H, unit % p.H); });
}

}  // namespace ak::linear::cpu
