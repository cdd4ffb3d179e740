// The per-chunk stages of the gated linear family on CUDA, shared by its forward and backward: chunk
// tile loads, the decay cumsum (per key channel or per token) and the causal intra-chunk scores
//   P_ij = scale sum_c q_ic k_jc exp(gc_ic - gc_jc)   (j <= i)
// with gc the decay cumulated within the chunk. A per-channel decay cannot be split into a row and a
// column factor without overflow (a gate of -20 over a few tokens leaves fp32's range), so the scores
// are formed per 16 x 16 block: off the diagonal with the cumulated decay taken relative to the first
// row of the block row (both factors then have exponents <= 0) on tensor cores, on the diagonal
// pair by pair in fp32. A scalar decay factors exactly: P = (Q K^T) * exp(gc_i - gc_j).
#pragma once

#include "linear/common/warp_tiles.cuh"
#include "linear/gla/cuda/params.h"

namespace ak::linear::cuda::gla {

// The warp tiling of a state tile (KD x 64 of S or dS, fp32 in registers): KD >= 128: warp w owns
// rows [w KD/8, (w+1) KD/8), all 64 columns; KD = 64: rows 16 (w % 4), columns 32 (w / 4).
template <int KD>
struct StateTiles {
  static constexpr int MT = KD >= 128 ? KD / 128 : 1;
  static constexpr int NT = KD >= 128 ? 8 : 4;
  __device__ static int row0(int warp) { return KD >= 128 ? warp * (KD / 8) : 16 * (warp & 3); }
  __device__ static int col0(int warp) { return KD >= 128 ? 0 : 32 * (warp >> 2); }
};

// A warp's part of the state tile of columns [v0, v0 + 64) from / to a row-major [K, V] fp32 matrix
// (entries past K or V read as zero, are not written); store16 writes the 16-bit copy (V % 8 == 0,
// so a pair is in or out as a whole).
template <int KD>
struct StateTile {
  using ST = StateTiles<KD>;
  float (&S)[ST::MT][ST::NT][4];
  int r0, c0, lane, K, V, v0;

