#include "linear/planner.h"

#include "linear/decode/planner.h"
#include "linear/gla/planner.h"
#include "linear/kda/planner.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common.h"
#include "linear/delta/bwd/layouts.h"
#include "linear/delta/fwd/layouts.h"

namespace ak::linear::planning {
namespace {

constexpr int kChunk = 64;  // the tensor-core paths work in chunks of 64 tokens

bool half_dtype(int32_t dtype) { return dtype == AK_BFLOAT16 || dtype == AK_FLOAT16; }

[[noreturn]] void refuse(const char* op, const std::string& setting, const std::string& why) {
  fail(AK_ERR_UNSUPPORTED, std::string(op) + ": tuning " + setting + " cannot serve this call: " + why);
}

// The row of stage/variant for this instance when the GPU can run it, else -1.
int runnable(const registry::Caps& caps, const char* stage, const char* variant, int32_t dtype, int d, int tile) {
  const int row = registry::find(stage, variant, dtype, d, tile);
  return row >= 0 && caps.can_run(row) ? row : -1;
}

// ---- shared memory of the forward's stage-2 kernels (0: no such kernel) ----

int64_t state_smem(const std::string& variant, int D, int VT) {
  using namespace cuda::fwd;
  if (variant == "mma") {
    if (D == 64 && VT == 32) return StateLayout<64, 32>::kBytes;
    if (D == 64 && VT == 64) return StateLayout<64, 64>::kBytes;
    if (D == 128 && VT == 32) return StateLayout<128, 32>::kBytes;
    if (D == 128 && VT == 64) return StateLayout<128, 64>::kBytes;
    if (D == 128 && VT == 128) return StateLayout<128, 128>::kBytes;
    if (D == 256 && VT == 32) return StateLayout<256, 32>::kBytes;
    if (D == 256 && VT == 64) return StateLayout<256, 64>::kBytes;
    return 0;
  }
  if (variant == "split") {
    if (D == 128 && VT == 32) return Sm90SplitLayout<128, 32, 3>::kAlloc;
    if (D == 128 && VT == 64) return Sm90SplitLayout<128, 64, 3>::kAlloc;
    if (D == 128 && VT == 128) return Sm90SplitLayout<128, 128, 2>::kAlloc;
    return 0;
  }
  if (D == 256 && VT == 64) return Sm90StateLayout<256, 64>::kAlloc;
  return 0;
}

int64_t prep_smem(int D) {
  using namespace cuda::fwd;
  return D == 64 ? PrepLayout<64>::kBytes : D == 128 ? PrepLayout<128>::kBytes : PrepLayout<256>::kBytes;
}

int64_t prep_sm90_smem(int D) {
  using namespace cuda::fwd;
  return D == 128 ? PrepSm90Layout<128>::kAlloc : D == 256 ? PrepSm90Layout<256>::kAlloc : 0;
}

// The wgmma stage-1 row when it runs on this GPU and its shared memory fits, else -1.
int prep_wgmma_row(const FwdShape& s, const registry::Caps& caps) {
  const int row = runnable(caps, "linear.fwd.prep", "wgmma", s.dtype, s.K, 0);
  const int64_t smem = prep_sm90_smem(s.K);
  return row >= 0 && smem > 0 && smem <= caps.smem_block ? row : -1;
}

// The stage-1 kernel of the fast forward: the wgmma one where it runs (Hopper, D 128 / 256), else mma.sync.
int plan_prep(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  const std::string& want = t.get("linear.fwd.prep");
  const int wgmma = want == "auto" || want == "wgmma" ? prep_wgmma_row(s, caps) : -1;
  if (wgmma >= 0) return wgmma;
  if (want == "auto" || want == "mma") return registry::find("linear.fwd.prep", "mma", s.dtype, s.K, 0);
  refuse("delta_rule_fwd", "linear.fwd.prep=" + want,
         "no runnable linear.fwd.prep." + want + " kernel at D = " + std::to_string(s.K) + " on this GPU");
}

// The stage-2 row of a variant and tile, when it exists, runs on this GPU and fits its shared memory.
int state_row(const registry::Caps& caps, const std::string& variant, int32_t dtype, int D, int VT) {
  const int row = runnable(caps, "linear.fwd.state", variant.c_str(), dtype, D, VT);
  if (row < 0) return -1;
  const int64_t smem = state_smem(variant, D, VT);
  return smem > 0 && smem <= caps.smem_block ? row : -1;
}

// The V tile of the mma.sync stage 2: more tiles fill more SMs but repeat the state-independent work
// (P) per tile and shrink each product. Among the tiles that fit, the one with the least estimated
// time: waves of blocks (blocks an SM from shared memory, at most one, two at D = 64, from registers)
// times the busiest warp's tensor-core work per chunk (mma.sync count plus a fixed cost for barriers,
// loads and epilogues). 0 when none fits.
int pick_tile_mma(const registry::Caps& caps, int32_t dtype, int D, int64_t units) {
  int best = 0;
  double best_cost = 1e300;
  for (int vt : {128, 64, 32}) {
    if (state_row(caps, "mma", dtype, D, vt) < 0) continue;
    const int64_t smem = state_smem("mma", D, vt);
    double per_chunk = 64;
    if (D == 64) per_chunk += 16 + 1.25 * vt;
    if (D == 128) per_chunk += 32 + 2.0 * vt;
    if (D == 256) per_chunk += 64 + 3.5 * vt;
    const int64_t by_smem = caps.smem_sm / (smem + 1024);
    const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(D == 64 ? 2 : 1, by_smem));
    const int64_t slots = static_cast<int64_t>(caps.sms) * per_sm;
    const int64_t blocks = units * (D / vt);
    const double cost = static_cast<double>((blocks + slots - 1) / slots) * per_chunk;
    if (cost < best_cost * 0.999) best_cost = cost, best = vt;
  }
  return best;
}

// The V tile of a wgmma stage 2 (one block an SM): waves of blocks times a chunk's cycles, the
// tensor-core time of its products at the dense rate (4096 FLOP a cycle an SM) plus a fixed cost for
// barriers, the element-wise steps and the loads' issue. 0 when none fits.
int pick_tile_sm90(const registry::Caps& caps, const std::string& variant, int32_t dtype, int D, int64_t units) {
  int best = 0;
  double best_cost = 1e300;
  for (int vt : {128, 64, 32}) {
    if (state_row(caps, variant, dtype, D, vt) < 0) continue;
    const double flops = 2.0 * 64 * D * vt * 2 + 2.0 * 64 * 64 * D + 2.0 * 64 * 64 * vt + 2.0 * D * 64 * vt;
    const double per_chunk = flops / 4096 + 400 + 3.0 * vt;
    const int64_t blocks = units * (D / vt);
    const double cost = static_cast<double>((blocks + caps.sms - 1) / caps.sms) * per_chunk;
    if (cost < best_cost * 0.999) best_cost = cost, best = vt;
  }
  return best;
}

// Microseconds a chunk step of a Hopper stage-2 kernel takes (a fixed latency plus a little per V
// column), the cost model of the segment plans, fitted to H200 measurements at tiles 64 and 128
// (bench/NOTES_linear.md).
double step_us(const std::string& variant, int vt) {
  return variant == "split" ? 0.6 + 0.0156 * vt : 3.4 + 0.023 * vt;
}

// The cheaper tile for a pass of `jobs` block rows (restricted to `only` when nonzero), and its cost
// in step-microseconds a chunk; 0 when none fits.
int segment_pass_tile(const registry::Caps& caps, const std::string& variant, int32_t dtype, int D, int64_t jobs,
                      int only, double& cost) {
  int best = 0;
  cost = 1e300;
  for (int vt : {128, 64, 32}) {
    if ((only != 0 && only != vt) || state_row(caps, variant, dtype, D, vt) < 0) continue;
    const int64_t blocks = jobs * (D / vt);
    const double c = static_cast<double>((blocks + caps.sms - 1) / caps.sms) * step_us(variant, vt);
    if (c < cost * 0.999) cost = c, best = vt;
  }
  return best;
}

// Why the chunked tensor-core forward cannot serve the call, or "" when it can.
std::string fast_fwd_refusal(const FwdShape& s, const registry::Caps& caps) {
  if (s.recurrent) return "the recurrent algorithm was asked for";
  if (s.chunk_size != kChunk && s.chunk_outputs) return "chunk_states, aw and au need chunk_size 64";
  if (!half_dtype(s.dtype)) return "it needs bfloat16 or float16 inputs";
  if (s.K != s.V || (s.K != 64 && s.K != 128 && s.K != 256)) return "it needs K = V in {64, 128, 256}";
  if (caps.major < 8) return "it needs compute capability 8.0 or newer";
  if (runnable(caps, "linear.fwd.prep", "mma", s.dtype, s.K, 0) < 0) return "its kernels are not built for this GPU";
  if (prep_smem(s.K) > caps.smem_block) return "its shared memory does not fit this GPU";
  if (!s.aligned) return "it needs 16-byte aligned rows (data and strides of q, k, v, output)";
  const bool sm90 = caps.is_hopper() && (s.K == 128 || s.K == 256) &&
                    pick_tile_sm90(caps, s.K == 128 ? "split" : "wgmma", s.dtype, s.K, s.N * s.H) != 0;
  if (!sm90 && pick_tile_mma(caps, s.dtype, s.K, s.N * s.H) == 0) return "its shared memory does not fit this GPU";
  return "";
}

// The stage-2 kernel and tile of the fast forward.
void plan_state(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t, FwdChoice& c,
                std::string& variant, int& vt) {
  const int D = s.K;
  const std::string& want = t.get("linear.fwd.state");
  const int asked_tile = t.get_int("linear.fwd.state.tile");
  variant = want;
  if (want == "auto") {
    // On Hopper the wgmma kernels (split at D 128, the two-role one at D 256); elsewhere mma.sync.
    const char* hopper = D == 128 ? "split" : D == 256 ? "wgmma" : nullptr;
    variant = caps.is_hopper() && hopper != nullptr && pick_tile_sm90(caps, hopper, s.dtype, D, s.N * s.H) != 0
                  ? hopper
                  : "mma";
  }
  if (asked_tile != 0) {
    if (state_row(caps, variant, s.dtype, D, asked_tile) < 0) {
      refuse("delta_rule_fwd", "linear.fwd.state.tile=" + std::to_string(asked_tile),
             "no runnable linear.fwd.state." + variant + " kernel of that tile at D = " + std::to_string(D));
    }
    vt = asked_tile;
  } else {
    vt = variant == "mma" ? pick_tile_mma(caps, s.dtype, D, s.N * s.H)
                          : pick_tile_sm90(caps, variant, s.dtype, D, s.N * s.H);
  }
  if (vt == 0) {
    const std::string why = "no linear.fwd.state." + variant + " kernel runs on this GPU at D = " + std::to_string(D);
    if (want != "auto") refuse("delta_rule_fwd", "linear.fwd.state=" + want, why);
    fail(AK_ERR_UNSUPPORTED, "delta_rule_fwd: " + why);
  }
  c.state_row = registry::find("linear.fwd.state", variant.c_str(), s.dtype, D, vt);
}

// Splits the Hopper state pass into segments (summaries in parallel, a combine, the outputs) when the
// model says it pays: for few long sequences and heads, which leave SMs idle.
void plan_segments(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t, const std::string& variant,
                   int vt, FwdChoice& c) {
  const std::string& want = t.get("linear.fwd.segments");
  if (want == "off" || variant == "mma" || s.chunk_states) {
    if (want != "auto" && want != "off") {
      refuse("delta_rule_fwd", "linear.fwd.segments=" + want,
             variant == "mma" ? "the mma.sync state kernel has no segments" : "chunk_states need the plain pass");
    }
    return;
  }
  const bool automatic = want == "auto";
  const int forced = automatic ? 0 : std::stoi(want);
  const int D = s.K;
  const int asked_tile = t.get_int("linear.fwd.state.tile");
  const int64_t units = s.N * s.H;
  double best = 1e300;
  if (automatic) {
    double c0;
    segment_pass_tile(caps, variant, s.dtype, D, units, vt, c0);
    // A split must win by 25%: the model is about 20% optimistic for split plans (pass 1's wave waits
    // for its slowest job, segment 0 with output; the combine; two launches).
    best = c0 * static_cast<double>(s.longest64) * 0.75;
  }
  for (int P = automatic ? 2 : forced; P <= (automatic ? 16 : forced); ++P) {
    const int64_t seg = (s.longest64 + P - 1) / P;
    if (automatic && seg < 4) break;
    double c1, c2;
    const int vt1 = segment_pass_tile(caps, variant, s.dtype, D, units * 2 * (P - 1), asked_tile, c1);
    const int vt2 = segment_pass_tile(caps, variant, s.dtype, D, units * (P - 1), asked_tile, c2);
    if (vt1 == 0 || vt2 == 0) continue;
    const double cost = static_cast<double>(seg) * (c1 + c2) + 3.0 * (P - 1);  // + the combine's products
    if (!automatic || cost < best) {
      best = cost;
      c.segments = P;
      c.seg_chunks = static_cast<int>(std::max<int64_t>(1, seg));
      c.pass1_row = registry::find("linear.fwd.state", variant.c_str(), s.dtype, D, vt1);
      c.state_row = registry::find("linear.fwd.state", variant.c_str(), s.dtype, D, vt2);
    }
  }
}

std::string tile_of(int row) { return std::to_string(registry::row(row).tile); }

// The states tile of the backward's state pass: the widest of 64, 32, 16 (those built for D) whose
// blocks fill two thirds of the multiprocessors, else the narrowest: with few sequences and heads a
// narrower tile halves each block's sequential pass (bench/results/2026-12-03c_gdn_bwd_tiles_sweep.json:
// 16 wins by 7-10% at 8 and 16 sequence-heads, 32 at 32, 64 from 48 on).
int pick_states_tile(const BwdShape& s, const registry::Caps& caps) {
  int chosen = 64;
  for (int tile = 64; tile >= 16; tile /= 2) {
    if (runnable(caps, "linear.bwd.states", "mma", s.dtype, s.K, tile) < 0) continue;
    chosen = tile;
    const int64_t blocks = static_cast<int64_t>(s.K / tile) * s.H * s.N;
    if (blocks * 3 >= 2 * static_cast<int64_t>(caps.sms)) break;
  }
  return chosen;
}

// The dstates tile: the narrowest of 32, 64, 128 (at most D, fitting shared memory) whose blocks fit
// in one wave of the multiprocessors; the widest when none does. A narrower tile halves each block's
// sequential pass, but a second wave costs a whole pass (H200, 72 heads at D = 128: 128 beats 64 by 6%).
int pick_dstates_tile(const BwdShape& s, const registry::Caps& caps) {
  const int D = s.K;
  int widest = 32;
  for (int vs = 32; vs <= std::min(D, 128); vs *= 2) {
    const int64_t smem = vs == 128   ? (D == 128 ? cuda::bwd::dstates_smem<128, 128>() : cuda::bwd::dstates_smem<256, 128>())
                         : vs == 64 ? (D == 64    ? cuda::bwd::dstates_smem<64, 64>()
                                       : D == 128 ? cuda::bwd::dstates_smem<128, 64>()
                                                  : cuda::bwd::dstates_smem<256, 64>())
                                    : 0;
    if (smem > caps.smem_block) continue;
    widest = vs;
    if (s.N * s.H * (D / vs) <= caps.sms) return vs;
  }
  return widest;
}

int64_t grads_smem(int D) {
  using namespace cuda::bwd;
  if (D == 64) return static_cast<int64_t>(fast_grads_smem<64>());
  if (D == 128) return static_cast<int64_t>(fast_grads_smem<128>());
  return static_cast<int64_t>(std::max(fast_grads256_smem_v(), fast_grads256_smem_k()));
}

std::string fast_bwd_refusal(const BwdShape& s, const registry::Caps& caps) {
  if (!half_dtype(s.dtype)) return "it needs bfloat16 or float16 inputs";
  if (s.K != s.V || (s.K != 64 && s.K != 128 && s.K != 256)) return "it needs K = V in {64, 128, 256}";
  if (caps.major < 8) return "it needs compute capability 8.0 or newer";
  if (runnable(caps, "linear.bwd.prep", "mma", s.dtype, s.K, 0) < 0) return "its kernels are not built for this GPU";
  if (grads_smem(s.K) > caps.smem_block) return "its shared memory does not fit this GPU";
  if ((!s.l2norm && !s.aligned_qk) || !s.aligned_rest) {
    return "it needs 16-byte aligned rows (q, k unless L2-normalised, v, d_output, dq, dk, dv)";
  }
  return "";
}

// A tiled stage of the backward: the asked tile (which must exist and run), else `automatic`.
int bwd_tile_row(const registry::Caps& caps, const tuning::Table& t, const char* stage, int32_t dtype, int D,
                 int automatic, const std::string& variant = "mma") {
  const std::string key = std::string(stage) + ".tile";
  const int asked = t.get_int(key);
  const int tile = asked != 0 ? asked : automatic;
  const int row = runnable(caps, stage, variant.c_str(), dtype, D, tile);
  if (row < 0) {
    refuse("delta_rule_bwd", (variant == "mma" ? key : std::string(stage) + "=" + variant + ", " + key) + "=" +
                                 std::to_string(tile),
           std::string("no runnable ") + stage + "." + variant + " kernel of that tile at D = " + std::to_string(D));
  }
  return row;
}

// The split dstates kernel's shared memory at a V tile (32 or 64).
int64_t dstates_split_smem(int tile) {
  return tile == 32 ? cuda::bwd::DStatesSplitLayout<128, 32>::kAlloc : cuda::bwd::DStatesSplitLayout<128, 64>::kAlloc;
}

// The dstates kernel: the split one where it runs (Hopper, D 128) at tiles 32 / 64 and its shared
// memory fits, else mma.sync.
int dstates_row(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  const std::string& want = t.get("linear.bwd.dstates");
  int automatic = pick_dstates_tile(s, caps);
  const int asked = t.get_int("linear.bwd.dstates.tile");
  const int tile = asked != 0 ? asked : automatic;
  const bool split_runs = tile <= 64 && runnable(caps, "linear.bwd.dstates", "split", s.dtype, s.K, tile) >= 0 &&
                          dstates_split_smem(tile) <= caps.smem_block;
  const std::string variant = want == "auto" ? (split_runs ? "split" : "mma") : want;
  if (variant == "split") automatic = std::min(automatic, 64);  // its tiles: 32 and 64
  const int row = bwd_tile_row(caps, t, "linear.bwd.dstates", s.dtype, s.K, automatic, variant);
  if (variant == "split" && dstates_split_smem(registry::row(row).tile) > caps.smem_block) {
    refuse("delta_rule_bwd", "linear.bwd.dstates=split", "its shared memory does not fit");
  }
  return row;
}

bool aligned_rows(const ak_tensor* t) {
  if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d) {
    if (t->strides[d] % 8 != 0) return false;
  }
  return true;
}

}  // namespace

