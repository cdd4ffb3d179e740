// The record a captured call reports a bad argument into. Inside a graph capture nothing can be read
// back to the host, so the pool ops check their indices and offsets on the device instead: the first
// failure of a replay is written here and to its mirror in mapped host memory (no copy on the success
// path), and replay() / synchronize() turn it into the error an eager call would have raised. Once a check
// has failed, every checked kernel of the graph returns without writing (check_failed below).
#pragma once

#include <cstdint>

namespace ak::cuda {

struct DeviceCheck {
  int32_t code;   // a CheckCode; 0 while every check passed
  int32_t label;  // which captured call failed (an index into the graph's labels)
  int64_t entry, value, limit, other;
  DeviceCheck* mirror;  // the host's copy (mapped pinned memory); a reset leaves this field alone
};

enum CheckCode : int32_t {
  kCheckPassed = 0,
  kCheckSlotPastPool = 1,     // entry `entry` names slot `value`, the pool has `limit` slots
  kCheckSlotTwice = 2,        // entries `other` and `entry` both name slot `value`
  kCheckOffsetsStart = 3,     // cu_seqlens[0] is `value`
  kCheckOffsetsDecrease = 4,  // cu_seqlens[entry] = value < cu_seqlens[entry - 1] = other
  kCheckOffsetsPastEnd = 5,   // the last offset `value` exceeds the `limit` tokens
};

#ifdef __CUDACC__
// True once a check of the graph has failed (and not yet been reported): a checked kernel then writes
// nothing. Null outside a capture.
__device__ __forceinline__ bool check_failed(const DeviceCheck* c) {
  return c != nullptr && *reinterpret_cast<const volatile int32_t*>(&c->code) != kCheckPassed;
}
#endif

}  // namespace ak::cuda
