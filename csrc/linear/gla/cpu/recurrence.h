// The CPU pieces of the gated linear recurrence shared by the forward, backward and decode: the
// token's decay per key channel, the state update and the output. States are double.
#pragma once

#include <cmath>
#include <cstdint>

#include "linear/cpu/rows.h"
#include "linear/gla/problem.h"

namespace ak::linear::cpu {

// The natural-log decay of one token and value head per key channel: gk_i + g + g_gamma (each absent
// term 0). gk_offset and g_offset locate the token's row of gk and its element of g.
inline void log_decay(const GlaGates& gates, const ak_tensor* gk, int64_t gk_offset, const ak_tensor* g,
                      int64_t g_offset, const ak_tensor* g_gamma, int64_t h, int64_t K, double* out) {
  double common = 0;
  if (gates.g) common += scalar_at(*g, g_offset);
  if (gates.gamma) common += static_cast<const float*>(g_gamma->data)[h];
  const float* channel = gates.gk ? static_cast<const float*>(gk->data) + gk_offset : nullptr;
  for (int64_t i = 0; i < K; ++i) out[i] = common + (channel ? channel[i] : 0.0f);
}

// The decay of token t of batch row `row` and value head h for a call over tokens (GlaFwd, GlaBwd).
template <class Call>
void token_log_decay(const Call& a, int64_t row, int64_t t, int64_t h, double* out) {
  log_decay(a.gates, a.gk, a.gates.gk ? row_offset(*a.gk, row, t, h) : 0, a.g,
            a.gates.g ? row_offset(*a.g, row, t, h) : 0, a.g_gamma, h, a.p.K, out);
}

// S = diag(decay) S + k v^T on a [K, V] state.
inline void decay_and_add(double* S, const double* decay, const float* k, const float* v, int64_t K, int64_t V) {
  for (int64_t i = 0; i < K; ++i) {
    double* s = S + i * V;
    const double a = decay[i], ki = k[i];
    for (int64_t c = 0; c < V; ++c) s[c] = a * s[c] + ki * v[c];
  }
}

// o = scale S^T q, each column divided by `divisor` (the normaliser) in double before it is rounded.
inline void state_output(const double* S, const float* q, double scale, int64_t K, int64_t V, float* o,
                         double divisor = 1.0) {
  for (int64_t c = 0; c < V; ++c) {
    double acc = 0;
    for (int64_t i = 0; i < K; ++i) acc += S[i * V + c] * q[i];
    o[c] = static_cast<float>(scale * acc / divisor);
  }
}

// exp of each log decay, in place.
inline void exp_in_place(double* x, int64_t K) {
  for (int64_t i = 0; i < K; ++i) x[i] = std::exp(x[i]);
}

}  // namespace ak::linear::cpu
