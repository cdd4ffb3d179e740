// The CPU pieces of the KDA recurrence shared by its forward and backward: the token's decays and one
// token's step on a double [K, V] state.
#pragma once

#include <cmath>
#include <cstdint>

#include "linear/cpu/rows.h"
#include "linear/kda/problem.h"

namespace ak::linear::cpu {

// exp(gate) of token t of batch row `row`, value head h (gate is float32 [B, T, H, K]).
inline void kda_decays(const ak_tensor& gate, int64_t row, int64_t t, int64_t h, int64_t K, double* a) {
  const float* g = static_cast<const float*>(gate.data) + row_offset(gate, row, t, h);
  for (int64_t i = 0; i < K; ++i) a[i] = std::exp(static_cast<double>(g[i]));
}

// One token: S <- diag(a) S; r = v - S^T k; u = beta r; S <- S + k u^T. Writes r and u when given.
inline void kda_step(double* S, const double* a, const float* k, const float* v, double beta, int64_t K, int64_t V,
                     double* r, double* u) {
  for (int64_t i = 0; i < K; ++i) {
    double* s = S + i * V;
    for (int64_t c = 0; c < V; ++c) s[c] *= a[i];
  }
  for (int64_t c = 0; c < V; ++c) {
    double p = 0;
    for (int64_t i = 0; i < K; ++i) p += S[i * V + c] * k[i];
    r[c] = v[c] - p;
    u[c] = beta * r[c];
  }
  for (int64_t i = 0; i < K; ++i) {
    double* s = S + i * V;
    const double ki = k[i];
    for (int64_t c = 0; c < V; ++c) s[c] += ki * u[c];
  }
}

// o = scale S^T q.
inline void kda_output(const double* S, const float* q, double scale, int64_t K, int64_t V, float* o) {
  for (int64_t c = 0; c < V; ++c) {
    double acc = 0;
    for (int64_t i = 0; i < K; ++i) acc += S[i * V + c] * q[i];
    o[c] = static_cast<float>(scale * acc);
  }
}

}  // namespace ak::linear::cpu
