#include "linear/kda/planner.h"

#include "core/common.h"
#include "linear/kda/layouts.h"

namespace ak::linear::kda_planning {

namespace {

using namespace kda_layout;

void describe(plan::Plan& p, const KdaShape& s) {
  p.detail("decay", "channel");
  p.detail("algorithm", s.recurrent ? "recurrent" : "chunked");
  p.detail("fastmath", s.fastmath ? "requested (the kernels' exponentials are the same either way)" : "off");
}

// The general path for `why`, unless the call asked for the fused kernels only: then it is refused.
void general(plan::Plan& p, const KdaShape& s, const std::string& why) {
  if (s.impl == Impl::fused) fail(AK_ERR_UNSUPPORTED, "impl 'fused': no fused kernel serves this call: " + why);
  p.path = "general";
  p.rows.clear();
  p.detail("why", why);
}

// Why the chunked forward cannot serve the call ("" when it can).
std::string refusal(const KdaShape& s) {
  if (s.recurrent) return "the token-by-token algorithm was asked for";
  if (s.dtype == AK_FLOAT32) return "float32 inputs (the chunked kernel takes 16-bit operands)";
  if (s.K > 128) return "K above 128 (the chunked kernel holds K <= 128)";
  if (s.K % 8 != 0 || s.V % 8 != 0) return "head dims that are not a multiple of 8";
  if (!s.aligned) return "rows that are not 16-byte aligned";
  if (s.huge) return "more than 2^30 tokens or sequences";
  return "";
}

}  // namespace

KdaChoice plan_kda_fwd(const KdaShape& s, const registry::Caps& caps) {
  KdaChoice c;
  c.plan.op = "linear.kda.fwd";
  describe(c.plan, s);
  if (s.impl == Impl::reference) return general(c.plan, s, "impl 'reference' was asked for"), c;
  const std::string why = refusal(s);
  if (!why.empty()) return general(c.plan, s, why), c;
  c.kd = s.K <= 64 ? 64 : 128;
  const bool narrow = c.kd == 64;
  const int64_t prep_smem = narrow ? PrepLayout<64>::kBytes : PrepLayout<128>::kBytes;
  const int64_t state_smem = narrow ? PassLayout<64, true>::kBytes : PassLayout<128, true>::kBytes;
  const int prep = registry::find("linear.kda.prep", "channel", s.dtype, c.kd, 0);
  const int fwd = registry::find("linear.kda.fwd", "channel", s.dtype, c.kd, 0);
  if (prep < 0 || fwd < 0 || !caps.can_run(prep) || !caps.can_run(fwd) || prep_smem > caps.smem_block ||
      state_smem > caps.smem_block) {
    return general(c.plan, s, "its kernels are not built for this GPU or do not fit its shared memory"), c;
  }
  c.prep_row = prep;
  c.fwd_row = fwd;
  c.chunked = true;
  c.plan.path = "chunked";
  c.plan.rows.push_back(prep);
  c.plan.rows.push_back(fwd);
  return c;
}

KdaChoice plan_kda_bwd(const KdaShape& s, const registry::Caps& caps) {
  KdaChoice c = plan_kda_fwd(s, caps);  // the recompute: the forward's rows
  c.plan.op = "linear.kda.bwd";
  if (!c.chunked) return c;
  const bool narrow = c.kd == 64;
  const int64_t dstates_smem = narrow ? DStatesLayout<64>::kBytes : DStatesLayout<128>::kBytes;
  const int64_t grads_smem = narrow ? GradsLayout<64>::kBytes : GradsLayout<128>::kBytes;
  const int dstates = registry::find("linear.kda.dstates", "channel", s.dtype, c.kd, 0);
  const int grads = registry::find("linear.kda.grads", "channel", s.dtype, c.kd, 0);
  if (dstates < 0 || grads < 0 || !caps.can_run(dstates) || !caps.can_run(grads) ||
      dstates_smem > caps.smem_block || grads_smem > caps.smem_block) {
    c.chunked = false;
    general(c.plan, s, "its kernels are not built for this GPU or do not fit its shared memory");
    return c;
  }
  c.dstates_row = dstates;
  c.grads_row = grads;
  c.plan.rows.push_back(dstates);
  c.plan.rows.push_back(grads);
  return c;
}

std::string plan_kda_query(const std::string& op, plan::Query& q) {
  require(op == "linear.kda.fwd" || op == "linear.kda.bwd",
          "query: op must be linear.kda.fwd or linear.kda.bwd, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  KdaShape s;
  s.dtype = q.dtype("dtype");
  s.K = q.integer("k", 128);
  s.V = q.integer("v", s.K);
  s.recurrent = q.flag("recurrent", false);
  s.fastmath = q.flag("fastmath", false);
  s.aligned = q.flag("aligned", true);
  q.finish();
  return (op == "linear.kda.fwd" ? plan_kda_fwd(s, caps) : plan_kda_bwd(s, caps)).plan.json();
}

}  // namespace ak::linear::kda_planning
