#include "sparse/planner.h"

#include "attention/tiled/block.h"
#include "attention/tiled/mma_block.h"
#include "core/common.h"
#include "sparse/dsa_source.h"
#include "sparse/indexer_block.h"
#include "sparse/topk_block.h"

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
  if (why.empty() && variant == "mma" && s.hq / s.hkv > 16) {
    why = std::to_string(s.hq / s.hkv) + " query heads per KV head (the tensor-core block takes at most 16)";
  }
  if (variant != "item" && !why.empty()) {
    fail(AK_ERR_UNSUPPORTED, s.stage + ": tuning " + s.stage + "=" + variant + " cannot serve this call: " + why);
  }
  return variant;
}

namespace {

// The plan of a stage's chosen variant: its registry row at the dtype and head dim (0 for the per-item
// kernels), or AK_ERR_UNSUPPORTED where this GPU has none; under "auto", why the per-item kernel was taken.
plan::Plan planned(const std::string& stage, const std::string& variant, int32_t dtype, int64_t d,
                   const registry::Caps& caps, const tuning::Table& t, const char* detail, const std::string& why) {
  plan::Plan plan;
  plan.op = stage;
  const int row = registry::find(stage.c_str(), variant.c_str(), dtype, variant == "item" ? 0 : int(d), 0);
  if (row < 0 || !caps.can_run(row)) {
    fail(AK_ERR_UNSUPPORTED, stage + ": no " + variant + " kernel for " + dtype_name(dtype) + " on this GPU");
  }
  plan.path = variant;
  plan.rows.push_back(row);
  if (variant == "item" && t.get(stage) == "auto") plan.detail(detail, why);
  return plan;
}

}  // namespace

