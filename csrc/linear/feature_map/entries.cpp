// The feature-map stages' C entries: check every argument (messages name it), then hand the call to
// the backend of the output's device. An empty call does nothing.
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/feature_map/backend.h"

using namespace ak;
using namespace ak::linear::feature_map;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

const ak_tensor& float_tensor(const ak_tensor* p, const char* name) {
  const ak_tensor& t = check_tensor(p, name);
  require(t.rank == 4, std::string(name) + ": expected rank 4 ([d0, d1, d2, columns]), got " + shape_string(t));
  require(is_float_dtype(t.dtype), std::string(name) + ": expected a float dtype, got " + dtype_name(t.dtype));
  return t;
}

// A tensor whose rows are dst's: the same first three dims, on dst's device; `cols` columns (-1: any).
const ak_tensor& rows_like(const ak_tensor* p, const char* name, const ak_tensor& dst, int64_t cols) {
  const ak_tensor& t = float_tensor(p, name);
  check_same_device(t, name, dst, "dst");
  bool ok = cols < 0 || t.shape[3] == cols;
  for (int d = 0; d < 3; ++d) ok = ok && t.shape[d] == dst.shape[d];
  require(ok, std::string(name) + ": expected shape [" + str(dst.shape[0]) + ", " + str(dst.shape[1]) + ", " +
                  str(dst.shape[2]) + ", " + (cols < 0 ? std::string("*") : str(cols)) + "] (rows of dst's), got " +
                  shape_string(t));
  return t;
}

void check_codes(int32_t phi, int32_t factor, int32_t token_dim) {
  require(phi >= AK_FMAP_IDENTITY && phi <= AK_FMAP_RELU,
          "phi: expected 0 (identity), 1 (elu+1) or 2 (relu), got " + str(phi));
  require(factor >= AK_FMAP_FACTOR_NONE && factor <= AK_FMAP_FACTOR_MEAN,
          "factor: expected 0 (none), 1 (1 / (t + 1)) or 2 (1 / T), got " + str(factor));
  require(token_dim == 1 || token_dim == 2, "token_dim: expected 1 or 2, got " + str(token_dim));
}

// A contiguous tensor of one dtype and an exact shape, on the device of `like`.
const ak_tensor& buffer(const ak_tensor* p, const char* name, int32_t dtype, const ak_tensor& like,
                        const char* like_name, const std::vector<int64_t>& shape) {
  const ak_tensor& t = check_contiguous(p, name);
  check_dtype(t, name, {dtype});
  check_same_device(t, name, like, like_name);
  check_shape(t, name, shape);
  return t;
}

// The cosformer weights: both or neither, [T] float32 contiguous on dst's device.
void check_weights(const ak_tensor* cos, const ak_tensor* sin, const ak_tensor& dst, int token_dim) {
  require((cos == nullptr) == (sin == nullptr), "cos, sin: give both or neither");
  const char* names[2] = {"cos", "sin"};
  const ak_tensor* ws[2] = {cos, sin};
  for (int n = 0; n < 2; ++n) {
    if (ws[n] == nullptr) continue;
    buffer(ws[n], names[n], AK_FLOAT32, dst, "dst", {dst.shape[token_dim]});
  }
}

const float* weight_data(const ak_tensor* w) { return w != nullptr ? static_cast<const float*>(w->data) : nullptr; }

bool empty_rows(const ak_tensor& t) { return t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0; }

