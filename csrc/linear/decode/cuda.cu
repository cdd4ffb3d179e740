// The paged decode step on a CUDA device, for now through the general path: the CPU backend on host
// copies of the tensors (the pool included), the outputs and the pool copied back. Exact and slow; the
// fused kernel is the next step.
#include "linear/decode/cpu.h"
#include "linear/decode/cuda.h"
#include "linear/gla/cuda/host_mirror.h"

namespace ak::linear::cuda {

void paged_decode(const PagedDecode& d) {
  HostMirror m;
  PagedDecode h = d;
  h.qkv = m.add(d.qkv, false), h.raw_gate = m.add(d.raw_gate, false), h.raw_beta = m.add(d.raw_beta, false);
  h.a_log = m.add(d.a_log, false), h.dt_bias = m.add(d.dt_bias, false);
  h.indices = m.add(d.indices, false), h.has_initial = m.add(d.has_initial, false);
  h.state = m.add(d.state, true), h.output = m.add(d.output, true);
  const int32_t* idx = static_cast<const int32_t*>(h.indices->data);
  for (int64_t b = 0; b < d.B; ++b) {
    require(idx[b] < d.slots, "state_indices: entry " + std::to_string(b) + " is " + std::to_string(idx[b]) +
                                  ", past the " + std::to_string(d.slots) + " slots of state_cache");
  }
  ak::linear::cpu::paged_decode(h);
  m.write_back();
}

}  // namespace ak::linear::cuda