FwdShape fwd_shape(const DeltaFwd& a, bool save) {
  const DeltaProblem& p = a.p;
  FwdShape s;
  s.dtype = p.dtype;
  s.K = static_cast<int>(p.K);
  s.V = static_cast<int>(p.V);
  s.N = p.N;
  s.H = p.H;
  s.varlen = p.varlen;
  // A packed call's work is sized by its capacity (chunk_map.cuh). Its longest sequence, which sizes the
  // state pass's segments, comes from the offsets when they were read back; in a graph capture they stay
  // on the device and the bound T is used: few long packed sequences may then be split differently
  // (results agree to rounding, not bit for bit, with the eager call).
  s.longest64 = (p.T + kChunk - 1) / kChunk;
  if (p.varlen && !p.offsets_on_device) {
    s.longest64 = 0;
    for (int64_t n = 0; n < p.N; ++n) {
      s.longest64 = std::max(s.longest64, (p.seq_start[n + 1] - p.seq_start[n] + kChunk - 1) / kChunk);
    }
  }
  s.chunks64 = p.chunk_capacity(kChunk);
  s.chunk_size = p.chunk_size;
  s.recurrent = p.recurrent;
  s.chunk_states = a.chunk_states != nullptr;
  s.factors = a.aw != nullptr || a.au != nullptr;
  s.chunk_outputs = s.chunk_states || s.factors;
  s.save = save;
  s.aligned = aligned_rows(a.q) && aligned_rows(a.k) && aligned_rows(a.v) && aligned_rows(a.output);
  return s;
}

