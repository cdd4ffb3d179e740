// The decode block on tensor cores with its keys streamed through a ring of shared-memory stages: up to 16
// query rows (one m16 tile) against the Sources of block.h, 64 keys a stage, the next stages' K and V rows
// in flight (16-byte asynchronous copies that hold no registers) while the current one is computed. Each
// warp takes 16 keys of every stage and keeps its own online softmax over the full head dim: scores on
// mma.sync m16n8k16 from ldmatrix fragments, the rows' maxima across the warp's four-lane groups, P
// rounded to the operands' 16 bits straight from the score fragments into the A fragment of P V (V's
// fragments by ldmatrix.trans). One barrier a stage (the ring's reuse); the four warps merge through
// shared memory at the end.
//
// The CPU backends run the same per-lane steps: the stage loaded whole, each warp's lanes in turn, the
// products over the 32 lanes' fragments (mma_host, from the fragment functions of mma_block.h, whose
// layout the device's ldmatrix reads give), the four-lane reductions over the lanes' values.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention/tiled/mma_block.h"
#include "attention/tiled/warp_block.h"

// Every loop over a lane's registers is unrolled on the device (an indexed register array would live in
// local memory).
#ifdef __CUDACC__
#define AK_PIPE_UNROLL _Pragma("unroll")
#else
#define AK_PIPE_UNROLL
#endif

namespace ak::attention::tiled {

constexpr int kPipeKeys = 64;      // keys a stage holds
constexpr int kPipeWarpKeys = 16;  // of which warp w takes 16 w .. 16 w + 15

// Stages of the ring: three (two in flight while one is computed), two at head dim 256 (a stage is 66 KB).
AK_HD constexpr int pipe_stages(int D) { return D == 256 ? 2 : 3; }

// Whether the streamed block serves a call: the tensor-core block's dtypes, head dims and rows.
inline bool pipe_serves(int32_t dtype, int64_t D, int64_t R) { return mma_serves(dtype, D, R); }

// The block's shared memory: q, the stages' K and V rows (padded by 8 elements: ldmatrix rows 16-byte
// aligned, eight rows on distinct banks), whether each staged key has a row, and each stage's cache rows
// (looked up once a key, a stage ahead of its load); after the last stage the K and V area holds the warps'
// results for the merge.
struct PipeShared {
  uint16_t* q;     // [16][D + 8] (rows past R zero)
  uint16_t* k;     // [S][kPipeKeys][D + 8]
  uint16_t* v;     // [S][kPipeKeys][D + 8]
  int32_t* valid;  // [S][kPipeKeys]
  int64_t* rows;   // [S][kPipeKeys] the cache row of each key of the stage's next tile (-1: none)
  float* merge;    // [4][16][D + 2] (over k and v)
  AK_HD static int64_t bytes(int64_t D) {
    const int64_t S = pipe_stages(static_cast<int>(D));
    return 2 * 16 * (D + 8) + 4 * S * kPipeKeys * (D + 8) + 4 * S * kPipeKeys + 8 * S * kPipeKeys;
  }
  AK_HD static PipeShared carve(unsigned char* base, int64_t D) {
    const int64_t S = pipe_stages(static_cast<int>(D));
    PipeShared sh;
    sh.q = reinterpret_cast<uint16_t*>(base);
    sh.k = sh.q + 16 * (D + 8);
    sh.v = sh.k + S * kPipeKeys * (D + 8);
    sh.valid = reinterpret_cast<int32_t*>(sh.v + S * kPipeKeys * (D + 8));
    sh.rows = reinterpret_cast<int64_t*>(sh.valid + S * kPipeKeys);
    sh.merge = reinterpret_cast<float*>(sh.k);
    return sh;
  }
};

// One lane's state: its rows g and g + 8 (g = lane / 4) over the keys its warp has seen.
template <int kD>
struct PipeLane {
  float m[2], l[2];      // the rows' max, and this lane's share of their sums (its keys' P)
  int64_t last[2];       // the rows' last visible key position (-1 for rows past R)
  float acc[kD / 8][4];  // C fragments of the rows' n8 tiles of output columns
};

template <class Source, int kD, int kDtype = 0>
struct PipeBlock {
  static constexpr int64_t kStride = kD + 8;
  static constexpr int kStages = pipe_stages(kD);
  static constexpr int kN = kD / 8;   // n8 tiles of the output
  static constexpr int kK = kD / 16;  // k16 steps of the scores
  using Lane = PipeLane<kD>;

