// What the gated linear family's CUDA kernels read: token-major views, the decays of a call and where
// the per-chunk states go. Shared by the forward, the backward and their host dispatch.
#pragma once

#include <cstdint>

#include "linear/common/chunk_map.cuh"
#include "linear/common/views.cuh"
#include "linear/gla/layouts.h"

namespace ak::linear::cuda::gla {

using namespace ::ak::linear::gla_layout;

// The decays of a call, natural log, each absent = 0: per key channel, per token, per head.
struct Decays {
  Rows<const float> gk;  // [B, T, H, K]; p == nullptr when absent
  Scalars g;             // [B, T, H]
  const float* gamma = nullptr;  // [H]
};

// Per-chunk states [(chunks + N), H, K, V] (fp32, or the inputs' 16-bit type for the backward's own
// slots): sequence n's chunk c is entry first_chunk(n) + n + c (one more entry per sequence than it has
// chunks: the state after its last chunk). Without cu_seqlens this is the forward's chunk_states
// layout [B, NT + 1, H, K, V]. With by_head > 0 the slots are instead the split state kernel's
// [H][by_head = the call's chunks][K][V] (saved_layout.h's states), which holds no state after the last
// chunk: read only the states before chunks.
template <class E>
struct Slots {
  E* p = nullptr;
  int H = 0, K = 0, V = 0;
  int by_head = 0;
  __device__ __forceinline__ E* at(int first_chunk, int n, int c, int h) const {
    const int64_t entry = by_head > 0 ? static_cast<int64_t>(h) * by_head + first_chunk + c
                                      : (static_cast<int64_t>(first_chunk) + n + c) * H + h;
    return p + entry * K * V;
  }
};
using StateSlots = Slots<float>;

// The final states [N, H, K, V] fp32 inside a larger buffer: sequence n, head h at
// p + n * n_stride + h * K * V.
struct FinalStates {
  const float* p = nullptr;
  int64_t n_stride = 0;
  __device__ __forceinline__ const float* at(int n, int h, int K, int V) const {
    return p + n * n_stride + static_cast<int64_t>(h) * K * V;
  }
};

template <class T>
struct FwdParams {
  Rows<const T> q, k, v;
  Rows<T> o;                  // null with states_only
  Decays d;
  ChunkMap map;
  const float* initial_state = nullptr;  // [N, H, K, V]
  float* final_state = nullptr;          // [N, H, K, V]
  StateSlots states;                     // fp32 chunk_states; p == nullptr: not stored
  Slots<T> states16;                     // the backward's 16-bit slots; p == nullptr: not stored
  int N = 0, H = 0, group = 1, K = 0, V = 0;
  float scale = 1.f;
};

// What the prep kernels hand to the state pass, per (chunk, value head) slot g * H + h, 16-bit unless
// said: kd = K exp(gL - gc), qd = scale Q exp(gc) (each [64][KD]), the causal scores p ([64][64]),
// el = exp(gL) (fp32 [KD]), and for the delta rule (KDA) w = A diag(beta) K exp(gc) ([64][KD]) and
// u = A diag(beta) V ([64][Vp]). KD: K padded; Vp: V padded to the 64-column tile.
template <class T>
struct ChunkOperands {
  T *w = nullptr, *kd = nullptr, *qd = nullptr, *u = nullptr, *p = nullptr;
  float* el = nullptr;
  // KDA's backward: A (fp32 [64][64]), and the pass's Vn and the reverse pass's dVn ([64][Vp] each).
  float* a32 = nullptr;
  T *vn = nullptr, *dvn = nullptr;
  int H = 0, KD = 0, Vp = 0;
  __host__ __device__ int64_t slot(int g, int h) const { return static_cast<int64_t>(g) * H + h; }
};

// The split forward's arguments (prep.cuh, pass.cuh).
template <class T>
struct SplitParams {
  FwdParams<T> f;
  ChunkOperands<T> ops;
  int chunks = 0;  // of the whole call (the prep kernel's grid)
};

template <class T>
struct BwdParams {
  Rows<const T> q, k, v, dout;
  Rows<T> dq, dk, dv;                 // group == 1: written directly
  float *ws_dq = nullptr, *ws_dk = nullptr;  // group > 1: fp32 [B, T, HK, K] contiguous, accumulated
  Decays d;
  ChunkMap map;
  Slots<T> states;     // S before each chunk (16-bit, the operand type of the products)
  Slots<T> dstates;    // dS after each chunk (slot c = after chunk c), 16-bit
  FinalStates final_states;  // S after each sequence, fp32 (the decays' gradient term)
  const float* d_final_state = nullptr;  // [N, H, K, V]
  float* d_initial_state = nullptr;      // [N, H, K, V]
  Rows<float> dG;      // [B, T, H, K] (channel) or [B, T, H] as sb/st/sh with K = 1 (scalar)
  float* chunk_sums = nullptr;  // [chunks, H, W] column sums of dG per chunk
  // Normalised linear attention (normaliser.cuh), the ones column's share: dD per token and value head
  // ([B, T, H]), the key sums before each chunk ([chunks][HK][K]) and the scaled sums of dD q after it
  // ([chunks][H][K]); norm_dd null otherwise.
  const float *norm_dd = nullptr, *norm_z = nullptr, *norm_q = nullptr;
  int N = 0, H = 0, group = 1, K = 0, V = 0, chunks = 0;
  float scale = 1.f;
};


// One decode step (decode.cuh): [B, heads, D] views with a contiguous last dimension.
template <class T>
struct DecodeParams {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t qb = 0, qh = 0, kb = 0, kh = 0, vb = 0, vh = 0;  // strides of [B, heads, D] (last dim contiguous)
  const float* gk = nullptr;
  int64_t gkb = 0, gkh = 0;
  const float* g = nullptr;
  int64_t gb = 0, gh = 0;
  const float* gamma = nullptr;
  const float* state = nullptr;
  float* new_state = nullptr;
  T* o = nullptr;
  int64_t ob = 0, oh = 0;
  int B = 0, H = 0, group = 1, K = 0, V = 0;
  float scale = 1.f;
};

}  // namespace ak::linear::cuda::gla
