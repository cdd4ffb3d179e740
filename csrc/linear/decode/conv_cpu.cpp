// The CPU backend of the paged causal convolution, in double: per sequence, its slot's history (zeros
// when has_initial says the slot is fresh) then its tokens form the window e; output row t is
// act(sum_i weight[c, i] e[t + i]) (weight[c, W - 1] on the current token), and the last W - 1 rows of e
// become the slot's history. A sequence whose index is not positive gets zero rows and touches no slot.
#include <cmath>
#include <vector>

#include "linear/cpu/rows.h"
#include "linear/decode/conv_cpu.h"

namespace ak::linear::cpu {

namespace {

// The row of token t of batch row b: x as [B, T, C] (rank 3) or [B, C] (rank 2, T = 1).
int64_t token_row(const ak_tensor& t, int64_t b, int64_t tok) {
  return t.rank == 3 ? b * t.strides[0] + tok * t.strides[1] : b * t.strides[0];
}

}  // namespace

void paged_conv(const PagedConv& d) {
  const int64_t C = d.C, W = d.W, H = W - 1;
  const ak_tensor& st = *d.state;
  std::vector<float> w(C * W), row(C), out(C);
  load_row(*d.weight, 0, C * W, w.data());
  for (int64_t n = 0; n < d.N; ++n) {
    const int64_t b = d.offsets ? 0 : n;
    const int64_t t0 = d.offsets ? d.offsets[n] : 0, len = d.offsets ? d.offsets[n + 1] - d.offsets[n] : d.T;
    const int64_t slot = d.indices ? static_cast<const int32_t*>(d.indices->data)[n] : n;
    if (d.indices && slot <= 0) {
      std::fill(out.begin(), out.end(), 0.f);
      for (int64_t t = 0; t < len; ++t) store_row(*d.output, token_row(*d.output, b, t0 + t), C, out.data());
      continue;
    }
    const bool resume = !d.has_initial || static_cast<const uint8_t*>(d.has_initial->data)[n] != 0;
    std::vector<double> e((H + len) * C, 0.0);
    for (int64_t i = 0; i < H && resume; ++i) {
      load_row(st, slot * st.strides[0] + i * st.strides[1], C, row.data());
      for (int64_t c = 0; c < C; ++c) e[i * C + c] = row[c];
    }
    for (int64_t t = 0; t < len; ++t) {
      load_row(*d.x, token_row(*d.x, b, t0 + t), C, row.data());
      for (int64_t c = 0; c < C; ++c) e[(H + t) * C + c] = row[c];
      for (int64_t c = 0; c < C; ++c) {
        double z = 0;
        for (int64_t i = 0; i < W; ++i) z += static_cast<double>(w[c * W + i]) * e[(t + i) * C + c];
        out[c] = static_cast<float>(d.activation == AK_CONV_SILU ? z / (1 + std::exp(-z)) : z);
      }
      store_row(*d.output, token_row(*d.output, b, t0 + t), C, out.data());
    }
    for (int64_t i = 0; i < H; ++i) {
      for (int64_t c = 0; c < C; ++c) row[c] = static_cast<float>(e[(len + i) * C + c]);
      store_row(st, slot * st.strides[0] + i * st.strides[1], C, row.data());
    }
  }
}

}  // namespace ak::linear::cpu
