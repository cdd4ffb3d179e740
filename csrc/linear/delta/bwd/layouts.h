// Shared-memory layouts of the tensor-core backward's stages, visible to the host (the planner checks
// them against the device's limit) and to the kernels. Element types are 16-bit; the structs take
// the kernels' element type, and uint16_t on the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ak::linear::cuda::bwd {

constexpr int kFastC = 64;

// ---- states (states.cuh): the chunk tiles, double-buffered, then the 16-bit state slice ----

template <class T, int D, int VS>
struct StatesBuf {
  T W[kFastC * (D + 8)];
  T K[kFastC * (D + 8)];
  T U[kFastC * (VS + 8)];
  float gc[kFastC];
};

template <int D, int VS>
constexpr size_t states_smem() {
  return 2 * sizeof(StatesBuf<uint16_t, D, VS>) + 2 * D * (VS + 8);
}

// ---- dstates (dstates.cuh): one or two sets of input tiles, the dh slice and dv_new ----

template <class T, int D, int VS>
struct DStatesTiles {
  T K[kFastC * (D + 8)];
  T Q[kFastC * (D + 8)];
  T W[kFastC * (D + 8)];
  T P[kFastC * (kFastC + 8)];
  T dO[kFastC * (VS + 8)];
  float gc[kFastC];
};

// Sets of input tiles: two (double buffering) where they fit.
template <int D>
constexpr int dstates_sets() {
  return D == 256 ? 1 : 2;
}

template <class T, int D, int VS>
struct DStatesSmem {
  DStatesTiles<T, D, VS> in[dstates_sets<D>()];
  T dh[D * (VS + 8)];
  T dU[kFastC * (VS + 8)];
  float qf[kFastC];  // scale e^gc of the current chunk
};

template <int D, int VS>
constexpr size_t dstates_smem() {
  return sizeof(DStatesSmem<uint16_t, D, VS>);
}

// ---- dstates with the chain on wgmma (dstates_split.cuh), bytes from a 1024-aligned base ----
// Two slots of chunk tiles (k, w, q as [64, D], P [64, 64], dO and dO scaled by the query factors as
// [64, VS]) in 128-byte swizzled panels, a VS-column tile keeping whole 64-column panels; then the
// chain's 16-bit dh ([D, VS]) and -dv_new ([64, VS]) tiles, which the helper copies out.
template <int D, int VS>
struct DStatesSplitLayout {
  static constexpr int kPanelCols = VS < 64 ? 64 : VS;
  static constexpr int kTileD = kFastC * 2 * D;          // k, w, q
  static constexpr int kTileC = kFastC * 2 * 64;         // P
  static constexpr int kTileV = kFastC * 2 * kPanelCols;  // dO, dOs, -dv_new
  static constexpr int kK = 0;
  static constexpr int kW = kK + kTileD;
  static constexpr int kQ = kW + kTileD;
  static constexpr int kP = kQ + kTileD;
  static constexpr int kDO = kP + kTileC;
  static constexpr int kDOs = kDO + kTileV;
  static constexpr int kGate = kDOs + kTileV;
  static constexpr int kSlot = kGate + 1024;  // a slot's bytes (the gates' 256 padded to keep tiles aligned)
  static constexpr int kDh = 2 * kSlot;
  static constexpr int kDv = kDh + D * 2 * kPanelCols;
  static constexpr int kBytes = kDv + kTileV;
  static constexpr int kAlloc = kBytes + 1024;
  static_assert(D == 128 && (VS == 32 || VS == 64), "the chain warpgroup holds D = 128 rows of dh");
  static_assert(kSlot % 1024 == 0 && kAlloc <= 227 * 1024, "aligned slots in one block's shared memory");
};

// ---- grads (grads.cuh, grads256.cuh) ----

// Whether the gradient stage keeps two K buffers (D = 128: one block per multiprocessor
// either way; at D = 64 a second buffer would cost the second block).
template <int D>
constexpr bool grads_two_k() {
  return D == 128;
}

// Column parts of the fused gradient stage's warps (4 x WC warps a block): 4 at D = 128 (16 warps, one
// block per multiprocessor), 2 at D = 64 (8 warps, two blocks).
template <int D>
constexpr int grads_wc() {
  return D == 128 ? 4 : 2;
}

// Shared memory of the fused gradient stage (grads.cuh), bytes.
template <int D>
constexpr size_t fast_grads_smem() {
  constexpr int WC = grads_wc<D>();
  return 2 * (6 * kFastC * (D + 8) + 2 * D * (D + 8) + 3 * kFastC * (kFastC + 8)) +
         sizeof(float) * (4 * kFastC + 8 * WC * kFastC + 4 * kFastC + 4 * WC + kFastC) +
         (grads_two_k<D>() ? 2 * kFastC * (D + 8) : 0);
}

// ---- grads with its products on wgmma (grads_sm90.cuh), D = 128, bytes from a 1024-aligned base ----
// Every 16-bit tile in 128-byte swizzled panels of 64 rows: q (dw once q is dead), k (two buffers,
// alternating items), v, dO, v_new, dv_new as [64, 128]; h and dh' as [128, 128], i.e. two [64, 128]
// tiles each (rows 0-63, 64-127); A and the two 64 x 64 scratch tiles; then the fp32 rows (gates, the
// per-warpgroup partial row sums).
struct GradsSm90Layout {
  static constexpr int kTile = kFastC * 2 * 128;
  static constexpr int kSquare = kFastC * 2 * kFastC;
  static constexpr int kQ = 0;
  static constexpr int kK0 = kQ + kTile;
  static constexpr int kK1 = kK0 + kTile;
  static constexpr int kV = kK1 + kTile;
  static constexpr int kDO = kV + kTile;
  static constexpr int kU = kDO + kTile;
  static constexpr int kDU = kU + kTile;
  static constexpr int kH = kDU + kTile;
  static constexpr int kDH = kH + 2 * kTile;
  static constexpr int kA = kDH + 2 * kTile;
  static constexpr int kT1 = kA + kSquare;
  static constexpr int kT2 = kT1 + kSquare;
  static constexpr int kFloats = kT2 + kSquare;
  // gc, e^gc, e^(gl - gc), beta; seven [4][64] row sums; [4][64] column sums; 16 <h, dh'> parts; dgc;
  // [4][64] k.dk at the end.
  static constexpr int kFloatCount = 4 * kFastC + 7 * 4 * kFastC + 4 * kFastC + 16 + kFastC + 4 * kFastC;
  static constexpr int kBytes = kFloats + 4 * kFloatCount;
  static constexpr int kAlloc = kBytes + 1024;
  static_assert(kAlloc <= 227 * 1024, "one block's shared memory");
};

// Shared memory of the two gradient kernels at D = 256 (grads256.cuh): the first
// (over V) holds dO, v_new, dv_new and three 64 x D buffers, the second (over K) Q, K, dw.
constexpr size_t fast_grads256_smem_v() {
  return 2 * (6 * kFastC * (256 + 8) + kFastC * (kFastC + 8)) + sizeof(float) * (6 * kFastC + 8);
}
constexpr size_t fast_grads256_smem_k() {
  return 2 * (3 * kFastC * (256 + 8) + 3 * kFastC * (kFastC + 8)) + sizeof(float) * (23 * kFastC + 8);
}

}  // namespace ak::linear::cuda::bwd
