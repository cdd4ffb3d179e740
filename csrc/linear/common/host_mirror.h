// The linear families' general path on a CUDA device: calls the fast kernels do not serve (fp32, head
// dims that are not a multiple of 8, unaligned views, the token-by-token algorithm, ...) run the CPU
// backend on host copies of the tensors and copy the outputs back. Exact, slow; the planner's choice is
// visible in lastPlan().
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/common.h"

namespace ak::linear::cuda {

// The part of an output the CPU backend writes: every element, or every element whose index along
// `axis` lies in [begin, end) (a packed call's tokens). Only that part is copied back, so the rest of
// the device tensor keeps its bytes, and nothing the backend leaves alone is read from the device.
struct Written {
  int axis = -1;  // -1: the whole tensor
  int64_t begin = 0, end = 0;

  static Written all() { return {}; }
  static Written along(int axis, int64_t begin, int64_t end) { return {axis, begin, end}; }
};

class HostMirror {
 public:
  // A host copy of an input (nullptr stays nullptr).
  const ak_tensor* input(const ak_tensor* t) { return add(t, Role::kInput, Written::all()); }
  // A zero-filled host buffer for an output: its device bytes are never read; write_back() copies
  // the `written` part back.
  const ak_tensor* output(const ak_tensor* t, Written written = Written::all()) {
    return add(t, Role::kOutput, written);
  }
  // A tensor the call both reads and updates in place (a state pool): copied in and back whole.
  const ak_tensor* in_out(const ak_tensor* t) { return add(t, Role::kInOut, Written::all()); }
  void write_back();

 private:
  enum class Role { kInput, kOutput, kInOut };
  struct Entry {
    const ak_tensor* device = nullptr;
    ak_tensor host{};
    std::vector<unsigned char> bytes;
    Role role = Role::kInput;
    Written written;
  };
  const ak_tensor* add(const ak_tensor* t, Role role, Written written);
  std::deque<Entry> entries_;
};

// What a packed call writes of a token-indexed output ([B, T, ...], tokens on axis 1): the tokens from
// the first offset to the last; a fixed-length call writes every row.
Written token_rows(bool varlen, const std::vector<int64_t>& seq_start);

}  // namespace ak::linear::cuda
