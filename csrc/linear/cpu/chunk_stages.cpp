// The chunked delta-rule stages on the CPU (see cpu_chunk_stages.h for the math).
#include "linear/cpu/chunk_stages.h"

#include <cmath>
#include <vector>

namespace ak::linear::cpu::stages {
namespace {

// exp(gc_i - gc_j), or 1 without a gate. Only called for j <= i, where the exponent is a decay.
inline double decay(const float* gc, int64_t i, int64_t j) {
  return gc ? std::exp(static_cast<double>(gc[i]) - gc[j]) : 1.0;
}

inline double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace

void gate_cumsum(const float* g, int64_t L, float* gc) {
  double sum = 0;
  for (int64_t i = 0; i < L; ++i) {
    sum += g[i];
    gc[i] = static_cast<float>(sum);
  }
}

void scaled_kkt(const float* k, const float* beta, const float* gc, int64_t L, int64_t K, float* A) {
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) {
      A[i * L + j] = j < i ? static_cast<float>(beta[i] * dot(k + i * K, k + j * K, K) * decay(gc, i, j)) : 0.0f;
    }
  }
}

void solve_unit_lower(const float* A, int64_t L, float* Tm) {
  // Row i of (I + A) Tm = I reads: Tm_i = e_i - sum_{m < i} A[i][m] Tm_m.
  std::vector<double> row(L);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) row[j] = (i == j) ? 1.0 : 0.0;
    for (int64_t m = 0; m < i; ++m) {
      const double a = A[i * L + m];
      if (a == 0.0) continue;
      const float* tm = Tm + m * L;
      for (int64_t j = 0; j <= m; ++j) row[j] -= a * tm[j];
    }
    for (int64_t j = 0; j < L; ++j) Tm[i * L + j] = static_cast<float>(row[j]);
  }
}

void wy_factors(const float* Tm, const float* beta, const float* gc, int64_t L, float* Aw, float* Au) {
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) {
      const double t = j <= i ? Tm[i * L + j] : 0.0;
      Au[i * L + j] = static_cast<float>(t * beta[j]);
      Aw[i * L + j] = static_cast<float>(t * beta[j] * (gc ? std::exp(static_cast<double>(gc[j])) : 1.0));
    }
  }
}

void wy_apply(const float* F, const float* X, int64_t L, int64_t D, float* out) {
  std::vector<double> acc(D);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t d = 0; d < D; ++d) acc[d] = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const double f = F[i * L + j];
      const float* x = X + j * D;
      for (int64_t d = 0; d < D; ++d) acc[d] += f * x[d];
    }
    for (int64_t d = 0; d < D; ++d) out[i * D + d] = static_cast<float>(acc[d]);
  }
}

void chunk_residual(const float* w, const float* u, const float* S, int64_t L, int64_t K, int64_t V,
                    float* v_new) {
  std::vector<double> acc(V);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t c = 0; c < V; ++c) acc[c] = u[i * V + c];
    for (int64_t r = 0; r < K; ++r) {
      const double wr = w[i * K + r];
      const float* s = S + r * V;
      for (int64_t c = 0; c < V; ++c) acc[c] -= wr * s[c];
    }
    for (int64_t c = 0; c < V; ++c) v_new[i * V + c] = static_cast<float>(acc[c]);
  }
}

void chunk_output(const float* q, const float* k, const float* gc, const float* S, const float* v_new,
                  double scale, int64_t L, int64_t K, int64_t V, float* o) {
  std::vector<double> acc(V);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t c = 0; c < V; ++c) acc[c] = 0;
    // Inter-chunk part: the decayed start state read by q_i.
    const double qscale = scale * (gc ? std::exp(static_cast<double>(gc[i])) : 1.0);
    for (int64_t r = 0; r < K; ++r) {
      const double qr = qscale * q[i * K + r];
      const float* s = S + r * V;
      for (int64_t c = 0; c < V; ++c) acc[c] += qr * s[c];
    }
    // Intra-chunk part: causal attention over this chunk's residuals.
    for (int64_t j = 0; j <= i; ++j) {
      const double a = scale * dot(q + i * K, k + j * K, K) * decay(gc, i, j);
      const float* vn = v_new + j * V;
      for (int64_t c = 0; c < V; ++c) acc[c] += a * vn[c];
    }
    for (int64_t c = 0; c < V; ++c) o[i * V + c] = static_cast<float>(acc[c]);
  }
}

void chunk_state_update(const float* k, const float* gc, const float* v_new, int64_t L, int64_t K, int64_t V,
                        float* S) {
  if (L == 0) return;
  const double last = gc ? gc[L - 1] : 0.0;
  std::vector<double> kd(L);
  for (int64_t j = 0; j < L; ++j) kd[j] = gc ? std::exp(last - gc[j]) : 1.0;
  const double state_decay = gc ? std::exp(last) : 1.0;
  std::vector<double> acc(V);
  for (int64_t r = 0; r < K; ++r) {
    float* s = S + r * V;
    for (int64_t c = 0; c < V; ++c) acc[c] = state_decay * s[c];
    for (int64_t j = 0; j < L; ++j) {
      const double kr = kd[j] * k[j * K + r];
      const float* vn = v_new + j * V;
      for (int64_t c = 0; c < V; ++c) acc[c] += kr * vn[c];
    }
    for (int64_t c = 0; c < V; ++c) s[c] = static_cast<float>(acc[c]);
  }
}

}  // namespace ak::linear::cpu::stages
