// CPU forward of softmax attention (MHA / GQA, dense or varlen): FlashAttention's online softmax
// over key tiles with fp32 accumulation. Each worker owns a tile of query rows of one (sequence,
// head) and keeps only a running max m, a running sum l and the unnormalised output per row.
#include "attention/cpu/common.h"

namespace ak::attention::cpu {

using namespace cpu_detail;

namespace {

// Prefix counts of query-row tiles per sequence, so a flat work index maps to (sequence, tile).
std::vector<int64_t> tile_prefix(const Sequences& seqs, int64_t N) {
  std::vector<int64_t> prefix(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) prefix[n + 1] = prefix[n] + (seqs.q_len(n) + kBlockRows - 1) / kBlockRows;
  return prefix;
}

}  // namespace

void attention_fwd(const AttnFwd& a) {
  const AttnProblem& p = a.p;
  const Sequences seqs{p};
  const int64_t D = p.D, group = p.group();
  // K transposed (scores run along contiguous keys), V as rows (O += P V runs along contiguous dims).
  // float8_e4m3 inputs are read times their (sequence, KV head) scales, exactly as fp32 products.
  const Staged k = stage(*a.k, p, /*is_query=*/false, p.Hkv, /*keep_rows=*/false, /*transposed=*/true, a.k_scale);
  const Staged v = stage(*a.v, p, /*is_query=*/false, p.Hkv, /*keep_rows=*/true, /*transposed=*/false, a.v_scale);
  const bool fp8 = p.dtype == AK_FLOAT8_E4M3;
  const float* q_scale = fp8 ? static_cast<const float*>(a.q_scale->data) : nullptr;
  const RowAddress<const uint16_t> q_at(*a.q, p.varlen, p.q_start);
  const RowAddress<const uint8_t> q8_at(*a.q, p.varlen, p.q_start);
  const RowAddress<uint16_t> o_at(*a.output, p.varlen, p.q_start);
  float* lse = a.lse != nullptr ? static_cast<float*>(a.lse->data) : nullptr;
  const std::vector<int64_t> tiles = tile_prefix(seqs, p.N);

  parallel_for(tiles[p.N] * p.Hq, [&](int64_t item) {
    const int64_t tile = item / p.Hq, h = item % p.Hq;
    const int64_t n = std::upper_bound(tiles.begin(), tiles.end(), tile) - tiles.begin() - 1;
    const int64_t sq = seqs.q_len(n), skv = seqs.kv_len(n);
    const int64_t i0 = (tile - tiles[n]) * kBlockRows, rows = std::min(kBlockRows, sq - i0);
    const float* kt = k.col_block(n, h / group);  // [D][skv]
    const float* vr = v.row_block(n, h / group);  // [skv][D]

    std::vector<float> q(rows * D), o(rows * D, 0.0f), s(kBlockKeys);
    std::vector<float> m(rows, kNegInf), l(rows, 0.0f);
    std::vector<KeyRange> keys(rows);
    int64_t span_lo = skv, span_hi = -1;
    for (int64_t r = 0; r < rows; ++r) {
      if (fp8) {
        load_row_e4m3(q8_at.at(n, i0 + r, h), D, q_scale[n * p.Hkv + h / group], q.data() + r * D);
      } else {
        load_row(q_at.at(n, i0 + r, h), D, p.dtype, q.data() + r * D);
      }
      keys[r] = admitted_keys(p, i0 + r, sq, skv);
      if (!keys[r].empty()) {
        span_lo = std::min(span_lo, keys[r].lo);
        span_hi = std::max(span_hi, keys[r].hi);
      }
    }

    for (int64_t j0 = span_lo; j0 <= span_hi; j0 += kBlockKeys) {
      const int64_t j1 = std::min(j0 + kBlockKeys - 1, span_hi);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t lo = std::max(keys[r].lo, j0), hi = std::min(keys[r].hi, j1);
        if (lo > hi) continue;  // this row admits no key of the tile
        const int64_t cols = hi - lo + 1;
        // S = scale * Q K^T (softcapped) for the admitted keys of the tile.
        row_times_transposed(q.data() + r * D, kt + lo, skv, D, cols, s.data());
        float tile_max = kNegInf;
        for (int64_t j = 0; j < cols; ++j) {
          s[j] = cap_score(s[j] * p.sm_scale, p.softcap);
          tile_max = std::max(tile_max, s[j]);
        }
        // Online softmax: rescale what was accumulated under the old max.
        const float m_new = std::max(m[r], tile_max);
        if (!(m_new > kNegInf)) {  // every admitted score is NaN or -inf: no softmax exists
          l[r] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        const float alpha = std::exp(m[r] - m_new);
        float tile_sum = 0.0f;
        for (int64_t j = 0; j < cols; ++j) {
          s[j] = std::exp(s[j] - m_new);
          tile_sum += s[j];
        }
        float* o_row = o.data() + r * D;
        if (alpha != 1.0f) {
          for (int64_t d = 0; d < D; ++d) o_row[d] *= alpha;
        }
        for (int64_t j = 0; j < cols; ++j) axpy(o_row, vr + (lo + j) * D, s[j], D);
        l[r] = l[r] * alpha + tile_sum;
        m[r] = m_new;
      }
    }

    // Normalise; a row that admits no key writes 0 and LSE -inf (NaN inputs stay NaN).
    for (int64_t r = 0; r < rows; ++r) {
      const bool empty = keys[r].empty();
      if (empty) std::fill(o.begin() + r * D, o.begin() + (r + 1) * D, 0.0f);
      store_row(o.data() + r * D, D, p.out_dtype, empty ? 0.0f : 1.0f / l[r], o_at.at(n, i0 + r, h));
      if (lse != nullptr) lse[seqs.lse_index(n, h, i0 + r)] = empty ? kNegInf : m[r] + std::log(l[r]);
    }
  });
}

}  // namespace ak::attention::cpu
