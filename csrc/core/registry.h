// The kernel registry as the library sees it at run time: one row per compiled kernel instance
// (stage, variant, architecture, dtype, head dim, tile), generated from the families' tables
// (csrc/<family>/registry.ts) into generated/registry_rows.h, and what the planner knows about a GPU.
// Pure host code: the CPU build compiles it too, so the planners' decisions can be tested anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "include/attnkit.h"

namespace ak::registry {

enum class Arch : int32_t { kSm80 = 0, kSm90a = 1 };

struct Row {
  const char* stage;    // e.g. "linear.fwd.state"
  const char* variant;  // e.g. "split"
  Arch arch;            // lowest architecture its code needs
  int32_t dtype;        // AK_FLOAT32 / AK_FLOAT16 / AK_BFLOAT16
  int32_t d;            // head dim, 0: any
  int32_t tile;         // the launcher's tile parameter, 0: none
};

// A row's launcher in a CUDA build: args points at the launcher's Args, stream is a cudaStream_t.
using LaunchFn = void (*)(const void* args, void* stream);

int row_count();
const Row& row(int index);
// The row serving this stage, variant, dtype, head dim and tile; -1 when the registry has none.
int find(const char* stage, const char* variant, int32_t dtype, int d, int tile);
// Whether any row has this stage (and variant, when not null).
bool has_stage(const char* stage, const char* variant = nullptr);
// As plans write it: linear.fwd.state.split<bfloat16, D128, tile 64>.
std::string row_name(int index);

// What the planner knows about the GPU a call runs on.
struct Caps {
  int major = 0, minor = 0;  // compute capability
  int sms = 0;               // multiprocessors
  int64_t smem_block = 0;    // shared memory a block may opt in to (bytes)
  int64_t smem_sm = 0;       // shared memory of a multiprocessor (bytes)
  int64_t l2 = 0;            // L2 cache (bytes)
  // Per row: its code was built for this GPU. Empty: every row (a description of a GPU, not a device).
  std::vector<bool> built;

  bool is_hopper() const { return major == 9 && minor == 0; }
  // The row exists for this GPU: built for it, and its architecture is the GPU's or older.
  bool can_run(int index) const;
};

// The caps of a named GPU, for plans of a GPU that is not present ("h100", "h200", "a100", "l40s");
// false for an unknown name.
bool preset_caps(const std::string& name, Caps& out);

}  // namespace ak::registry
