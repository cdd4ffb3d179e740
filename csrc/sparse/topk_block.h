// NSA's block selection on tensor cores: a warp per (token, KV head) item scores the compressed rows its
// position sees for the group's query heads (the m16 tile of mma.sync, rows past the group zero), 32 rows
// (four n8 tiles) a step, turns each row's scores into the group's summed probability exp(s - lse) (a
// butterfly over the lanes holding the rows), and merges the step's 32 candidates into the kept top S (S
// <= 32, a lane each, sorted): every candidate's rank in the union comes from comparisons over the warp's
// lanes, and each entry that ranks below S moves to that lane through shared memory. The order is the item
// kernel's (rows.h): importance descending, the smaller block first on a tie; the first block and the
// two last are forced with importance G.
//
// The CPU backend runs the same steps lane by lane (mma_host over the lanes' fragments, the butterfly in the
// device's order), so its lists are the device's up to the products' rounding.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/tiled/mma_block.h"
#include "sparse/problem.h"
#include "sparse/rows.h"

namespace ak::sparse {

constexpr int kTopkWarps = 4;  // items a block, a warp each
constexpr int kTopkThreads = 32 * kTopkWarps;
constexpr int kTopkStep = 32;  // candidate blocks scored a step
constexpr int kTopkMaxKept = 32;

// Whether the tensor-core selection serves a call: 16-bit q and k_cmp, head dims 64 / 128 / 256, at most 16
// query heads a KV head, at most 32 selected blocks.
inline bool topk_block_serves(int32_t dtype, int64_t K, int64_t G, int64_t S) {
  return (dtype == AK_BFLOAT16 || dtype == AK_FLOAT16) && (K == 64 || K == 128 || K == 256) && G >= 1 && G <= 16 &&
         S >= 1 && S <= kTopkMaxKept;
}

// One item's fixed facts: its token's position, sequence's first compressed row, the candidates.
struct TopkItemInfo {
  int64_t t, hk, G, base, current;
  AK_HD TopkItemInfo(const NsaTopk& p, int64_t token, int64_t kv_head) : t(token), hk(kv_head), G(p.H / p.Hkv) {
    const int64_t n = sequence_of(p.seq, t);
    base = p.seq.chunk_offsets[n];
    current = (t - p.seq.offsets[n]) / p.block;
  }
  // Whether candidate c has a compressed row to score (forced blocks need none).
  AK_HD bool scored(const NsaTopk& p, int64_t c) const { return c <= current && base + c < p.C; }
  AK_HD bool forced(int64_t c) const { return c == 0 || c == current || c + 1 == current; }
  // Candidate c's importance from its score sum, or -inf for no candidate.
  AK_HD float importance(const NsaTopk& p, int64_t c, float summed) const {
    if (c > current) return -INFINITY;
    if (forced(c)) return static_cast<float>(G);
    return base + c < p.C ? summed : -INFINITY;
  }
};

template <int kK>
struct TopkBlock {
  static constexpr int kSteps = kK / 16;  // k16 steps of a score
  const NsaTopk& p;
  AK_HD explicit TopkBlock(const NsaTopk& problem) : p(problem) {}

  // The q A fragments of lane `lane` (rows g and g + 8 of the group, zeros past it).
  AK_HD void load_q(const TopkItemInfo& it, int lane, uint32_t qa[kSteps][4]) const {
    const int g = lane >> 2, q = lane & 3;
    const uint32_t* words = static_cast<const uint32_t*>(p.q);
    for (int kk = 0; kk < kSteps; kk++) {
      for (int e = 0; e < 4; e++) {
        const int64_t r = g + 8 * (e & 1), col = 16 * kk + 2 * q + 8 * (e >> 1);
        qa[kk][e] = r < it.G ? words[((it.t * p.H + it.hk * it.G + r) * kK + col) / 2] : 0u;
      }
    }
  }
  // The B fragment of lane `lane` for k-step kk of the n8 tile of candidates c0 .. c0 + 7 (zeros without a
  // row).
  AK_HD void load_k(const TopkItemInfo& it, int64_t c0, int kk, int lane, uint32_t b[2]) const {
    const int g = lane >> 2, q = lane & 3;
    const int64_t c = c0 + g;
    if (!it.scored(p, c)) {
      b[0] = b[1] = 0u;
      return;
    }
    const uint32_t* words = static_cast<const uint32_t*>(p.k_cmp);
    const int64_t at = ((it.base + c) * p.Hkv + it.hk) * kK + 16 * kk + 2 * q;
    b[0] = words[at / 2], b[1] = words[(at + 8) / 2];
  }
  // Lane's share of the importance of its two candidates of an n8 tile (columns 2 q, 2 q + 1): its rows'
  // exp(s - lse), before the sum over the lanes of the same q.
  AK_HD void share(const TopkItemInfo& it, int lane, const float c[4], float out[2]) const {
    const int g = lane >> 2;
    const float scale = static_cast<float>(p.scale);
    for (int h = 0; h < 2; h++) {
      float sum = 0.f;
      for (int half = 0; half < 2; half++) {
        const int64_t r = g + 8 * half;
        if (r < it.G) sum += expf(scale * c[2 * half + h] - p.lse[it.t * p.H + it.hk * it.G + r]);
      }
      out[h] = sum;
    }
  }
  // Where candidate `mine` (value v, index c = lane l of the step) ranks in the union with the kept list
  // (kept values kv[0..S)) and the step's values nv[0..32): kept entries and earlier candidates first on ties.
  AK_HD static int rank_new(float v, int l, const float* kv, int S, const float* nv) {
    int rank = 0;
    for (int j = 0; j < S; j++) rank += kv[j] >= v;
    for (int m = 0; m < kTopkStep; m++) rank += nv[m] > v || (nv[m] == v && m < l);
    return rank;
  }
  AK_HD static int rank_kept(float v, int j, const float* nv) {
    int rank = j;
    for (int m = 0; m < kTopkStep; m++) rank += nv[m] > v;
    return rank;
  }

