// The paged causal convolution on a CUDA device, for now through the general path: the CPU backend on
// host copies of the tensors (the pool included), the output and the pool copied back.
#include <string>

#include "linear/decode/conv_cpu.h"
#include "linear/decode/conv_cuda.h"
#include "linear/decode/slots.h"
#include "linear/gla/cuda/host_mirror.h"

namespace ak::linear::cuda {

void paged_conv(const PagedConv& d) {
  HostMirror m;
  PagedConv h = d;
  h.x = m.add(d.x, false), h.weight = m.add(d.weight, false);
  h.indices = m.add(d.indices, false), h.has_initial = m.add(d.has_initial, false);
  h.state = m.add(d.state, true), h.output = m.add(d.output, true);
  require_slots_in_pool(h.indices, d.N, d.slots);
  ak::linear::cpu::paged_conv(h);
  m.write_back();
}

}  // namespace ak::linear::cuda
