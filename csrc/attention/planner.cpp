#include "attention/planner.h"

#include <algorithm>

#include "core/common.h"

namespace ak::attention::planning {
namespace {

int forward_bucket(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 192 ? 192 : 256; }
int backward_bucket(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

[[noreturn]] void refuse(const char* op, const std::string& key, const std::string& value, const std::string& why) {
  fail(AK_ERR_UNSUPPORTED, std::string(op) + ": tuning " + key + "=" + value + " cannot serve this call: " + why);
}

// The row of a variant for this dtype and head dim, or -1 with `why` set.
int usable_row(const char* stage, const char* variant, int32_t dtype, int d, const registry::Caps& caps,
               std::string& why) {
  const int row = registry::find(stage, variant, dtype, d, 0);
  if (row < 0) {
    why = std::string("no ") + stage + "." + variant + " kernel for " + dtype_name(dtype) + " at head dim " +
          std::to_string(d);
  } else if (!caps.can_run(row)) {
    why = registry::row_name(row) + " is not built for this GPU (compute capability " + std::to_string(caps.major) +
          "." + std::to_string(caps.minor) + ")";
    return -1;
  }
  return row;
}

}  // namespace

FwdChoice plan_fwd(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  FwdChoice c;
  c.plan.op = "attention.fwd";
  if (s.sq == 0 || s.hq == 0 || s.n_seq == 0) {
    c.plan.path = "empty";
    return c;
  }
  const std::string& want = t.get("attention.fwd");
  // The Hopper kernels: head dim exactly 64, 128 or 256, aligned tensors, some keys.
  std::string why;
  if (!caps.is_hopper()) {
    why = "they need compute capability 9.0";
  } else if (s.d != 64 && s.d != 128 && s.d != 256) {
    why = "head dim " + std::to_string(s.d) + " (they take 64, 128 or 256)";
  } else if (s.total_kv == 0) {
    why = "there are no keys";
  } else if (!s.aligned) {
    why = "they need 16-byte aligned pointers and strides";
  }
  const char* hopper = s.d == 256 ? "wgmma" : "wgmma_persistent";
  std::string variant = want == "auto" ? (why.empty() ? hopper : "general") : want;
  if (variant != "general" && !why.empty()) refuse("attention_fwd", "attention.fwd", variant, why);
  const int d = variant == "general" ? forward_bucket(s.d) : s.d;
  const int row = usable_row("attention.fwd", variant.c_str(), s.dtype, d, caps, why);
  if (row < 0) {
    if (want == "auto") fail(AK_ERR_UNSUPPORTED, "attention_fwd: " + why);
    refuse("attention_fwd", "attention.fwd", variant, why);
  }
  c.plan.path = variant;
  c.plan.rows.push_back(row);
  c.block_m = variant == "general" ? 64 : variant == "wgmma" ? 128 : s.d == 64 ? 192 : 128;
  // (Sequence, head) pairs per L2 section: as many as keep their K and V within half of the L2.
  const int64_t l2 = std::max<int64_t>(caps.l2, 1 << 20);
  const int64_t kv_bytes_per_q_head = std::max<int64_t>(int64_t(s.skv) * s.d * 2 * 2 / std::max(1, s.hq / s.hkv), 1);
  const int64_t pairs = int64_t(s.hq) * s.n_seq;
  c.heads_per_section = static_cast<int>(std::min(std::max<int64_t>(1, (l2 / 2) / kv_bytes_per_q_head), pairs));
  c.plan.detail("block_m", c.block_m);
  c.plan.detail("heads_per_section", c.heads_per_section);
  return c;
}

BwdChoice plan_bwd(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  BwdChoice c;
  c.plan.op = "attention.bwd";
  const std::string& want = t.get("attention.bwd");
  std::string why;
  if (!caps.is_hopper()) {
    why = "they need compute capability 9.0";
  } else if (s.d != 64 && s.d != 128) {
    why = "head dim " + std::to_string(s.d) + " (they take 64 or 128)";
  } else if (s.deterministic) {
    why = "the deterministic order runs on the general kernel";
  } else if (s.sq == 0 || s.skv == 0) {
    why = "an empty sequence dimension";
  } else if (!s.tma_ok) {
    why = "a tensor with a zero (broadcast) stride, which the tensor-memory accelerator cannot walk";
  }
  const char* hopper = s.d == 64 ? "wgmma_v2" : "wgmma";
  std::string variant = want == "auto" ? (why.empty() ? hopper : "general") : want;
  if (variant != "general" && !why.empty()) refuse("attention_bwd", "attention.bwd", variant, why);
  const int d = variant == "general" ? backward_bucket(s.d) : s.d;
  const int row = usable_row("attention.bwd", variant.c_str(), s.dtype, d, caps, why);
  if (row < 0) {
    if (want == "auto") fail(AK_ERR_UNSUPPORTED, "attention_bwd: " + why);
    refuse("attention_bwd", "attention.bwd", variant, why);
  }
  c.plan.path = variant;
  c.plan.rows.push_back(row);
  c.dq_order = variant == "general" ? DqOrder::kPlain
               : variant == "wgmma" ? DqOrder::kHopperFragments
                                    : DqOrder::kHopperFull;
  c.plan.detail("dq_order", variant == "general" ? "plain" : variant == "wgmma" ? "fragments" : "full");
  return c;
}

std::string plan_query(const std::string& op, plan::Query& q) {
  require(op == "attention.fwd" || op == "attention.bwd",
          "query: op must be attention.fwd or attention.bwd, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  const tuning::Table t = tuning::current();
  const int32_t dtype = q.dtype("dtype");
  const int d = static_cast<int>(q.integer("d", 128));
  const int b = static_cast<int>(q.integer("b", 1));
  const int hq = static_cast<int>(q.integer("hq", 8));
  const int hkv = static_cast<int>(q.integer("hkv", hq));
  const int sq = static_cast<int>(q.integer("sq", 1024));
  const int skv = static_cast<int>(q.integer("skv", sq));
  std::string out;
  if (op == "attention.fwd") {
    FwdShape s{dtype, d, b, hq, hkv, sq, skv, q.integer("total_kv", int64_t(b) * skv), q.flag("aligned", true)};
    q.finish();
    out = plan_fwd(s, caps, t).plan.json();
  } else {
    BwdShape s{dtype, d, b, hq, hkv, sq, skv, q.flag("deterministic", false), q.flag("tma_ok", true)};
    q.finish();
    out = plan_bwd(s, caps, t).plan.json();
  }
  return out;
}

namespace {
const bool registered = plan::register_planner("attention", plan_query);
}  // namespace

}  // namespace ak::attention::planning
