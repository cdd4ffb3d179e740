#include "core/plan.h"

#include <cstdlib>

#include "core/common.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

namespace ak::plan {
namespace {

thread_local std::string last;

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtoll(s.c_str(), &end, 10);
  return *end == '\0';
}

}  // namespace

std::string Plan::json() const {
  std::string kernels;
  for (int r : rows) {
    const registry::Row& row = registry::row(r);
    kernels += std::string(kernels.empty() ? "" : ", ") + "{\"name\": " + json_quoted(registry::row_name(r)) +
               ", \"stage\": " + json_quoted(row.stage) + ", \"variant\": " + json_quoted(row.variant) +
               ", \"dtype\": " + json_quoted(dtype_name(row.dtype)) + ", \"d\": " + std::to_string(row.d) +
               ", \"tile\": " + std::to_string(row.tile) + "}";
  }
  std::string extra;
  for (const auto& [k, v] : details) {
    extra += std::string(extra.empty() ? "" : ", ") + json_quoted(k) + ": ";
    extra += is_number(v) ? v : json_quoted(v);
  }
  return "{\"op\": " + json_quoted(op) + ", \"path\": " + json_quoted(path) + ", \"kernels\": [" + kernels +
         "], \"details\": {" + extra + "}}";
}

void set_last(const Plan& p) { last = p.json(); }

const std::string& last_json() { return last; }

Query::Query(const std::string& text) {
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t b = item.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
    const size_t eq = item.find('=');
    require(eq != std::string::npos && eq > 0, "query: expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq);
    for (const auto& kv : items_) require(kv.first != key, "query: key '" + key + "' is given twice");
    items_.emplace_back(key, item.substr(eq + 1));
  }
}

const std::string* Query::find(const std::string& key) {
  for (const auto& kv : items_) {
    if (kv.first == key) {
      used_.insert(key);
      return &kv.second;
    }
  }
  return nullptr;
}

bool Query::has(const std::string& key) const {
  for (const auto& kv : items_) {
    if (kv.first == key) return true;
  }
  return false;
}

std::string Query::str(const std::string& key, const std::string& fallback) {
  const std::string* v = find(key);
  return v ? *v : fallback;
}

int64_t Query::integer(const std::string& key, int64_t fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  require(is_number(*v), "query: " + key + " must be an integer, got '" + *v + "'");
  return std::strtoll(v->c_str(), nullptr, 10);
}

bool Query::flag(const std::string& key, bool fallback) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  if (*v == "1" || *v == "true") return true;
  if (*v == "0" || *v == "false") return false;
  fail(AK_ERR_INVALID_ARGUMENT, "query: " + key + " must be true or false, got '" + *v + "'");
}

std::vector<int64_t> Query::list(const std::string& key) {
  std::vector<int64_t> out;
  const std::string* v = find(key);
  if (v == nullptr) return out;
  size_t pos = 0;
  while (pos <= v->size()) {
    const size_t slash = std::min(v->find('/', pos), v->size());
    const std::string part = v->substr(pos, slash - pos);
    require(is_number(part), "query: " + key + " must be integers separated by '/', got '" + *v + "'");
    out.push_back(std::strtoll(part.c_str(), nullptr, 10));
    pos = slash + 1;
  }
  return out;
}

int32_t Query::dtype(const std::string& key) {
  const std::string name = str(key, "bfloat16");
  for (int32_t d : {AK_FLOAT32, AK_FLOAT16, AK_BFLOAT16, AK_FLOAT8_E4M3}) {
    if (name == dtype_name(d)) return d;
  }
  fail(AK_ERR_INVALID_ARGUMENT,
       "query: " + key + " must be float32, float16, bfloat16 or float8_e4m3, got '" + name + "'");
}

void Query::finish() const {
  for (const auto& kv : items_) {
    require(used_.count(kv.first) > 0, "query: unknown key '" + kv.first + "' for this op");
  }
}

registry::Caps caps_of(Query& q) {
  registry::Caps caps;
  if (q.has("gpu")) {
    const std::string name = q.str("gpu", "");
    require(registry::preset_caps(name, caps),
            "query: gpu must be one of h200, h100, a100, l40s (or give device=<index>), got '" + name + "'");
    return caps;
  }
#if AK_WITH_CUDA
  const int64_t device = q.integer("device", 0);
  require(device >= 0 && device < cuda::device_count(),
          "query: device " + std::to_string(device) + " does not exist on this machine (or name a gpu=h200, ...)");
  return cuda::caps(static_cast<int>(device));
#else
  require(!q.has("device"), "query: this library was built without CUDA; name a gpu=h200, h100, a100 or l40s");
  fail(AK_ERR_INVALID_ARGUMENT, "query: name the GPU to plan for, gpu=h200, h100, a100 or l40s");
#endif
}

namespace {

struct Planners {
  std::vector<std::pair<std::string, QueryPlanner>> all;
};
Planners& planners() {
  static Planners p;
  return p;
}

}  // namespace

bool register_planner(const char* family, QueryPlanner planner) {
  planners().all.emplace_back(std::string(family) + ".", planner);
  return true;
}

std::string plan_for(const std::string& text) {
  Query q(text);
  const std::string op = q.str("op", "");
  std::string names;
  for (const auto& [prefix, planner] : planners().all) {
    if (op.rfind(prefix, 0) == 0) return planner(op, q);
    names += (names.empty() ? "" : ", ") + prefix + "*";
  }
  fail(AK_ERR_INVALID_ARGUMENT, "query: op must name an op of " + names + ", got '" + op + "'");
}

}  // namespace ak::plan