FwdChoice plan_fwd(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  FwdChoice c;
  c.plan.op = "linear.fwd";
  const std::string& path = t.get("linear.fwd.path");
  const std::string refusal = path == "general" ? "linear.fwd.path=general" : fast_fwd_refusal(s, caps);
  if (path == "fast" && !refusal.empty()) refuse("delta_rule_fwd", "linear.fwd.path=fast", refusal);
  if (!refusal.empty()) {
    c.plan.path = "general";
    c.recurrent_row = runnable(caps, "linear.fwd.recurrent", "simt", s.dtype, 0, 0);
    require(c.recurrent_row >= 0, "delta_rule_fwd: the general kernels are not built for this GPU");
    c.plan.rows.push_back(c.recurrent_row);
    if (s.factors) {
      c.wy_row = runnable(caps, "linear.fwd.wy", "simt", s.dtype, 0, 0);
      c.plan.rows.push_back(c.wy_row);
    }
    c.plan.detail("why", refusal);
    return c;
  }
  c.fast = true;
  c.plan.path = "fast";
  c.prep_row = plan_prep(s, caps, t);
  std::string variant;
  int vt = 0;
  plan_state(s, caps, t, c, variant, vt);
  plan_segments(s, caps, t, variant, vt, c);
  const std::string& loads = t.get("linear.fwd.loads");
  if (variant == "split") {
    if (loads == "tma" && s.varlen) {
      refuse("delta_rule_fwd", "linear.fwd.loads=tma", "packed sequences load with cp.async");
    }
    // A call without tokens has nothing to load, and a tensor map cannot have an extent of 0.
    c.tma_loads = !s.varlen && s.chunks64 > 0 && loads != "cp.async";
  } else if (loads != "auto") {
    refuse("delta_rule_fwd", "linear.fwd.loads=" + loads, "only the split state kernel has a choice of loads");
  }
  c.save = s.save && s.chunks64 > 0 && variant != "mma" && (s.K == 128 || s.K == 256);
  c.plan.rows.push_back(c.prep_row);
  if (c.segments > 1) c.plan.rows.push_back(c.pass1_row);
  c.plan.rows.push_back(c.state_row);
  c.plan.detail("tile", registry::row(c.state_row).tile);
  if (c.segments > 1) {
    c.plan.detail("segments", c.segments);
    c.plan.detail("segment_chunks", c.seg_chunks);
  }
  if (variant == "split") c.plan.detail("loads", c.tma_loads ? "tma" : "cp.async");
  c.plan.detail("saves_states", c.save ? "true" : "false");
  return c;
}

