#include "linear/gla/planner.h"

#include <algorithm>

#include "core/common.h"
#include "linear/gla/layouts.h"

namespace ak::linear::gla_planning {

namespace {

using namespace gla_layout;

int padded(int64_t K) { return K <= 64 ? 64 : K <= 128 ? 128 : 256; }

// The backward's state passes (K <= 128).
template <bool kChannel>
int64_t states_smem_of(int kd) {
  return kd == 64 ? FwdLayout<64, kChannel>::kBytes : FwdLayout<128, kChannel>::kBytes;
}
int64_t states_smem(int kd, bool channel) { return channel ? states_smem_of<true>(kd) : states_smem_of<false>(kd); }
template <bool kChannel>
int64_t prep_smem_of(int kd) {
  return kd == 64 ? PrepLayout<64, kChannel>::kBytes
         : kd == 128 ? PrepLayout<128, kChannel>::kBytes
                     : PrepLayout<256, kChannel>::kBytes;
}
int64_t prep_smem(int kd, bool channel) { return channel ? prep_smem_of<true>(kd) : prep_smem_of<false>(kd); }
int64_t pass_smem(int kd) {
  return kd == 64 ? PassLayout<64, false>::kBytes
         : kd == 128 ? PassLayout<128, false>::kBytes
                     : PassLayout<256, false>::kBytes;
}
template <bool kChannel>
int64_t grads_smem_of(int kd) {
  return kd == 64 ? GradLayout<64, kChannel>::kBytes : GradLayout<128, kChannel>::kBytes;
}
int64_t grads_smem(int kd, bool channel) { return channel ? grads_smem_of<true>(kd) : grads_smem_of<false>(kd); }

// The row of a stage for this call, when built for the GPU and its shared memory fits; else -1.
int row_of(const registry::Caps& caps, const char* stage, const GlaShape& s, int kd, int64_t smem) {
  const int row = registry::find(stage, s.channel ? "channel" : "scalar", s.dtype, kd, 0);
  if (row < 0 || !caps.can_run(row) || smem > caps.smem_block) return -1;
  return row;
}

// Why the chunked kernels cannot serve the call ("" when they can).
std::string refusal(const GlaShape& s) {
  if (s.recurrent) return "the token-by-token algorithm was asked for";
  if (s.dtype == AK_FLOAT32) return "float32 inputs (the chunked kernels take 16-bit operands)";
  if (s.K % 8 != 0 || s.V % 8 != 0) return "head dims that are not a multiple of 8";
  if (!s.aligned) return "rows that are not 16-byte aligned";
  if (s.huge) return "more than 2^30 tokens or sequences";
  return "";
}

GlaChoice start(const char* op, const GlaShape& s) {
  GlaChoice c;
  c.plan.op = op;
  c.plan.detail("decay", s.channel ? "channel" : "scalar");
  c.kd = padded(s.K);
  return c;
}

void general(GlaChoice& c, const std::string& why) {
  c.chunked = false;
  c.plan.path = "general";
  c.plan.rows.clear();
  c.plan.detail("why", why);
}

// The scalar-decay forward on Hopper at K = V = 128: the delta rule's split state kernel without the
// delta rule reads q, k and v where they are (no per-chunk operands through memory). V tiles of 128 when
// the sequence-heads fill the GPU, else 64 (two output warpgroups, twice the blocks). -1 when it cannot.
// The normalised forward (bfloat16 only) runs there or on the general path.
int split_pass_row(const GlaShape& s, const registry::Caps& caps) {
  if (s.channel || s.K != 128 || s.V != 128 || s.chunk_states) return -1;
  const int tile = s.N * s.H >= caps.sms ? 128 : 64;
  const int row = registry::find("linear.gla.pass", s.normalize ? "split_normalized" : "split", s.dtype, 128, tile);
  return row >= 0 && caps.can_run(row) ? row : -1;
}

// The normalised backward: the split state kernel recomputes the normalised output and stores the
// states, the normaliser's gradient comes from scans over the keys and queries (fp32, added to dq and dk
// inside the chunk kernels' sums), and the chunk kernels run from dO / D. Where the split kernel does
// not divide, the general path.
GlaChoice plan_normalised_bwd(const GlaShape& s, const registry::Caps& caps) {
  GlaChoice c = start("linear.gla.bwd", s);
  std::string why = refusal(s);
  const int pass = why.empty() ? split_pass_row(s, caps) : -1;
  if (why.empty() && pass < 0) why = "the normalised output is recomputed only by the split state kernel (bfloat16, K = V = 128, sm_90a)";
  if (!why.empty()) return general(c, why), c;
  c.dstates_row = row_of(caps, "linear.gla.dstates", s, c.kd, states_smem(c.kd, s.channel));
  c.grads_row = row_of(caps, "linear.gla.grads", s, c.kd, grads_smem(c.kd, s.channel));
  if (c.dstates_row < 0 || c.grads_row < 0) {
    return general(c, "its kernels are not built for this GPU or do not fit its shared memory"), c;
  }
  c.chunked = c.state_split = true;
  c.pass_row = pass;
  c.plan.path = "chunked";
  c.plan.detail("states", "state_split");
  c.plan.detail("normaliser", "scans");
  c.plan.rows = {pass, c.dstates_row, c.grads_row};
  return c;
}

}  // namespace

GlaChoice plan_gla_fwd(const GlaShape& s, const registry::Caps& caps) {
  GlaChoice c = start("linear.gla.fwd", s);
  const std::string why = refusal(s);
  if (!why.empty()) return general(c, why), c;
  if (const int row = split_pass_row(s, caps); row >= 0) {
    c.chunked = c.state_split = true;
    c.pass_row = row;
    c.plan.path = "state_split";
    c.plan.rows = {row};
    return c;
  }
  if (s.normalize) {
    return general(c, "the normaliser is fused only into the split state kernel (bfloat16, K = V = 128, sm_90a)"), c;
  }
  c.prep_row = row_of(caps, "linear.gla.prep", s, c.kd, prep_smem(c.kd, s.channel));
  const int pass = registry::find("linear.gla.pass", "plain", s.dtype, c.kd, 0);
  c.pass_row = pass >= 0 && caps.can_run(pass) && pass_smem(c.kd) <= caps.smem_block ? pass : -1;
  if (c.prep_row < 0 || c.pass_row < 0) {
    return general(c, "its kernels are not built for this GPU or do not fit its shared memory"), c;
  }
  c.chunked = true;
  c.plan.path = "chunked";
  c.plan.rows = {c.prep_row, c.pass_row};
  return c;
}

int key_piece_width(int64_t K) {
  const int64_t count = (K + kBwdMaxKey - 1) / kBwdMaxKey;
  return static_cast<int>(std::min<int64_t>(kBwdMaxKey, 8 * ((K + 8 * count - 1) / (8 * count))));
}

GlaChoice plan_gla_bwd(const GlaShape& s, const registry::Caps& caps) {
  if (s.normalize) return plan_normalised_bwd(s, caps);
  if (s.K > kBwdMaxKey && refusal(s).empty()) {
    // The chunk kernels hold K <= 128 in shared memory, and the recurrence is separable over key
    // channels: each channel's row of the state decays and grows on its own, the output and dv are sums
    // over the channels. So the backward runs once per piece of key columns (planned as that piece).
    GlaShape piece = s;
    piece.K = key_piece_width(s.K);
    GlaChoice c = plan_gla_bwd(piece, caps);
    c.key_pieces = static_cast<int>((s.K + piece.K - 1) / piece.K);
    if (c.chunked) c.plan.detail("key_pieces", c.key_pieces);
    return c;
  }
  GlaChoice c = start("linear.gla.bwd", s);
  const std::string why = refusal(s);
  if (!why.empty()) return general(c, why), c;
  c.states_row = row_of(caps, "linear.gla.states", s, c.kd, states_smem(c.kd, s.channel));
  c.dstates_row = row_of(caps, "linear.gla.dstates", s, c.kd, states_smem(c.kd, s.channel));
  c.grads_row = row_of(caps, "linear.gla.grads", s, c.kd, grads_smem(c.kd, s.channel));
  if (c.states_row < 0 || c.dstates_row < 0 || c.grads_row < 0) {
    return general(c, "its kernels are not built for this GPU or do not fit its shared memory"), c;
  }
  c.chunked = true;
  c.plan.path = "chunked";
  // Recomputed states (none given): the forward's split state kernel where it serves, its output not
  // stored (a scalar decay at K = V = 128 on Hopper), else the states kernel.
  if (const int row = split_pass_row(s, caps); row >= 0) {
    c.state_split = true;
    c.pass_row = row;
    c.plan.detail("states", "state_split");
    c.plan.rows = {row, c.dstates_row, c.grads_row};
    return c;
  }
  c.plan.detail("states", s.chunk_states ? "given" : "states kernel");
  c.plan.rows = s.chunk_states ? std::vector<int>{c.dstates_row, c.grads_row}
                               : std::vector<int>{c.states_row, c.dstates_row, c.grads_row};
  return c;
}

plan::Plan plan_gla_decode(int32_t dtype, const registry::Caps& caps, int& row) {
  plan::Plan p;
  p.op = "linear.gla.decode";
  p.path = "simt";
  row = registry::find("linear.gla.decode", "simt", dtype, 0, 0);
  if (row >= 0 && !caps.can_run(row)) row = -1;
  require(row >= 0, "gla_decode: the decode kernel is not built for this GPU");
  p.rows.push_back(row);
  return p;
}

std::string plan_gla_query(const std::string& op, plan::Query& q) {
  require(op == "linear.gla.fwd" || op == "linear.gla.bwd" || op == "linear.gla.decode",
          "query: op must be linear.gla.fwd, linear.gla.bwd or linear.gla.decode, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  GlaShape s;
  s.dtype = q.dtype("dtype");
  if (op == "linear.gla.decode") {
    q.finish();
    int row = -1;
    return plan_gla_decode(s.dtype, caps, row).json();
  }
  s.K = q.integer("k", 128);
  s.V = q.integer("v", s.K);
  s.N = q.integer("b", 1);
  s.H = q.integer("h", 1);
  s.chunk_states = q.flag("chunk_states", false);
  s.normalize = q.flag("normalize", false);
  s.channel = q.flag("channel", true);
  s.recurrent = q.flag("recurrent", false);
  s.aligned = q.flag("aligned", true);
  q.finish();
  return (op == "linear.gla.fwd" ? plan_gla_fwd(s, caps) : plan_gla_bwd(s, caps)).plan.json();
}

}  // namespace ak::linear::gla_planning
