// Host memory for the CPU backend: 64-byte aligned, so vector loads never straddle a line.
#include <cstdlib>

#include "core/common.h"
#include "core/memory_tracker.h"
#include "cpu/backend.h"

namespace ak::cpu {
namespace {
MemoryTracker& tracker() {
  static MemoryTracker t;
  return t;
}
}  // namespace

void* alloc(int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 63) & ~static_cast<size_t>(63);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    fail(AK_ERR_OUT_OF_MEMORY, "could not allocate " + std::to_string(bytes) + " bytes of host memory");
  }
  tracker().on_alloc(p, bytes);
  return p;
}

void free(void* ptr) {
  if (ptr == nullptr) return;
  require(tracker().on_free(ptr), "ptr: not a live CPU allocation of attnkit (freed twice?)");
  std::free(ptr);
}

void memory_stats(ak_memory_stats_t* out) { tracker().fill(out); }

int64_t thread_bytes_in_use() { return tracker().thread_in_use(); }

}  // namespace ak::cpu
