// The CPU backend of the paged decode step, in double: per sequence and value head, the slot's state
// S [V, K] (zero when has_initial says the slot is fresh) decays by exp(g), the value is corrected by
// what the state predicts for k, the state takes the correction, and the output reads the new state:
//   S <- diag_k(exp(g)) S,  u = beta (v - S k),  S <- S + u k^T,  o = scale S q
// with q, k L2-normalised, g from the raw gate (softplus or bounded transform) and beta = sigmoid(raw).
// A sequence whose index is not positive gets a zero output and touches no slot.
#include <cmath>
#include <vector>

#include "linear/cpu/rows.h"
#include "linear/decode/cpu.h"

namespace ak::linear::cpu {

namespace {

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The natural-log decay of one gate element from its raw value x = raw + dt_bias and a = exp(a_log).
double gate_of(const PagedDecode& d, double a, double x) {
  return d.bounded ? d.lower_bound * sigmoid(a * x) : -a * softplus(x);
}

int64_t index_of(const ak_tensor& t, int64_t b) { return static_cast<const int32_t*>(t.data)[b * t.strides[0]]; }
bool flag_of(const ak_tensor& t, int64_t b) { return static_cast<const uint8_t*>(t.data)[b * t.strides[0]] != 0; }

}  // namespace

void paged_decode(const PagedDecode& d) {
  const int64_t K = d.K, V = d.V, group = d.H / d.HK;
  std::vector<float> q(K), k(K), v(V), raw(K), out(V), row(K);
  std::vector<double> S(V * K);
  const ak_tensor& st = *d.state;
  for (int64_t b = 0; b < d.B; ++b) {
    const int64_t slot = index_of(*d.indices, b);
    const bool resume = d.has_initial == nullptr || flag_of(*d.has_initial, b);
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t out_at = row_offset(*d.output, 0, b, h);
      if (slot <= 0) {
        std::fill(out.begin(), out.end(), 0.f);
        store_row(*d.output, out_at, V, out.data());
        continue;
      }
      const int64_t hk = h / group, base = b * d.qkv->strides[0];
      load_row(*d.qkv, base + hk * K, K, q.data());
      load_row(*d.qkv, base + (d.HK + hk) * K, K, k.data());
      load_row(*d.qkv, base + 2 * d.HK * K + h * V, V, v.data());
      l2_normalize(q.data(), K);
      l2_normalize(k.data(), K);
      const double a = std::exp(static_cast<double>(static_cast<const float*>(d.a_log->data)[h * d.a_log->strides[0]]));
      const float* bias = static_cast<const float*>(d.dt_bias->data) + h * d.dt_bias->strides[0];
      std::vector<double> decay(K);
      if (d.per_channel) {
        load_row(*d.raw_gate, row_offset(*d.raw_gate, 0, b, h), K, raw.data());
        for (int64_t c = 0; c < K; ++c) decay[c] = std::exp(gate_of(d, a, static_cast<double>(raw[c]) + bias[c]));
      } else {
        load_row(*d.raw_gate, row_offset(*d.raw_gate, 0, b) + h, 1, raw.data());
        const double e = std::exp(gate_of(d, a, static_cast<double>(raw[0]) + bias[0]));
        for (int64_t c = 0; c < K; ++c) decay[c] = e;
      }
      float rb;
      load_row(*d.raw_beta, row_offset(*d.raw_beta, 0, b) + h, 1, &rb);
      const double beta = sigmoid(rb);
      const int64_t slot_at = slot * st.strides[0] + h * st.strides[1];
      for (int64_t j = 0; j < V; ++j) {
        if (resume) {
          load_row(st, slot_at + j * st.strides[2], K, row.data());
        } else {
          std::fill(row.begin(), row.end(), 0.f);
        }
        double pred = 0;
        for (int64_t c = 0; c < K; ++c) {
          S[j * K + c] = decay[c] * row[c];
          pred += S[j * K + c] * k[c];
        }
        const double u = beta * (v[j] - pred);
        double o = 0;
        for (int64_t c = 0; c < K; ++c) {
          S[j * K + c] += u * k[c];
          o += S[j * K + c] * q[c];
          row[c] = static_cast<float>(S[j * K + c]);
        }
        out[j] = static_cast<float>(d.scale * o);
        store_row(st, slot_at + j * st.strides[2], K, row.data());
      }
      store_row(*d.output, out_at, V, out.data());
    }
  }
}

}  // namespace ak::linear::cpu
