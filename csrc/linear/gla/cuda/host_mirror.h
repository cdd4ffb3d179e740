// The gated linear family's general path on a CUDA device: calls the fast kernels do not serve (fp32,
// head dims that are not a multiple of 8, unaligned views, the token-by-token algorithm) run the CPU
// backend on host copies of the tensors and copy the outputs back. Exact, slow; the planner's choice
// is visible in lastPlan().
#pragma once

#include <deque>
#include <vector>

#include "core/common.h"

namespace ak::linear::cuda {

class HostMirror {
 public:
  // A host copy of t (nullptr stays nullptr): its bytes are copied in (outputs too, so rows the CPU
  // backend leaves untouched keep their values), and copied back by write_back() when `output`.
  // `whole`: the CPU backend writes every element of this output, so a contiguous one is not copied in
  // (its device bytes may be uninitialised; nothing reads them).
  const ak_tensor* add(const ak_tensor* t, bool output, bool whole = false);
  void write_back();

 private:
  struct Entry {
    const ak_tensor* device = nullptr;
    ak_tensor host{};
    std::vector<unsigned char> bytes;
    bool output = false;
  };
  std::deque<Entry> entries_;
};

}  // namespace ak::linear::cuda
