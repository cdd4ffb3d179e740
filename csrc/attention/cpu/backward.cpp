// CPU backward of softmax attention (MHA / GQA, dense or varlen), recomputing the probabilities from
// the forward's LSE tile by tile (FlashAttention-2's backward; no Sq x Skv matrix is ever held):
//   P = exp(S - LSE),  dP = dO V^T,  D_i = rowsum(dO * O),  dS = P * (dP - D),
//   through the softcap c: dZ = dS * (1 - tanh^2(z / c)),
//   dQ = scale * dZ K,  dK = scale * dZ^T Q (summed over the KV group),  dV = P^T dO (likewise).
// Two passes instead of atomics: one over query tiles for dQ, one over key tiles for dK and dV, so the
// result is deterministic (AK_ATTN_DETERMINISTIC changes nothing here).
#include "attention/cpu/common.h"

namespace ak::attention::cpu {

using namespace cpu_detail;

namespace {

std::vector<int64_t> tile_prefix(int64_t N, int64_t tile, const std::function<int64_t(int64_t)>& length) {
  std::vector<int64_t> prefix(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) prefix[n + 1] = prefix[n] + (length(n) + tile - 1) / tile;
  return prefix;
}

// Everything both passes read, staged once in fp32.
struct Operands {
  Staged q, d_out, k, v;
  std::vector<float> delta;  // D_i = rowsum(dO * O), indexed like the LSE
  const float* lse;
};

// One query row's probabilities p and score gradients dz over the admitted keys of a tile.
struct RowGrad {
  std::vector<float> p, dz;
  explicit RowGrad(int64_t n) : p(n), dz(n) {}
};

// Fills g for query row (q_row, do_row) and keys [lo, lo + cols) (dP is computed into g.dz first).
void row_probabilities_and_grads(const AttnProblem& p, const float* q_row, const float* do_row, float lse,
                                 float delta, const float* kt, const float* vt, int64_t ld, int64_t lo,
                                 int64_t cols, RowGrad& g) {
  const int64_t D = p.D;
  row_times_transposed(q_row, kt + lo, ld, D, cols, g.p.data());
  row_times_transposed(do_row, vt + lo, ld, D, cols, g.dz.data());  // dP
  for (int64_t j = 0; j < cols; ++j) {
    const float s = cap_score(g.p[j] * p.sm_scale, p.softcap);
    const float prob = std::exp(s - lse);
    float dz = prob * (g.dz[j] - delta);
    if (p.softcap > 0) {
      const float t = s / p.softcap;  // tanh(z / c)
      dz *= 1.0f - t * t;
    }
    g.p[j] = prob;
    g.dz[j] = dz;
  }
}

}  // namespace

void attention_bwd(const AttnBwd& a) {
  const AttnProblem& p = a.p;
  const Sequences seqs{p};
  const int64_t D = p.D, group = p.group(), Hq = p.Hq;

  Operands ops{
      stage(*a.q, p, /*is_query=*/true, Hq, /*keep_rows=*/true, /*transposed=*/false),
      stage(*a.d_output, p, /*is_query=*/true, Hq, /*keep_rows=*/true, /*transposed=*/false),
      stage(*a.k, p, /*is_query=*/false, p.Hkv, /*keep_rows=*/true, /*transposed=*/true),
      stage(*a.v, p, /*is_query=*/false, p.Hkv, /*keep_rows=*/false, /*transposed=*/true),
      std::vector<float>(static_cast<size_t>(Hq * seqs.q_total())),
      static_cast<const float*>(a.lse->data),
  };

  // D_i from the forward's stored output.
  const RowAddress<const uint16_t> o_at(*a.output, p.varlen, p.q_start);
  parallel_for(p.N * Hq, [&](int64_t item) {
    const int64_t n = item / Hq, h = item % Hq, sq = seqs.q_len(n);
    std::vector<float> o(D);
    const float* d_out = ops.d_out.row_block(n, h);
    for (int64_t i = 0; i < sq; ++i) {
      load_row(o_at.at(n, i, h), D, p.dtype, o.data());
      float sum = 0.0f;
      for (int64_t d = 0; d < D; ++d) sum += d_out[i * D + d] * o[d];
      ops.delta[seqs.lse_index(n, h, i)] = sum;
    }
  });

  // Pass 1: dQ, one worker per (query tile, head).
  const RowAddress<uint16_t> dq_at(*a.dq, p.varlen, p.q_start);
  const std::vector<int64_t> q_tiles = tile_prefix(p.N, kBlockRows, [&](int64_t n) { return seqs.q_len(n); });
  parallel_for(q_tiles[p.N] * Hq, [&](int64_t item) {
    const int64_t tile = item / Hq, h = item % Hq;
    const int64_t n = std::upper_bound(q_tiles.begin(), q_tiles.end(), tile) - q_tiles.begin() - 1;
    const int64_t sq = seqs.q_len(n), skv = seqs.kv_len(n);
    const int64_t i0 = (tile - q_tiles[n]) * kBlockRows, rows = std::min(kBlockRows, sq - i0);
    const float* q = ops.q.row_block(n, h);
    const float* d_out = ops.d_out.row_block(n, h);
    const float* kt = ops.k.col_block(n, h / group);
    const float* kr = ops.k.row_block(n, h / group);
    const float* vt = ops.v.col_block(n, h / group);
    std::vector<float> dq(D);
    RowGrad g(kBlockKeys);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      std::fill(dq.begin(), dq.end(), 0.0f);
      const KeyRange keys = admitted_keys(p, i, sq, skv);
      const float lse = ops.lse[seqs.lse_index(n, h, i)];
      if (!keys.empty() && lse != kNegInf) {
        const float delta = ops.delta[seqs.lse_index(n, h, i)];
        for (int64_t lo = keys.lo; lo <= keys.hi; lo += kBlockKeys) {
          const int64_t cols = std::min(kBlockKeys, keys.hi - lo + 1);
          row_probabilities_and_grads(p, q + i * D, d_out + i * D, lse, delta, kt, vt, skv, lo, cols, g);
          for (int64_t j = 0; j < cols; ++j) axpy(dq.data(), kr + (lo + j) * D, g.dz[j], D);
        }
      }
      store_row(dq.data(), D, p.dtype, p.sm_scale, dq_at.at(n, i, h));
    }
  });