  const Source& src;
  AK_HD explicit PipeBlock(const Source& source) : src(source) {}

  AK_HD static int64_t shared_bytes() { return PipeShared::bytes(kD); }
  AK_HD int32_t dtype() const { return kDtype != 0 ? kDtype : src.dtype; }
  AK_HD const uint16_t* k_stage(const PipeShared& sh, int s) const { return sh.k + s * kPipeKeys * kStride; }
  AK_HD const uint16_t* v_stage(const PipeShared& sh, int s) const { return sh.v + s * kPipeKeys * kStride; }

  // Thread t's share of the q rows (zeros past R).
  AK_HD void load_q(const PipeShared& sh, int t) const {
    for (int64_t e = t; e < 16 * kD; e += kThreads) {
      const int64_t r = e / kD, c = e % kD;
      sh.q[r * kStride + c] = r < src.R ? static_cast<const uint16_t*>(src.q)[src.q_at(r) + c] : 0;
    }
  }

  AK_HD void start(int lane, Lane& st) const {
    const int g = lane >> 2;
    AK_PIPE_UNROLL
    for (int h = 0; h < 2; h++) {
      st.m[h] = -INFINITY, st.l[h] = 0.f;
      st.last[h] = g + 8 * h < src.R ? src.last_visible(g + 8 * h) : -1;
    }
    AK_PIPE_UNROLL
    for (int n = 0; n < kN; n++) st.acc[n][0] = st.acc[n][1] = st.acc[n][2] = st.acc[n][3] = 0.f;
  }

  // The cache rows of the keys [tile, tile + 64) for stage s (-1 past the range or without a row): one
  // lookup a key (a page table read in a paged cache), by the first 64 threads.
  AK_HD void mark_rows(const PipeShared& sh, int t, int s, int64_t tile) const {
    if (t < kPipeKeys) sh.rows[s * kPipeKeys + t] = row_of(t, tile);
  }
  // Thread t's key of the tile at `tile`: its cache row (t < kPipeKeys), else -1.
  AK_HD int64_t row_of(int t, int64_t tile) const {
    return t < kPipeKeys && tile + t < src.end ? src.row(tile + t) : -1;
  }

  // Thread t's share of stage s's keys (their rows marked): `copy(dst, src, ok)` moves 16 bytes (zeros when
  // !ok: a key without a row); the thread moving a key's first 8 columns records whether it has a row.
  // A thread moves one column group c of every kRowsPerPass-th key, so only the key's row changes from move
  // to move.
  template <class Copy>
  AK_HD void load_stage(const PipeShared& sh, int t, int s, Copy&& copy) const {
    constexpr int kPerRow = kD / 8, kRowsPerPass = kThreads / kPerRow;
    const int c = 8 * (t % kPerRow);
    const int64_t row_stride = src.Hkv * kD;
    const uint16_t* k = static_cast<const uint16_t*>(src.k) + src.hk * kD + c;
    const uint16_t* v = static_cast<const uint16_t*>(src.v) + src.hk * kD + c;
    const int64_t stage = static_cast<int64_t>(s) * kPipeKeys * kStride + c;
    AK_PIPE_UNROLL
    for (int pass = 0; pass < kPipeKeys / kRowsPerPass; pass++) {
      const int j = t / kPerRow + pass * kRowsPerPass;
      const int64_t row = sh.rows[s * kPipeKeys + j];
      const int64_t at = (row >= 0 ? row : 0) * row_stride;
      copy(sh.k + stage + j * kStride, k + at, row >= 0);
      copy(sh.v + stage + j * kStride, v + at, row >= 0);
      if (c == 0) sh.valid[s * kPipeKeys + j] = row >= 0 ? 1 : 0;
    }
  }

