// One token of the delta rule, forward and reverse (see cpu_recurrent_step.h).
#include "linear/cpu/recurrent_step.h"

#include <vector>

namespace ak::linear::cpu {

void recurrent_step(float* S, const float* q, const float* k, const float* v, float beta, double a,
                    double scale, int64_t K, int64_t V, float* o, float* r_out, float* u_out) {
  // Pass 1: decay the state and read it with k.
  std::vector<double> p(V, 0.0), acc(V, 0.0);
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const double ki = k[i];
    for (int64_t c = 0; c < V; ++c) {
      const float decayed = static_cast<float>(a * s[c]);
      s[c] = decayed;
      p[c] += ki * decayed;
    }
  }
  std::vector<float> u(V);
  for (int64_t c = 0; c < V; ++c) {
    const float r = static_cast<float>(v[c] - p[c]);
    if (r_out) r_out[c] = r;
    u[c] = static_cast<float>(static_cast<double>(beta) * r);
    if (u_out) u_out[c] = u[c];
  }
  // Pass 2: write k u^T and read the new state with q.
  for (int64_t i = 0; i < K; ++i) {
    float* s = S + i * V;
    const double ki = k[i], qi = q[i];
    for (int64_t c = 0; c < V; ++c) {
      const float updated = static_cast<float>(s[c] + ki * u[c]);
      s[c] = updated;
      acc[c] += qi * updated;
    }
  }
  for (int64_t c = 0; c < V; ++c) o[c] = static_cast<float>(scale * acc[c]);
}

void recurrent_step_backward(double* dS, const float* S_prev, const float* q, const float* k, const float* r,
                             const float* u, float beta, double a, double scale, const float* d_out, int64_t K,
                             int64_t V, double* dq, double* dk, float* dv, double* dbeta, double* dg) {
  // Pass 1: the output's gradient joins dS; read dq (through S), du and dk (through S = S' + k u^T).
  std::vector<double> du(V, 0.0);
  for (int64_t i = 0; i < K; ++i) {
    double* ds = dS + i * V;
    const float* sp = S_prev + i * V;
    const double qi = scale * q[i], ki = k[i];
    double dqi = 0, dki = 0;
    for (int64_t c = 0; c < V; ++c) {
      const double after = a * sp[c] + ki * u[c];
      dqi += after * d_out[c];
      const double g = ds[c] + qi * d_out[c];
      ds[c] = g;
      du[c] += g * ki;
      dki += g * u[c];
    }
    dq[i] += scale * dqi;
    dk[i] += dki;
  }
  // u = beta r, r = v - p.
  double db = 0;
  std::vector<double> dp(V);
  for (int64_t c = 0; c < V; ++c) {
    db += du[c] * r[c];
    dv[c] = static_cast<float>(beta * du[c]);
    dp[c] = -static_cast<double>(beta) * du[c];
  }
  *dbeta = db;
  // Pass 2: p = S'^T k gives dS' = dS + k dp^T and dk += S' dp; then S' = a S_prev.
  double da = 0;
  for (int64_t i = 0; i < K; ++i) {
    double* ds = dS + i * V;
    const float* sp = S_prev + i * V;
    const double ki = k[i];
    double dki = 0;
    for (int64_t c = 0; c < V; ++c) {
      const double d_decayed = ds[c] + ki * dp[c];
      dki += sp[c] * dp[c];
      da += d_decayed * sp[c];
      ds[c] = a * d_decayed;
    }
    dk[i] += a * dki;
  }
  *dg = a * da;
}

}  // namespace ak::linear::cpu
