// What every CUDA backward kernel of softmax attention receives, and the index arithmetic they share:
// sequence bounds, which query tiles a key tile meets (and the reverse, for the deterministic dQ
// order), where a row lives in the fp32 scratch buffers. Plain C++ so that the host launcher and the
// device kernels agree on one definition.
//
// The scratch buffers (all fp32, head-major, rows padded per sequence to whole 64-row tiles):
//   lse_log2 [Hq][acc_rows]     the forward's LSE times log2(e); +inf where the LSE is -inf and on
//                               padding rows, so that exp2(score - lse_log2) is 0 there
//   dsum     [Hq][acc_rows]     D_i = rowsum(dO_i * O_i); 0 on padding rows
//   dq_accum [Hq][acc_rows][D]  dQ / sm_scale accumulated over key tiles (layout: see DqLayout)
// Sequence n's row i sits at scratch row acc_row0(n) + i; each sequence starts on a tile boundary.
#pragma once

#include <cstdint>

#include "attention/fwd/params.h"  // kWindowUnlimited, AK_ATTN_HD

namespace ak::attention::cuda {

// Query rows per tile in every backward path; the scratch padding unit.
constexpr int kBwdTileM = 64;

// How a 64-row tile of dq_accum is ordered. Plain: row-major [64][D]. Hopper fragments: two chunks
// of 64 x D/2 floats (one per consumer warpgroup), each in the order the warpgroup's m64n(D/2) wgmma
// accumulator leaves its registers, so that the kernel's stores to shared memory are conflict-free
// 16-byte writes and one bulk reduction adds the chunk to global memory (see dq_frag_index).
// Hopper full: one chunk of 64 x D floats in the order of an m64nD accumulator (the v2 kernel, whose
// consumers each add a whole tile with 16-byte vector reductions from registers).
enum class DqLayout : int { kPlain = 0, kHopperFragments = 1, kHopperFull = 2 };

struct BwdParams : CallParams {
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;

  // Element strides, as CallParams's.
  int64_t o_batch = 0, o_row = 0, o_head = 0;
  int64_t do_batch = 0, do_row = 0, do_head = 0;
  int64_t dq_batch = 0, dq_row = 0, dq_head = 0;
  int64_t dk_batch = 0, dk_row = 0, dk_head = 0;
  int64_t dv_batch = 0, dv_row = 0, dv_head = 0;
  int64_t lse_batch = 0, lse_head = 0;  // the row stride of the LSE is 1

  int tq = 0, tkv = 0;  // varlen: packed query / key rows (the tensors' first dimension)