  // The warp's scores c[nt][e] (row g + 8 (e >> 1), key 16 w + 8 nt + 2 q + (e & 1) of the stage) scaled,
  // capped and masked in place; mx: the lane's maxima of rows g and g + 8.
  AK_HD void mask(const PipeShared& sh, int s, int w, int lane, int64_t tile, const Lane& st, float c[2][4],
                  float mx[2]) const {
    if (src.softcap > 0.f) mask_scores<true>(sh, s, w, lane, tile, st, c, mx);
    else mask_scores<false>(sh, s, w, lane, tile, st, c, mx);
  }
  // The same with the cap known at compile time: every score scaled (and capped), then the masked ones
  // replaced by -inf, with no branch per score.
  template <bool kCap>
  AK_HD void mask_scores(const PipeShared& sh, int s, int w, int lane, int64_t tile, const Lane& st, float c[2][4],
                         float mx[2]) const {
    const int q = lane & 3;
    mx[0] = mx[1] = -INFINITY;
    AK_PIPE_UNROLL
    for (int nt = 0; nt < 2; nt++) {
      AK_PIPE_UNROLL
      for (int e = 0; e < 4; e++) {
        const int key = kPipeWarpKeys * w + 8 * nt + 2 * q + (e & 1), h = e >> 1;
        const bool seen = sh.valid[s * kPipeKeys + key] != 0 && tile + key <= st.last[h];
        float x = c[nt][e] * src.scale;
        if constexpr (kCap) x = src.softcap * fast_tanh(x / src.softcap);
        x = seen ? x : -INFINITY;
        c[nt][e] = x;
        mx[h] = x > mx[h] ? x : mx[h];
      }
    }
  }

  // Two probabilities rounded to the operands' 16 bits (to nearest even on both sides), as one A register.
  AK_HD uint32_t pack_p(float lo, float hi) const {
#ifdef __CUDA_ARCH__
    return dtype() == AK_BFLOAT16 ? ak::arch::pack2<__nv_bfloat16>(lo, hi) : ak::arch::pack2<__half>(lo, hi);
#else
    return dtype() == AK_BFLOAT16 ? pack16(float_to_bf16(lo), float_to_bf16(hi))
                                  : pack16(float_to_f16(lo), float_to_f16(hi));
#endif
  }

  // With mx the rows' maxima over the warp's 16 keys: the rows' new maxima, the accumulators and sums
  // rescaled, P into the A fragment of P V (rounded to 16 bits; the sums take it unrounded). A masked score
  // (-inf) gives exp(-inf) = 0 against a finite max, and against a row with nothing seen yet (max -inf) the
  // exponent is taken from 0, so no score needs a test of its own.
  AK_HD void exponentiate(const float c[2][4], const float mx[2], Lane& st, uint32_t a[4]) const {
    float from[2], alpha[2];
    AK_PIPE_UNROLL
    for (int h = 0; h < 2; h++) {
      const float top = st.m[h] > mx[h] ? st.m[h] : mx[h];
      alpha[h] = st.m[h] == -INFINITY ? 1.f : fast_exp(st.m[h] - top);
      st.m[h] = top;
      from[h] = top == -INFINITY ? 0.f : top;
    }
    // Once the rows' maxima settle, a tile leaves them unchanged (alpha exactly 1) on every lane of the warp,
    // and the rescale (multiplying by 1) is skipped; the host always multiplies, to the same bits.
#ifdef __CUDA_ARCH__
    const bool rescale = __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f);
#else
    const bool rescale = true;
#endif
    if (rescale) {
      AK_PIPE_UNROLL
      for (int h = 0; h < 2; h++) {
        st.l[h] *= alpha[h];
        AK_PIPE_UNROLL
        for (int n = 0; n < kN; n++) st.acc[n][2 * h] *= alpha[h], st.acc[n][2 * h + 1] *= alpha[h];
      }
    }
    float p[2][4];
    AK_PIPE_UNROLL
    for (int nt = 0; nt < 2; nt++) {
      AK_PIPE_UNROLL
      for (int e = 0; e < 4; e++) {
        p[nt][e] = fast_exp(c[nt][e] - from[e >> 1]);
        st.l[e >> 1] += p[nt][e];
      }
    }
    a[0] = pack_p(p[0][0], p[0][1]), a[1] = pack_p(p[0][2], p[0][3]);
    a[2] = pack_p(p[1][0], p[1][1]), a[3] = pack_p(p[1][2], p[1][3]);
  }

  // The warp's result (its lanes' sums already added over each four-lane group) to the merge area: row r of
  // warp w at [w][r]: max, sum, then D accumulators.
  AK_HD void stash(const PipeShared& sh, int w, int lane, const Lane& st) const {
    const int g = lane >> 2, q = lane & 3;
    AK_PIPE_UNROLL
    for (int h = 0; h < 2; h++) {
      float* at = sh.merge + (w * 16 + g + 8 * h) * (kD + 2);
      if (q == 0) at[0] = st.m[h], at[1] = st.l[h];
      AK_PIPE_UNROLL
      for (int n = 0; n < kN; n++) at[2 + 8 * n + 2 * q] = st.acc[n][2 * h], at[3 + 8 * n + 2 * q] = st.acc[n][2 * h + 1];
    }
  }