  // Pass 2: dK and dV, one worker per (key tile, KV head), over every query head of its group.
  const RowAddress<uint16_t> dk_at(*a.dk, p.varlen, p.kv_start);
  const RowAddress<uint16_t> dv_at(*a.dv, p.varlen, p.kv_start);
  const std::vector<int64_t> kv_tiles = tile_prefix(p.N, kBlockKeys, [&](int64_t n) { return seqs.kv_len(n); });
  parallel_for(kv_tiles[p.N] * p.Hkv, [&](int64_t item) {
    const int64_t tile = item / p.Hkv, hk = item % p.Hkv;
    const int64_t n = std::upper_bound(kv_tiles.begin(), kv_tiles.end(), tile) - kv_tiles.begin() - 1;
    const int64_t sq = seqs.q_len(n), skv = seqs.kv_len(n);
    const int64_t j0 = (tile - kv_tiles[n]) * kBlockKeys, j1 = std::min(j0 + kBlockKeys, skv) - 1;
    const int64_t width = j1 - j0 + 1;
    const float* kt = ops.k.col_block(n, hk);
    const float* vt = ops.v.col_block(n, hk);
    std::vector<float> dk(width * D, 0.0f), dv(width * D, 0.0f);
    RowGrad g(kBlockKeys);
    const KeyRange rows = admitting_rows(p, j0, j1, sq, skv);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const float* q = ops.q.row_block(n, h);
      const float* d_out = ops.d_out.row_block(n, h);
      for (int64_t i = rows.lo; i <= rows.hi; ++i) {
        const KeyRange keys = admitted_keys(p, i, sq, skv);
        const int64_t lo = std::max(keys.lo, j0), hi = std::min(keys.hi, j1);
        const float lse = ops.lse[seqs.lse_index(n, h, i)];
        if (lo > hi || lse == kNegInf) continue;
        const int64_t cols = hi - lo + 1;
        row_probabilities_and_grads(p, q + i * D, d_out + i * D, lse, ops.delta[seqs.lse_index(n, h, i)], kt, vt,
                                    skv, lo, cols, g);
        for (int64_t j = 0; j < cols; ++j) {
          axpy(dv.data() + (lo - j0 + j) * D, d_out + i * D, g.p[j], D);
          axpy(dk.data() + (lo - j0 + j) * D, q + i * D, g.dz[j], D);
        }
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      store_row(dk.data() + j * D, D, p.dtype, p.sm_scale, dk_at.at(n, j0 + j, hk));
      store_row(dv.data() + j * D, D, p.dtype, 1.0f, dv_at.at(n, j0 + j, hk));
    }
  });
}

}  // namespace ak::attention::cpu
