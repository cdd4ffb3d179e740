// The CPU backend of the causal convolution: blocks of rows (or of history entries) across threads,
// each element computed alone; the weight gradient's parts in parallel, then added in order.
#include <algorithm>
#include <vector>

#include "core/common.h"
#include "linear/conv/backend.h"

namespace ak::linear::conv::cpu {
namespace {

// Elements per unit of parallel work.
constexpr int64_t kPerTask = 4096;

// body(i, c) for every i < count and channel c < C.
template <class F>
void each(int64_t count, int64_t C, F&& body) {
  const int64_t rows_per_task = std::max<int64_t>(1, kPerTask / std::max<int64_t>(1, C));
  const int64_t tasks = (count + rows_per_task - 1) / rows_per_task;
  parallel_for(tasks, [&](int64_t t) {
    const int64_t end = std::min(count, (t + 1) * rows_per_task);
    for (int64_t i = t * rows_per_task; i < end; ++i) {
      for (int64_t c = 0; c < C; ++c) body(i, c);
    }
  });
}

}  // namespace

void forward(const ForwardArgs& a) {
  const Problem& p = a.p;
  each(a.rows, p.C, [&](int64_t r, int64_t c) { output_at(a, r, c); });
  if (a.final_state.given()) {
    each(p.seqs.N * (p.W - 1), p.C, [&](int64_t nk, int64_t c) { final_state_at(a, nk / (p.W - 1), nk % (p.W - 1), c); });
  }
}

void backward(BackwardArgs a) {
  const Problem& p = a.p;
  if (a.dx.f.given()) each(a.rows, p.C, [&](int64_t r, int64_t c) { dx_at(a, r, c); });
  if (a.d_initial.given()) {
    each(p.seqs.N * (p.W - 1), p.C, [&](int64_t nk, int64_t c) { d_initial_at(a, nk / (p.W - 1), nk % (p.W - 1), c); });
  }
  if (a.dweight.given()) {
    split_rows(a);
    std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(1, a.parts * p.C * p.W)));
    a.partial = partial.data();
    each(a.parts, p.C, [&](int64_t q, int64_t c) { dweight_part(a, q, c); });
    const int64_t taps = p.C * p.W;
    parallel_for((taps + kPerTask - 1) / kPerTask, [&](int64_t t) {
      const int64_t end = std::min(taps, (t + 1) * kPerTask);
      for (int64_t ci = t * kPerTask; ci < end; ++ci) dweight_sum(a, ci);
    });
  }
}

}  // namespace ak::linear::conv::cpu
