// The planner of the gated linear family: for a call's shape, dtype and GPU, whether the chunked
// kernels serve it and which registry rows run (decay policy "channel" or "scalar", K padded to 64,
// 128 or 256), or why the general path runs instead. Pure host code, tested anywhere through ak_plan
// (ops linear.gla.fwd, linear.gla.bwd, linear.gla.decode).
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"

namespace ak::linear::gla_planning {

struct GlaShape {
  int32_t dtype = 0;
  int64_t K = 0, V = 0;
  int64_t N = 1, H = 1;      // sequences, value heads
  bool channel = false;    // a decay per key channel (gk)
  bool recurrent = false;  // the token-by-token algorithm was asked for
  bool aligned = true;     // every token-major view: 16-byte aligned rows
  bool huge = false;       // more than 2^30 tokens or sequences
  bool chunk_states = false;  // the forward stores the state before every chunk (backward: is given them)
  bool normalize = false;     // each output row divided by its normaliser (AK_GLA_NORMALIZE)
};

struct GlaChoice {
  plan::Plan plan;
  bool chunked = false;
  int kd = 0;  // K padded
  int prep_row = -1, pass_row = -1;                  // forward (split: prep, then the state pass)
  // forward: the gates' cumsum, then the split state kernel alone (pass_row); backward: the states
  // recomputed by the same (its output not stored)
  bool state_split = false;
  int states_row = -1, dstates_row = -1, grads_row = -1;  // backward
  int key_pieces = 1;  // backward at K > kBwdMaxKey: one run per piece of key_piece_width(K) columns
};

// The backward's chunk kernels take at most this many key columns; wider calls run by pieces.
constexpr int kBwdMaxKey = 128;
// Columns of each key piece but the last (equal widths, multiples of 8, at most kBwdMaxKey).
int key_piece_width(int64_t K);

GlaChoice plan_gla_fwd(const GlaShape& s, const registry::Caps& caps);
GlaChoice plan_gla_bwd(const GlaShape& s, const registry::Caps& caps);
plan::Plan plan_gla_decode(int32_t dtype, const registry::Caps& caps, int& row);

// ak_plan for linear.gla.fwd, linear.gla.bwd and linear.gla.decode.
std::string plan_gla_query(const std::string& op, plan::Query& q);

}  // namespace ak::linear::gla_planning