BwdChoice plan_bwd(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t) {
  BwdChoice c;
  c.plan.op = "linear.bwd";
  const std::string& path = t.get("linear.bwd.path");
  const std::string refusal = path == "general" ? "linear.bwd.path=general" : fast_bwd_refusal(s, caps);
  if (path == "fast" && !refusal.empty()) refuse("delta_rule_bwd", "linear.bwd.path=fast", refusal);
  if (!refusal.empty()) {
    c.plan.path = "general";
    c.chunk = s.chunk_size;
    c.general_row = runnable(caps, "linear.bwd.general", "simt", s.dtype, 0, 0);
    require(c.general_row >= 0, "delta_rule_bwd: the general kernels are not built for this GPU");
    c.plan.rows.push_back(c.general_row);
    c.plan.detail("chunk", c.chunk);
    c.plan.detail("why", refusal);
    return c;
  }
  const int D = s.K;
  c.fast = true;
  c.plan.path = "fast";
  c.chunk = kChunk;
  c.prep_row = registry::find("linear.bwd.prep", "mma", s.dtype, D, 0);
  // Who normalises q and k: prep as it loads them (16-byte rows), or a kernel of its own.
  const std::string& l2 = t.get("linear.bwd.l2norm");
  if (s.l2norm) {
    if (l2 == "prep" && !s.aligned_qk) {
      refuse("delta_rule_bwd", "linear.bwd.l2norm=prep", "prep reads q and k as 16-byte rows");
    }
    c.l2_in_prep = l2 != "kernel" && s.aligned_qk;
    c.fused_l2 = s.HK == s.H && D != 256;
  } else if (l2 != "auto") {
    refuse("delta_rule_bwd", "linear.bwd.l2norm=" + l2, "the call has no L2 norm");
  }
  c.plan.rows.push_back(c.prep_row);
  if (!s.saved) {
    c.states_row = bwd_tile_row(caps, t, "linear.bwd.states", s.dtype, D, pick_states_tile(s, caps));
    c.plan.rows.push_back(c.states_row);
  }
  c.dstates_row = dstates_row(s, caps, t);
  c.plan.rows.push_back(c.dstates_row);
  const std::string& want = t.get("linear.bwd.grads");
  std::string variant = want;
  if (want == "auto") {
    // At D 128 the wgmma kernel where it runs and fits (Hopper), else mma.sync.
    const bool wgmma_runs = D == 128 && runnable(caps, "linear.bwd.grads", "wgmma", s.dtype, D, 0) >= 0 &&
                            cuda::bwd::GradsSm90Layout::kAlloc <= caps.smem_block;
    variant = D == 256 ? "two_pass" : wgmma_runs ? "wgmma" : "fused";
  }
  c.grads_row = runnable(caps, "linear.bwd.grads", variant.c_str(), s.dtype, D, 0);
  if (c.grads_row < 0) {
    refuse("delta_rule_bwd", "linear.bwd.grads=" + variant, "no runnable kernel of it at D = " + std::to_string(D));
  }
  if (variant == "wgmma" && cuda::bwd::GradsSm90Layout::kAlloc > caps.smem_block) {
    refuse("delta_rule_bwd", "linear.bwd.grads=wgmma", "its shared memory does not fit");
  }
  c.plan.rows.push_back(c.grads_row);
  if (c.states_row >= 0) c.plan.detail("states_tile", tile_of(c.states_row));
  c.plan.detail("dstates_tile", tile_of(c.dstates_row));
  c.plan.detail("from_saved", s.saved ? "true" : "false");
  if (s.l2norm) c.plan.detail("l2norm", std::string(c.l2_in_prep ? "prep" : "kernel") + (c.fused_l2 ? ", fused" : ""));
  return c;
}

