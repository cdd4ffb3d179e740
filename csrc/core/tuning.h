// The tuning table: every run-time choice of the library in one structure, so that a benchmark or a
// test can pin a kernel without a rebuild. Keys and values:
//   <stage> = auto | <variant>     every registry stage with more than one kernel (e.g.
//                                  linear.fwd.state = mma | wgmma | split, attention.bwd = ...)
//   <stage>.tile = auto | <tile>   every registry stage whose kernels come in tiles
//   linear.fwd.path, linear.bwd.path = auto | fast | general
//   linear.fwd.segments = auto | off | 2 .. 16   (forward state pass split into segments)
//   linear.fwd.loads = auto | tma | cp.async    (how the split state kernel loads fixed-length inputs)
//   linear.bwd.l2norm = auto | prep | kernel     (who normalises q and k in the backward)
// Each thread has its own table: it starts as the environment variable ATTNKIT_TUNE sets it
// ("key=value,key=value", read once per process, at first use) and ak_tune_set replaces it; an unknown key or value is an error that names it. "auto" (or an absent key)
// leaves the choice to the planner. A setting that cannot serve a call makes that call fail with
// AK_ERR_UNSUPPORTED saying why; no setting leaves an output unwritten.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ak::tuning {

struct Table {
  std::map<std::string, std::string> values;  // the keys set to something other than auto

  // The value of a key, "auto" when unset.
  const std::string& get(const std::string& key) const;
  bool is_auto(const std::string& key) const { return values.find(key) == values.end(); }
  // A numeric value (tiles, segments); 0 for auto.
  int get_int(const std::string& key) const;
};

struct Key {
  std::string name;
  std::vector<std::string> values;  // allowed values besides "auto"
  std::string doc;
};

// Every key, with its allowed values.
const std::vector<Key>& keys();
// Parses "key=value,..." (empty: all auto); throws AK_ERR_INVALID_ARGUMENT naming a bad key or value.
Table parse(const std::string& spec, const char* source);
// The calling thread's table in force: ATTNKIT_TUNE's at first use, then whatever set() installed.
// Throws when ATTNKIT_TUNE is malformed and nothing has replaced it since.
Table current();
// Replaces the calling thread's table (an empty spec resets every key to auto).
void set(const std::string& spec);
// "key=value,..." of the keys set (empty when all are auto).
std::string to_string(const Table& t);
// JSON: {"current": {key: value}, "keys": [{"name", "values", "doc"}]}.
std::string describe_json();

}  // namespace ak::tuning