// The checked forward arguments of a bidirectional call; `like` is a tensor shaped like v (the output
// or dv) whose device and first three sizes the others must share.
BidirectionalArgs checked_bidirectional(const ak_tensor& like, const char* like_name, const ak_tensor* q_p,
                                        const ak_tensor* k_p, const ak_tensor* v_p, const ak_tensor* cos,
                                        const ak_tensor* sin, const ak_tensor* sums_p, int32_t phi,
                                        int32_t normalised, double eps, int32_t token_dim) {
  check_codes(phi, AK_FMAP_FACTOR_NONE, token_dim);
  require(std::isfinite(eps) && eps >= 0, "eps: expected a finite number from 0, got " + std::to_string(eps));
  const ak_tensor& v = rows_like(v_p, "v", like, like.shape[3]);
  const ak_tensor& q = float_tensor(q_p, "q");
  check_same_device(q, "q", like, like_name);
  const int64_t head_dim = 3 - token_dim;
  require(q.shape[0] == like.shape[0] && q.shape[token_dim] == like.shape[token_dim] &&
              q.shape[head_dim] == like.shape[head_dim],
          std::string("q: expected the batch, token and head sizes of ") + like_name + " " + shape_string(like) +
              ", got " + shape_string(q));
  const ak_tensor& k = rows_like(k_p, "k", q, q.shape[3]);
  require(q.dtype == k.dtype && q.dtype == v.dtype && q.dtype == like.dtype,
          std::string("q, k, v, ") + like_name + ": expected one dtype, got " + dtype_name(q.dtype) + ", " +
              dtype_name(k.dtype) + ", " + dtype_name(v.dtype) + ", " + dtype_name(like.dtype));
  check_weights(cos, sin, like, token_dim);
  const int64_t features = cos != nullptr ? 2 * q.shape[3] : q.shape[3];
  const ak_tensor& sums = buffer(sums_p, "sums", AK_FLOAT32, like, like_name,
                                 {like.shape[0], like.shape[head_dim], features, like.shape[3] + 1});
  BidirectionalArgs a;
  a.q = float_view(q);
  a.k = float_view(k);
  a.v = float_view(v);
  a.sums = static_cast<float*>(sums.data);
  a.cos = weight_data(cos);
  a.sin = weight_data(sin);
  a.batch = like.shape[0];
  a.tokens = like.shape[token_dim];
  a.heads = like.shape[head_dim];
  a.k_dim = q.shape[3];
  a.features = features;
  a.v_dim = like.shape[3];
  a.token_dim = token_dim;
  a.phi = phi;
  a.normalised = normalised != 0;
  a.eps = static_cast<float>(eps);
  a.device = like.device_index;
  return a;
}

#define AK_FMAP_DISPATCH(dst, call)  \
  if ((dst).device_type == AK_CPU) { \
    cpu::call;                       \
  } else {                           \
    AK_CUDA_CALL(cuda::call);        \
  }

}  // namespace

