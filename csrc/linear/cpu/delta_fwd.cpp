// CPU forward of the delta rule: the chunked algorithm (the stages of cpu_chunk_stages.h) and the
// token-by-token recurrence, parallel over (sequence, value head).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "linear/cpu/chunk_stages.h"
#include "linear/cpu/recurrent_step.h"
#include "linear/cpu/rows.h"
#include "linear/problem.h"

namespace ak::linear::cpu {
namespace {

// The inputs of tokens [t0, t0 + L) of one (sequence, value head), loaded as dense fp32 rows.
struct ChunkInputs {
  std::vector<float> q, k, v, g, beta;
  ChunkInputs(int64_t C, int64_t K, int64_t V) : q(C * K), k(C * K), v(C * V), g(C), beta(C) {}
};

void load_chunk(const DeltaFwd& a, int64_t row, int64_t h, int64_t t0, int64_t L, ChunkInputs& in) {
  const DeltaProblem& p = a.p;
  const int64_t hk = h / p.group();
  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = t0 + i;
    load_row(*a.q, row_offset(*a.q, row, t, hk), p.K, in.q.data() + i * p.K);
    load_row(*a.k, row_offset(*a.k, row, t, hk), p.K, in.k.data() + i * p.K);
    load_row(*a.v, row_offset(*a.v, row, t, h), p.V, in.v.data() + i * p.V);
    if (p.l2norm) {
      l2_normalize(in.q.data() + i * p.K, p.K);
      l2_normalize(in.k.data() + i * p.K, p.K);
    }
    in.beta[i] = scalar_at(*a.beta, row_offset(*a.beta, row, t, h));
    in.g[i] = p.gated ? scalar_at(*a.g, row_offset(*a.g, row, t, h)) : 0.0f;
  }
}

void load_state(const ak_tensor* initial, int64_t n, int64_t h, const DeltaProblem& p, float* S) {
  const int64_t KV = p.K * p.V;
  if (initial) {
    std::memcpy(S, static_cast<const float*>(initial->data) + (n * p.H + h) * KV, KV * sizeof(float));
  } else {
    std::fill(S, S + KV, 0.0f);
  }
}

// Writes the chunk-local WY factors of rows [t0, t0 + L) of (b, h) into an [B, H, T, C] tensor,
// zero past the chunk's L columns.
void store_factor(const ak_tensor* out, const DeltaProblem& p, int64_t b, int64_t h, int64_t t0, int64_t L,
                  const float* F) {
  if (!out) return;
  const int64_t C = p.chunk_size;
  float* base = static_cast<float*>(out->data) + ((b * p.H + h) * p.T + t0) * C;
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < C; ++j) base[i * C + j] = j < L ? F[i * L + j] : 0.0f;
  }
}

void chunked_sequence(const DeltaFwd& a, int64_t n, int64_t h) {
  const DeltaProblem& p = a.p;
  const int64_t C = p.chunk_size, K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), end = p.end(n);
  const int64_t NC = (p.T + C - 1) / C;  // chunk_states entries (fixed length only)
  std::vector<float> S(KV);
  load_state(a.initial_state, n, h, p, S.data());
  ChunkInputs in(C, K, V);
  std::vector<float> gc(C), A(C * C), Tm(C * C), Aw(C * C), Au(C * C);
  std::vector<float> w(C * K), u(C * V), v_new(C * V), o(C * V);
  float* states = a.chunk_states ? static_cast<float*>(a.chunk_states->data) + (n * p.H + h) * (NC + 1) * KV
                                 : nullptr;
  for (int64_t t0 = begin, c = 0; t0 < end; t0 += C, ++c) {
    const int64_t L = std::min(C, end - t0);
    load_chunk(a, row, h, t0, L, in);
    if (states) std::memcpy(states + c * KV, S.data(), KV * sizeof(float));
    const float* gate = nullptr;
    if (p.gated) {
      stages::gate_cumsum(in.g.data(), L, gc.data());
      gate = gc.data();
    }
    stages::scaled_kkt(in.k.data(), in.beta.data(), gate, L, K, A.data());
    stages::solve_unit_lower(A.data(), L, Tm.data());
    stages::wy_factors(Tm.data(), in.beta.data(), gate, L, Aw.data(), Au.data());
    store_factor(a.aw, p, n, h, t0, L, Aw.data());
    store_factor(a.au, p, n, h, t0, L, Au.data());
    stages::wy_apply(Aw.data(), in.k.data(), L, K, w.data());
    stages::wy_apply(Au.data(), in.v.data(), L, V, u.data());
    stages::chunk_residual(w.data(), u.data(), S.data(), L, K, V, v_new.data());
    stages::chunk_output(in.q.data(), in.k.data(), gate, S.data(), v_new.data(), p.scale, L, K, V, o.data());
    stages::chunk_state_update(in.k.data(), gate, v_new.data(), L, K, V, S.data());
    for (int64_t i = 0; i < L; ++i) store_row(*a.output, row_offset(*a.output, row, t0 + i, h), V, o.data() + i * V);
  }
  if (states) std::memcpy(states + NC * KV, S.data(), KV * sizeof(float));
  if (a.final_state) {
    std::memcpy(static_cast<float*>(a.final_state->data) + (n * p.H + h) * KV, S.data(), KV * sizeof(float));
  }
}

void recurrent_sequence(const DeltaFwd& a, int64_t n, int64_t h) {
  const DeltaProblem& p = a.p;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t row = p.row(n), begin = p.begin(n), end = p.end(n);
  std::vector<float> S(KV);
  load_state(a.initial_state, n, h, p, S.data());
  ChunkInputs in(1, K, V);
  std::vector<float> o(V);
  for (int64_t t = begin; t < end; ++t) {
    load_chunk(a, row, h, t, 1, in);
    const double decay = p.gated ? std::exp(static_cast<double>(in.g[0])) : 1.0;
    recurrent_step(S.data(), in.q.data(), in.k.data(), in.v.data(), in.beta[0], decay, p.scale, K, V, o.data());
    store_row(*a.output, row_offset(*a.output, row, t, h), V, o.data());
  }
  if (a.final_state) {
    std::memcpy(static_cast<float*>(a.final_state->data) + (n * p.H + h) * KV, S.data(), KV * sizeof(float));
  }
}

}  // namespace

void delta_fwd(const DeltaFwd& a) {
  const DeltaProblem& p = a.p;
  parallel_for(p.N * p.H, [&](int64_t unit) {
    const int64_t n = unit / p.H, h = unit % p.H;
    if (p.recurrent) {
      recurrent_sequence(a, n, h);
    } else {
      chunked_sequence(a, n, h);
    }
  });
}

}  // namespace ak::linear::cpu
