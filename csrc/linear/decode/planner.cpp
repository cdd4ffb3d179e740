#include "linear/decode/planner.h"

#include "core/common.h"

namespace ak::linear::paged_planning {

PagedDecodeChoice plan_paged_decode(const PagedDecodeShape& s, const registry::Caps& caps, const tuning::Table& t) {
  PagedDecodeChoice c;
  c.plan.op = "linear.paged_decode";
  c.plan.detail("gate", s.per_channel ? "per key channel" : "per head");
  auto general = [&](const std::string& why) {
    c.plan.path = "general";
    c.plan.detail("why", why);
    return c;
  };
  if (s.K != 32 && s.K != 64 && s.K != 128 && s.K != 256) return general("K is not 32, 64, 128 or 256");
  if (!s.aligned) return general("the pool's rows are not 16-byte aligned");
  // The bulk-copy kernel where the GPU has the copy engine (sm_90a), the register kernel elsewhere; the
  // tuning key linear.paged_decode pins one.
  const std::string& want = t.get("linear.paged_decode");
  for (const char* variant : {"bulk", "fused"}) {
    if (want != "auto" && want != variant) continue;
    const int row = registry::find("linear.paged_decode", variant, s.dtype, 0, 0);
    if (row >= 0 && caps.can_run(row)) {
      c.row = row;
      c.plan.path = variant;
      break;
    }
  }
  if (c.row < 0 && want != "auto") {
    fail(AK_ERR_UNSUPPORTED, "paged_decode: tuning linear.paged_decode=" + want +
                                 " cannot serve this call: that kernel is not built for this GPU");
  }
  if (c.row < 0) return general("no fused kernel is built for this GPU");
  c.fused = true;
  c.plan.rows.push_back(c.row);
  return c;
}

std::string plan_paged_decode_query(const std::string& op, plan::Query& q) {
  require(op == "linear.paged_decode", "query: op must be linear.paged_decode, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  PagedDecodeShape s;
  s.dtype = q.dtype("dtype");
  s.K = q.integer("k", 128);
  s.per_channel = q.flag("channel", true);
  s.aligned = q.flag("aligned", true);
  q.finish();
  return plan_paged_decode(s, caps, tuning::current()).plan.json();
}

}  // namespace ak::linear::paged_planning