plan::Plan plan_nsa(const NsaShape& s, const registry::Caps& caps, const tuning::Table& t) {
  return planned(s.stage, pick_nsa(s, t), s.dtype, s.d, caps, t, "tiled_ruled_out", tiled_ruled_out(s));
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

namespace {

bool on_16_bytes(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A tensor-core kernel of a stage and why it cannot serve a call ("" when it can).
struct Candidate {
  const char* variant;
  std::string why;
};

// The variant a stage runs under the tuning table: under "auto" the first candidate that serves, else the
// per-item kernel; otherwise the table's. A candidate pinned where it cannot serve is AK_ERR_UNSUPPORTED.
std::string pick_first(const std::string& stage, std::initializer_list<Candidate> candidates,
                       const tuning::Table& t) {
  const std::string& want = t.get(stage);
  for (const Candidate& c : candidates) {
    if (want == c.variant && !c.why.empty()) {
      fail(AK_ERR_UNSUPPORTED, stage + ": tuning " + stage + "=" + want + " cannot serve this call: " + c.why);
    }
    if (want == "auto" && c.why.empty()) return c.variant;
  }
  return want == "auto" ? "item" : want;
}

// Whether this GPU runs a stage's variant at a dtype and head dim (its registry row and the caps).
bool runs_here(const char* stage, const char* variant, int32_t dtype, int64_t d, const registry::Caps& caps) {
  const int row = registry::find(stage, variant, dtype, int(d), 0);
  return row >= 0 && caps.can_run(row);
}

}  // namespace

DsaShape shape_of(const DsaDecode& p) {
  DsaShape s;
  s.dtype = p.dtype, s.width = p.D + p.tail, s.dv = p.D;
  s.aligned = on_16_bytes(p.q) && on_16_bytes(p.kv) && on_16_bytes(p.q_pe) && on_16_bytes(p.kv_pe);
  s.b = p.B, s.sq = p.Sq, s.hq = p.H, s.hkv = p.Hkv, s.topk = p.topk;
  return s;
}

namespace {

// Why the Hopper kernel cannot serve a call ("" when it can).
std::string dsa_wgmma_ruled_out(const DsaShape& s) {
  const std::string why = dsa_mma_ruled_out(s);
  if (!why.empty()) return why;
  const int64_t group = s.hkv > 0 ? s.hq / s.hkv : 0;
  if (!ak::sparse::dsa_wgmma_serves(s.dtype, s.dv, s.width, group)) {
    return std::to_string(group) + " query heads per KV head (it takes multiples of 64)";
  }
  if (!s.hopper) return "it needs a Hopper GPU (sm_90a)";
  return "";
}

}  // namespace

std::string pick_dsa(const DsaShape& s, const tuning::Table& t) {
  return pick_first(kDsaStage, {{"wgmma", dsa_wgmma_ruled_out(s)}, {"mma", dsa_mma_ruled_out(s)}}, t);
}

void split_lists(DsaDecode& p, const std::string& path, int sms) {
  plan_latent_splits(p, sms, path == "wgmma" ? kLatentWgmmaSplit : kLatentMmaSplit);
}

plan::Plan plan_dsa(const DsaShape& shape, const registry::Caps& caps, const tuning::Table& t) {
  DsaShape s = shape;
  s.hopper = runs_here(kDsaStage, "wgmma", AK_BFLOAT16, kDsaMmaWidth, caps);
  plan::Plan plan =
      planned(kDsaStage, pick_dsa(s, t), s.dtype, s.width, caps, t, "mma_ruled_out", dsa_mma_ruled_out(s));
  if (plan.path != "item" && s.b * s.sq * s.hq * s.topk > 0) {
    DsaDecode p;
    p.B = s.b, p.Sq = s.sq, p.H = s.hq, p.Hkv = s.hkv, p.topk = s.topk;
    split_lists(p, plan.path, caps.sms);
    plan.detail("splits", p.splits);
  }
  return plan;
}

std::string indexer_mma_ruled_out(const IndexerShape& s) {
  if (s.dtype != AK_BFLOAT16 && s.dtype != AK_FLOAT8_E4M3) return "it takes bfloat16 and float8_e4m3";
  if (!indexer_block_serves(s.dtype, s.h, s.d)) {
    return std::to_string(s.h) + " heads of " + std::to_string(s.d) + " dims (it is built for " +
           std::to_string(kIdxHeads) + " of " + std::to_string(kIdxDim) + ")";
  }
  if (!s.aligned) return "q and k must start on 16 bytes";
  return "";
}

IndexerShape shape_of(const Indexer& p) {
  IndexerShape s;
  s.dtype = p.dtype, s.h = p.H, s.d = p.D, s.aligned = on_16_bytes(p.q) && on_16_bytes(p.k);
  return s;
}

namespace {

// The mma.sync block where this call runs: its shape rules, and a GPU with sm_90a rows (the CPU backend runs
// its phases on the host).
std::string indexer_mma_here(const IndexerShape& s) {
  const std::string why = indexer_mma_ruled_out(s);
  if (!why.empty() || s.cpu || s.hopper) return why;
  return "it needs a Hopper GPU (sm_90a)";
}

std::string indexer_wgmma_ruled_out(const IndexerShape& s) {
  if (s.dtype != AK_FLOAT8_E4M3) return "it takes float8_e4m3";
  const std::string why = indexer_mma_ruled_out(s);
  if (!why.empty()) return why;
  if (!s.hopper) return "it needs a Hopper GPU (sm_90a)";
  return "";
}

}  // namespace

std::string pick_indexer(const IndexerShape& s, const tuning::Table& t) {
  return pick_first(kIndexerStage, {{"wgmma", indexer_wgmma_ruled_out(s)}, {"mma", indexer_mma_here(s)}}, t);
}

plan::Plan plan_indexer(const IndexerShape& shape, const registry::Caps& caps, const tuning::Table& t) {
  IndexerShape s = shape;
  s.hopper = runs_here(kIndexerStage, "wgmma", AK_FLOAT8_E4M3, kIdxDim, caps);
  return planned(kIndexerStage, pick_indexer(s, t), s.dtype, s.d, caps, t, "mma_ruled_out", indexer_mma_here(s));
}

std::string topk_mma_ruled_out(const TopkShape& s) {
  if (s.dtype != AK_BFLOAT16 && s.dtype != AK_FLOAT16) return "it takes bfloat16 and float16";
  const int64_t G = s.hkv > 0 ? s.hq / s.hkv : 0;
  if (!topk_block_serves(s.dtype, s.d, G, s.selected)) {
    return "head dim " + std::to_string(s.d) + ", " + std::to_string(G) + " query heads per KV head, " +
           std::to_string(s.selected) + " selected blocks (it takes head dims 64, 128, 256, at most 16 heads and " +
           std::to_string(kTopkMaxKept) + " blocks)";
  }
  if (!s.aligned) return "q and k_cmp must start on 16 bytes";
  return "";
}

TopkShape shape_of(const NsaTopk& p) {
  TopkShape s;
  s.dtype = p.dtype, s.d = p.K, s.hq = p.H, s.hkv = p.Hkv, s.selected = p.S;
  s.aligned = on_16_bytes(p.q) && on_16_bytes(p.k_cmp);
  return s;
}

std::string pick_topk(const TopkShape& s, const tuning::Table& t) {
  return pick_first(kTopkStage, {{"mma", topk_mma_ruled_out(s)}}, t);
}

plan::Plan plan_topk(const TopkShape& s, const registry::Caps& caps, const tuning::Table& t) {
  return planned(kTopkStage, pick_topk(s, t), s.dtype, s.d, caps, t, "mma_ruled_out", topk_mma_ruled_out(s));
}

std::string plan_query(const std::string& op, plan::Query& q) {
  require(op == "sparse.nsa.compression" || op == "sparse.nsa.selection" || op == kTopkStage || op == kDsaStage ||
              op == kIndexerStage,
          "query: op must be sparse.nsa.compression, sparse.nsa.selection, sparse.nsa.topk, sparse.dsa.decode or "
          "sparse.indexer, got '" +
              op + "'");
  const registry::Caps caps = plan::caps_of(q);
  if (op == kTopkStage) {
    TopkShape s;
    s.dtype = q.dtype("dtype");
    s.d = q.integer("d", 128);
    s.hq = q.integer("hq", 64);
    s.hkv = q.integer("hkv", 4);
    s.selected = q.integer("selected", 16);
    s.aligned = q.flag("aligned", true);
    q.finish();
    return plan_topk(s, caps, tuning::current()).json();
  }
  if (op == kIndexerStage) {
    IndexerShape s;
    s.dtype = q.dtype("dtype");
    s.h = q.integer("hq", kIdxHeads);
    s.d = q.integer("d", kIdxDim);
    s.aligned = q.flag("aligned", true);
    q.finish();
    return plan_indexer(s, caps, tuning::current()).json();
  }
  if (op == kDsaStage) {
    DsaShape s;
    s.dtype = q.dtype("dtype");
    s.dv = q.integer("v", kDsaMmaValue);
    s.width = q.integer("d", s.dv + 64);
    s.aligned = q.flag("aligned", true);
    s.b = q.integer("b", 0), s.sq = q.integer("sq", 1), s.hq = q.integer("hq", 128), s.hkv = q.integer("hkv", 1);
    s.topk = q.integer("skv", 0);
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
