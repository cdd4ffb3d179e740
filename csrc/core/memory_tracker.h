// Bytes in use per device, for ak_memory_stats: every allocation made through ak_alloc is recorded
// here with its size and the thread that made it, so tests can check that memory returns to its
// baseline, for the process or for one thread (tests running side by side in Workers).
#pragma once

#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "include/attnkit.h"

namespace ak {

class MemoryTracker {
 public:
  void on_alloc(void* ptr, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::thread::id owner = std::this_thread::get_id();
    sizes_[ptr] = {bytes, owner};
    thread_in_use_[owner] += bytes;
    in_use_ += bytes;
    if (in_use_ > peak_) peak_ = in_use_;
    ++total_;
  }
  // Returns false when ptr was not allocated here (or was freed already).
  bool on_free(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return false;
    in_use_ -= it->second.bytes;
    auto owner = thread_in_use_.find(it->second.owner);
    if ((owner->second -= it->second.bytes) == 0) thread_in_use_.erase(owner);
    sizes_.erase(it);
    return true;
  }
  // Bytes the calling thread allocated that are still live (whoever frees them).
  int64_t thread_in_use() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = thread_in_use_.find(std::this_thread::get_id());
    return it == thread_in_use_.end() ? 0 : it->second;
  }
  void fill(ak_memory_stats_t* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    out->bytes_in_use = in_use_;
    out->peak_bytes = peak_;
    out->live_allocations = static_cast<int64_t>(sizes_.size());
    out->total_allocations = total_;
    out->pool_reserved = 0;
    out->pool_used = 0;
  }

 private:
  struct Allocation {
    int64_t bytes;
    std::thread::id owner;
  };
  std::mutex mutex_;
  std::unordered_map<void*, Allocation> sizes_;
  std::unordered_map<std::thread::id, int64_t> thread_in_use_;
  int64_t in_use_ = 0, peak_ = 0, total_ = 0;
};

}  // namespace ak