  // Thread t's share of the merge over the warps (their results laid out as the warp block's, 16 rows a warp).
  AK_HD void finish(const PipeShared& sh, int t) const { merge_warps<Source, kD>(src, sh.merge, 16, t); }

  // The whole block on the host: the device's ring of stages in its order (rows marked a stage ahead, loads
  // kStages - 1 ahead), each warp's lanes step by step, the collective steps over them.
  void run_on_host() const {
    std::vector<Words> memory(static_cast<size_t>(shared_bytes() / 16 + 1));
    const PipeShared sh = PipeShared::carve(reinterpret_cast<unsigned char*>(memory.data()), kD);
    const auto copy = [](uint16_t* dst, const uint16_t* from, bool ok) {
      if (ok) std::memcpy(dst, from, 16);
      else std::memset(dst, 0, 16);
    };
    for (int t = 0; t < kThreads; t++) load_q(sh, t);
    std::vector<Lane> lanes(kThreads);
    for (int t = 0; t < kThreads; t++) start(t % 32, lanes[t]);
    uint32_t a[32][4], b[32][2];
    float c[32][2][4], mx[32][2], d[32][4];
    const int64_t tiles = src.end > src.begin ? (src.end - src.begin + kPipeKeys - 1) / kPipeKeys : 0;
    for (int s = 0; s < kStages; s++) {
      for (int t = 0; t < kThreads; t++) mark_rows(sh, t, s, src.begin + s * kPipeKeys);
    }
    for (int s = 0; s < kStages - 1 && s < tiles; s++) {
      for (int t = 0; t < kThreads; t++) load_stage(sh, t, s, copy);
    }
    for (int64_t i = 0; i < tiles; i++) {
      const int64_t tile = src.begin + i * kPipeKeys, next = i + kStages - 1;
      const int st_now = static_cast<int>(i % kStages);
      if (next < tiles) {
        for (int t = 0; t < kThreads; t++) load_stage(sh, t, static_cast<int>(next % kStages), copy);
      }
      for (int t = 0; t < kThreads; t++) mark_rows(sh, t, st_now, src.begin + (i + kStages) * kPipeKeys);
      for (int w = 0; w < 4; w++) {
        Lane* st = lanes.data() + 32 * w;
        for (int nt = 0; nt < 2; nt++) {
          for (int lane = 0; lane < 32; lane++) d[lane][0] = d[lane][1] = d[lane][2] = d[lane][3] = 0.f;
          for (int kk = 0; kk < kK; kk++) {
            for (int lane = 0; lane < 32; lane++) {
              fragment_a(sh.q, kStride, 16 * kk, lane, a[lane]);
              fragment_b_rows(k_stage(sh, st_now), kStride, kPipeWarpKeys * w + 8 * nt, 16 * kk, lane, b[lane]);
            }
            mma_host(dtype(), a, b, d);
          }
          for (int lane = 0; lane < 32; lane++) std::memcpy(c[lane][nt], d[lane], sizeof(d[lane]));
        }
        for (int lane = 0; lane < 32; lane++) mask(sh, st_now, w, lane, tile, st[lane], c[lane], mx[lane]);
        for (int quad = 0; quad < 8; quad++) {  // the device's shuffles within four lanes
          for (int h = 0; h < 2; h++) {
            float top = -INFINITY;
            for (int i = 0; i < 4; i++) top = mx[4 * quad + i][h] > top ? mx[4 * quad + i][h] : top;
            for (int i = 0; i < 4; i++) mx[4 * quad + i][h] = top;
          }
        }
        for (int lane = 0; lane < 32; lane++) exponentiate(c[lane], mx[lane], st[lane], a[lane]);
        for (int n = 0; n < kN; n++) {
          for (int lane = 0; lane < 32; lane++) {
            fragment_b_cols(v_stage(sh, st_now), kStride, kPipeWarpKeys * w, 8 * n, lane, b[lane]);
            std::memcpy(d[lane], st[lane].acc[n], sizeof(d[lane]));
          }
          mma_host(dtype(), a, b, d);
          for (int lane = 0; lane < 32; lane++) std::memcpy(st[lane].acc[n], d[lane], sizeof(d[lane]));
        }
      }
    }
    for (int w = 0; w < 4; w++) {
      Lane* st = lanes.data() + 32 * w;
      for (int quad = 0; quad < 8; quad++) {
        for (int h = 0; h < 2; h++) {
          float sum = 0.f;
          for (int i = 0; i < 4; i++) sum += st[4 * quad + i].l[h];
          for (int i = 0; i < 4; i++) st[4 * quad + i].l[h] = sum;
        }
      }
      for (int lane = 0; lane < 32; lane++) stash(sh, w, lane, st[lane]);
    }
    for (int t = 0; t < kThreads; t++) finish(sh, t);
  }

#ifdef __CUDACC__
  // The warp's scores and P V over its 16 keys of stage s.
  __device__ void compute(const PipeShared& sh, int s, int w, int lane, int64_t tile, Lane& st) const {
    const int m = lane >> 3, r = lane & 7;
    const uint16_t* k = k_stage(sh, s);
    const uint16_t* v = v_stage(sh, s);
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < kK; kk++) {
      uint32_t a[4], b[4];
      // A: q rows 8 (m & 1) + r at columns 16 kk + 8 (m >> 1); B: both n8 tiles of the warp's keys.
      ak::arch::ldsm_x4(a, sh.q + (8 * (m & 1) + r) * kStride + 16 * kk + 8 * (m >> 1));
      ak::arch::ldsm_x4(b, k + (kPipeWarpKeys * w + 8 * (m >> 1) + r) * kStride + 16 * kk + 8 * (m & 1));
      mma_device(dtype(), a, b, c[0]);
      mma_device(dtype(), a, b + 2, c[1]);
    }
    float mx[2];
    mask(sh, s, w, lane, tile, st, c, mx);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    }
    uint32_t p[4];
    exponentiate(c, mx, st, p);
