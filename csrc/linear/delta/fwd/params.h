// What the CUDA forward kernels of the delta rule receive: their parameter structs (host and device).
// The launchers are declared in linear/launchers.h; dispatch.cu fills these from the validated call.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_check.h"
#include "linear/common/chunk_map.cuh"
#include "linear/common/views.cuh"

namespace ak::linear::cuda::fwd {

// ---- general path: the token-by-token recurrence (any dtype, K and V up to 256) ----

template <class T>
struct RecurrentParams {
  Rows<const T> q, k, v;
  Rows<T> o;
  Scalars g, beta;  // g.p == nullptr: ungated
  const float* initial_state = nullptr;  // [N, H, K, V] or nullptr (zeros)
  float* final_state = nullptr;          // [N, H, K, V] or nullptr
  float* chunk_states = nullptr;         // [B, H, NC + 1, K, V] or nullptr (fixed length only)
  ChunkMap map;                          // sequences
  int N = 0, H = 0, group = 1, K = 0, V = 0;
  int C = 64, NC = 0;  // chunk_states interval and count
  float scale = 1.f;
  bool l2norm = false;
};

// ---- general path: the chunk-local WY factors Aw, Au in fp32 (fixed length) ----

template <class T>
struct WyParams {
  Rows<const T> k;
  Scalars g, beta;
  float *aw = nullptr, *au = nullptr;  // [B, H, T, C]
  int B = 0, tokens = 0, H = 0, group = 1, K = 0, C = 64, NC = 0;
  bool l2norm = false;
};

// ---- decode: one token per sequence ----

// S is the state's element type (float, or T).
template <class T, class S>
struct DecodeParams {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t q_sb = 0, q_sh = 0, k_sb = 0, k_sh = 0, v_sb = 0, v_sh = 0;
  const float *g = nullptr, *beta = nullptr;  // g == nullptr: ungated
  int64_t g_sb = 0, g_sh = 0, beta_sb = 0, beta_sh = 0;
  const S* state = nullptr;  // [B, H, K, V] contiguous
  S* new_state = nullptr;    // may equal state
  T* o = nullptr;
  int64_t o_sb = 0, o_sh = 0;
  int B = 0, H = 0, group = 1, K = 0, V = 0;
  float scale = 1.f;
  bool l2norm = false;
};

// ---- fast chunked path (bf16/f16, K = V = D in {64, 128, 256}, chunk 64) ----

constexpr int kFastChunk = 64;

// A [D, D] float32 state in device memory, element (r, c) at ptr[r rs + c cs]: the delta rule's own
// [K, V] rows (rs = D, cs = 1), or a pool slot's [V, K] (rs = 1, cs = D); a null ptr is no state.
template <class F>
struct StateAt {
  F* ptr = nullptr;
  int64_t rs = 0, cs = 1;
};
using StateIn = StateAt<const float>;
using StateOut = StateAt<float>;

// Stage 1, chunk-parallel: gate cumsum, scaled K K^T, (I + A)^-1, WY vectors w = Aw K, u = Au V.
template <class T>
struct PrepParams {
  Rows<const T> k, v;
  Scalars g, beta;
  ChunkMap map;
  T *w = nullptr, *u = nullptr;   // [chunks, H, C, D]
  float *gc = nullptr, *rk = nullptr;  // [chunks, H, C]: gate cumsum, 1 / |k| (rk only with l2norm)
  float *aw = nullptr, *au = nullptr;  // [B, H, T, C] or nullptr (fixed length only)
  // For the backward (DeltaFwd::saved), or null: A = (I + L)^-1 ([H][chunks * 64][64]) and w
  // ([H][chunks * 64][D]) in the fast backward's layouts.
  T *save_a = nullptr, *save_w = nullptr;
  int chunks = 0, H = 0, group = 1, tokens = 0;
  bool l2norm = false;
};

// What the split state kernel computes: the delta rule (u - w S), or without it (U = v) the scalar-decay
// linear family, plainly or each output row divided by its normaliser (linear attention's `normalize`).
enum class SplitPolicy { kDelta, kPlain, kNormalized };

// Stage 2, sequential over chunks per (sequence, head, V tile): the chunk state recurrence fused
// with the output (u - w S, O = Q S + P U, S <- decay S + K^T U).
template <class T>
struct StateParams {
  Rows<const T> q, k;
  Rows<const T> v;  // read in place of u by the kernels without the delta rule (the scalar-decay family)
  Rows<T> o;  // null: the split kernel's plain policy stores the states alone (save_chunks), no output
  const T *w = nullptr, *u = nullptr;
  const float *gc = nullptr, *rk = nullptr;
  const float* initial_state = nullptr;  // [N, H, D, D], or the pool
  float* final_state = nullptr;          // [N, H, D, D], or the pool
  float* chunk_states = nullptr;  // [B, H, NC + 1, D, D] (fixed length only)
  // A state pool (slots not null): initial_state and final_state both point at [pool_slots, H, D, D],
  // whose slots hold each head's state as [V, K]. Sequence n reads and writes slot slots[n] in place
  // (none when slots[n] <= 0 or >= pool_slots: padding), starting from zero where has_initial[n] is 0;
  // once `check` has failed (a captured call's device check), no slot is touched.
  const int32_t* slots = nullptr;
  const uint8_t* has_initial = nullptr;
  int64_t slot_stride = 0;
  int pool_slots = 0;
  const ak::cuda::DeviceCheck* check = nullptr;
  ChunkMap map;
  int N = 0, H = 0, group = 1;
  float scale = 1.f;
  bool l2norm = false;
  float norm_eps = 0.f;  // SplitPolicy::kNormalized: added to each row's normaliser
  float* inv_den = nullptr;  // SplitPolicy::kNormalized: 1 / normaliser per token and head [B, T, H], or null
  // wgmma kernels only. Segment jobs of the context-parallel stage 2 (seg_pass 0: one job per
  // sequence, the plain recurrence). Every sequence is cut into seg_count segments of seg_chunks
  // chunks (later ones may be short or empty), and with Pm = seg_count - 1:
  //   seg_pass 1: 2 Pm jobs per sequence: forward runs of segments 0 .. Pm - 1 (segment 0 from the
  //     initial state, writing its output; the others from zero, no output), end states to seg_fwd
  //     [N, H, Pm, D, D]; then transitions of segments 1 .. Pm (from the identity with u = 0, no
  //     output), to seg_tr [N, H, Pm, D, D]: S_end = M S_start + N for every segment.
  //   seg_pass 2: Pm jobs per sequence: segments 1 .. Pm from their entry states seg_entry
  //     [N, H, Pm, D, D], writing the output (the last one the final state).
  int seg_pass = 0, seg_count = 1, seg_chunks = 0;
  float *seg_fwd = nullptr, *seg_tr = nullptr;
  const float* seg_entry = nullptr;
  // wgmma kernels only: the chunks of the whole call when they save, for the backward, the 16-bit
  // state before every chunk and U = u - w S (SaveMaps; layouts of linear/saved_layout.h), else 0.
  int save_chunks = 0;
  // The same two parts as plain pointers ([H][chunks][D][D] and [H][chunks * 64][D]), for the split
  // kernel's 32-column tiles, which store them without the maps.
  T *save_hs = nullptr, *save_vs = nullptr;
};

// Tensor maps of the Hopper kernels' stores for the backward (StateParams::save_chunks): the states
// as [H * chunks * D, D] rows in boxes of 64 columns x D rows, U as [H * chunks * 64, D] in boxes
// of 64 x 64 (the fast backward's layouts).
struct SaveMaps {
  CUtensorMap hs, vs;
};

// Tensor maps of the split kernel's loads: q, k as [B, T, heads, D] and w, u as [chunks * H * 64, D],
// boxes of 64 columns x 64 rows (dispatch.cu encodes them for fixed-length calls).
struct SplitMaps {
  CUtensorMap q, k, w, u;
};

// What a state kernel's launcher receives: the kernel's parameters, and the tensor maps of the Hopper
// kernels (split: loads, null to load with cp.async; both: the stores for the backward, null when
// p.save_chunks is 0). The mma.sync kernel takes neither.
template <class T>
struct StateArgs {
  StateParams<T> p;
  const SplitMaps* maps = nullptr;
  const SaveMaps* save = nullptr;
};

// What the decode launcher receives: the parameters with an fp32 state; with state_f32 false the
// state is in the inputs' dtype (its pointers are read as T).
template <class T>
struct DecodeArgs {
  DecodeParams<T, float> p;
  bool state_f32 = true;
};

// Whether every row of a decode's state and new state starts on 16 bytes (their bases and V elements of
// elem bytes): what the tile kernel's copies need.
inline bool decode_rows_aligned(const void* state, const void* new_state, int64_t V, size_t elem) {
  return reinterpret_cast<uintptr_t>(state) % 16 == 0 && reinterpret_cast<uintptr_t>(new_state) % 16 == 0 &&
         (static_cast<size_t>(V) * elem) % 16 == 0;
}

// The same parameters with the state read and written in the inputs' dtype.
template <class T>
DecodeParams<T, T> state_in_input_dtype(const DecodeParams<T, float>& p) {
  DecodeParams<T, T> h;
  h.q = p.q, h.k = p.k, h.v = p.v;
  h.q_sb = p.q_sb, h.q_sh = p.q_sh, h.k_sb = p.k_sb, h.k_sh = p.k_sh, h.v_sb = p.v_sb, h.v_sh = p.v_sh;
  h.g = p.g, h.beta = p.beta;
  h.g_sb = p.g_sb, h.g_sh = p.g_sh, h.beta_sb = p.beta_sb, h.beta_sh = p.beta_sh;
  h.state = reinterpret_cast<const T*>(p.state);
  h.new_state = reinterpret_cast<T*>(p.new_state);
  h.o = p.o, h.o_sb = p.o_sb, h.o_sh = p.o_sh;
  h.B = p.B, h.H = p.H, h.group = p.group, h.K = p.K, h.V = p.V;
  h.scale = p.scale;
  h.l2norm = p.l2norm;
  return h;
}

}  // namespace ak::linear::cuda::fwd
