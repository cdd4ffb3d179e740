// Shared-memory layout of KDA's prep kernel (kda/cuda/prep.cuh) and the sizes of the per-chunk operands
// it hands to the state pass: plain constants, so the planner
// (host code, also in the CPU build) can tell whether they fit a GPU. KD: K padded to 64 or 128.
#pragma once

#include "linear/gla/layouts.h"

namespace ak::linear::kda_layout {

using gla_layout::kChunk;
using gla_layout::kThreads;
using gla_layout::kVTile;
using gla_layout::pitch16;
using gla_layout::pitch_gc;

constexpr int kLd = 68;  // row pitch (floats) of the fp32 64 x 64 tile the triangular solve works on

// The prep kernel: a block per (chunk, value head). Regions reused once their first tenant is done:
// the scores' tile takes A once the scores are stored; the solve's fp32 tile takes the V tiles. At
// K <= 128 it fits two blocks per multiprocessor.
template <int KD>
struct PrepLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kQ = 0;            // q, then scale q exp(gc)
  static constexpr int kK = kQ + kTile;   // k, then k exp(gL - gc)
  static constexpr int kX = kK + kTile;   // the scores' scratch, then beta k exp(gc)
  static constexpr int kP = kX + kTile;   // the causal q k scores, then A (16-bit)
  static constexpr int kLA = kP + kChunk * pitch16(64) * 2;  // L, then A (fp32), then a V tile
  static constexpr int kGc = kLA + kChunk * kLd * 4;
  static constexpr int kGs = kGc + kChunk * pitch_gc(KD) * 4;
  static constexpr int kBeta = kGs + kChunk * 4;
  static constexpr int kBytes = kBeta + kChunk * 4;
  static constexpr int kMinBlocks = 2;
};

// The state pass is the family's (gla_layout::PassLayout<KD, true>).
using gla_layout::PassLayout;

using gla_layout::Operands;

// The backward's reverse state pass (dstates.cuh): a block per (sequence, value head, V tile).
template <int KD>
struct DStatesLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kVT = kChunk * pitch16(kVTile) * 2;
  static constexpr int kKd = 0;
  static constexpr int kQd = kKd + kTile;
  static constexpr int kW = kQd + kTile;
  static constexpr int kP = kW + kTile;
  static constexpr int kO = kP + kVT;                           // dO tile
  static constexpr int kDVn = kO + kVT;                         // dVn tile
  static constexpr int kDS = kDVn + kVT;                        // dS (16-bit copy) KD x 64
  static constexpr int kEl = kDS + KD * pitch16(kVTile) * 2;
  static constexpr int kBytes = kEl + KD * 4;
};

// The backward's gradient kernel (grads.cuh): a block per (chunk, value head). What lives through the
// whole block, then region R: first the V-tile operands, then the fp32 [64][KD + 8] arrays of dqd, dkd
// and dX (dX's space holds the 16-bit dw and X before dX is formed).
template <int KD>
struct GradsLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kVT = kChunk * pitch16(kVTile) * 2;
  static constexpr int kF = KD + 8;                             // row pitch (floats) of the fp32 arrays
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTile;
  static constexpr int kGc = kK + kTile;
  static constexpr int kGs = kGc + kChunk * pitch_gc(KD) * 4;
  static constexpr int kBeta = kGs + kChunk * 4;
  static constexpr int kDBeta = kBeta + kChunk * 4;
  static constexpr int kDel = kDBeta + kChunk * 4;              // sum_v S dS per key channel
  static constexpr int kDgl = kDel + KD * 4;                    // the gradient of gL per key channel
  static constexpr int kA = kDgl + KD * 4;                      // A fp32 [64][kLd], then its 16-bit halves
  static constexpr int kHalves = 2 * kChunk * pitch16(64) * 2;  // a 64 x 64 tile as hi + lo
  static constexpr int kDP = kA + (kHalves > kChunk * kLd * 4 ? kHalves : kChunk * kLd * 4);  // dP fp32 [64][65]
  static constexpr int kDL = kDP + kChunk * 65 * 4;             // dL fp32 [64][65]
  static constexpr int kR = kDL + kChunk * 65 * 4;
  // Once dL is formed, [kA, kR) holds 16-bit dP and dL and the cross-block operands of the score terms.
  static_assert(2 * kChunk * pitch16(64) * 2 + 5 * 16 * pitch16(KD) * 2 <= kR - kA, "score operands fit");
  // Region R, first use: the V-tile operands.
  static constexpr int kS = kR;                                 // S tile KD x 64
  static constexpr int kDS = kS + KD * pitch16(kVTile) * 2;     // dS tile
  static constexpr int kO = kDS + KD * pitch16(kVTile) * 2;     // dO
  static constexpr int kVn = kO + kVT;
  static constexpr int kDVn = kVn + kVT;
  static constexpr int kVb = kDVn + kVT;                        // beta V
  static constexpr int kTilesEnd = kVb + kVT;
  // Region R, second use.
  static constexpr int kDqd = kR;
  static constexpr int kDkd = kDqd + kChunk * kF * 4;
  static constexpr int kDX = kDkd + kChunk * kF * 4;            // first dw (16-bit) and X (16-bit)
  static constexpr int kX16 = kDX + kTile;
  static constexpr int kSplit = kX16;                           // then dA's and T1's halves
  static constexpr int kArraysEnd =
      kDX + kChunk * kF * 4 > kSplit + kHalves ? kDX + kChunk * kF * 4 : kSplit + kHalves;
  static_assert(2 * kTile <= kChunk * kF * 4, "dw and X fit dX's space");
  static constexpr int kBytes = kTilesEnd > kArraysEnd ? kTilesEnd : kArraysEnd;
};

}  // namespace ak::linear::kda_layout
