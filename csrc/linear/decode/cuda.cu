// The paged decode step on a CUDA device, for now through the general path: the CPU backend on host
// copies of the tensors (the pool included), the outputs and the pool copied back. Exact and slow; the
// fused kernel is the next step.
#include "linear/decode/cpu.h"
#include "linear/decode/cuda.h"
#include "linear/decode/slots.h"
#include "linear/gla/cuda/host_mirror.h"

namespace ak::linear::cuda {

void paged_decode(const PagedDecode& d) {
  HostMirror m;
  PagedDecode h = d;
  h.qkv = m.add(d.qkv, false), h.raw_gate = m.add(d.raw_gate, false), h.raw_beta = m.add(d.raw_beta, false);
  h.a_log = m.add(d.a_log, false), h.dt_bias = m.add(d.dt_bias, false);
  h.indices = m.add(d.indices, false), h.has_initial = m.add(d.has_initial, false);
  h.state = m.add(d.state, true), h.output = m.add(d.output, true);
  require_slots_in_pool(h.indices, d.B, d.slots);
  ak::linear::cpu::paged_decode(h);
  m.write_back();
}

}  // namespace ak::linear::cuda