  // The item on the host: the same steps, lane by lane.
  void run_on_host(int64_t t, int64_t hk) const {
    const TopkItemInfo it(p, t, hk);
    const int S = static_cast<int>(p.S);
    uint32_t qa[32][kSteps][4], b[32][2], a[32][4];
    float kept_v[kTopkMaxKept], next_v[kTopkMaxKept], nv[kTopkStep], c[32][4], part[4][32][2];
    int32_t kept_i[kTopkMaxKept], next_i[kTopkMaxKept];
    for (int lane = 0; lane < 32; lane++) load_q(it, lane, qa[lane]);
    for (int j = 0; j < S; j++) kept_v[j] = -INFINITY, kept_i[j] = -1;
    for (int64_t c0 = 0; c0 <= it.current; c0 += kTopkStep) {
      for (int nt = 0; nt < 4; nt++) {
        for (int lane = 0; lane < 32; lane++) c[lane][0] = c[lane][1] = c[lane][2] = c[lane][3] = 0.f;
        for (int kk = 0; kk < kSteps; kk++) {
          for (int lane = 0; lane < 32; lane++) {
            for (int e = 0; e < 4; e++) a[lane][e] = qa[lane][kk][e];
            load_k(it, c0 + 8 * nt, kk, lane, b[lane]);
          }
          ak::attention::tiled::mma_host(p.dtype, a, b, c);
        }
        for (int lane = 0; lane < 32; lane++) share(it, lane, c[lane], part[nt][lane]);
      }
      // The butterfly over g (lane bits 2, 3, 4), then candidate l from the lanes of q = (l % 8) / 2.
      for (int l = 0; l < kTopkStep; l++) {
        const int nt = l / 8, q = (l % 8) / 2, h = l % 2;
        float v[8];
        for (int g = 0; g < 8; g++) v[g] = part[nt][4 * g + q][h];
        const float summed = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        nv[l] = it.importance(p, c0 + l, summed);
      }
      for (int j = 0; j < S; j++) next_v[j] = -INFINITY, next_i[j] = -1;
      for (int j = 0; j < S; j++) {
        const int r = rank_kept(kept_v[j], j, nv);
        if (r < S) next_v[r] = kept_v[j], next_i[r] = kept_i[j];
      }
      for (int l = 0; l < kTopkStep; l++) {
        const int r = rank_new(nv[l], l, kept_v, S, nv);
        if (r < S) next_v[r] = nv[l], next_i[r] = static_cast<int32_t>(c0 + l);
      }
      for (int j = 0; j < S; j++) kept_v[j] = next_v[j], kept_i[j] = next_i[j];
    }
    int32_t* out = p.indices + (t * p.Hkv + hk) * p.S;
    for (int j = 0; j < S; j++) out[j] = kept_v[j] == -INFINITY ? -1 : kept_i[j];
  }

#ifdef __CUDACC__
  // The item on the device: warp w of the block, its own 32 + 32 slots of shared memory for the moves.
  __device__ void run_on_device(int64_t t, int64_t hk, int lane, float* move_v, int32_t* move_i) const {
    const TopkItemInfo it(p, t, hk);
    const int S = static_cast<int>(p.S);
    uint32_t qa[kSteps][4];
    load_q(it, lane, qa);
    float kept_v = -INFINITY;
    int32_t kept_i = -1;
    for (int64_t c0 = 0; c0 <= it.current; c0 += kTopkStep) {
      float part[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < kSteps; kk++) {
          uint32_t b[2];
          load_k(it, c0 + 8 * nt, kk, lane, b);
          ak::attention::tiled::mma_device(p.dtype, qa[kk], b, c);
        }
        share(it, lane, c, part[nt]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
          for (int o = 4; o < 32; o <<= 1) part[nt][h] += __shfl_xor_sync(0xffffffffu, part[nt][h], o);
        }
      }
      // Candidate `lane`: tile lane / 8, held by the lanes of q = (lane % 8) / 2 (g = 0 among them).
      float summed = 0.f;
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float x = __shfl_sync(0xffffffffu, part[nt][h], (lane % 8) / 2);
          if (nt == lane / 8 && h == lane % 2) summed = x;
        }
      }
      const float v = it.importance(p, c0 + lane, summed);
      int r_new = 0, r_kept = lane;
      for (int j = 0; j < S; j++) r_new += __shfl_sync(0xffffffffu, kept_v, j) >= v;
      for (int m = 0; m < kTopkStep; m++) {
        const float vm = __shfl_sync(0xffffffffu, v, m);
        r_new += vm > v || (vm == v && m < lane);
        r_kept += vm > kept_v;
      }
      if (lane < S && r_kept < S) move_v[r_kept] = kept_v, move_i[r_kept] = kept_i;
      if (r_new < S) move_v[r_new] = v, move_i[r_new] = static_cast<int32_t>(c0 + lane);
      __syncwarp();
      if (lane < S) kept_v = move_v[lane], kept_i = move_i[lane];
      __syncwarp();
    }
    if (lane < S) p.indices[(t * p.Hkv + hk) * p.S + lane] = kept_v == -INFINITY ? -1 : kept_i;
  }
#endif
};

}  // namespace ak::sparse
