#include "linear/kda/planner.h"

#include "core/common.h"

namespace ak::linear::kda_planning {

plan::Plan plan_kda(const std::string& op, bool recurrent, bool fastmath) {
  plan::Plan plan;
  plan.op = op;
  plan.path = "general";
  plan.detail("decay", "channel");
  plan.detail("algorithm", recurrent ? "recurrent" : "chunked");
  plan.detail("fastmath", fastmath ? "requested (no effect on the general path)" : "off");
  plan.detail("why", "the chunked KDA kernels are not written yet");
  return plan;
}

std::string plan_kda_query(const std::string& op, plan::Query& q) {
  require(op == "linear.kda.fwd" || op == "linear.kda.bwd",
          "query: op must be linear.kda.fwd or linear.kda.bwd, got '" + op + "'");
  const bool recurrent = q.flag("recurrent", false);
  const bool fastmath = q.flag("fastmath", false);
  plan::caps_of(q);  // the GPU is named or present, as for every op
  q.finish();
  return plan_kda(op, recurrent, fastmath).json();
}

}  // namespace ak::linear::kda_planning
