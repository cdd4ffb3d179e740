#include "sparse/planner.h"

#include "attention/tiled/block.h"
#include "attention/tiled/mma_block.h"
#include "core/common.h"

namespace ak::sparse::planning {

std::string tiled_ruled_out(const NsaShape& s) {
  if (s.dtype != AK_FLOAT16 && s.dtype != AK_BFLOAT16) return "it takes float16 and bfloat16";
  if (s.d != s.dv) return "it needs K = V";
  if (s.d != 64 && s.d != 128 && s.d != 256) return "head dim " + std::to_string(s.d) + " (it takes 64, 128, 256)";
  const int64_t rows = s.hkv > 0 ? s.hq / s.hkv : 0;
  if (!ak::attention::tiled::tiled_serves(s.dtype, s.d, rows)) {
    return std::to_string(rows) + " query heads per KV head at head dim " + std::to_string(s.d) +
           " (it takes group * D <= 4096)";
  }
  if (!s.aligned) return "q, k and v must start on 16 bytes";
  return "";
}

std::string nsa_variant(const NsaShape& s) {
  if (!tiled_ruled_out(s).empty()) return "item";
  const int64_t group = s.hq / s.hkv;
  return ak::attention::tiled::mma_serves(s.dtype, s.d, group) && group >= 8 ? "mma" : "tiled";
}

std::string pick_nsa(const NsaShape& s, const tuning::Table& t) {
  const std::string& want = t.get(s.stage);
  std::string why = tiled_ruled_out(s);
  const std::string variant = want == "auto" ? nsa_variant(s) : want;
  if (variant != "item" && why.empty() && variant == "mma" && s.hq / s.hkv > 16) {
    why = std::to_string(s.hq / s.hkv) + " query heads per KV head (the tensor-core block takes at most 16)";
  }
  if (variant != "item" && !why.empty()) {
    fail(AK_ERR_UNSUPPORTED, s.stage + ": tuning " + s.stage + "=" + variant + " cannot serve this call: " + why);
  }
  return variant;
}

plan::Plan plan_nsa(const NsaShape& s, const registry::Caps& caps, const tuning::Table& t) {
  plan::Plan plan;
  plan.op = s.stage;
  const std::string& want = t.get(s.stage);
  const std::string why = tiled_ruled_out(s);
  const std::string variant = pick_nsa(s, t);
  const int row = registry::find(s.stage.c_str(), variant.c_str(), s.dtype, variant == "item" ? 0 : int(s.d), 0);
  if (row < 0 || !caps.can_run(row)) {
    fail(AK_ERR_UNSUPPORTED, s.stage + ": no " + variant + " kernel for " + dtype_name(s.dtype) + " on this GPU");
  }
  plan.path = variant;
  plan.rows.push_back(row);
  if (variant == "item" && want == "auto") plan.detail("tiled_ruled_out", why);
  return plan;
}

std::string dsa_mma_ruled_out(const DsaShape& s) {
  if (s.dtype != AK_FLOAT16 && s.dtype != AK_BFLOAT16) return "it takes float16 and bfloat16";
  if (s.width != kDsaMmaWidth || s.dv != kDsaMmaValue) {
    return "dim " + std::to_string(s.dv) + " + dimTail " + std::to_string(s.width - s.dv) + " (it is built for " +
           std::to_string(kDsaMmaValue) + " + " + std::to_string(kDsaMmaWidth - kDsaMmaValue) + ")";
  }
  if (!s.aligned) return "q and kv must start on 16 bytes";
  return "";
}

std::string dsa_variant(const DsaShape& s) { return dsa_mma_ruled_out(s).empty() ? "mma" : "item"; }

std::string pick_dsa(const DsaShape& s, const tuning::Table& t) {
  const std::string& want = t.get(kDsaStage);
  const std::string why = dsa_mma_ruled_out(s);
  const std::string variant = want == "auto" ? dsa_variant(s) : want;
  if (variant == "mma" && !why.empty()) {
    fail(AK_ERR_UNSUPPORTED, std::string(kDsaStage) + ": tuning " + kDsaStage + "=mma cannot serve this call: " + why);
  }
  return variant;
}

plan::Plan plan_dsa(const DsaShape& s, const registry::Caps& caps, const tuning::Table& t) {
  const std::string stage = kDsaStage;
  plan::Plan plan;
  plan.op = stage;
  const std::string& want = t.get(stage);
  const std::string why = dsa_mma_ruled_out(s);
  const std::string variant = pick_dsa(s, t);
  const int row = registry::find(stage.c_str(), variant.c_str(), s.dtype, variant == "mma" ? int(s.width) : 0, 0);
  if (row < 0 || !caps.can_run(row)) {
    fail(AK_ERR_UNSUPPORTED, stage + ": no " + variant + " kernel for " + dtype_name(s.dtype) + " on this GPU");
  }
  plan.path = variant;
  plan.rows.push_back(row);
  if (variant == "item" && want == "auto") plan.detail("mma_ruled_out", why);
  return plan;
}

std::string plan_query(const std::string& op, plan::Query& q) {
  require(op == "sparse.nsa.compression" || op == "sparse.nsa.selection" || op == "sparse.dsa.decode",
          "query: op must be sparse.nsa.compression, sparse.nsa.selection or sparse.dsa.decode, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  if (op == kDsaStage) {
    DsaShape s;
    s.dtype = q.dtype("dtype");
    s.dv = q.integer("v", kDsaMmaValue);
    s.width = q.integer("d", s.dv + 64);
    s.aligned = q.flag("aligned", true);
    q.finish();
    return plan_dsa(s, caps, tuning::current()).json();
  }
  NsaShape s;
  s.stage = op;
  s.dtype = q.dtype("dtype");
  s.d = q.integer("d", 128);
  s.dv = q.integer("v", s.d);
  s.hq = q.integer("hq", 64);
  s.hkv = q.integer("hkv", 4);
  s.aligned = q.flag("aligned", true);
  q.finish();
  return plan_nsa(s, caps, tuning::current()).json();
}

namespace {
const bool registered = plan::register_planner("sparse", plan_query);
}  // namespace

}  // namespace ak::sparse::planning
