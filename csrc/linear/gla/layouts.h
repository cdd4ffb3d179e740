// Shared-memory layouts of the gated linear family's chunked kernels: plain constants, so the planner
// (host code, also in the CPU build) can tell whether a kernel fits a GPU.
#pragma once

#include <cstdint>

namespace ak::linear::gla_layout {

constexpr int kChunk = 64;   // tokens per chunk
constexpr int kVTile = 64;   // value columns per block of the state passes
constexpr int kThreads = 256;

// Row pitch (elements) of a 16-bit shared tile of width w: w + 8 (see warp_tiles.cuh).
constexpr int pitch16(int w) { return w + 8; }
// Row pitch (floats) of the gate cumsum: 16-byte rows that start 4 banks apart.
constexpr int pitch_gc(int kd) { return kd + 4; }

// The backward's state passes (fwd.cuh's recompute of the states, bwd.cuh's dstates): KD: K padded to
// 64 or 128. Each stage holds a chunk's rows (k for the states, q for dstates) and its V tile (v, or dO);
// a scalar decay keeps two stages, the next chunk's loads in flight during this one's products (a
// per-channel decay's fp32 gates would take a multiprocessor's second block).
template <int KD, bool kChannel>
struct FwdLayout {
  static constexpr int kStages = kChannel ? 1 : 2;
  static constexpr int kRows = 0;                                 // rows of stage s at kRows + s kStage
  static constexpr int kVt = kRows + kChunk * pitch16(KD) * 2;    // V tile of stage s at kVt + s kStage
  static constexpr int kStage = kVt + kChunk * pitch16(kVTile) * 2;
  static constexpr int kGc = kStages * kStage;                    // gc [64][pitch_gc] or [64]
  static constexpr int kGs = kGc + (kChannel ? kChunk * pitch_gc(KD) * 4 : kChunk * 4);  // per-token decay
  static constexpr int kBytes = kGs + kChunk * 4;
  // Blocks a multiprocessor runs at once (the kernels' launch bounds).
  static constexpr int kMinBlocks = 2;
};

// The split forward: the prep kernel (prep.cuh), a block per (chunk, value head), computes what needs
// no state (the decayed q and k, the scores, exp(gL)) for all chunks at once; the state pass
// (pass.cuh), a block per (sequence, value head, V tile), walks the chunks with the next chunk's
// operands in flight.
template <int KD, bool kChannel>
struct PrepLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kQ = 0;                                 // q, then scale q exp(gc)
  static constexpr int kK = kQ + kTile;                        // k, then k exp(gL - gc)
  static constexpr int kX = kK + kTile;                        // the scores' scratch (per channel)
  static constexpr int kP = kX + (kChannel ? kTile : 0);       // scores
  static constexpr int kGc = kP + kChunk * pitch16(64) * 2;
  static constexpr int kGs = kGc + (kChannel ? kChunk * pitch_gc(KD) * 4 : kChunk * 4);
  static constexpr int kBytes = kGs + kChunk * 4;
  static constexpr int kMinBlocks = KD == 256 ? 1 : 2;
};

// kDelta: the delta rule's pass (KDA), whose values are corrected first: Vn = u - w S.
template <int KD, bool kDelta>
struct PassLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kVT = kChunk * pitch16(kVTile) * 2;
  static constexpr int kW = 0;                                 // w (delta only)
  static constexpr int kKd = kW + (kDelta ? kTile : 0);        // k exp(gL - gc)
  static constexpr int kQd = kKd + kTile;                      // scale q exp(gc)
  static constexpr int kU = kQd + kTile;                       // the V tile (delta: u's)
  static constexpr int kP = kU + kVT;                          // the causal scores
  static constexpr int kEl = kP + kVT;                         // exp(gL) per key channel, fp32
  static constexpr int kStage = kEl + KD * 4;
  static constexpr int kS = 2 * kStage;                        // S (16-bit copy) KD x 64
  static constexpr int kVn = kS + KD * pitch16(kVTile) * 2;    // u - w S (delta only)
  static constexpr int kBytes = kVn + (kDelta ? kVT : 0);
};

// Elements of each per-chunk operand the prep kernels hand to the state pass, per (chunk, value head);
// KDA's u takes 64 Vp (V padded to the 64-column tile).
template <int KD>
struct Operands {
  static constexpr int64_t kRowsK = int64_t{kChunk} * KD;  // w, k exp(gL - gc), scale q exp(gc)
  static constexpr int64_t kScores = int64_t{kChunk} * kChunk;
};

// The backward's grads kernel (bwd.cuh). Per key channel: what lives through the whole block first,
// then the V-tile operands, whose space the intra dq and dk (fp32) take once the V tiles are done. A
// scalar decay needs neither the decayed k (its factor scales dv's rows), the fp32 dP (the decayed dP
// goes from registers to 16 bits) nor the fp32 intra dq, dk, which leaves two blocks a multiprocessor.
template <int KD, bool kChannel>
struct GradLayout {
  static constexpr int kTile = kChunk * pitch16(KD) * 2;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTile;
  static constexpr int kKd = kK + kTile;                         // per channel only
  static constexpr int kP = kKd + (kChannel ? kTile : 0);        // P, then the decayed dP (16-bit)
  static constexpr int kDP = kP + kChunk * pitch16(64) * 2;      // dP fp32 [64][65] (per channel)
  static constexpr int kGc = kDP + (kChannel ? kChunk * 65 * 4 : 0);
  static constexpr int kGs = kGc + (kChannel ? kChunk * pitch_gc(KD) * 4 : kChunk * 4);
  static constexpr int kRow = kGs + kChunk * 4;                  // per-row sums [64]
  static constexpr int kV = kRow + kChunk * 4;                   // V tile
  static constexpr int kO = kV + kChunk * pitch16(kVTile) * 2;  // dO tile
  static constexpr int kS = kO + kChunk * pitch16(kVTile) * 2;  // S tile (16-bit), KD x 64
  static constexpr int kD = kS + KD * pitch16(kVTile) * 2;      // dS tile
  static constexpr int kTail = kD + KD * pitch16(kVTile) * 2;
  static constexpr int kDQ = kV;                                 // per channel only
  static constexpr int kDK = kDQ + kChunk * (KD + 4) * 4;
  static constexpr int kEnd = kChannel ? kDK + kChunk * (KD + 4) * 4 : 0;
  static constexpr int kBytes = kTail > kEnd ? kTail : kEnd;
  static constexpr int kMinBlocks = kChannel ? 1 : 2;
  static_assert(kChunk * pitch16(KD) * 2 <= 2 * KD * pitch16(kVTile) * 2, "scores scratch fits S, dS");
};

}  // namespace ak::linear::gla_layout
