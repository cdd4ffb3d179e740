// The online softmax of FlashAttention on one thread's share of a score tile, shared by the general
// (mma.sync) and the Hopper (wgmma) forward kernels: both hand each thread the same accumulator
// layout. A thread holds two rows of the tile (r and r + 8 of its 16-row slice) and, for each 8-key
// column block j, four values: s[4j + e] sits at row (e >> 1 ? r + 8 : r), key 8j + 2 * (lane % 4) +
// (e & 1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "arch/sm80.cuh"
#include "attention/fwd/params.h"

namespace ak::attention::cuda {

using namespace ::ak::arch;

// z <- cap * tanh(z * mul), mul = sm_scale / cap. tanh from the accurate library routine: a score's
// absolute error becomes an error of the softmax weight, so the fast approximation would not do.
template <int kN>
__device__ __forceinline__ void apply_softcap(float (&s)[kN], float mul, float cap) {
#pragma unroll
  for (int i = 0; i < kN; ++i) s[i] = cap * tanhf(s[i] * mul);
}

// The keys a thread's two rows (row0 and row0 + 8, sequence positions) admit: [lo[r], hi[r]],
// inclusive, under the bottom-right-aligned causal mask and the window.
struct RowWindow {
  int lo[2], hi[2];
};
__device__ __forceinline__ RowWindow row_window(const FwdParams& p, const SeqBounds& sb, int row0) {
  const int off = sb.kv_len - sb.q_len;
  RowWindow w;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    w.lo[r] = row0 + 8 * r + off - p.window_left;
    w.hi[r] = min(sb.kv_len - 1, row0 + 8 * r + off + p.window_right);
  }
  return w;
}

// Masks keys outside the rows' windows with -inf; col0 is the key index of this thread's first column
// (tile start + 2 * (lane % 4)).
template <int kN>
__device__ __forceinline__ void apply_mask(float (&s)[kN], int col0, const RowWindow& w) {
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int col = col0 + 8 * (i >> 2) + (i & 1);
    const int r = (i >> 1) & 1;
    if (col < w.lo[r] || col > w.hi[r]) s[i] = -INFINITY;
  }
}

// Row state of the online softmax: running max m (score units) and the thread's partial row sum l
// (the four threads of a quad hold disjoint columns; their sums are added at the end).
struct RowState {
  float m[2];
  float l[2];
  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }
  // A fresh state for this thread's two rows and their zeroed output accumulator.
  template <int kN>
  __device__ __forceinline__ void start(float (&o)[kN]) {
    init();
#pragma unroll
    for (int i = 0; i < kN; ++i) o[i] = 0.0f;
  }
};

// One step: folds the scores s of a new key tile into the row state, replaces s by the unnormalised
// probabilities exp2((s - m_new) * exp_scale + log2_gain) (a gain of 2^log2_gain, which the row sums
// carry too), and returns in corr the factor by which the output accumulated so far must be
// multiplied. Rows that have seen no admitted key keep m = -inf and produce p = 0 (the -inf - -inf
// case is avoided by using 0 as the subtrahend).
template <int kN>
__device__ __forceinline__ void softmax_step(float (&s)[kN], RowState& st, float exp_scale, float (&corr)[2],
                                             float log2_gain = 0.0f) {
  // Row maxima over four independent chains per row (one per 8-key block modulo 4), so the
  // dependent max instructions form chains of kN / 8 instead of one chain of kN / 2. max is
  // exact, so the result is the same as a single chain's.
  constexpr int kChains = kN >= 16 ? 4 : 1;
  float part[2][kChains];
#pragma unroll
  for (int k = 0; k < kChains; ++k) part[0][k] = part[1][k] = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    float& chain = part[(i >> 1) & 1][(i >> 2) % kChains];
    chain = fmaxf(chain, s[i]);
  }
  float mx[2];
  float shift[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m = st.m[r];
#pragma unroll
    for (int k = 0; k < kChains; ++k) m = fmaxf(m, part[r][k]);
    mx[r] = quad_max(m);
    shift[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * exp_scale;
    corr[r] = fast_exp2(st.m[r] * exp_scale - shift[r]);  // m_old = -inf gives 0
    st.m[r] = mx[r];
    shift[r] -= log2_gain;
  }
  // Row sums over the same four chains as the maxima (a single chain would be kN / 2 dependent adds).
  float sum[2][kChains];
#pragma unroll
  for (int k = 0; k < kChains; ++k) sum[0][k] = sum[1][k] = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int r = (i >> 1) & 1;
    s[i] = fast_exp2(fmaf(s[i], exp_scale, -shift[r]));
    sum[r][(i >> 2) % kChains] += s[i];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = sum[r][0];
#pragma unroll
    for (int k = 1; k < kChains; ++k) total += sum[r][k];
    st.l[r] = fmaf(st.l[r], corr[r], total);
  }
}

