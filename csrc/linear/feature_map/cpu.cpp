// The CPU backend of the feature-map stages: rows split across threads, each row's columns in turn.
#include <algorithm>

#include "core/common.h"
#include "linear/feature_map/backend.h"

namespace ak::linear::feature_map::cpu {
namespace {

// Rows per unit of parallel work.
constexpr int64_t kRowsPerTask = 256;

template <class F>
void each_row(const Rows& rows, F&& row) {
  const int64_t tasks = (rows.count + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(tasks, [&](int64_t t) {
    const int64_t end = std::min(rows.count, (t + 1) * kRowsPerTask);
    for (int64_t r = t * kRowsPerTask; r < end; ++r) row(r);
  });
}

}  // namespace

void features(const FeaturesArgs& a) {
  each_row(a.rows, [&](int64_t r) { features_row(a, r, 0, 1); });
}
void feature_grad(const FeatureGradArgs& a) {
  each_row(a.rows, [&](int64_t r) { feature_grad_row(a, r, 0, 1); });
}
void values(const ValuesArgs& a) {
  each_row(a.rows, [&](int64_t r) { values_row(a, r, 0, 1); });
}
void normalise(const NormaliseArgs& a) {
  each_row(a.rows, [&](int64_t r) { normalise_row(a, r, 0, 1); });
}
void normalise_grad(const NormaliseGradArgs& a) {
  each_row(a.rows, [&](int64_t r) { normalise_grad_row(a, r, 0, 1, [](float v) { return v; }); });
}

}  // namespace ak::linear::feature_map::cpu
