// The paged decode step's planner: for a call's shape, dtype and GPU, which fused kernel serves it
// (registry rows linear.paged_decode.bulk and .fused) or why the general path (the CPU backend on host
// copies) runs.
// Pure host code, so `explain` answers for linear.paged_decode on any machine.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"

namespace ak::linear::paged_planning {

struct PagedDecodeShape {
  int32_t dtype = 0;   // packed_qkv's
  int64_t K = 0;
  bool per_channel = false;
  bool aligned = true;  // the pool's base and slot stride keep 16-byte rows
};

struct PagedDecodeChoice {
  plan::Plan plan;
  bool fused = false;
  int row = -1;
};

PagedDecodeChoice plan_paged_decode(const PagedDecodeShape& s, const registry::Caps& caps, const tuning::Table& t);

// ak_plan for linear.paged_decode.
std::string plan_paged_decode_query(const std::string& op, plan::Query& q);

}  // namespace ak::linear::paged_planning
