// The sparse planner: which kernel serves an NSA branch (the tiled attention block or the per-item
// kernels), under the tuning table's sparse.nsa.<branch> = auto | mma | tiled | item. Pure host code (the CPU
// build compiles it too, and the CPU backend follows the same rule), so its decisions are tested anywhere.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"

namespace ak::sparse::planning {

struct NsaShape {
  std::string stage;  // sparse.nsa.compression or sparse.nsa.selection
  int32_t dtype = 0;
  int64_t d = 0, dv = 0, hq = 0, hkv = 1;
  bool aligned = true;  // q, k, v start on 16 bytes
};

// Why the tiled blocks cannot serve a call, "" when they can.
std::string tiled_ruled_out(const NsaShape& s);

// The variant under "auto", the CPU's choice too: "mma" (tensor cores) for groups of 8 to 16 query heads,
// else "tiled" (CUDA cores) where the tiled block serves, else "item".
std::string nsa_variant(const NsaShape& s);

// The plan: path "mma", "tiled" or "item", its row. A forced variant that cannot serve is AK_ERR_UNSUPPORTED.
plan::Plan plan_nsa(const NsaShape& s, const registry::Caps& caps, const tuning::Table& t);

// ak_plan for op sparse.nsa.compression / sparse.nsa.selection.
std::string plan_query(const std::string& op, plan::Query& q);

}  // namespace ak::sparse::planning
