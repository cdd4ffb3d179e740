// KDA's planner: which path a call takes on a CUDA device and why. Pure host code, so `explain` answers
// for linear.kda.fwd and linear.kda.bwd on any machine. For now every call takes the general path (the
// exact CPU recurrence on host copies): the chunked KDA kernels are not written yet.
#pragma once

#include <string>

#include "core/plan.h"

namespace ak::linear::kda_planning {

plan::Plan plan_kda(const std::string& op, bool recurrent, bool fastmath);

// ak_plan for linear.kda.fwd and linear.kda.bwd.
std::string plan_kda_query(const std::string& op, plan::Query& q);

}  // namespace ak::linear::kda_planning
