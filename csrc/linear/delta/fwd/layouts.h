// Shared-memory layouts of the fast chunked forward, visible to the host (the planner checks them
// against the device's limit) and to the kernels.
#pragma once

#include "linear/common/padded.h"

namespace ak::linear::cuda::fwd {

// Stage 1 (prep.cuh), bytes. 56 KB for D = 128: four blocks an SM.
template <int D>
struct PrepLayout {
  static constexpr int kPitchD = tile_pitch(D);   // k and v tiles
  static constexpr int kPitchC = tile_pitch(64);  // Aw and Au (16-bit, 64 x 64)
  // Floats per row of the fp32 64 x 64 matrix: 68 puts eight consecutive rows in eight different
  // 16-byte bank groups (the solve reads float4s down a column of rows).
  static constexpr int kLd = 68;
  static constexpr int kK = 0;
  static constexpr int kV = kK + 64 * kPitchD;
  // L, then A in place (the solve's intermediates in its upper triangle), then (after a barrier) Aw
  // and Au as 16-bit tiles over L/A and the spare bytes after it, which they need.
  static constexpr int kLA = kV + 64 * kPitchD;
  static constexpr int kSpare = kLA + 64 * kLd * 4;
  static constexpr int kGate = kSpare + 3328;
  static constexpr int kBeta = kGate + 64 * 4;
  static constexpr int kRk = kBeta + 64 * 4;
  static constexpr int kBytes = kRk + 64 * 4;
  static_assert(2 * 64 * kPitchC <= kGate - kLA, "Aw and Au fit where L, A and R were");
};

// Stage 1 on Hopper (prep_sm90.cuh), bytes from a 1024-aligned base: k and v as 128-byte swizzled
// panels (the operands of K K^T, w = Aw K and u = Au V), the fp32 L / A of the solve, then Aw and Au as
// two swizzled 64 x 64 panels over it. 52 KB for D = 128: four blocks an SM.
template <int D>
struct PrepSm90Layout {
  static constexpr int kLd = PrepLayout<D>::kLd;
  static constexpr int kK = 0;
  static constexpr int kV = kK + 64 * 2 * D;
  static constexpr int kLA = kV + 64 * 2 * D;
  static constexpr int kGate = kLA + 64 * kLd * 4;
  static constexpr int kBeta = kGate + 64 * 4;
  static constexpr int kRk = kBeta + 64 * 4;
  static constexpr int kBytes = kRk + 64 * 4;
  static constexpr int kAlloc = kBytes + 1024;  // slack to align the base to the swizzle pattern
  static_assert(kLA % 1024 == 0 && 2 * 64 * 128 <= kGate - kLA, "Aw and Au panels fit where L and A were");
};

// Stage 2 on mma.sync (state_mma.cuh), bytes.
template <int D, int VT>
struct StateLayout {
  static constexpr int kStages = D <= 128 ? 2 : 1;  // buffers of q, w, u (k always has two)
  static constexpr int kPitchD = tile_pitch(D);
  static constexpr int kPitchV = tile_pitch(VT);
  static constexpr int kPitchC = tile_pitch(64);
  static constexpr int kTileD = 64 * kPitchD;
  static constexpr int kTileV = 64 * kPitchV;
  static constexpr int kQ = 0;
  static constexpr int kW = kQ + kStages * kTileD;
  static constexpr int kU = kW + kStages * kTileD;
  static constexpr int kK = kU + kStages * kTileV;
  static constexpr int kGate = kK + 2 * kTileD;  // [2][64] fp32 gate cumsum
  static constexpr int kRk = kGate + 2 * 64 * 4;  // [2][64] fp32 1/|k|
  static constexpr int kSb = kRk + 2 * 64 * 4;    // D x VT, 16-bit copy of S
  static constexpr int kP = kSb + D * kPitchV;    // 64 x 64
  static constexpr int kUb = kP + 64 * kPitchC;   // 64 x VT
  static constexpr int kUd = kUb + kTileV;        // 64 x VT
  static constexpr int kBytes = kUd + kTileV;
  // Warp tiles of (e): RB3 row blocks of 32 rows, CG3 column groups.
  static constexpr int kRB3 = D / 32;
  static constexpr int kCG3 = 8 / kRB3;
  static constexpr int kNT3 = VT / (8 * kCG3);  // n8 tiles per warp in (e)
  static constexpr int kNT1 = VT / 16;          // n8 tiles per warp in (b)
  static_assert(kBytes <= 227 * 1024, "shared memory of one block");
  static_assert(kNT1 % 2 == 0 && (kNT3 == 1 || kNT3 % 2 == 0), "n8 tiles come in pairs");
};

// Stage 2 on Hopper (state_wgmma.cuh and state_split.cuh), bytes from a 1024-aligned base. Every 16-bit
// tile is stored as 128-byte swizzled panels of 64 columns (the layout wgmma reads): element
// (r, c) of a tile with R rows lies at (c / 64) * 128 R + 128 r + 16 ((c % 64 / 8) ^ (r % 8)) + 2 (c % 8).
template <int D, int VT>
struct Sm90StateLayout {
  static constexpr int kSQ = D <= 128 ? 2 : 1;  // buffers of q, w, u (loaded after (c) when 1)
  static constexpr int kSK = 2;                 // buffers of k, gc, rk
  static constexpr int kTileD = 64 * 2 * D;     // [64, D]: q, k, w
  static constexpr int kTileV = 64 * 2 * VT;    // [64, VT]: u, U, Ud
  static constexpr int kQ = 0;
  static constexpr int kW = kQ + kSQ * kTileD;
  static constexpr int kU = kW + kSQ * kTileD;
  static constexpr int kK = kU + kSQ * kTileV;
  static constexpr int kSb = kK + kSK * kTileD;  // [D, VT] 16-bit copy of S (N-major for [W; Q] S)
  static constexpr int kUb = kSb + D * VT * 2;   // U = u - W S
  static constexpr int kUd = kUb + kTileV;       // U * rk * exp(gL - gc)
  static constexpr int kGate = kUd + kTileV;     // [kSK][64] fp32 gate cumsum
  static constexpr int kRk = kGate + kSK * 256;  // [kSK][64] fp32 1/|k|
  static constexpr int kBytes = kRk + kSK * 256;
  static constexpr int kAlloc = kBytes + 1024;  // slack to align the base to the swizzle pattern
  static_assert(VT % 64 == 0 && D % 128 == 0 && VT <= D, "panels of 64 columns, two warpgroups of S rows");
  static_assert(kAlloc <= 227 * 1024, "shared memory of one block");
};

// Stage 2 with the warpgroups split by role (state_split.cuh), kSlots = output warpgroups + 1.
// Bytes from a 1024-aligned base; tiles are 128-byte swizzled panels as in Sm90StateLayout.
// A V tile of 32 columns keeps whole 64-column panels (its columns 0 .. 31 used): one panel a
// [rows, VT] tile, so every address, TMA box and descriptor is that of VT 64.
template <int D, int VT, int kSlots>
struct Sm90SplitLayout {
  static constexpr int kPanelCols = VT < 64 ? 64 : VT;
  static constexpr int kTileD = 64 * 2 * D;
  static constexpr int kTileV = 64 * 2 * kPanelCols;
  static constexpr int kTileS = D * kPanelCols * 2;
  static constexpr int kQ = 0;                        // [kSlots]
  static constexpr int kK = kQ + kSlots * kTileD;     // [kSlots]
  static constexpr int kW = kK + kSlots * kTileD;     // [2] (chain only)
  // u is read by the chain only; double buffered where it fits, so chunk c + 1's u loads with its k and
  // w a whole step before it is read.
  static constexpr int kWithoutU =
      (2 * kSlots + 2) * kTileD + kSlots * kTileS + (kSlots + 1) * kTileV + 2 * kSlots * 256 + 64 + 1024;
  static constexpr int kUSlots = kWithoutU + 2 * kTileV <= 227 * 1024 ? 2 : 1;
  static constexpr int kU = kW + 2 * kTileD;              // [kUSlots] u (chain only)
  static constexpr int kSb = kU + kUSlots * kTileV;       // [kSlots] 16-bit S
  static constexpr int kUb = kSb + kSlots * kTileS;       // [kSlots] U = u - W S
  static constexpr int kUd = kUb + kSlots * kTileV;       // [1] U rk e^(gL - gc)
  static constexpr int kGate = kUd + kTileV;              // [kSlots][64] fp32
  static constexpr int kRk = kGate + kSlots * 256;        // [kSlots][64] fp32
  static constexpr int kLoadBar = kRk + kSlots * 256;  // [kSlots + 1] mbarriers of the TMA loads
  static constexpr int kBytes = kLoadBar + 64;
  static constexpr int kAlloc = kBytes + 1024;
  static_assert(D == 128 && (VT == 32 || VT % 64 == 0) && VT <= D, "the chain warpgroup holds D = 128 rows of S");
  static_assert(kAlloc <= 227 * 1024, "shared memory of one block");
};

}  // namespace ak::linear::cuda::fwd
