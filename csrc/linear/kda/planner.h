// KDA's planner: for a call's shape, dtype and GPU, whether the chunked forward serves it (registry
// rows linear.kda.prep then linear.kda.fwd, K padded to 64 or 128; the backward those again, then
// linear.kda.dstates and linear.kda.grads) or why the general path (the exact CPU recurrence on host
// copies) runs instead. Pure host code, so `explain` answers for
// linear.kda.fwd and linear.kda.bwd on any machine.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "linear/checks.h"

namespace ak::linear::kda_planning {

struct KdaShape {
  int32_t dtype = 0;
  int64_t K = 0, V = 0;
  bool recurrent = false;  // the token-by-token algorithm was asked for
  bool fastmath = false;
  Impl impl = Impl::any;   // impl "fused": no general path; "reference": the general path
  bool aligned = true;     // every token-major view: 16-byte aligned rows
  bool huge = false;       // more than 2^30 tokens or sequences
};

struct KdaChoice {
  plan::Plan plan;
  bool chunked = false;
  int kd = 0;       // K padded
  int prep_row = -1, fwd_row = -1;
  int dstates_row = -1, grads_row = -1;  // the backward (after prep and fwd again, the recompute)
};

KdaChoice plan_kda_fwd(const KdaShape& s, const registry::Caps& caps);
KdaChoice plan_kda_bwd(const KdaShape& s, const registry::Caps& caps);

// ak_plan for linear.kda.fwd and linear.kda.bwd.
std::string plan_kda_query(const std::string& op, plan::Query& q);

}  // namespace ak::linear::kda_planning