DecodeChoice plan_decode(const DecodeShape& s, const registry::Caps& caps, const tuning::Table& t) {
  DecodeChoice c;
  c.plan.op = "linear.decode";
  // The tile kernel where it serves (K 64 / 128 / 256, 16-byte rows), else the register kernel (any K up
  // to 256, any alignment); the tuning key linear.decode pins one.
  std::string why_not_tile;
  if (s.K != 64 && s.K != 128 && s.K != 256) why_not_tile = "K is not 64, 128 or 256";
  else if (!s.aligned) why_not_tile = "the rows of the state or the new state are not 16-byte aligned";
  const int tile = why_not_tile.empty() ? runnable(caps, "linear.decode", "tile", s.dtype, int(s.K), 0) : -1;
  if (why_not_tile.empty() && tile < 0) why_not_tile = "it is not built for this GPU";
  const std::string& want = t.get("linear.decode");
  if (want == "tile" && tile < 0) {
    fail(AK_ERR_UNSUPPORTED, "delta_rule_decode: tuning linear.decode=tile cannot serve this call: " + why_not_tile);
  }
  if (want != "simt" && tile >= 0) {
    c.plan.path = "tile";
    c.row = tile;
  } else {
    c.plan.path = "simt";
    c.row = runnable(caps, "linear.decode", "simt", s.dtype, 0, 0);
    require(c.row >= 0, "delta_rule_decode: the decode kernel is not built for this GPU");
    if (want == "auto") c.plan.detail("why", "tile kernel: " + why_not_tile);
  }
  c.plan.rows.push_back(c.row);
  return c;
}

