// The CPU backend of the gate transforms: chunks of rows across threads (each row's channels in
// turn), always the accurate math. The backward's sums: each chunk's rows in order into a partial per
// channel, then the partials in chunk order and the columns of a head in order, so the bits depend on
// the shape alone, not on the thread count.
#include <vector>

#include "core/common.h"
#include "linear/gate/backend.h"
#include "linear/gate/math.h"

namespace ak::linear::gate::cpu {
namespace {

template <class Raw, bool Bounded>
void forward_rows(const ForwardArgs& a, int64_t begin, int64_t end) {
  const Shape& s = a.shape;
  const float lower = a.settings.lower_bound;
  a.rows.for_range(begin, end, [&](const int64_t (&off)[2]) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float amp = amplitude<false>(a.a_log[h]);
      for (int64_t d = 0; d < s.columns; ++d) {
        const float x = load<Raw>(a.raw, off[0] + a.raw_ch.at(h, d)) + a.dt_bias[h * s.columns + d];
        a.gate[off[1] + a.gate_ch.at(h, d)] = gate_value<false, Bounded>(x, amp, lower);
      }
    }
  });
}

// Writes d_raw for rows [begin, end) and adds their terms to the chunk's partials (in row order).
template <class Raw, bool Bounded>
void backward_rows(const BackwardArgs& a, int64_t begin, int64_t end, float* part_dt, float* part_a) {
  const Shape& s = a.shape;
  const float lower = a.settings.lower_bound;
  a.rows.for_range(begin, end, [&](const int64_t (&off)[3]) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float amp = amplitude<false>(a.a_log[h]);
      for (int64_t d = 0; d < s.columns; ++d) {
        const int64_t c = h * s.columns + d;
        const float x = load<Raw>(a.raw, off[0] + a.raw_ch.at(h, d)) + a.dt_bias[c];
        const float dg = a.d_gate[off[1] + a.dg_ch.at(h, d)];
        const Grad g = gate_grad<false, Bounded>(x, amp, lower, dg);
        store<Raw>(a.d_raw, off[2] + a.draw_ch.at(h, d), g.dx);
        part_dt[c] += g.dx;
        part_a[c] += g.da_log;
      }
    }
  });
}

}  // namespace

void forward(const ForwardArgs& a) {
  const Tiling t = tiling_of(a.shape);
  with_raw_type(a.raw_dtype, [&](auto raw) {
    using Raw = decltype(raw);
    parallel_for(t.chunks, [&](int64_t k) {
      const int64_t begin = k * t.rows_per_chunk, end = std::min(a.shape.rows, begin + t.rows_per_chunk);
      if (a.settings.bounded) forward_rows<Raw, true>(a, begin, end);
      else forward_rows<Raw, false>(a, begin, end);
    });
  });
}

void backward(const BackwardArgs& a) {
  const Shape& s = a.shape;
  const Tiling t = tiling_of(s);
  const int64_t C = s.channels;
  std::vector<float> part_dt(static_cast<size_t>(t.chunks * C), 0.f), part_a(part_dt.size(), 0.f);
  with_raw_type(a.raw_dtype, [&](auto raw) {
    using Raw = decltype(raw);
    parallel_for(t.chunks, [&](int64_t k) {
      const int64_t begin = k * t.rows_per_chunk, end = std::min(s.rows, begin + t.rows_per_chunk);
      float* dt = part_dt.data() + k * C;
      float* pa = part_a.data() + k * C;
      if (a.settings.bounded) backward_rows<Raw, true>(a, begin, end, dt, pa);
      else backward_rows<Raw, false>(a, begin, end, dt, pa);
    });
  });
  for (int64_t h = 0; h < s.heads; ++h) {
    float head = 0.f;
    for (int64_t d = 0; d < s.columns; ++d) {
      const int64_t c = h * s.columns + d;
      float dt = 0.f, da = 0.f;
      for (int64_t k = 0; k < t.chunks; ++k) {
        dt += part_dt[k * C + c];
        da += part_a[k * C + c];
      }
      a.d_dt_bias[c] = dt;
      head += da;
    }
    a.d_a_log[h] = head;
  }
}

}  // namespace ak::linear::gate::cpu
