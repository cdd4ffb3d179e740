// The CPU backend of the sparse-attention ops: every item of rows.h, in double, spread over the threads; or,
// for the calls the tiled attention block serves, its blocks phase by phase (as the CUDA kernels run them).
#include <vector>

#include "core/common.h"
#include "sparse/backend.h"
#include "sparse/rows.h"
#include "attention/tiled/mma_block.h"
#include "sparse/dsa_source.h"
#include "sparse/indexer_block.h"
#include "sparse/topk_block.h"
#include "sparse/tiled.h"

namespace ak::sparse::cpu {

namespace {

// One (token, KV head) of an NSA branch on the block the planner chose, phase by phase as the CUDA kernel
// runs it.
template <class Source>
void run_block(NsaBlock kernel, const Source& source) {
  if (kernel == NsaBlock::mma) ak::attention::tiled::MmaBlock<Source>(source).run_on_host();
  else ak::attention::tiled::Block<Source>(source).run_on_host();
}

}  // namespace

void nsa_compression(const NsaCompression& p) {
  if (p.kernel != NsaBlock::item) {
    parallel_for(p.seq.T * p.Hkv, [&](int64_t x) { run_block(p.kernel, CompressionSource(p, x / p.Hkv, x % p.Hkv)); });
    return;
  }
  const int64_t S = value_slices(p.V);
  parallel_for(p.seq.T * p.H, [&](int64_t th) {
    for (int64_t s = 0; s < S; s++) nsa_compression_item<double>(p, th / p.H, th % p.H, s * kSlice);
  });
}

void nsa_topk(const NsaTopk& p) {
  if (p.mma) {
    parallel_for(p.seq.T * p.Hkv, [&](int64_t th) {
      const int64_t t = th / p.Hkv, hk = th % p.Hkv;
      if (p.K == 64) TopkBlock<64>(p).run_on_host(t, hk);
      else if (p.K == 128) TopkBlock<128>(p).run_on_host(t, hk);
      else TopkBlock<256>(p).run_on_host(t, hk);
    });
    return;
  }
  parallel_for(p.seq.T * p.Hkv, [&](int64_t th) { nsa_topk_item<double>(p, th / p.Hkv, th % p.Hkv); });
}

void nsa_selection(const NsaSelection& p) {
  if (p.kernel != NsaBlock::item) {
    parallel_for(p.seq.T * p.Hkv, [&](int64_t x) { run_block(p.kernel, SelectionSource(p, x / p.Hkv, x % p.Hkv)); });
    return;
  }
  const int64_t S = value_slices(p.V);
  parallel_for(p.seq.T * p.H, [&](int64_t th) {
    for (int64_t s = 0; s < S; s++) nsa_selection_item<double>(p, th / p.H, th % p.H, s * kSlice);
  });
}

void dsa_decode(const DsaDecode& p) {
  if (p.mma) {
    // The CUDA planner's split for the H200's 132 multiprocessors, so that these tests cover the combine.
    DsaDecode s = p;
    plan_latent_splits(s, 0);
    const int64_t rows = s.B * s.Sq * s.H;
    std::vector<float> partial(static_cast<size_t>(s.splits > 1 ? s.splits * rows * (s.D + 1) : 0));
    if (s.splits > 1) s.partial = partial.data(), s.partial_lse = s.partial + s.splits * rows * s.D;
    const int64_t groups = DsaSource<>::groups(s), blocks = s.B * s.Sq * s.Hkv * groups;
    parallel_for(blocks * s.splits, [&](int64_t i) {
      const int64_t block = i % blocks;
      const DsaSource<> source(s, block % groups, block / (groups * s.Hkv), (block / groups) % s.Hkv, i / blocks);
      ak::attention::tiled::MmaBlock<DsaSource<>, 0, 0, kLatentWarps>(source).run_on_host();
    });
    if (s.splits > 1) {
      parallel_for(rows, [&](int64_t xh) {
        for (int64_t c = 0; c < s.D; c++) combine_latent(s, xh / s.H, xh % s.H, c);
      });
    }
    return;
  }
  const int64_t S = value_slices(p.D);
  parallel_for(p.B * p.Sq * p.H, [&](int64_t rh) {
    for (int64_t s = 0; s < S; s++) dsa_decode_item<double>(p, rh / p.H, rh % p.H, s * kSlice);
  });
}

void indexer(const Indexer& p) {
  if (p.mma) {
    const int64_t chunks = (p.Sk + kIdxChunk - 1) / kIdxChunk, pairs = (p.Sq + kIdxQueries - 1) / kIdxQueries;
    parallel_for(chunks * pairs, [&](int64_t x) { IndexerBlock(p, x % chunks, x / chunks).run_on_host(); });
    return;
  }
  parallel_for(p.Sq, [&](int64_t i) {
    for (int64_t j = 0; j < p.Sk; j++) indexer_item<double>(p, i, j);
  });
}

}  // namespace ak::sparse::cpu
