// CPU decode of the delta rule: one token per sequence, parallel over (sequence, value head). The
// state may be fp32 or the inputs' dtype and may be updated in place.
#include <cmath>
#include <vector>

#include "linear/cpu/recurrent_step.h"
#include "linear/cpu/rows.h"
#include "linear/problem.h"

namespace ak::linear::cpu {

void delta_decode(const DeltaDecode& a) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  parallel_for(p.B * p.H, [&](int64_t unit) {
    const int64_t b = unit / p.H, h = unit % p.H, hk = h / p.group();
    std::vector<float> q(K), k(K), v(V), o(V), S(KV);
    load_row(*a.q, row_offset(*a.q, b, hk), K, q.data());
    load_row(*a.k, row_offset(*a.k, b, hk), K, k.data());
    load_row(*a.v, row_offset(*a.v, b, h), V, v.data());
    if (p.l2norm) {
      l2_normalize(q.data(), K);
      l2_normalize(k.data(), K);
    }
    const float beta = scalar_at(*a.beta, row_offset(*a.beta, b, h));
    const double decay = p.gated ? std::exp(static_cast<double>(scalar_at(*a.g, row_offset(*a.g, b, h)))) : 1.0;
    // The state is read whole before it is written, so new_state may alias state.
    const int64_t state_offset = unit * KV;
    load_row(*a.state, state_offset, KV, S.data());
    recurrent_step(S.data(), q.data(), k.data(), v.data(), beta, decay, p.scale, K, V, o.data());
    store_row(*a.new_state, state_offset, KV, S.data());
    store_row(*a.output, row_offset(*a.output, b, h), V, o.data());
  });
}

}  // namespace ak::linear::cpu
