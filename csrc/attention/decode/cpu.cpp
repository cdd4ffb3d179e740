// The decode blocks on the host (the CUDA-core, warp, tensor-core or streamed tensor-core block, as the
// planner's rule picks): each block's phases run thread by thread (lane by lane for the warp and streamed
// blocks), one phase after another (what the kernel's barriers and shuffles guarantee), then the combine of
// the splits.
#include <vector>

#include "attention/decode/backend.h"
#include "attention/decode/source.h"
#include "attention/tiled/mma_block.h"
#include "attention/tiled/pipe_block.h"
#include "attention/tiled/warp_block.h"
#include "core/common.h"

namespace ak::attention::decode::cpu {

namespace {

template <int kD>
void run_warp_block(const DecodeSource& source) {
  switch (tiled::warp_rows(source.R)) {
    case 1: return tiled::WarpBlock<DecodeSource, kD, 1>(source).run_on_host();
    case 2: return tiled::WarpBlock<DecodeSource, kD, 2>(source).run_on_host();
    case 4: return tiled::WarpBlock<DecodeSource, kD, 4>(source).run_on_host();
    default: return tiled::WarpBlock<DecodeSource, kD, 8>(source).run_on_host();
  }
}

void run_block(const Problem& p, const DecodeSource& source) {
  if (p.block == 'p') {
    if (p.D == 64) return tiled::PipeBlock<DecodeSource, 64>(source).run_on_host();
    if (p.D == 128) return tiled::PipeBlock<DecodeSource, 128>(source).run_on_host();
    return tiled::PipeBlock<DecodeSource, 256>(source).run_on_host();
  }
  if (p.block == 'm') return tiled::MmaBlock<DecodeSource>(source).run_on_host();
  if (p.block != 'w') return tiled::Block<DecodeSource>(source).run_on_host();
  if (p.D == 64) return run_warp_block<64>(source);
  if (p.D == 128) return run_warp_block<128>(source);
  return run_warp_block<256>(source);
}

}  // namespace

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
    run_block(p, source);
  });
  if (p.splits == 1) return;
  parallel_for(p.B * p.Hkv * R, [&](int64_t x) {
    const int64_t r = x % R, hk = (x / R) % p.Hkv, b = x / (R * p.Hkv);
    for (int64_t c = 0; c < p.D; c++) combine(p, b, hk, r, c);
  });
}

}  // namespace ak::attention::decode::cpu