std::string plan_query(const std::string& op, plan::Query& q) {
  if (op.rfind("linear.gla.", 0) == 0) return gla_planning::plan_gla_query(op, q);
  if (op.rfind("linear.kda.", 0) == 0) return kda_planning::plan_kda_query(op, q);
  if (op == "linear.paged_decode") return paged_planning::plan_paged_decode_query(op, q);
  require(op == "linear.fwd" || op == "linear.bwd" || op == "linear.decode",
          "query: op must be linear.fwd, linear.bwd or linear.decode, got '" + op + "'");
  const registry::Caps caps = plan::caps_of(q);
  const tuning::Table t = tuning::current();
  const int32_t dtype = q.dtype("dtype");
  if (op == "linear.decode") {
    DecodeShape d;
    d.dtype = dtype;
    d.K = q.integer("k", 128);
    d.aligned = q.flag("aligned", true);
    q.finish();
    return plan_decode(d, caps, t).plan.json();
  }
  const int64_t b = q.integer("b", 1), T = q.integer("t", 4096);
  const int64_t H = q.integer("h", 16), HK = q.integer("hk", H);
  const int K = static_cast<int>(q.integer("k", 128)), V = static_cast<int>(q.integer("v", K));
  const std::vector<int64_t> seqlens = q.list("seqlens");
  const int chunk = static_cast<int>(q.integer("chunk_size", 64));
  const bool recurrent = q.flag("recurrent", false);
  const int64_t N = seqlens.empty() ? b : static_cast<int64_t>(seqlens.size());
  // A packed call of these lengths (T their sum), sized by its capacity as fwd_shape does.
  int64_t tokens = T, longest = (T + kChunk - 1) / kChunk;
  if (!seqlens.empty()) {
    tokens = 0, longest = 0;
    for (int64_t len : seqlens) tokens += len, longest = std::max(longest, (len + kChunk - 1) / kChunk);
  }
  const int64_t chunks = DeltaProblem::chunks_for(!seqlens.empty(), b, tokens, N, kChunk);
  if (op == "linear.fwd") {
    FwdShape s;
    s.dtype = dtype, s.K = K, s.V = V, s.N = N, s.H = H, s.varlen = !seqlens.empty();
    s.chunks64 = chunks, s.longest64 = longest, s.chunk_size = chunk, s.recurrent = recurrent;
    s.chunk_states = q.flag("chunk_states", false);
    s.factors = q.flag("factors", false);
    s.chunk_outputs = s.chunk_states || s.factors;
    s.save = q.flag("save", false);
    s.aligned = q.flag("aligned", true);
    q.finish();
    return plan_fwd(s, caps, t).plan.json();
  }
  BwdShape s;
  s.dtype = dtype, s.K = K, s.V = V, s.N = N, s.H = H, s.HK = HK;
  s.chunk_size = recurrent ? 64 : chunk;
  s.l2norm = q.flag("l2norm", false);
  s.saved = q.flag("saved", false);
  s.aligned_qk = q.flag("aligned", true);
  s.aligned_rest = s.aligned_qk;
  q.finish();
  return plan_bwd(s, caps, t).plan.json();
}

namespace {
const bool registered = plan::register_planner("linear", plan_query);
}  // namespace

}  // namespace ak::linear::planning
