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

}  // namespace ak::linear::kda_layout
