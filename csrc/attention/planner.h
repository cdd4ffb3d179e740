// The attention planner: which registry row serves a call, and with what tiling. Pure host code (the
// CPU build compiles it too), so its decisions are tested on any machine through ak_plan.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"

namespace ak::attention::planning {

// What both directions' planners read of a call.
struct CallShape {
  int32_t dtype = 0;
  int d = 0;
  int n_seq = 0, hq = 0, hkv = 0, sq = 0, skv = 0;
};

struct FwdShape : CallShape {
  int64_t total_kv = 0;  // key rows in all (0: no keys at all)
  bool aligned = true;   // q, k, v, output: 16-byte aligned pointers and strides
  int32_t out_dtype = 0;  // float8_e4m3 inputs: the output dtype (0: dtype)
};

struct FwdChoice {
  plan::Plan plan;   // plan.rows: empty when there is nothing to compute, else the one kernel
  int block_m = 64;  // query rows a work tile
  int heads_per_section = 1;  // (sequence, head) pairs whose K and V share the L2
};

// float8_e4m3 inputs (dense): the 8-bit wgmma_persistent row at D 128 on Hopper; elsewhere path
// "dequantized" (the inputs widened to the output dtype, then that dtype's plan, named in details).
FwdChoice plan_fwd(const FwdShape& s, const registry::Caps& caps, const tuning::Table& t);

struct BwdShape : CallShape {
  bool deterministic = false;
  bool tma_ok = true;  // no zero (broadcast) strides in q, k, v, dO
};

// How the chosen kernel orders dq_accum (BwdParams::dq_layout).
enum class DqOrder : int { kPlain = 0, kHopperFragments = 1, kHopperFull = 2 };

struct BwdChoice {
  plan::Plan plan;  // plan.rows: the main kernel
  DqOrder dq_order = DqOrder::kPlain;
};

BwdChoice plan_bwd(const BwdShape& s, const registry::Caps& caps, const tuning::Table& t);

struct DecodeShape : CallShape {
  int64_t capacity = 0;  // keys a sequence may hold (the split is planned for it)
};

struct DecodeChoice {
  plan::Plan plan;  // plan.rows: the split kernel (its combine runs when splits > 1)
  int64_t splits = 1, chunk = 0;
};

// The shared memory a Hopper block may opt in to: the device the CPU backend's choice mirrors.
constexpr int64_t kHopperBlockSmem = 227 * 1024;

// The decode block for a call under "auto" (bench/results/2026-12-03_decode_blocks.md): "warp" (CUDA cores, a
// warp at a time) for one query row per KV head; for 2 to 16, "pipe" (tensor cores over a ring of stages)
// where its stages fit `smem_block`, except at head dim 256, where "mma" (tensor cores in phases, two
// blocks an SM) reads faster; else "tiled" (CUDA cores in phases) where it serves, else "" with `why` set.
std::string decode_variant(int32_t dtype, int d, int64_t rows, std::string& why,
                           int64_t smem_block = kHopperBlockSmem);

// The decode block under the tuning's attention.decode (auto | tiled | warp | mma | pipe), on either backend:
// a forced variant that cannot serve (for "pipe": its stages past `smem_block`) is AK_ERR_UNSUPPORTED naming
// why, and so is a call no variant serves.
std::string pick_decode(int32_t dtype, int d, int64_t rows, const tuning::Table& t,
                        int64_t smem_block = kHopperBlockSmem);

// The split-key decode: pick_decode's block, its row at the call's dtype and head dim, and the split:
// enough blocks for two per multiprocessor.
DecodeChoice plan_decode(const DecodeShape& s, const registry::Caps& caps, const tuning::Table& t);

// ak_plan for op attention.fwd / attention.bwd / attention.decode: the plan as JSON.
std::string plan_query(const std::string& op, plan::Query& q);

}  // namespace ak::attention::planning