  // Scratch (see the top of this file).
  float* lse_log2 = nullptr;
  float* dsum = nullptr;
  float* dq_accum = nullptr;
  int* dq_semaphore = nullptr;  // deterministic order: one counter per (head, 64-row tile); else null
  int64_t acc_rows = 0;         // scratch rows per head
  int sq_pad = 0;               // dense: scratch rows per sequence (sq rounded up to a tile)
  DqLayout dq_layout = DqLayout::kPlain;
};

struct BwdSeq {
  int q_off, q_len;    // first row of the sequence in q/o/dO/dq (0 when dense), its length
  int kv_off, kv_len;
  int64_t acc_row0;    // its first scratch row
};

#ifdef __CUDACC__
__device__ __forceinline__ BwdSeq bwd_seq(const BwdParams& p, int n) {
  if (p.cu_q != nullptr) {
    const int q0 = p.cu_q[n], q1 = p.cu_q[n + 1];
    const int k0 = p.cu_kv[n], k1 = p.cu_kv[n + 1];
    return {q0, q1 - q0, k0, k1 - k0, static_cast<int64_t>(q0 / kBwdTileM + n) * kBwdTileM};
  }
  return {0, p.sq, 0, p.skv, static_cast<int64_t>(n) * p.sq_pad};
}
#endif

// Scratch rows per head: dense N * round_up(Sq, 64); varlen (Tq / 64 + N) * 64, which leaves every
// sequence acc_row0(n) = (cu_q[n] / 64 + n) * 64 room for its whole tiles.
inline int64_t bwd_acc_rows(bool varlen, int64_t n_seq, int64_t sq, int64_t total_q) {
  if (varlen) return (total_q / kBwdTileM + n_seq) * kBwdTileM;
  return n_seq * ((sq + kBwdTileM - 1) / kBwdTileM * kBwdTileM);
}

// An inclusive range of tile indices; empty when lo > hi.
struct TileRange {
  int lo, hi;
};

// Query tiles (of block_m rows) that meet key tile [j0, j0 + block_n) of a sequence: rows i whose
// admitted keys [i + off - left, i + off + right] touch the tile, with off = kv_len - q_len. Both
// window edges move right with i, so the rows form one interval.
AK_ATTN_HD TileRange query_tiles(int j0, int block_n, int block_m, int q_len, int kv_len, int left, int right) {
  const int64_t off = static_cast<int64_t>(kv_len) - q_len;
  const int64_t j1 = (j0 + block_n < kv_len ? j0 + block_n : kv_len) - 1;
  int64_t first = static_cast<int64_t>(j0) - right - off;
  int64_t last = j1 + left - off;
  if (first < 0) first = 0;
  if (last > q_len - 1) last = q_len - 1;
  if (j0 >= kv_len || first > last) return {0, -1};
  return {static_cast<int>(first / block_m), static_cast<int>(last / block_m)};
}

// Key tiles (of block_n keys) that meet query tile [i0, i0 + block_m): the mirror of query_tiles, so
// key tile n visits query tile m exactly when m is in query_tiles(n) and n in key_tiles(m).
AK_ATTN_HD TileRange key_tiles(int i0, int block_m, int block_n, int q_len, int kv_len, int left, int right) {
  const int64_t off = static_cast<int64_t>(kv_len) - q_len;
  const int64_t i1 = (i0 + block_m < q_len ? i0 + block_m : q_len) - 1;
  int64_t first = static_cast<int64_t>(i0) + off - left;
  int64_t last = i1 + off + right;
  if (first < 0) first = 0;
  if (last > kv_len - 1) last = kv_len - 1;
  if (i0 >= q_len || first > last) return {0, -1};
  return {static_cast<int>(first / block_n), static_cast<int>(last / block_n)};
}

// Whether every (row, key) of query tile [i0, i0 + block_m) x key tile [j0, j0 + block_n) is
// admitted (inside both sequences and the window), so the tile can skip per-element masking.
AK_ATTN_HD bool tile_fully_admitted(int i0, int block_m, int j0, int block_n, int q_len, int kv_len, int left,
                                    int right) {
  if (i0 + block_m > q_len || j0 + block_n > kv_len) return false;
  const int64_t off = static_cast<int64_t>(kv_len) - q_len;
  // The tightest rows: the last row's left edge and the first row's right edge.
  const int64_t lo = static_cast<int64_t>(i0) + block_m - 1 + off - left;
  const int64_t hi = static_cast<int64_t>(i0) + off + right;
  return j0 >= lo && j0 + block_n - 1 <= hi;
}

// Index, within a 64 x W chunk of a Hopper-fragment dq_accum tile, of element (row r, col c < W):
// the chunk holds W / 8 slabs (j = c / 8) of 128 threads x 4 floats; thread (warp r / 16, lane 4 g + t)
// holds rows g and g + 8 of its warp's 16 at columns 8j + 2t and 8j + 2t + 1 (the wgmma m64nNk16
// accumulator layout, registers 4j .. 4j + 3).
AK_ATTN_HD int dq_frag_index(int r, int c) {
  const int warp = r >> 4, hi = (r >> 3) & 1, g = r & 7;
  const int j = c >> 3, t = (c & 7) >> 1, e = c & 1;
  const int thread = warp * 32 + g * 4 + t;
  return ((j * 128 + thread) << 2) + hi * 2 + e;
}

// The main backward kernels' launcher arguments.
struct BwdArgs {
  BwdParams p;
  int device = 0;
};

}  // namespace ak::attention::cuda
