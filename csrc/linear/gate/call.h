// One gate-transform call as the backends see it (checked by gate/entries.cpp): raw's leading dims
// as rows (walked together with the other row tensors, any strides), the channels of a row (H heads,
// or H x D per channel: channel c is head c / D, column c % D, dt_bias[c]), and the split of the rows
// that fixes the order of the backward's sums.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/common.h"
#include "core/numeric.h"
#include "math/element.h"
#include "math/walk.h"

namespace ak::linear::gate {

// Channel strides of a row tensor: head, column (0 per head).
struct Channels {
  int64_t h = 0, d = 0;
  AK_HD int64_t at(int64_t head, int64_t col) const { return head * h + col * d; }
};

// The offsets of row r in each of N row tensors; a single merged dim (contiguous leading dims)
// without divisions.
template <int N>
AK_HD void row_offsets(const math::Walk<N>& w, int64_t r, int64_t (&off)[N]) {
  if (w.rank <= 1) {
    for (int k = 0; k < N; ++k) off[k] = w.rank == 0 ? 0 : r * w.strides[k][0];
    return;
  }
  w.offsets(r, off);
}

template <class T>
AK_HD float load(const void* p, int64_t at) {
  return static_cast<float>(math::Elem<T>::load(static_cast<const T*>(p)[at]));
}
template <class T>
AK_HD void store(void* p, int64_t at, float v) {
  static_cast<T*>(p)[at] = math::Elem<T>::store(v);
}

struct Shape {
  int64_t rows = 0;      // the product of raw's leading dims
  int64_t heads = 0;     // H
  int64_t columns = 1;   // D per channel, 1 per head
  int64_t channels = 0;  // H * D
  bool per_channel = false;
};

struct Settings {
  bool bounded = false;
  bool fast = false;
  float lower_bound = 0.f;
};

// gate = transform(raw + dt_bias), float32.
struct ForwardArgs {
  Shape shape;
  Settings settings;
  math::Walk<2> rows;  // raw, gate
  Channels raw_ch, gate_ch;
  const void* raw = nullptr;
  int32_t raw_dtype = AK_FLOAT32;
  float* gate = nullptr;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  int device = 0;
};

// d_raw (raw's dtype), d_a_log [H] and d_dt_bias [channels] for the loss sum(d_gate * gate).
struct BackwardArgs {
  Shape shape;
  Settings settings;
  math::Walk<3> rows;  // raw, d_gate, d_raw
  Channels raw_ch, dg_ch, draw_ch;
  const void* raw = nullptr;
  int32_t raw_dtype = AK_FLOAT32;
  const float* d_gate = nullptr;
  void* d_raw = nullptr;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  float* d_a_log = nullptr;
  float* d_dt_bias = nullptr;
  int device = 0;
};

// The split of rows x channels into blocks: `tile` channels (a power of 2 up to 256) by
// `rows_per_chunk` rows, `row_lanes` = 256 / tile threads down the rows of a tile. The backward sums
// every chunk's rows into a partial per channel, then the partials in chunk order: the split is a
// function of the shape alone, so the sums' order, and their bits, are the same on every run.
struct Tiling {
  int tile = 1;
  int row_lanes = 256;
  int64_t rows_per_chunk = 0;
  int64_t chunks = 0;
  int64_t channel_tiles = 0;
};

constexpr int kThreads = 256;
// At most this many partials per channel (the partial buffers stay small next to the tensors).
constexpr int64_t kMaxChunks = 1024;

inline Tiling tiling_of(const Shape& s) {
  Tiling t;
  while (t.tile < kThreads && t.tile < s.channels) t.tile *= 2;
  t.row_lanes = kThreads / t.tile;
  t.rows_per_chunk = std::max<int64_t>({int64_t{4} * t.row_lanes, 32, (s.rows + kMaxChunks - 1) / kMaxChunks});
  t.chunks = s.rows == 0 ? 0 : (s.rows + t.rows_per_chunk - 1) / t.rows_per_chunk;
  t.channel_tiles = (s.channels + t.tile - 1) / t.tile;
  return t;
}

// ---- the vector path (gate/cuda_vec.cuh) ----

// Channels per thread in the vector path: one 16-byte load of a 16-bit row, two of a float32 one.
constexpr int kVec = 8;
// Groups of kVec channels across a block (a warp spans a row segment of up to 256 channels).
constexpr int kVecMaxTileGroups = 32;
// The vector path aims at this many blocks (chunks x channel tiles) so every SM holds several.
constexpr int64_t kVecTargetBlocks = 1024;

// The vector path's split: `tile_groups` groups of kVec channels (a power of 2 up to 32) by
// `rows_per_chunk` rows, `row_lanes` = 256 / tile_groups threads down the rows. A function of the
// shape alone (never of the device), like Tiling, so the backward's sums keep their order.
struct VecTiling {
  int tile_groups = 1;
  int row_lanes = kThreads;
  int64_t groups = 0;  // channels / kVec
  int64_t rows_per_chunk = 1;
  int64_t chunks = 0;
  int64_t channel_tiles = 0;
};

inline VecTiling vec_tiling_of(const Shape& s) {
  VecTiling t;
  t.groups = s.channels / kVec;
  while (t.tile_groups < kVecMaxTileGroups && t.tile_groups < t.groups) t.tile_groups *= 2;
  t.row_lanes = kThreads / t.tile_groups;
  t.channel_tiles = (t.groups + t.tile_groups - 1) / t.tile_groups;
  if (s.rows == 0 || t.groups == 0) return t;
  // Enough chunks for kVecTargetBlocks blocks, at least one row per thread (so never more chunks
  // than that, which also bounds the partials to about kVecTargetBlocks x 256 channels).
  const int64_t want_chunks = std::max<int64_t>(1, (kVecTargetBlocks + t.channel_tiles - 1) / t.channel_tiles);
  const int64_t span = t.row_lanes * want_chunks;  // rows at one row per thread
  const int64_t lane_rows = std::max<int64_t>(1, (s.rows + span - 1) / span);
  t.rows_per_chunk = lane_rows * t.row_lanes;
  t.chunks = (s.rows + t.rows_per_chunk - 1) / t.rows_per_chunk;
  return t;
}

// Whether the row tensors suit the vector path: a row's channels contiguous (channel c at offset c),
// the rows one merged dim (row r at r x stride), the channels a multiple of kVec, and every base
// pointer and row stride a multiple of 16 bytes. `bytes` are the tensors' element sizes.
template <int N>
bool vector_layout(const Shape& s, const math::Walk<N>& w, const Channels (&ch)[N], const void* const (&base)[N],
                   const int64_t (&bytes)[N]) {
  if (s.channels == 0 || s.channels % kVec != 0 || w.rank > 1) return false;
  for (int k = 0; k < N; ++k) {
    if (s.columns > 1 && ch[k].d != 1) return false;
    if (s.heads > 1 && ch[k].h != s.columns) return false;
    const int64_t row = w.rank == 1 ? w.strides[k][0] : 0;
    if (reinterpret_cast<uintptr_t>(base[k]) % 16 != 0 || (row * bytes[k]) % 16 != 0) return false;
  }
  return true;
}

// A row tensor's row stride (elements) in a walk of rank 0 or 1.
template <int N>
int64_t row_stride(const math::Walk<N>& w, int k) {
  return w.rank == 1 ? w.strides[k][0] : 0;
}

// Calls fn.template operator()<T>() with raw's storage type.
template <class F>
void with_raw_type(int32_t dtype, F&& fn) {
  switch (dtype) {
    case AK_FLOAT16: fn(f16_t{}); break;
    case AK_BFLOAT16: fn(bf16_t{}); break;
    case AK_FLOAT64: fn(double{}); break;
    default: fn(float{});
  }
}

// Calls fn(bool_constant<fast>, bool_constant<bounded>).
template <class F>
void with_settings(const Settings& s, F&& fn) {
  using F0 = std::false_type;
  using T1 = std::true_type;
  if (s.fast) {
    if (s.bounded) fn(T1{}, T1{});
    else fn(T1{}, F0{});
  } else {
    if (s.bounded) fn(F0{}, T1{});
    else fn(F0{}, F0{});
  }
}

}  // namespace ak::linear::gate
