// What a planner decided for one call: the path, the registry rows it launches, and the other
// choices (tiles, segments, ...). Dispatchers record the plan of every CUDA call (ak_last_plan), and
// ak_plan asks a planner what it would run for a described call, on this GPU or a named one, without
// running anything: both for users and for the tests of the planners, which run on any machine.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"

namespace ak::plan {

struct Plan {
  std::string op;                                            // e.g. "attention.fwd"
  std::string path;                                          // e.g. "wgmma_persistent", "fast", "general"
  std::vector<int> rows;                                     // registry rows launched, in order
  std::vector<std::pair<std::string, std::string>> details;  // other decisions, in order

  void detail(const std::string& key, const std::string& value) { details.emplace_back(key, value); }
  void detail(const std::string& key, int64_t value) { details.emplace_back(key, std::to_string(value)); }
  // {"op": ..., "path": ..., "kernels": [{"name", "stage", "variant", "dtype", "d", "tile"}], "details": {...}}
  std::string json() const;
};

// The plan of the last CUDA call on this thread.
void set_last(const Plan& p);
const std::string& last_json();

// A described call: "key=value,key=value" (lists as a/b/c). Every key must be read by the planner;
// finish() refuses the ones nobody read, naming them.
class Query {
 public:
  explicit Query(const std::string& text);
  bool has(const std::string& key) const;
  std::string str(const std::string& key, const std::string& fallback);
  int64_t integer(const std::string& key, int64_t fallback);
  bool flag(const std::string& key, bool fallback);
  std::vector<int64_t> list(const std::string& key);
  int32_t dtype(const std::string& key);
  void finish() const;

 private:
  std::vector<std::pair<std::string, std::string>> items_;
  std::set<std::string> used_;
  const std::string* find(const std::string& key);
};

// The GPU a query describes: gpu=<preset> (registry::preset_caps) or device=<index> (this machine's,
// CUDA builds only; the default when neither is given and a GPU is present).
registry::Caps caps_of(Query& q);

// A family's answer to ak_plan: the plan of the described call as JSON (op is e.g. "linear.fwd").
using QueryPlanner = std::string (*)(const std::string& op, Query& q);
// Registers the planner of the ops whose names start with `family` + "." (at static initialisation).
bool register_planner(const char* family, QueryPlanner planner);
// ak_plan: "op=<family>.<op>,key=value,..." -> the plan as JSON.
std::string plan_for(const std::string& query);

}  // namespace ak::plan
