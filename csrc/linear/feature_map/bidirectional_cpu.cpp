// The CPU backend of the fused bidirectional feature map, forward and backward: per (batch, head),
// the sums in double over the sequence, then each query row against them; the features are computed
// in float as the CUDA kernels compute them, without their 16-bit rounding.
#include <vector>

#include "core/common.h"
#include "linear/feature_map/backend.h"

namespace ak::linear::feature_map::cpu {
namespace {

// The F features of row `at` of x at token t.
void features_of(const BidirectionalArgs& a, const FloatView& x, int64_t at, int64_t t, std::vector<double>& out) {
  for (int64_t f = 0; f < a.features; ++f) {
    const int64_t c = f % a.k_dim;
    float y = phi_of(a.phi, x.load(at + c * x.s[3]));
    if (a.cos != nullptr) y *= f < a.k_dim ? a.cos[t] : a.sin[t];
    out[f] = y;
  }
}

// Y = sum_t X(k_t)^T [v_t | 1] of sequence (b, h), F x (V + 1) row-major; `x` is scratch of F.
std::vector<double> key_sums(const BidirectionalArgs& a, int64_t b, int64_t h, std::vector<double>& x) {
  const int64_t W = a.v_dim + 1;
  std::vector<double> y(a.features * W, 0.0);
  for (int64_t t = 0; t < a.tokens; ++t) {
    features_of(a, a.k, a.row(a.k, b, t, h), t, x);
    const int64_t vo = a.row(a.v, b, t, h);
    for (int64_t j = 0; j < W; ++j) {
      const double z = j < a.v_dim ? a.v.load(vo + j * a.v.s[3]) : 1.0;
      for (int64_t f = 0; f < a.features; ++f) y[f * W + j] += x[f] * z;
    }
  }
  return y;
}

// num = x Y (V + 1 columns: the numerator, then the normaliser's sum).
void query_against(const BidirectionalArgs& a, const std::vector<double>& x, const std::vector<double>& y,
                   std::vector<double>& num) {
  const int64_t W = a.v_dim + 1;
  for (int64_t j = 0; j < W; ++j) {
    double s = 0.0;
    for (int64_t f = 0; f < a.features; ++f) s += x[f] * y[f * W + j];
    num[j] = s;
  }
}

}  // namespace

void bidirectional(const BidirectionalArgs& a) {
  const int64_t W = a.v_dim + 1;
  parallel_for(a.batch * a.heads, [&](int64_t bh) {
    const int64_t b = bh / a.heads, h = bh % a.heads;
    std::vector<double> x(a.features);
    const std::vector<double> y = key_sums(a, b, h, x);
    float* sums = a.sums + bh * a.features * W;
    for (int64_t i = 0; i < a.features * W; ++i) sums[i] = static_cast<float>(y[i]);
    std::vector<double> num(W);
    for (int64_t t = 0; t < a.tokens; ++t) {
      features_of(a, a.q, a.row(a.q, b, t, h), t, x);
      query_against(a, x, y, num);
      const double den = a.normalised ? num[a.v_dim] + a.eps : 1.0;
      const int64_t o = a.row(a.out, b, t, h);
      for (int64_t j = 0; j < a.v_dim; ++j) a.out.store(o + j * a.out.s[3], static_cast<float>(num[j] / den));
    }
  });
}


// The backward in double: with G = [dO / D | dD] (dD = -(dO / D) . o), or dO without the normaliser,
// dX(q_t) = G_t Y^T, dY = sum_t X(q_t)^T G_t, dX(k_t) = [v_t | 1] dY^T and dv_t = X(k_t) dY[:, :V];
// the features' gradients then go back through the weights and phi.
void bidirectional_grad(const BidirectionalGradArgs& g) {
  const BidirectionalArgs& a = g.forward;
  const int64_t V = a.v_dim, W = V + 1, F = a.features, K = a.k_dim;
  parallel_for(a.batch * a.heads, [&](int64_t bh) {
    const int64_t b = bh / a.heads, h = bh % a.heads;
    std::vector<double> dy(F * W, 0.0), x(F), num(W), grow(W), dx(F);
    const std::vector<double> y = key_sums(a, b, h, x);
    // Through the weights and phi back to the columns of `src`, into `dst`.
    const auto store_grad = [&](const FloatView& src, const FloatView& dst, int64_t t) {
      const int64_t so = a.row(src, b, t, h), d = a.row(dst, b, t, h);
      for (int64_t c = 0; c < K; ++c) {
        double gc = dx[c];
        if (a.cos != nullptr) gc = dx[c] * a.cos[t] + dx[c + K] * a.sin[t];
        dst.store(d + c * dst.s[3], through_phi(a.phi, src.load(so + c * src.s[3]), static_cast<float>(gc)));
      }
    };
    for (int64_t t = 0; t < a.tokens; ++t) {
      features_of(a, a.q, a.row(a.q, b, t, h), t, x);
      const int64_t go = a.row(g.d_output, b, t, h);
      if (a.normalised) {
        query_against(a, x, y, num);
        const double den = num[V] + a.eps;
        double dd = 0.0;
        for (int64_t j = 0; j < V; ++j) {
          grow[j] = g.d_output.load(go + j * g.d_output.s[3]) / den;
          dd -= grow[j] * num[j] / den;
        }
        grow[V] = dd;
      } else {
        for (int64_t j = 0; j < V; ++j) grow[j] = g.d_output.load(go + j * g.d_output.s[3]);
        grow[V] = 0.0;
      }
      for (int64_t f = 0; f < F; ++f) {
        double s = 0.0;
        for (int64_t j = 0; j < W; ++j) {
          s += grow[j] * y[f * W + j];
          dy[f * W + j] += x[f] * grow[j];
        }
        dx[f] = s;
      }
      store_grad(a.q, g.dq, t);
    }
    for (int64_t t = 0; t < a.tokens; ++t) {
      features_of(a, a.k, a.row(a.k, b, t, h), t, x);
      const int64_t vo = a.row(a.v, b, t, h), d = a.row(g.dv, b, t, h);
      for (int64_t f = 0; f < F; ++f) {
        double s = a.normalised ? dy[f * W + V] : 0.0;
        for (int64_t j = 0; j < V; ++j) s += a.v.load(vo + j * a.v.s[3]) * dy[f * W + j];
        dx[f] = s;
      }
      store_grad(a.k, g.dk, t);
      for (int64_t j = 0; j < V; ++j) {
        double s = 0.0;
        for (int64_t f = 0; f < F; ++f) s += x[f] * dy[f * W + j];
        g.dv.store(d + j * g.dv.s[3], static_cast<float>(s));
      }
    }
  });
}

}  // namespace ak::linear::feature_map::cpu
