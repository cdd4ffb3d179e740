// NSA's compressed and selected branches as Sources of the tiled attention blocks (attention/tiled/block.h,
// mma_block.h): block (token t, KV head hk) attends the group's G query rows of token t to the keys of its
// list, read in place: the compressed rows its position sees, or the positions of its selected blocks. A key
// the token may not see has no row, so every row of the group sees every key that has one (visible() is
// always true: the blocks look a key's row up once, not its mask per score). Served where
// tiled::tiled_serves holds and K = V; other calls take the per-item kernels of rows.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/tiled/block.h"
#include "sparse/problem.h"
#include "sparse/rows.h"

namespace ak::sparse {

// What both sources share: the operands, the token's row of q and its output row.
struct TokenSource {
  const void* q;
  const void* k;
  const void* v;
  int32_t dtype;
  int64_t D, Hkv, hk, R;
  float scale, softcap = 0.f;
  int64_t begin = 0, end = 0;
  int64_t t, H, bos, len, i;
  void* output;

  AK_HD TokenSource(const Packed& seq, const void* q_, const void* k_, const void* v_, void* out, int32_t dtype_,
                    int64_t H_, int64_t Hkv_, int64_t D_, double scale_, int64_t token, int64_t kv_head)
      : q(q_), k(k_), v(v_), dtype(dtype_), D(D_), Hkv(Hkv_), hk(kv_head), R(H_ / Hkv_),
        scale(static_cast<float>(scale_)), t(token), H(H_), output(out) {
    const int64_t n = sequence_of(seq, t);
    bos = seq.offsets[n], len = seq.offsets[n + 1] - bos, i = t - bos;
  }
  AK_HD int64_t q_at(int64_t r) const { return (t * H + hk * R + r) * D; }
  AK_HD bool visible(int64_t, int64_t) const { return true; }
  AK_HD void write(int64_t r, int64_t c, float o0, float o1) const {
    store(output, dtype, q_at(r) + c, o0), store(output, dtype, q_at(r) + c + 1, o1);
  }
};

// The compressed branch: slots are the compressed rows the token's position sees.
struct CompressionSource : TokenSource {
  const NsaCompression& p;
  int64_t base;
  AK_HD CompressionSource(const NsaCompression& problem, int64_t token, int64_t kv_head)
      : TokenSource(problem.seq, problem.q, problem.k_cmp, problem.v_cmp, problem.output, problem.dtype, problem.H,
                    problem.Hkv, problem.K, problem.scale, token, kv_head),
        p(problem) {
    base = p.seq.chunk_offsets[sequence_of(p.seq, t)];
    end = visible_compressed(i, p.block, p.stride);
  }
  AK_HD int64_t row(int64_t c) const { return base + c < p.C ? base + c : -1; }
  AK_HD void stats(int64_t r, float m, float l) const { p.lse[t * H + hk * R + r] = l > 0.f ? m + logf(l) : 0.f; }
};

// The selected branch: slot j is position j % block of the (j / block)-th listed block.
struct SelectionSource : TokenSource {
  const NsaSelection& p;
  const int32_t* list;
  AK_HD SelectionSource(const NsaSelection& problem, int64_t token, int64_t kv_head)
      : TokenSource(problem.seq, problem.q, problem.k, problem.v, problem.output, problem.dtype, problem.H,
                    problem.Hkv, problem.K, problem.scale, token, kv_head),
        p(problem), list(problem.indices + (token * problem.Hkv + kv_head) * problem.S) {
    int64_t count = p.counts ? p.counts[t * Hkv + hk] : p.S;
    count = count < 0 ? 0 : (count > p.S ? p.S : count);
    end = count * p.block;
  }
  // The position of slot j in its sequence, or -1 (padding, past the sequence, a block listed before, or
  // under the causal mask past the token).
  AK_HD int64_t position(int64_t j) const {
    const int64_t e = j / p.block, b = list[e];
    if (b < 0 || b * p.block >= len) return -1;
    for (int64_t f = 0; f < e; f++) {
      if (list[f] == b) return -1;
    }
    const int64_t pos = b * p.block + j % p.block;
    return pos < len && (!p.causal || pos <= i) ? pos : -1;
  }
  AK_HD int64_t row(int64_t j) const {
    const int64_t pos = position(j);
    return pos < 0 ? -1 : bos + pos;
  }
  AK_HD void stats(int64_t r, float m, float l) const {
    if (p.lse) p.lse[t * H + hk * R + r] = l > 0.f ? m + logf(l) : -INFINITY;
  }
};

}  // namespace ak::sparse