#pragma unroll
    for (int np = 0; np < kN / 2; np++) {
      uint32_t b[4];
      // V's keys 16 w + 8 (m & 1) + r at columns 16 np + 8 (m >> 1), transposed: two n8 tiles' B fragments.
      ak::arch::ldsm_x4_trans(b, v + (kPipeWarpKeys * w + 8 * (m & 1) + r) * kStride + 16 * np + 8 * (m >> 1));
      mma_device(dtype(), p, b, st.acc[2 * np]);
      mma_device(dtype(), p, b + 2, st.acc[2 * np + 1]);
    }
  }

  // The whole block on the device: stages kStages - 1 ahead, one barrier a stage.
  __device__ void run_on_device(unsigned char* smem) const {
    const int t = static_cast<int>(threadIdx.x), w = t / 32, lane = t % 32;
    const PipeShared sh = PipeShared::carve(smem, kD);
    const auto copy = [](uint16_t* dst, const uint16_t* from, bool ok) {
      ak::arch::cp_async16(dst, from, ok ? 16 : 0);
    };
    load_q(sh, t);
    Lane st;
    start(lane, st);
    const int64_t tiles = src.end > src.begin ? (src.end - src.begin + kPipeKeys - 1) / kPipeKeys : 0;
#pragma unroll
    for (int s = 0; s < kStages; s++) mark_rows(sh, t, s, src.begin + s * kPipeKeys);
    __syncthreads();
#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
      if (s < tiles) load_stage(sh, t, s, copy);
      ak::arch::cp_async_commit();
    }
    for (int64_t i = 0; i < tiles; i++) {
      // Stage i has landed for every thread, every warp is done with the stage the next load reuses, and
      // the next load's rows (marked an iteration ago) are visible.
      ak::arch::cp_async_wait<kStages - 2>();
      __syncthreads();
      const int64_t next = i + kStages - 1;
      if (next < tiles) load_stage(sh, t, static_cast<int>(next % kStages), copy);
      ak::arch::cp_async_commit();
      // Stage i's rows were read by its load (before this iteration's barrier): the slot takes tile i + S's,
      // looked up before the products (a paged cache's table read in flight behind them) and stored after,
      // ahead of the next barrier, after which tile i + S's load reads them.
      const int64_t next_row = row_of(t, src.begin + (i + kStages) * kPipeKeys);
      compute(sh, static_cast<int>(i % kStages), w, lane, src.begin + i * kPipeKeys, st);
      if (t < kPipeKeys) sh.rows[(i % kStages) * kPipeKeys + t] = next_row;
    }
    ak::arch::cp_async_wait_all();
    __syncthreads();  // the merge area overlays the stages
#pragma unroll
    for (int h = 0; h < 2; h++) {
      st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 1);
      st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 2);
    }
    stash(sh, w, lane, st);
    __syncthreads();
    finish(sh, t);
  }
#endif
};

}  // namespace ak::attention::tiled

#undef AK_PIPE_UNROLL
