#include "attention/planner.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "attention/decode/problem.h"
#include "attention/tiled/mma_block.h"
#include "attention/tiled/pipe_block.h"
#include "attention/tiled/warp_block.h"
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

// Why the Hopper kernels cannot serve a call, "" when they can: the GPU, the head dims they are built
// for, then the direction's own conditions (the first that holds gives the reason).
std::string hopper_ruled_out(const registry::Caps& caps, int d, std::initializer_list<int> dims, const char* dims_text,
                             std::initializer_list<std::pair<bool, const char*>> conditions) {
  if (!caps.is_hopper()) return "they need compute capability 9.0";
  if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
    return "head dim " + std::to_string(d) + " (they take " + dims_text + ")";
  }
  for (const auto& [holds, why] : conditions) {
    if (holds) return why;
  }
  return "";
}

// The variant that serves a call and its row: the tuning's choice, or under "auto" the Hopper kernel
// when nothing rules it out (`why` empty) and else the general one, whose head dim is `general_d`
// (the bucket the call's head dim pads to). A forced variant that cannot serve is an error. The plan
// gets the variant as its path and the row.
std::string choose(const char* op, const char* stage, const std::string& want, const char* hopper,
                   const std::string& ruled_out, const CallShape& s, int general_d, const registry::Caps& caps,
                   plan::Plan& plan) {
  const std::string variant = want == "auto" ? (ruled_out.empty() ? hopper : "general") : want;
  if (variant != "general" && !ruled_out.empty()) refuse(op, stage, variant, ruled_out);
  std::string why;
  const int row = usable_row(stage, variant.c_str(), s.dtype, variant == "general" ? general_d : s.d, caps, why);
  if (row < 0) {
    if (want == "auto") fail(AK_ERR_UNSUPPORTED, std::string(op) + ": " + why);
    refuse(op, stage, variant, why);
  }
  plan.path = variant;
  plan.rows.push_back(row);
  return variant;
}

}  // namespace

namespace {

// How many (sequence, head) pairs of a call fit half of the L2 with their K and V (bytes per element:
// `bytes`), for the tile order.
int heads_per_section(const FwdShape& s, const registry::Caps& caps, int64_t bytes) {
  const int64_t l2 = std::max<int64_t>(caps.l2, 1 << 20);
  const int64_t kv_bytes_per_q_head =
      std::max<int64_t>(int64_t(s.skv) * s.d * 2 * bytes / std::max(1, s.hq / s.hkv), 1);
  const int64_t pairs = int64_t(s.hq) * s.n_seq;
  return static_cast<int>(std::min(std::max<int64_t>(1, (l2 / 2) / kv_bytes_per_q_head), pairs));
}

FwdChoice plan_fwd_e4m3(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  const std::string& want = t.get("attention.fwd");
  const std::string why = hopper_ruled_out(caps, s.d, {128}, "128 for float8_e4m3",
                                           {{s.total_kv == 0, "there are no keys"},
                                            {!s.aligned, "they need 16-byte aligned pointers and strides"}});
  if (want == "wgmma_persistent" || (want == "auto" && why.empty())) {
    if (!why.empty()) refuse("attention_fwd", "attention.fwd", want, why);
    FwdChoice c;
    c.plan.op = "attention.fwd";
    std::string missing;
    const int row = usable_row("attention.fwd", "wgmma_persistent", s.dtype, s.d, caps, missing);
    if (row < 0) fail(AK_ERR_UNSUPPORTED, "attention_fwd: " + missing);
    c.plan.path = "wgmma_persistent";
    c.plan.rows.push_back(row);
    c.block_m = 128;
    c.heads_per_section = heads_per_section(s, caps, 1);
    c.plan.detail("block_m", c.block_m);
    c.plan.detail("heads_per_section", c.heads_per_section);
    c.plan.detail("v", "transposed");
    return c;
  }
  // The widened inputs take the 16-bit plan (a forced 16-bit variant applies to it).
  FwdShape wide = s;
  wide.dtype = s.out_dtype;
  FwdChoice c = plan_fwd(wide, caps, t);
  const std::string kernel = c.plan.path;
  c.plan.path = "dequantized";
  c.plan.detail("kernel", kernel);
  c.plan.detail("why", why.empty() ? "tuning attention.fwd=" + want : why);
  return c;
}

}  // namespace

FwdChoice plan_fwd(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  FwdChoice c;
  c.plan.op = "attention.fwd";
  if (s.sq == 0 || s.hq == 0 || s.n_seq == 0) {
    c.plan.path = "empty";
    return c;
  }
  if (s.dtype == AK_FLOAT8_E4M3) return plan_fwd_e4m3(s, caps, t);
  const std::string& want = t.get("attention.fwd");
  // The Hopper kernels: head dim exactly 64, 128 or 256, aligned tensors, some keys.
  const std::string why = hopper_ruled_out(caps, s.d, {64, 128, 256}, "64, 128 or 256",
                                           {{s.total_kv == 0, "there are no keys"},
                                            {!s.aligned, "they need 16-byte aligned pointers and strides"}});
  const char* hopper = s.d == 256 ? "wgmma" : "wgmma_persistent";
  const std::string variant =
      choose("attention_fwd", "attention.fwd", want, hopper, why, s, forward_bucket(s.d), caps, c.plan);
  c.block_m = variant == "general" ? 64 : variant == "wgmma" ? 128 : s.d == 64 ? 192 : 128;
  // (Sequence, head) pairs per L2 section: as many as keep their K and V within half of the L2.
  c.heads_per_section = heads_per_section(s, caps, 2);
  c.plan.detail("block_m", c.block_m);
  c.plan.detail("heads_per_section", c.heads_per_section);
  return c;
}

