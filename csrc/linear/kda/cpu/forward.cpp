// CPU forward of KDA: the plain token-by-token recurrence with a double state, parallel over
// (sequence, value head). The chunked and recurrent algorithms are the same computation here.
#include <vector>

#include "linear/kda/cpu/recurrence.h"

namespace ak::linear::cpu {
namespace {

void forward_head(const KdaFwd& a, int64_t n, int64_t h) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V, hk = h / p.group();
  const int64_t row = p.row(n);
  std::vector<double> S(KV, 0.0), decay(K), r(V), u(V);
  if (a.initial_state) widen(static_cast<const float*>(a.initial_state->data) + (n * p.H + h) * KV, KV, S.data());
  std::vector<float> q(K), k(K), v(V), o(V);
  for (int64_t t = p.begin(n); t < p.end(n); ++t) {
    load_row(*a.q, row_offset(*a.q, row, t, hk), K, q.data());
    load_row(*a.k, row_offset(*a.k, row, t, hk), K, k.data());
    load_row(*a.v, row_offset(*a.v, row, t, h), V, v.data());
    kda_decays(*a.gate, row, t, h, K, decay.data());
    const double beta = scalar_at(*a.beta, row_offset(*a.beta, row, t, h));
    kda_step(S.data(), decay.data(), k.data(), v.data(), beta, K, V, r.data(), u.data());
    kda_output(S.data(), q.data(), p.scale, K, V, o.data());
    store_row(*a.output, row_offset(*a.output, row, t, h), V, o.data());
  }
  if (a.final_state) narrow(S.data(), KV, static_cast<float*>(a.final_state->data) + (n * p.H + h) * KV);
}

}  // namespace

void kda_fwd(const KdaFwd& a) {
  const DeltaProblem& p = a.p;
  parallel_for(p.N * p.H, [&](int64_t unit) { forward_head(a, unit / p.H, unit % p.H); });
}

}  // namespace ak::linear::cpu
