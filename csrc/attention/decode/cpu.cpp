// The decode blocks on the host (the CUDA-core or the tensor-core block, as the planner's rule picks): each
// block's phases run thread by thread, one phase after another (what the kernel's barriers guarantee), then
// the combine of the splits.
#include <vector>

#include "attention/decode/backend.h"
#include "attention/decode/source.h"
#include "attention/tiled/mma_block.h"
#include "core/common.h"

namespace ak::attention::decode::cpu {

void run(const Problem& problem) {
  Problem p = problem;
  const int64_t R = p.rows(), blocks = p.splits * p.Hkv * p.B;
  std::vector<float> workspace;
  if (p.splits > 1) {
    workspace.resize(static_cast<size_t>(p.splits * p.B * p.Hkv * R * (p.D + 1)));
    p.partial = workspace.data();
    p.partial_lse = p.partial + p.splits * p.B * p.Hkv * R * p.D;
  }
  parallel_for(blocks, [&](int64_t x) {
    const int64_t split = x % p.splits, hk = (x / p.splits) % p.Hkv, b = x / (p.splits * p.Hkv);
    const DecodeSource source(p, split, hk, b);
    if (p.mma) tiled::MmaBlock<DecodeSource>(source).run_on_host();
    else tiled::Block<DecodeSource>(source).run_on_host();
  });
  if (p.splits == 1) return;
  parallel_for(p.B * p.Hkv * R, [&](int64_t x) {
    const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
    for (int64_t c = 0; c < p.D; c++) combine(p, b, hk, r, c);
  });
}

}  // namespace ak::attention::decode::cpu
