// The tiled attention block with each warp walking its own keys in registers: no shared memory and no
// barrier until the end. A lane owns eight head-dim columns (one 16-byte load of K and one of V per key),
// so D / 8 lanes read one key and a warp reads 32 / (D / 8) keys at a time; each lane group reads
// kUnroll keys a step (all the step's loads issued before any product, which keeps 8 KB a warp in flight),
// forms its partial dot products, sums them across the group (the one collective step), then updates its
// rows' online softmax and accumulators. At the end the groups of a warp merge their (max, sum,
// accumulators), the four warps merge through shared memory, and the block writes through its Source.
//
// As with block.h, the CPU backends run the same phases: lane by lane, with the collective steps (the sum
// across a lane group, the merges) done over the lanes' arrays where the device shuffles registers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "attention/tiled/block.h"

// Every loop over a lane's registers is unrolled on the device (an indexed register array would live in
// local memory).
#ifdef __CUDACC__
#define AK_WARP_UNROLL _Pragma("unroll")
#else
#define AK_WARP_UNROLL
#endif

namespace ak::attention::tiled {

constexpr int kWarpBlockWarps = kThreads / 32;
constexpr int kLaneCols = 8;
// The most query rows the warp block holds (a lane keeps 8 q values and 8 accumulators per row).
constexpr int kWarpRows = 8;

// The rows of an instance for R query rows: R rounded up to 1, 2, 4 or 8 (0: more than the block holds).
inline int warp_rows(int64_t R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : R <= kWarpRows ? 8 : 0; }

// Whether the warp block serves a call: block.h's dtypes and head dims, at most 8 query rows.
inline bool warp_serves(int32_t dtype, int64_t D, int64_t R) {
  return (dtype == AK_FLOAT16 || dtype == AK_BFLOAT16) && (D == 64 || D == 128 || D == 256) && R >= 1 &&
         R <= kWarpRows;
}

// One lane's registers: its columns of the q rows and of the accumulators, and its group's statistics.
template <int kR>
struct WarpLane {
  float q[kR][kLaneCols];
  float acc[kR][kLaneCols];
  float m[kR], l[kR];
  int64_t last[kR];  // the row's last visible key position (Source::last_visible; -1 for rows past R)
};

// A lane's loads and partial products of one step.
template <int kR, int kUnroll>
struct WarpStep {
  Words v[kUnroll];
  bool valid[kUnroll];
  float dot[kUnroll][kR];
};

// exp on the multifunction unit on the device (ex2.approx, a few ulp: the probabilities are rounded to the
// operands' 16 bits in the other blocks' P V anyway), the C library's on the host.
AK_HD float fast_exp(float x) {
#ifdef __CUDA_ARCH__
  return __expf(x);
#else
  return expf(x);
#endif
}

// tanh for the softcap: on the device (1 - e^{-2|x|}) / (1 + e^{-2|x|}) with x's sign, a few instructions
// and a few ulp; the C library's on the host.
AK_HD float fast_tanh(float x) {
#ifdef __CUDA_ARCH__
  const float e = __expf(-2.f * fabsf(x));
  return copysignf(__fdividef(1.f - e, 1.f + e), x);
#else
  return tanhf(x);
#endif
}

// The merge of two (max, sum, accumulators) results of the same rows: into (m, l, a) from (mo, lo, ao).
AK_HD void merge_partial(float& m, float& l, float* a, float mo, float lo, const float* ao, int n) {
  const float top = m > mo ? m : mo;
  const float x = m == -INFINITY ? 0.f : fast_exp(m - top), y = mo == -INFINITY ? 0.f : fast_exp(mo - top);
  l = l * x + lo * y;
  AK_WARP_UNROLL
  for (int j = 0; j < n; j++) a[j] = a[j] * x + ao[j] * y;
  m = top;
}

// Thread t's share of the merge over the block's warps, whose results lie in `smem` as `rows` rows a warp
// (row r of warp w at [w][r]: max, sum, then D accumulators): output column pairs (r, c) through the Source,
// then the rows' statistics.
template <class Source, int kD>
AK_HD void merge_warps(const Source& src, const float* smem, int rows, int t) {
  for (int64_t e = t; e < src.R * (kD / 2); e += kThreads) {
    const int r = static_cast<int>(e / (kD / 2)), c = 2 * static_cast<int>(e % (kD / 2));
    float m = -INFINITY, l = 0.f, a[2] = {0.f, 0.f};
    AK_WARP_UNROLL
    for (int w = 0; w < kWarpBlockWarps; w++) {
      const float* at = smem + (w * rows + r) * (kD + 2);
      merge_partial(m, l, a, at[0], at[1], at + 2 + c, 2);
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    src.write(r, c, a[0] * inv, a[1] * inv);
  }
  if (t < src.R) {
    float m = -INFINITY, l = 0.f;
    AK_WARP_UNROLL
    for (int w = 0; w < kWarpBlockWarps; w++) {
      const float* at = smem + (w * rows + t) * (kD + 2);
      merge_partial(m, l, nullptr, at[0], at[1], nullptr, 0);
    }
    src.stats(t, m, l);
  }
}

// kDtype fixes the operands' dtype at compile time (the kernels' instances: one conversion in the code, not
// both behind a branch); 0 reads it from the Source (the host runs).
template <class Source, int kD, int kR, int kDtype = 0>
struct WarpBlock {
  static constexpr int kLanes = kD / kLaneCols;     // lanes reading one key
  static constexpr int kGroups = 32 / kLanes;       // keys a warp reads at once
  static constexpr int kUnroll = kR <= 2 ? 8 : 4;   // keys a lane group reads a step
  static constexpr int kStep = kGroups * kUnroll;   // keys a warp reads a step
  using Lane = WarpLane<kR>;
  using Step = WarpStep<kR, kUnroll>;

  const Source& src;
  AK_HD explicit WarpBlock(const Source& source) : src(source) {}

  // Shared memory of the final merge: per warp and row, the max, the sum and the D accumulators.
  AK_HD static int64_t shared_bytes() { return 4 * kWarpBlockWarps * kR * (kD + 2); }

  AK_HD int32_t dtype() const { return kDtype != 0 ? kDtype : src.dtype; }
  AK_HD static int group(int lane) { return lane / kLanes; }
  AK_HD static int column(int lane) { return kLaneCols * (lane % kLanes); }

  // Before the first step: the lane's q columns (rows past R read as zeros), the statistics reset.
  AK_HD void start(int lane, Lane& st) const {
    const int c = column(lane);
    AK_WARP_UNROLL
    for (int r = 0; r < kR; r++) {
      AK_WARP_UNROLL
      for (int j = 0; j < kLaneCols; j++) {
        st.q[r][j] = r < src.R ? element(src.q, dtype(), src.q_at(r) + c + j) : 0.f;
        st.acc[r][j] = 0.f;
      }
      st.m[r] = -INFINITY, st.l[r] = 0.f;
      st.last[r] = r < src.R ? src.last_visible(r) : -1;
    }
  }

  // The first key of warp w's step n: steps go round the warps, kStep keys each.
  AK_HD int64_t step_start(int w, int64_t n) const { return src.begin + (n * kWarpBlockWarps + w) * kStep; }

  // The step's loads (every one issued before any product) and the lane's partial dot products.
  AK_HD void load_and_dot(int lane, int64_t first, const Lane& st, Step& s) const {
    const int c = column(lane);
    Words k[kUnroll];
    AK_WARP_UNROLL
    for (int u = 0; u < kUnroll; u++) {
      const int64_t pos = first + u * kGroups + group(lane);
      const int64_t row = pos < src.end ? src.row(pos) : -1;
      s.valid[u] = row >= 0;
      k[u] = Words{}, s.v[u] = Words{};
      if (row >= 0) {
        const int64_t at = (row * src.Hkv + src.hk) * kD + c;
        k[u] = words(src.k, at), s.v[u] = words(src.v, at);
      }
    }
    AK_WARP_UNROLL
    for (int u = 0; u < kUnroll; u++) {
      float kf[kLaneCols];
      AK_WARP_UNROLL
      for (int w = 0; w < 4; w++) pair(k[u].w[w], dtype(), kf[2 * w], kf[2 * w + 1]);
      AK_WARP_UNROLL
      for (int r = 0; r < kR; r++) {
        float d = 0.f;
        AK_WARP_UNROLL
        for (int j = 0; j < kLaneCols; j++) d += st.q[r][j] * kf[j];
        s.dot[u][r] = d;
      }
    }
  }

  // With the dot products summed over the lane group: the scores (scaled, capped, masked, in place of the
  // products), the rows' new maxima, the accumulators rescaled, then this step's P V a key at a time (each
  // V row widened once for all the rows).
  AK_HD void update(int lane, int64_t first, Lane& st, Step& s) const {
    float top[kR];
    AK_WARP_UNROLL
    for (int r = 0; r < kR; r++) {
      top[r] = st.m[r];
      AK_WARP_UNROLL
      for (int u = 0; u < kUnroll; u++) {
        const int64_t pos = first + u * kGroups + group(lane);
        float x = -INFINITY;
        if (s.valid[u] && pos <= st.last[r]) {
          x = s.dot[u][r] * src.scale;
          if (src.softcap > 0.f) x = src.softcap * fast_tanh(x / src.softcap);
        }
        s.dot[u][r] = x;
        top[r] = x > top[r] ? x : top[r];
      }
      // Nothing visible yet: the row stays as it was (its probabilities below are 0).
      const float alpha = st.m[r] == -INFINITY || top[r] == -INFINITY ? 1.f : fast_exp(st.m[r] - top[r]);
      st.l[r] *= alpha;
      AK_WARP_UNROLL
      for (int j = 0; j < kLaneCols; j++) st.acc[r][j] *= alpha;
      st.m[r] = top[r];
    }
    AK_WARP_UNROLL
    for (int u = 0; u < kUnroll; u++) {
      float vf[kLaneCols];
      AK_WARP_UNROLL
      for (int w = 0; w < 4; w++) pair(s.v[u].w[w], dtype(), vf[2 * w], vf[2 * w + 1]);
      AK_WARP_UNROLL
      for (int r = 0; r < kR; r++) {
        const float p = s.dot[u][r] == -INFINITY ? 0.f : fast_exp(s.dot[u][r] - top[r]);
        st.l[r] += p;
        AK_WARP_UNROLL
        for (int j = 0; j < kLaneCols; j++) st.acc[r][j] += p * vf[j];
      }
    }
  }

  // The warp's result to shared memory (lanes of group 0, after the groups merged): row r of warp w at
  // [w][r]: max, sum, then D accumulators.
  AK_HD void stash(float* smem, int w, int lane, const Lane& st) const {
    if (group(lane) != 0) return;
    AK_WARP_UNROLL
    for (int r = 0; r < kR; r++) {
      float* at = smem + (w * kR + r) * (kD + 2);
      if (lane == 0) at[0] = st.m[r], at[1] = st.l[r];
      AK_WARP_UNROLL
      for (int j = 0; j < kLaneCols; j++) at[2 + column(lane) + j] = st.acc[r][j];
    }
  }

  // Thread t's share of the final merge over the warps.
  AK_HD void finish(const float* smem, int t) const { merge_warps<Source, kD>(src, smem, kR, t); }

  // The whole block on the host: each warp's lanes step by step, the collective steps over the lanes.
  void run_on_host() const {
    std::vector<float> smem(static_cast<size_t>(shared_bytes() / 4));
    std::vector<Lane> lanes(32);
    std::vector<Step> step(32);
    for (int w = 0; w < kWarpBlockWarps; w++) {
      for (int lane = 0; lane < 32; lane++) start(lane, lanes[lane]);
      for (int64_t first = step_start(w, 0); first < src.end; first += kWarpBlockWarps * kStep) {
        for (int lane = 0; lane < 32; lane++) load_and_dot(lane, first, lanes[lane], step[lane]);
        // The sum across each lane group (the device's butterfly of shuffles).
        for (int g = 0; g < kGroups; g++) {
          for (int u = 0; u < kUnroll; u++) {
            for (int r = 0; r < kR; r++) {
              float sum = 0.f;
              for (int i = 0; i < kLanes; i++) sum += step[g * kLanes + i].dot[u][r];
              for (int i = 0; i < kLanes; i++) step[g * kLanes + i].dot[u][r] = sum;
            }
          }
        }
        for (int lane = 0; lane < 32; lane++) update(lane, first, lanes[lane], step[lane]);
      }
      // The groups' merge, as the device's butterfly: lane x takes lane x ^ off's result.
      for (int off = kLanes; off < 32; off *= 2) {
        const std::vector<Lane> before = lanes;
        for (int lane = 0; lane < 32; lane++) {
          const Lane& o = before[lane ^ off];
          for (int r = 0; r < kR; r++) {
            merge_partial(lanes[lane].m[r], lanes[lane].l[r], lanes[lane].acc[r], o.m[r], o.l[r], o.acc[r],
                          kLaneCols);
          }
        }
      }
      for (int lane = 0; lane < 32; lane++) stash(smem.data(), w, lane, lanes[lane]);
    }
    for (int t = 0; t < kThreads; t++) finish(smem.data(), t);
  }

#ifdef __CUDACC__
  __device__ void run_on_device(float* smem) const {
    const int w = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    Lane st;
    start(lane, st);
    for (int64_t first = step_start(w, 0); first < src.end; first += kWarpBlockWarps * kStep) {
      Step s;
      load_and_dot(lane, first, st, s);
      AK_WARP_UNROLL
      for (int off = kLanes / 2; off > 0; off /= 2) {
        AK_WARP_UNROLL
        for (int u = 0; u < kUnroll; u++) {
          AK_WARP_UNROLL
          for (int r = 0; r < kR; r++) s.dot[u][r] += __shfl_xor_sync(0xffffffffu, s.dot[u][r], off);
        }
      }
      update(lane, first, st, s);
    }
    AK_WARP_UNROLL
    for (int off = kLanes; off < 32; off *= 2) {
      AK_WARP_UNROLL
      for (int r = 0; r < kR; r++) {
        const float mo = __shfl_xor_sync(0xffffffffu, st.m[r], off);
        const float lo = __shfl_xor_sync(0xffffffffu, st.l[r], off);
        float ao[kLaneCols];
        AK_WARP_UNROLL
        for (int j = 0; j < kLaneCols; j++) ao[j] = __shfl_xor_sync(0xffffffffu, st.acc[r][j], off);
        merge_partial(st.m[r], st.l[r], st.acc[r], mo, lo, ao, kLaneCols);
      }
    }
    stash(smem, w, lane, st);
    __syncthreads();
    finish(smem, static_cast<int>(threadIdx.x));
  }
#endif
};

}  // namespace ak::attention::tiled

#undef AK_WARP_UNROLL
