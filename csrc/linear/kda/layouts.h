// Shared-memory layouts of KDA's chunked forward (kda/cuda/prep.cuh, kda/cuda/fwd.cuh) and the sizes
// of the per-chunk operands the first kernel hands to the second: plain constants, so the planner
// (host code, also in the CPU build) can tell whether they fit a GPU. KD: K padded to 64 or 128.
#pragma once

#include <cstdint>

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

// The state pass: a block per (sequence, value head, V tile); its chunk operands double-buffered.
template <int KD>
struct StateLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kVT = kChunk * pitch16(kVTile) * 2;
  static constexpr int kW = 0;             // w = A diag(beta) K exp(gc)
  static constexpr int kKd = kW + kTile;   // k exp(gL - gc)
  static constexpr int kQd = kKd + kTile;  // scale q exp(gc)
  static constexpr int kU = kQd + kTile;   // u = A diag(beta) V, the block's V tile
  static constexpr int kP = kU + kVT;      // the causal scores
  static constexpr int kEl = kP + kVT;     // exp(gL) per key channel, fp32
  static constexpr int kStage = kEl + KD * 4;
  static constexpr int kS = 2 * kStage;    // S (16-bit copy) KD x 64
  static constexpr int kVn = kS + KD * pitch16(kVTile) * 2;  // u - w S
  static constexpr int kBytes = kVn + kVT;
};

// Elements of each per-chunk operand in the global scratch, per (chunk, value head); u takes 64 Vp
// (V padded to the 64-column tile).
template <int KD>
struct Operands {
  static constexpr int64_t kRowsK = int64_t{kChunk} * KD;  // w, k exp(gL - gc), scale q exp(gc)
  static constexpr int64_t kScores = int64_t{kChunk} * kChunk;
};

}  // namespace ak::linear::kda_layout
