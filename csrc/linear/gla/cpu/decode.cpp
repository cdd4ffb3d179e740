// CPU decode of the gated linear family: one token per sequence, parallel over (sequence, value
// head). Each state is read whole before it is written, so new_state may be state itself.
#include <vector>

#include "linear/gla/cpu/recurrence.h"

namespace ak::linear::cpu {

void gla_decode(const GlaDecode& a) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  parallel_for(p.B * p.H, [&](int64_t unit) {
    const int64_t b = unit / p.H, h = unit % p.H, hk = h / p.group();
    std::vector<float> q(K), k(K), v(V), o(V);
    std::vector<double> S(KV), decay(K);
    load_row(*a.q, row_offset(*a.q, b, hk), K, q.data());
    load_row(*a.k, row_offset(*a.k, b, hk), K, k.data());
    load_row(*a.v, row_offset(*a.v, b, h), V, v.data());
    log_decay(a.gates, a.gk, a.gates.gk ? row_offset(*a.gk, b, h) : 0, a.g, a.gates.g ? row_offset(*a.g, b, h) : 0,
              a.g_gamma, h, K, decay.data());
    exp_in_place(decay.data(), K);
    widen(static_cast<const float*>(a.state->data) + unit * KV, KV, S.data());
    decay_and_add(S.data(), decay.data(), k.data(), v.data(), K, V);
    state_output(S.data(), q.data(), p.scale, K, V, o.data());
    narrow(S.data(), KV, static_cast<float*>(a.new_state->data) + unit * KV);
    store_row(*a.output, row_offset(*a.output, b, h), V, o.data());
  });
}

}  // namespace ak::linear::cpu