// The first tile of a row block: nothing accumulated yet, so no correction is needed.
template <int kN>
__device__ __forceinline__ void softmax_first(float (&s)[kN], RowState& st, float exp_scale) {
  float corr[2];
  softmax_step(s, st, exp_scale, corr);
}

// Finishes the rows: the full row sums, 1/l (0 for rows that saw no key) and the natural-log LSE
// (-inf for those rows; NaN for rows whose scores held a NaN). log2_gain: softmax_step's.
__device__ __forceinline__ void softmax_finish(RowState& st, float exp_scale, float (&inv)[2], float (&lse)[2],
                                               float log2_gain = 0.0f) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(st.l[r]);
    // l is 0 only for rows that saw no admitted key; a NaN score makes l NaN, and the row's output
    // and LSE must then be NaN too (as in plain attention), not the empty-row 0 and -inf.
    const bool any = l != 0.0f;
    inv[r] = any ? 1.0f / l : 0.0f;
    lse[r] = any ? (st.m[r] * exp_scale + __log2f(l) - log2_gain) * 0.69314718055994530942f : -INFINITY;
  }
}

// Packs consecutive pairs: word w holds s[2w] (low half) and s[2w + 1]. For the accumulator layout
// above, words 4k .. 4k + 3 are then exactly the A-operand registers of key block k (16 keys) of an
// m16n8k16 / m64nNk16 product.
template <class T, int kN>
__device__ __forceinline__ void pack_pairs(const float (&s)[kN], uint32_t (&p)[kN / 2]) {
#pragma unroll
  for (int w = 0; w < kN / 2; ++w) p[w] = pack2<T>(s[2 * w], s[2 * w + 1]);
}

// Packs a tile's probabilities (softmax_step's with a gain of 256: P <= 256 after the running maximum,
// below e4m3's 448, while small values keep their mantissa; the row sums carry the same gain, so 1 / l
// takes it out) as the e4m3 A operand of m64nNk32 products. Word 4g + w of key group g (32 keys) holds four
// values: rows r (w even) or r + 8 (w odd), from the n8 blocks 4g + 2 (w / 2) and 4g + 2 (w / 2) + 1.
// The operand expects keys 4 t .. 4 t + 3 of each 16 (t = lane % 4) where this thread holds 2t, 2t + 1,
// 8 + 2t, 9 + 2t: V's keys are stored in that order (fwd/fp8.cu), so the product is unchanged.
template <int kN>
__device__ __forceinline__ void pack_e4m3(const float (&s)[kN], uint32_t (&p)[kN / 4]) {
#pragma unroll
  for (int g = 0; g < kN / 16; ++g) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int a = 16 * g + 8 * (w / 2) + 2 * (w % 2);  // first value of the lower n8 block
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(s[a], s[a + 1]), __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(s[a + 4], s[a + 5]), __NV_SATFINITE, __NV_E4M3);
      p[4 * g + w] = lo | (hi << 16);
    }
  }
}

}  // namespace ak::attention::cuda
