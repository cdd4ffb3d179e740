// The feature-map stages' C entries: check every argument (messages name it), then hand the call to
// the backend of the output's device. An empty call does nothing.
#include <string>

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

// The cosformer weights: both or neither, [T] float32 contiguous on dst's device.
void check_weights(const ak_tensor* cos, const ak_tensor* sin, const ak_tensor& dst, int token_dim) {
  require((cos == nullptr) == (sin == nullptr), "cos, sin: give both or neither");
  const char* names[2] = {"cos", "sin"};
  const ak_tensor* ws[2] = {cos, sin};
  for (int n = 0; n < 2; ++n) {
    if (ws[n] == nullptr) continue;
    const ak_tensor& w = check_contiguous(ws[n], names[n]);
    check_dtype(w, names[n], {AK_FLOAT32});
    check_same_device(w, names[n], dst, "dst");
    check_shape(w, names[n], {dst.shape[token_dim]});
  }
}

const float* weight_data(const ak_tensor* w) { return w != nullptr ? static_cast<const float*>(w->data) : nullptr; }

bool empty_rows(const ak_tensor& t) { return t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0; }

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

}  // extern "C"