extern "C" {

AK_API ak_status ak_fmap_features(const ak_tensor* dst_p, const ak_tensor* x_p, const ak_tensor* cos,
                                  const ak_tensor* sin, int32_t phi, int32_t factor, int32_t token_dim) {
  AK_ENTRY("ak_fmap_features", {
    check_codes(phi, factor, token_dim);
    const ak_tensor& dst = float_tensor(dst_p, "dst");
    const ak_tensor& x = rows_like(x_p, "x", dst, -1);
    check_weights(cos, sin, dst, token_dim);
    const int64_t width = cos != nullptr ? 2 * x.shape[3] : x.shape[3];
    require(dst.shape[3] == width, "dst: expected " + str(width) + " columns (x's" +
                                       (cos != nullptr ? " times 2, with weights" : "") + "), got " +
                                       shape_string(dst));
    if (empty_rows(dst) || width == 0) return;
    FeaturesArgs a;
    a.rows = rows_of(dst, token_dim, factor);
    a.dst = float_view(dst);
    a.x = float_view(x);
    a.cos = weight_data(cos);
    a.sin = weight_data(sin);
    a.phi = phi;
    a.k = x.shape[3];
    AK_FMAP_DISPATCH(dst, features(a));
  });
}

AK_API ak_status ak_fmap_feature_grad(const ak_tensor* dx_p, const ak_tensor* x_p, const ak_tensor* df_p,
                                      const ak_tensor* cos, const ak_tensor* sin, int32_t phi, int32_t factor,
                                      int32_t token_dim) {
  AK_ENTRY("ak_fmap_feature_grad", {
    check_codes(phi, factor, token_dim);
    const ak_tensor& dx = float_tensor(dx_p, "dx");
    const ak_tensor& x = rows_like(x_p, "x", dx, dx.shape[3]);
    check_weights(cos, sin, dx, token_dim);
    const ak_tensor& df = rows_like(df_p, "d_features", dx, cos != nullptr ? 2 * dx.shape[3] : dx.shape[3]);
    if (empty_rows(dx) || dx.shape[3] == 0) return;
    FeatureGradArgs a;
    a.rows = rows_of(dx, token_dim, factor);
    a.dx = float_view(dx);
    a.x = float_view(x);
    a.df = float_view(df);
    a.cos = weight_data(cos);
    a.sin = weight_data(sin);
    a.phi = phi;
    a.k = dx.shape[3];
    AK_FMAP_DISPATCH(dx, feature_grad(a));
  });
}

AK_API ak_status ak_fmap_values(const ak_tensor* dst_p, const ak_tensor* v_p) {
  AK_ENTRY("ak_fmap_values", {
    const ak_tensor& dst = float_tensor(dst_p, "dst");
    const ak_tensor& v = rows_like(v_p, "v", dst, -1);
    require(v.shape[3] + 1 <= dst.shape[3], "dst: expected at least " + str(v.shape[3] + 1) +
                                                " columns (v's and the ones column), got " + shape_string(dst));
    if (empty_rows(dst)) return;
    ValuesArgs a;
    a.rows = rows_of(dst, 1, AK_FMAP_FACTOR_NONE);
    a.dst = float_view(dst);
    a.v = float_view(v);
    a.w = v.shape[3];
    a.width = dst.shape[3];
    AK_FMAP_DISPATCH(dst, values(a));
  });
}

AK_API ak_status ak_fmap_normalise(const ak_tensor* dst_p, const ak_tensor* num_p, double eps, int32_t factor,
                                   int32_t token_dim) {
  AK_ENTRY("ak_fmap_normalise", {
    check_codes(AK_FMAP_IDENTITY, factor, token_dim);
    require(std::isfinite(eps) && eps >= 0, "eps: expected a finite number from 0, got " + std::to_string(eps));
    const ak_tensor& dst = float_tensor(dst_p, "dst");
    const ak_tensor& num = rows_like(num_p, "num", dst, -1);
    require(num.shape[3] >= dst.shape[3] + 1, "num: expected at least " + str(dst.shape[3] + 1) +
                                                  " columns (dst's and the normaliser), got " + shape_string(num));
    if (empty_rows(dst)) return;
    NormaliseArgs a;
    a.rows = rows_of(dst, token_dim, factor);
    a.dst = float_view(dst);
    a.num = float_view(num);
    a.eps = static_cast<float>(eps);
    a.w = dst.shape[3];
    AK_FMAP_DISPATCH(dst, normalise(a));
  });
}

AK_API ak_status ak_fmap_normalise_grad(const ak_tensor* dst_p, const ak_tensor* d_output_p, const ak_tensor* num_p,
                                        double eps, int32_t factor, int32_t token_dim) {
  AK_ENTRY("ak_fmap_normalise_grad", {
    check_codes(AK_FMAP_IDENTITY, factor, token_dim);
    require(std::isfinite(eps) && eps >= 0, "eps: expected a finite number from 0, got " + std::to_string(eps));
    const ak_tensor& dst = float_tensor(dst_p, "dst");
    const ak_tensor& d_output = rows_like(d_output_p, "d_output", dst, -1);
    const int64_t w = d_output.shape[3];
    require(dst.shape[3] >= w + 2, "dst: expected at least " + str(w + 2) +
                                       " columns (d_output's and the normaliser's two), got " + shape_string(dst));
    const ak_tensor& num = rows_like(num_p, "num", dst, -1);
    require(num.shape[3] >= w + 1, "num: expected at least " + str(w + 1) +
                                       " columns (d_output's and the normaliser), got " + shape_string(num));
    if (empty_rows(dst)) return;
    NormaliseGradArgs a;
    a.rows = rows_of(dst, token_dim, factor);
    a.dst = float_view(dst);
    a.d_output = float_view(d_output);
    a.num = float_view(num);
    a.eps = static_cast<float>(eps);
    a.w = w;
    a.width = dst.shape[3];
    AK_FMAP_DISPATCH(dst, normalise_grad(a));
  });
}

AK_API ak_status ak_fmap_bidirectional(const ak_tensor* out_p, const ak_tensor* q, const ak_tensor* k,
                                       const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
                                       const ak_tensor* sums, int32_t phi, int32_t normalised, double eps,
                                       int32_t token_dim) {
  AK_ENTRY("ak_fmap_bidirectional", {
    const ak_tensor& out = float_tensor(out_p, "out");
    BidirectionalArgs a = checked_bidirectional(out, "out", q, k, v, cos, sin, sums, phi, normalised, eps, token_dim);
    a.out = float_view(out);
    if (empty_rows(out) || out.shape[3] == 0) return;
    if (out.device_type != AK_CPU) {
      require(bidirectional_cuda_serves(a),
              "q, k, v, out: the CUDA kernels take float16 or bfloat16, feature and value dims that are multiples "
              "of 64, contiguous columns, other strides multiples of 8 and 16-byte aligned data");
    }
    AK_FMAP_DISPATCH(out, bidirectional(a));
  });
}

AK_API ak_status ak_fmap_bidirectional_grad(const ak_tensor* dq_p, const ak_tensor* dk_p, const ak_tensor* dv_p,
                                            const ak_tensor* d_output_p, const ak_tensor* q, const ak_tensor* k,
                                            const ak_tensor* v, const ak_tensor* cos, const ak_tensor* sin,
                                            const ak_tensor* sums, const ak_tensor* d_sums_p,
                                            const ak_tensor* r_rows_p, const ak_tensor* dd_p, int32_t phi,
                                            int32_t normalised, double eps, int32_t token_dim) {
  AK_ENTRY("ak_fmap_bidirectional_grad", {
    const ak_tensor& dv = float_tensor(dv_p, "dv");
    BidirectionalGradArgs g;
    g.forward = checked_bidirectional(dv, "dv", q, k, v, cos, sin, sums, phi, normalised, eps, token_dim);
    g.forward.out = float_view(dv);  // not read by the backward; shaped like the output it stands for
    const BidirectionalArgs& a = g.forward;
    const ak_tensor& d_output = rows_like(d_output_p, "d_output", dv, dv.shape[3]);
    const ak_tensor& dq = rows_like(dq_p, "dq", dv, a.k_dim);
    const ak_tensor& dk = rows_like(dk_p, "dk", dv, a.k_dim);
    check_same_dtype(d_output, "d_output", dv, "dv");
    check_same_dtype(dq, "dq", dv, "dv");
    check_same_dtype(dk, "dk", dv, "dv");
    const ak_tensor& d_sums =
        buffer(d_sums_p, "d_sums", AK_FLOAT32, dv, "dv", {a.batch, a.heads, a.features, a.v_dim + 1});
    const ak_tensor& r_rows = buffer(r_rows_p, "r_rows", dv.dtype, dv, "dv", {a.batch, a.heads, a.tokens, a.v_dim});
    const ak_tensor& dd = buffer(dd_p, "dd", AK_FLOAT32, dv, "dv", {a.batch, a.heads, a.tokens});
    g.d_output = float_view(d_output);
    g.dq = float_view(dq);
    g.dk = float_view(dk);
    g.dv = float_view(dv);
    g.d_sums = static_cast<float*>(d_sums.data);
    g.r_rows = r_rows.data;
    g.dd = static_cast<float*>(dd.data);
    if (empty_rows(dv) || a.k_dim == 0) return;
    if (dv.device_type != AK_CPU) {
      require(bidirectional_grad_cuda_serves(g),
              "q, k, v, d_output, dq, dk, dv: the CUDA kernels take float16 or bfloat16, a feature dim that is a "
              "multiple of 64, K a multiple of 64, V of 64 or 128, contiguous columns, other strides multiples of 8 "
              "and 16-byte aligned data");
    }
    AK_FMAP_DISPATCH(dv, bidirectional_grad(g));
  });
}

}  // extern "C"
