// The planner of the chunked linear-attention family: for a call's shape, dtype, GPU and the tuning
// table, which registry rows run (the path, the stage kernels and their tiles) and the other choices
// (segments of the state pass, the loads, what the forward saves for the backward, who applies the L2
// norm). Pure host code (the CPU build compiles it too), so its decisions are tested anywhere through
// ak_plan; the CUDA dispatchers (delta/fwd/dispatch.cu, delta/bwd/dispatch.cu) only execute plans.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"
#include "linear/problem.h"

namespace ak::linear::planning {

struct FwdShape {
  int32_t dtype = 0;
  int K = 0, V = 0;
  int64_t N = 0, H = 0;        // sequences, value heads
  bool varlen = false;
  int64_t chunks64 = 0;        // chunks of 64 tokens in the whole call
  int64_t longest64 = 0;       // chunks of 64 of the longest sequence
  int chunk_size = 64;         // asked (the fast path computes the same function in chunks of 64)
  bool recurrent = false;      // the token-by-token algorithm was asked for
  bool chunk_outputs = false;  // chunk_states, aw or au asked for
  bool chunk_states = false;   // chunk_states asked for (a pass split into segments cannot write them)
  bool factors = false;        // aw or au asked for
  bool save = false;           // a saved-states buffer is given
  bool aligned = true;         // q, k, v, output: 16-byte aligned rows
};

struct FwdChoice {
  plan::Plan plan;       // rows: fast [prep, state] or [prep, pass 1, pass 2]; general [recurrent(, wy)]
  bool fast = false;
  int prep_row = -1, state_row = -1;  // fast path (state_row: the plain pass, or pass 2 with segments)
  int pass1_row = -1;                 // segments: the summaries' pass
  int segments = 1, seg_chunks = 0;   // the state pass split into `segments` runs of seg_chunks chunks
  bool tma_loads = false;             // split kernel: TMA (fixed length) or cp.async
  bool save = false;                  // the state kernel stores the states for the backward
  int recurrent_row = -1, wy_row = -1;  // general path
};

FwdChoice plan_fwd(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t);

// The planner's view of a validated forward call (save: whether a saved-states buffer is offered).
FwdShape fwd_shape(const DeltaFwd& a, bool save);

struct BwdShape {
  int32_t dtype = 0;
  int K = 0, V = 0;
  int64_t N = 0, H = 0, HK = 0;
  int chunk_size = 64;        // asked (recurrent calls: 64)
  bool l2norm = false;
  bool saved = false;         // the forward's saved buffer is given
  bool aligned_qk = true;     // q and k: 16-byte aligned rows
  bool aligned_rest = true;   // v, d_output, dq, dk, dv: 16-byte aligned rows
};

struct BwdChoice {
  plan::Plan plan;  // rows: fast [prep, (states,) dstates, grads]; general [general]
  bool fast = false;
  int chunk = 64;   // the chunk size the path computes in
  int prep_row = -1, states_row = -1, dstates_row = -1, grads_row = -1;
  int general_row = -1;
  bool l2_in_prep = false;  // prep normalises q and k (else a kernel of its own, before it)
  bool fused_l2 = false;    // grads applies the L2 norm's backward and writes dq, dk itself
};

BwdChoice plan_bwd(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t);

struct DecodeChoice {
  plan::Plan plan;
  int row = -1;
};

// A decode call: the inputs' dtype, K, and whether every row of the state and of the new state starts on
// 16 bytes (their bases and V times the element size).
struct DecodeShape {
  int32_t dtype = 0;
  int64_t K = 0;
  bool aligned = true;
};

// The decode kernel: the tile kernel where it serves, else the register kernel; a pin through the
// tuning key linear.decode that cannot serve is AK_ERR_UNSUPPORTED.
DecodeChoice plan_decode(const DecodeShape& s, const registry::Caps& caps, const tuning::Table& t);

// ak_plan for ops linear.fwd, linear.bwd and linear.decode: the plan as JSON.
std::string plan_query(const std::string& op, plan::Query& q);

}  // namespace ak::linear::planning