  __device__ void load(const float* src) const {
    for_acc_pairs(S, r0, c0, lane, [&](int r, int c, float* v) {
      v[0] = r < K && v0 + c < V ? src[static_cast<int64_t>(r) * V + v0 + c] : 0.f;
      v[1] = r < K && v0 + c + 1 < V ? src[static_cast<int64_t>(r) * V + v0 + c + 1] : 0.f;
    });
  }
  __device__ void store(float* dst) const {
    for_acc_pairs(S, r0, c0, lane, [&](int r, int c, float* v) {
      if (r < K && v0 + c < V) dst[static_cast<int64_t>(r) * V + v0 + c] = v[0];
      if (r < K && v0 + c + 1 < V) dst[static_cast<int64_t>(r) * V + v0 + c + 1] = v[1];
    });
  }
  template <class T>
  __device__ void store16(T* dst) const {
    for_acc_pairs(S, r0, c0, lane, [&](int r, int c, float* v) {
      if (r < K && v0 + c < V) {
        *reinterpret_cast<uint32_t*>(dst + static_cast<int64_t>(r) * V + v0 + c) = pack2<T>(v[0], v[1]);
      }
    });
  }
  // The 16-bit copy in shared memory (row pitch pitch16(kVTile)), the operand of the products.
  template <class T>
  __device__ void to_smem(T* Ss) const {
    for_acc_pairs(S, r0, c0, lane, [&](int r, int c, float* v) {
      *reinterpret_cast<uint32_t*>(Ss + r * pitch16(kVTile) + c) = pack2<T>(v[0], v[1]);
    });
  }
};

// Loads rows [0, 64) x [0, KD) of a token-major view (batch row b, tokens t0.., head) into a shared tile:
// rows >= len and columns >= width are zero-filled. width % 8 == 0; all threads take part.
template <class T, int KD>
__device__ __forceinline__ void load_rows(T* s, const Rows<const T>& src, int b, int t0, int len, int head,
                                          int width, int tid) {
  constexpr int kPer = KD / 8;  // 16-byte pieces per row
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 8;
    T* dst = s + r * pitch16(KD) + c;
    if (r < len && c < width) {
      cp_async16(dst, src.row(b, t0 + r, head) + c);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// The same for a V tile: columns [v0, v0 + kVTile) of the view, zero past width.
template <class T>
__device__ __forceinline__ void load_vtile(T* s, const Rows<const T>& src, int b, int t0, int len, int head, int v0,
                                           int width, int tid) {
  constexpr int kPer = kVTile / 8;
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 8;
    T* dst = s + r * pitch16(kVTile) + c;
    if (r < len && v0 + c < width) {
      cp_async16(dst, src.row(b, t0 + r, head) + v0 + c);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }
}

// Stage 1: the cumulated log decay of a chunk. kChannel: gc [64][pitch_gc(KD)] per key channel (gk's
// rows loaded raw into gc first by load_gk); else gc [64] per token. Rows past len add nothing, so
// gc's last row is the decay of the whole chunk. Ends with a barrier.
template <int KD>
__device__ __forceinline__ void load_gk(float* gc, const Decays& d, int b, int t0, int len, int h, int K, int tid) {
  constexpr int kPer = KD / 4;
  for (int e = tid; e < kChunk * kPer; e += kThreads) {
    const int r = e / kPer, c = (e - r * kPer) * 4;
    float* dst = gc + r * pitch_gc(KD) + c;
    if (r < len && c < K) {
      cp_async16(dst, d.gk.row(b, t0 + r, h) + c);
    } else {
      *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// Thread tid's per-token decay (g + gamma) of a chunk, 0 past len or for tid >= 64: read ahead of its
// chunk by the kernels that keep the next chunk in flight.
__device__ __forceinline__ float token_decay(const Decays& d, int b, int t0, int len, int h, int tid) {
  if (tid >= len || tid >= kChunk) return 0.f;
  return d.g.at(b, t0 + tid, h) + (d.gamma ? d.gamma[h] : 0.f);
}

// gate_cumsum with thread tid's token_decay already read.
template <int KD, bool kChannel>
__device__ __forceinline__ void gate_cumsum_of(float* gc, float* gs, float token, int tid) {
  // gs[t]: the per-token part (g + gamma), 0 past len. Written after the caller's cp.async wait.
  if (tid < kChunk) gs[tid] = token;
  __syncthreads();
  if constexpr (kChannel) {
    if (tid < KD) {
      float acc = 0.f;
#pragma unroll 8
      for (int t = 0; t < kChunk; ++t) {
        acc += gc[t * pitch_gc(KD) + tid] + gs[t];
        gc[t * pitch_gc(KD) + tid] = acc;
      }
    }
  } else {
    if (tid < 32) {
      const float lo = warp_inclusive_scan(gs[tid], tid);
      const float hi = warp_inclusive_scan(gs[tid + 32], tid) + __shfl_sync(0xffffffffu, lo, 31);
      gc[tid] = lo;
      gc[tid + 32] = hi;
    }
  }
  __syncthreads();
}

template <int KD, bool kChannel>
__device__ __forceinline__ void gate_cumsum(float* gc, float* gs, const Decays& d, int b, int t0, int len, int h,
                                            int tid) {
  gate_cumsum_of<KD, kChannel>(gc, gs, token_decay(d, b, t0, len, h, tid), tid);
}

// The state passes' chunk ring (FwdLayout's stages): chunk c's rows (k for the states, q for dstates)
// and V tile (v, or dO) of one sequence, value head and V tile go to stage c % kStages, its per-token decay
// to a register (per key channel: the raw gates into gc). With two stages the walk's next chunk is in
// flight while this one's products run.
template <class T, int KD, bool kChannel>
struct ChunkRing {
  using Lay = FwdLayout<KD, kChannel>;
  unsigned char* smem;
  Rows<const T> rows_src, tile_src;
  const Decays& d;
  float* gc;
  int row, begin, end, hk, h, v0, K, V, tid;

  __device__ unsigned char* stage(int c) const { return smem + (c % Lay::kStages) * Lay::kStage; }
  __device__ T* rows(int c) const { return reinterpret_cast<T*>(stage(c) + Lay::kRows); }
  __device__ T* tile(int c) const { return reinterpret_cast<T*>(stage(c) + Lay::kVt); }

  // Starts chunk c's loads (one cp.async group) and reads its per-token decay into `token`.
  __device__ void issue(int c, float& token) const {
    const int t0 = begin + c * kChunk, len = min(kChunk, end - t0);
    load_rows<T, KD>(rows(c), rows_src, row, t0, len, hk, K, tid);
    load_vtile<T>(tile(c), tile_src, row, t0, len, h, v0, V, tid);
    if constexpr (kChannel) load_gk<KD>(gc, d, row, t0, len, h, K, tid);
    cp_async_commit();
    token = token_decay(d, row, t0, len, h, tid);
  }
  // Before the walk: with two stages, its first chunk's loads.
  __device__ void start(int first, float& next) const {
    if (Lay::kStages > 1 && first >= 0) issue(first, next);
  }
  // Chunk c's tiles are ready when this returns. One stage: c is loaded now. Two: c was issued a step
  // earlier (its decay taken from `next`), and `following` (the walk's next chunk, -1 at its end) is
  // issued into the other stage before the wait.
  __device__ void step(int c, int following, float& token, float& next) const {
    if constexpr (Lay::kStages == 1) {
      issue(c, token);
      cp_async_wait<0>();
    } else {
      token = next;
      if (following >= 0) {
        issue(following, next);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    }
  }
};

// The cumulated decay of row t, channel c (a scalar decay ignores c).
template <int KD, bool kChannel>
__device__ __forceinline__ float gc_at(const float* gc, int t, int c) {
  if constexpr (kChannel) {
    return gc[t * pitch_gc(KD) + c];
  } else {
    return gc[t];
  }
}

// The pairs of the four diagonal 16 x 16 blocks of a chunk's causal scores, lower triangles with their
// diagonals (4 x 136): pair e is rows ri >= rj of block e / 136.
constexpr int kDiagonalPairs = 4 * 136;
__device__ __forceinline__ void diagonal_pair(int e, int& ri, int& rj) {
  const int blk = e / 136, idx = e - blk * 136;
  int i = static_cast<int>((sqrtf(8.f * idx + 1.f) - 1.f) * 0.5f);
  if ((i + 1) * (i + 2) / 2 <= idx) ++i;
  if (i * (i + 1) / 2 > idx) --i;
  ri = 16 * blk + i;
  rj = 16 * blk + idx - i * (i + 1) / 2;
}

// Stores one or two adjacent score entries as PT (the operand type T, or fp32).
template <class T, class PT>
__device__ __forceinline__ void store_score2(PT* dst, float a, float b) {
  if constexpr (sizeof(PT) == 4) {
    dst[0] = a;
    dst[1] = b;
  } else {
    *reinterpret_cast<uint32_t*>(dst) = pack2<T>(a, b);
  }
}
template <class T, class PT>
__device__ __forceinline__ void store_score(PT* dst, float a) {
  if constexpr (sizeof(PT) == 4) {
    *dst = a;
  } else {
    *dst = from_float<T>(a);
  }
}

// Stage 2: P (64 x 64 of PT, 16-bit by default, row pitch kPLd) = the causal scores, zero above the
// diagonal. Q, K: raw tiles [64][pitch16(KD)]. X: a scratch tile [64][pitch16(KD)] (per-channel decay
// only). Ends with a barrier.
template <class T, int KD, bool kChannel, class PT = T, int kPLd = pitch16(64)>
__device__ __forceinline__ void intra_scores(PT* P, const T* Q, const T* K, const float* gc, T* X, float scale,
                                             int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
  if constexpr (!kChannel) {
    float acc[1][4][4];
    zero_acc(acc);
    warp_mma<T, 1, 4, false, false>(acc, Q, pitch16(KD), m0, K, pitch16(KD), n0, KD, lane);
    for_acc_pairs(acc, m0, n0, lane, [&](int r, int c, float* v) {
      const float a = c <= r ? scale * __expf(gc[r] - gc[c]) * v[0] : 0.f;
      const float b2 = c + 1 <= r ? scale * __expf(gc[r] - gc[c + 1]) * v[1] : 0.f;
      store_score2<T>(P + r * kPLd + c, a, b2);
    });
    __syncthreads();
  } else {
    // Diagonal blocks, pair by pair.
    for (int e = tid; e < kDiagonalPairs; e += kThreads) {
      int ri, rj;
      diagonal_pair(e, ri, rj);
      const T* qi = Q + ri * pitch16(KD);
      const T* kj = K + rj * pitch16(KD);
      const float* gi = gc + ri * pitch_gc(KD);
      const float* gj = gc + rj * pitch_gc(KD);
      float s = 0.f;
#pragma unroll 4
      for (int c = 0; c < KD; c += 2) {
        const float2 a = unpack2<T>(*reinterpret_cast<const uint32_t*>(qi + c));
        const float2 bb = unpack2<T>(*reinterpret_cast<const uint32_t*>(kj + c));
        s += a.x * bb.x * __expf(gi[c] - gj[c]) + a.y * bb.y * __expf(gi[c + 1] - gj[c + 1]);
      }
      store_score<T>(P + ri * kPLd + rj, scale * s);
      if (ri != rj) store_score<T>(P + rj * kPLd + ri, 0.f);
    }
    // Blocks above the diagonal blocks' rows: zero (blocks (I, J), J > I, other than diagonal pairs).
    for (int e = tid; e < 64 * 64; e += kThreads) {
      const int r = e >> 6, c = e & 63;
      if ((c >> 4) > (r >> 4)) store_score<T>(P + r * kPLd + c, 0.f);
    }
    // Off-diagonal block rows I = 1..3: X rows [0, 16 I) = k_j exp(gc_r - gc_j), X rows [48, 64) =
    // q_i exp(gc_i - gc_r) for the 16 rows of block row I, r = 16 I.
    for (int I = 1; I < 4; ++I) {
      const int r = 16 * I;
      const float* gr = gc + r * pitch_gc(KD);
      for (int e = tid; e < (r + 16) * (KD / 2); e += kThreads) {
        const int row = e / (KD / 2), c = (e - row * (KD / 2)) * 2;
        if (row < r) {
          const float2 kk = unpack2<T>(*reinterpret_cast<const uint32_t*>(K + row * pitch16(KD) + c));
          const float* gj = gc + row * pitch_gc(KD);
          *reinterpret_cast<uint32_t*>(X + row * pitch16(KD) + c) =
              pack2<T>(kk.x * __expf(gr[c] - gj[c]), kk.y * __expf(gr[c + 1] - gj[c + 1]));
        } else {
          const int qi = row;  // rows r .. r + 15 of the chunk, stored at X rows 48 + (qi - r)
          const float2 qq = unpack2<T>(*reinterpret_cast<const uint32_t*>(Q + qi * pitch16(KD) + c));
          const float* gi = gc + qi * pitch_gc(KD);
          *reinterpret_cast<uint32_t*>(X + (48 + qi - r) * pitch16(KD) + c) =
              pack2<T>(qq.x * __expf(gi[c] - gr[c]), qq.y * __expf(gi[c + 1] - gr[c + 1]));
        }
      }
      __syncthreads();
      // I tiles of 16 x 16 (J = 0 .. I - 1), one warp each.
      if (warp < I) {
        const int J = warp;
        float acc[1][2][4];
        zero_acc(acc);
        warp_mma<T, 1, 2, false, false>(acc, X, pitch16(KD), 48, X, pitch16(KD), 16 * J, KD, lane);
        for_acc_pairs(acc, 0, 0, lane, [&](int rr, int cc, float* v) {
          store_score2<T>(P + (r + rr) * kPLd + 16 * J + cc, scale * v[0], scale * v[1]);
        });
      }
      __syncthreads();
    }
  }
}

}  // namespace ak::linear::cuda::gla