BwdChoice plan_bwd(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  BwdChoice c;
  c.plan.op = "attention.bwd";
  const std::string& want = t.get("attention.bwd");
  const std::string why = hopper_ruled_out(
      caps, s.d, {64, 128}, "64 or 128",
      {{s.sq == 0 || s.skv == 0, "an empty sequence dimension"},
       {!s.tma_ok, "a tensor with a zero (broadcast) stride, which the tensor-memory accelerator cannot walk"}});
  const char* hopper = s.d == 64 ? "wgmma_v2" : "wgmma";
  const std::string variant =
      choose("attention_bwd", "attention.bwd", want, hopper, why, s, backward_bucket(s.d), caps, c.plan);
  c.dq_order = variant == "general" ? DqOrder::kPlain
               : variant == "wgmma" ? DqOrder::kHopperFragments
                                    : DqOrder::kHopperFull;
  c.plan.detail("dq_order", variant == "general" ? "plain" : variant == "wgmma" ? "fragments" : "full");
  return c;
}

std::string decode_variant(int32_t dtype, int d, int64_t rows, std::string& why, int64_t smem_block) {
  if (tiled::warp_serves(dtype, d, rows) && rows == 1) return "warp";
  if (d != 256 && tiled::pipe_serves(dtype, d, rows) && tiled::PipeShared::bytes(d) <= smem_block) return "pipe";
  if (tiled::mma_serves(dtype, d, rows)) return "mma";
  if (tiled::tiled_serves(dtype, d, rows)) return "tiled";
  why = d != 64 && d != 128 && d != 256
            ? "head dim " + std::to_string(d) + " (the decode blocks take 64, 128 and 256)"
            : std::to_string(rows) + " query rows per KV head at head dim " + std::to_string(d) +
                  " (the decode blocks take rows * d <= 4096)";
  return "";
}

std::string pick_decode(int32_t dtype, int d, int64_t rows, const tuning::Table& t, int64_t smem_block) {
  const std::string& want = t.get("attention.decode");
  std::string why;
  const std::string fallback = decode_variant(dtype, d, rows, why, smem_block);
  const std::string variant = want == "auto" ? fallback : want;
  if (variant.empty()) fail(AK_ERR_UNSUPPORTED, "attention_decode: " + why);
  const bool pipe_fits = tiled::PipeShared::bytes(d) <= smem_block;
  const bool serves = variant == "pipe"   ? tiled::pipe_serves(dtype, d, rows) && pipe_fits
                      : variant == "mma"  ? tiled::mma_serves(dtype, d, rows)
                      : variant == "warp" ? tiled::warp_serves(dtype, d, rows)
                                          : tiled::tiled_serves(dtype, d, rows);
  if (!serves) {
    refuse("attention_decode", "attention.decode", variant,
           std::to_string(rows) + " query rows per KV head at head dim " + std::to_string(d));
  }
  return variant;
}

DecodeChoice plan_decode(const DecodeShape& s, const registry::Caps& caps, const tuning::Table& t) {
  DecodeChoice c;
  c.plan.op = "attention.decode";
  if (s.sq == 0 || s.hq == 0 || s.n_seq == 0) {
    c.plan.path = "empty";
    return c;
  }
  const int64_t rows = int64_t(s.hq / s.hkv) * s.sq;
  const std::string variant = pick_decode(s.dtype, s.d, rows, t, caps.smem_block);
  std::string why;
  const int row = usable_row("attention.decode", variant.c_str(), s.dtype, s.d, caps, why);
  if (row < 0) fail(AK_ERR_UNSUPPORTED, "attention_decode: " + why);
  decode::Problem p;
  p.B = s.n_seq, p.Hkv = s.hkv, p.capacity = s.capacity;
  decode::plan_splits(p, 2 * int64_t(caps.sms > 0 ? caps.sms : 132));
  c.splits = p.splits, c.chunk = p.chunk;
  c.plan.path = variant;
  c.plan.rows.push_back(row);
  c.plan.detail("splits", c.splits);
  c.plan.detail("chunk", c.chunk);
  return c;
}

std::string plan_query(const std::string& op, plan::Query& q) {
  require(op == "attention.fwd" || op == "attention.bwd" || op == "attention.decode",
          "query: op must be attention.fwd, attention.bwd or attention.decode, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  const tuning::Table t = tuning::current();
  const int32_t dtype = q.dtype("dtype");
  CallShape call;
  call.dtype = dtype;
  call.d = static_cast<int>(q.integer("d", 128));
  call.n_seq = static_cast<int>(q.integer("b", 1));
  call.hq = static_cast<int>(q.integer("hq", 8));
  call.hkv = static_cast<int>(q.integer("hkv", call.hq));
  call.sq = static_cast<int>(q.integer("sq", op == "attention.decode" ? 1 : 1024));
  call.skv = static_cast<int>(q.integer("skv", call.sq));
  std::string out;
  if (op == "attention.fwd") {
    FwdShape s{call, q.integer("total_kv", int64_t(call.n_seq) * call.skv), q.flag("aligned", true), 0};
    if (dtype == AK_FLOAT8_E4M3) s.out_dtype = q.dtype("out_dtype");
    q.finish();
    out = plan_fwd(s, caps, t).plan.json();
  } else if (op == "attention.decode") {
    DecodeShape s;
    static_cast<CallShape&>(s) = call;
    s.capacity = call.skv;
    q.finish();
    out = plan_decode(s, caps, t).plan.json();
  } else {
    BwdShape s{call, q.flag("deterministic", false), q.flag("tma_ok", true)};
    q.finish();
    out = plan_bwd(s, caps, t).plan.json();
  }
  return out;
}

namespace {
const bool registered = plan::register_planner("attention", plan_query);
}  // namespace

}  // namespace ak::attention::planning
