#include "core/tuning.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "core/common.h"
#include "core/registry.h"

namespace ak::tuning {
namespace {

const std::string kAuto = "auto";

std::vector<Key> build_keys() {
  std::vector<Key> out = {
      {"linear.fwd.path", {"fast", "general"},
       "the chunked tensor-core forward of the delta rule, or the general fp32 recurrence"},
      {"linear.bwd.path", {"fast", "general"}, "the tensor-core backward of the delta rule, or the general fp32 one"},
      {"linear.fwd.segments", {"off"}, "the forward state pass split into this many segments per sequence"},
      {"linear.fwd.loads", {"tma", "cp.async"}, "how the split state kernel loads fixed-length q, k, w, u"},
      {"linear.bwd.l2norm", {"prep", "kernel"},
       "with useQkL2norm, the backward normalises q and k in its prep kernel or in a kernel of its own"},
  };
  for (int s = 2; s <= 16; ++s) out[2].values.push_back(std::to_string(s));
  // One key per registry stage with several kernels, one per stage with tiles.
  std::map<std::string, std::set<std::string>> variants;
  std::map<std::string, std::set<int>> tiles;
  std::vector<std::string> order;
  for (int i = 0; i < registry::row_count(); ++i) {
    const registry::Row& r = registry::row(i);
    if (variants.find(r.stage) == variants.end()) order.push_back(r.stage);
    variants[r.stage].insert(r.variant);
    if (r.tile != 0) tiles[r.stage].insert(r.tile);
  }
  for (const std::string& stage : order) {
    if (variants[stage].size() > 1) {
      out.push_back({stage, {variants[stage].begin(), variants[stage].end()}, "the kernel of stage " + stage});
    }
    if (!tiles[stage].empty()) {
      Key k{stage + ".tile", {}, "the tile of stage " + stage};
      for (int t : tiles[stage]) k.values.push_back(std::to_string(t));
      out.push_back(k);
    }
  }
  return out;
}

// Levenshtein distance, for "did you mean".
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// ATTNKIT_TUNE, parsed once for the process: the table every thread starts from.
std::mutex mutex;
bool env_read = false;
Table env_table;
std::string env_error;

// Each thread's own table (a Deno Worker is a thread): one thread's setting, or an op's kernelMap in
// force for its call, never reaches a call on another thread.
struct ThreadTable {
  bool initialised = false;
  Table installed;
  std::string error;  // ATTNKIT_TUNE's parse error, until set() replaces the table
};
thread_local ThreadTable mine;

}  // namespace

const std::string& Table::get(const std::string& key) const {
  const auto it = values.find(key);
  return it == values.end() ? kAuto : it->second;
}

int Table::get_int(const std::string& key) const {
  const std::string& v = get(key);
  return v == kAuto || v == "off" ? 0 : std::atoi(v.c_str());
}

const std::vector<Key>& keys() {
  static const std::vector<Key> all = build_keys();
  return all;
}

Table parse(const std::string& spec, const char* source) {
  Table t;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    require(eq != std::string::npos,
            std::string(source) + ": expected key=value, got '" + item + "' (keys: ak_tune_describe)");
    const std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    const Key* found = nullptr;
    for (const Key& k : keys()) {
      if (k.name == key) found = &k;
    }
    if (found == nullptr) {
      std::string best;
      size_t best_d = 1000;
      for (const Key& k : keys()) {
        const size_t d = distance(key, k.name);
        if (d < best_d) best_d = d, best = k.name;
      }
      std::vector<std::string> names;
      for (const Key& k : keys()) names.push_back(k.name);
      fail(AK_ERR_INVALID_ARGUMENT, std::string(source) + ": unknown key '" + key + "'" +
                                        (best_d <= 3 ? " (did you mean '" + best + "'?)" : "") +
                                        "; the keys are " + join(names, ", "));
    }
    require(t.values.find(key) == t.values.end(), std::string(source) + ": key '" + key + "' is given twice");
    if (value == kAuto) continue;
    require(std::find(found->values.begin(), found->values.end(), value) != found->values.end(),
            std::string(source) + ": " + key + " must be auto or one of " + join(found->values, ", ") + ", got '" +
                value + "'");
    t.values[key] = value;
  }
  return t;
}

Table current() {
  if (!mine.initialised) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!env_read) {
      env_read = true;
      const char* env = std::getenv("ATTNKIT_TUNE");
      if (env != nullptr) {
        try {
          env_table = parse(env, "ATTNKIT_TUNE");
        } catch (const Error& e) {
          env_error = e.what();
        }
      }
    }
    mine.initialised = true;
    mine.installed = env_table;
    mine.error = env_error;
  }
  if (!mine.error.empty()) fail(AK_ERR_INVALID_ARGUMENT, mine.error);
  return mine.installed;
}

void set(const std::string& spec) {
  Table t = parse(spec, "tuning");
  mine.initialised = true;
  mine.error.clear();
  mine.installed = std::move(t);
}

std::string to_string(const Table& t) {
  std::vector<std::string> items;
  for (const auto& [k, v] : t.values) items.push_back(k + "=" + v);
  return join(items, ",");
}

std::string describe_json() {
  std::string current_part;
  try {
    const Table t = current();
    for (const auto& [k, v] : t.values) {
      current_part += (current_part.empty() ? "" : ", ") + json_quoted(k) + ": " + json_quoted(v);
    }
  } catch (const Error&) {
    // a malformed ATTNKIT_TUNE: describe the keys anyway; the next op reports the error
  }
  std::string keys_part;
  for (const Key& k : keys()) {
    std::vector<std::string> values;
    for (const std::string& v : k.values) values.push_back(json_quoted(v));
    keys_part += std::string(keys_part.empty() ? "" : ", ") + "{\"name\": " + json_quoted(k.name) +
                 ", \"values\": [" + join(values, ", ") + "], \"doc\": " + json_quoted(k.doc) + "}";
  }
  return "{\"current\": {" + current_part + "}, \"keys\": [" + keys_part + "]}";
}

}  // namespace ak::tuning
