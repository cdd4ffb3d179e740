// The sparse planner: which kernel serves an NSA branch (the tiled attention block or the per-item
// kernels), under the tuning table's sparse.nsa.<branch> = auto | mma | tiled | item. Pure host code (the CPU
// build compiles it too, and the CPU backend follows the same rule), so its decisions are tested anywhere.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan.h"
#include "core/registry.h"
#include "core/tuning.h"
#include "sparse/problem.h"

namespace ak::sparse::planning {

struct NsaShape {
  std::string stage;  // sparse.nsa.compression or sparse.nsa.selection
  int32_t dtype = 0;
  int64_t d = 0, dv = 0, hq = 0, hkv = 1;
  bool aligned = true;  // q, k, v start on 16 bytes
};

// Why the tiled blocks cannot serve a call, "" when they can.
std::string tiled_ruled_out(const NsaShape& s);

// The variant under "auto": "mma" (tensor cores) for groups of 8 to 16 query heads, else "tiled" (CUDA
// cores) where the tiled block serves, else "item".
std::string nsa_variant(const NsaShape& s);

// The variant a call runs under the tuning table (the CPU backend's choice too): the rule's under "auto", else
// the table's; one that cannot serve is AK_ERR_UNSUPPORTED.
std::string pick_nsa(const NsaShape& s, const tuning::Table& t);

// The plan: path "mma", "tiled" or "item", its row. A forced variant that cannot serve is AK_ERR_UNSUPPORTED.
plan::Plan plan_nsa(const NsaShape& s, const registry::Caps& caps, const tuning::Table& t);

// DeepSeek sparse decode: the tensor-core block over the latent cache rows (built for DeepSeek's 512 + 64
// columns) or the per-item kernel (any shape), under sparse.dsa.decode = auto | mma | item.
struct DsaShape {
  int32_t dtype = 0;
  int64_t width = 0;  // D + tail, the key's columns
  int64_t dv = 0;     // D, the value's
  bool aligned = true;  // q and kv start on 16 bytes
  // The call's sizes, when known: the plan then records the tensor-core block's split of the lists.
  int64_t b = 0, sq = 0, hq = 0, hkv = 1, topk = 0;
  bool hopper = false;  // the GPU runs sm_90a rows (plan_dsa sets it from the caps)
};

constexpr const char* kDsaStage = "sparse.dsa.decode";
// The key and value widths the tensor-core block's kernels are built for.
constexpr int64_t kDsaMmaWidth = 576, kDsaMmaValue = 512;

// Why the tensor-core block cannot serve a DSA call, "" when it can.
std::string dsa_mma_ruled_out(const DsaShape& s);

// A checked call's shape, its sizes included.
DsaShape shape_of(const DsaDecode& p);

// The variant a call runs under the tuning table (the CPU backend's choice too): under "auto" the wgmma
// kernel where it serves (Hopper, KV groups of a multiple of 64 heads; MLA's calls too), else
// the mma.sync block where it serves, else per item; otherwise the table's. A kernel forced where it cannot
// serve is AK_ERR_UNSUPPORTED.
std::string pick_dsa(const DsaShape& s, const tuning::Table& t);

plan::Plan plan_dsa(const DsaShape& s, const registry::Caps& caps, const tuning::Table& t);

// Sets the split of the lists (p.splits, p.chunk) for a plan's latent kernel ("mma", "wgmma") on `sms`
// multiprocessors.
void split_lists(DsaDecode& p, const std::string& path, int sms);

// The lightning indexer: at 64 heads of 128 dims the wgmma kernel (float8_e4m3 on Hopper) or the mma.sync
// block (bfloat16 or float8_e4m3), else the per-item kernel, under sparse.indexer = auto | wgmma | mma | item.
struct IndexerShape {
  int32_t dtype = 0;
  int64_t h = 0, d = 0;
  bool aligned = true;  // q and k start on 16 bytes
  bool hopper = false;  // the GPU runs sm_90a rows (plan_indexer sets it from the caps)
  bool cpu = false;     // the CPU backend: the mma.sync block's phases on the host, no wgmma
};
constexpr const char* kIndexerStage = "sparse.indexer";
std::string indexer_mma_ruled_out(const IndexerShape& s);
IndexerShape shape_of(const Indexer& p);
// "auto": the wgmma kernel where it serves, else the mma.sync block, else the per-item kernel; a pinned
// kernel that cannot serve is AK_ERR_UNSUPPORTED.
std::string pick_indexer(const IndexerShape& s, const tuning::Table& t);
plan::Plan plan_indexer(const IndexerShape& s, const registry::Caps& caps, const tuning::Table& t);

// NSA's block selection: the tensor-core block (16-bit, head dims 64 / 128 / 256, groups of at most 16 query
// heads, at most 32 selected blocks) or the per-item kernel, under sparse.nsa.topk = auto | mma | item; "auto"
// takes the block where it serves (as pick_dsa).
struct TopkShape {
  int32_t dtype = 0;
  int64_t d = 0, hq = 0, hkv = 1, selected = 0;
  bool aligned = true;  // q and k_cmp start on 16 bytes
};
constexpr const char* kTopkStage = "sparse.nsa.topk";
std::string topk_mma_ruled_out(const TopkShape& s);
TopkShape shape_of(const NsaTopk& p);
std::string pick_topk(const TopkShape& s, const tuning::Table& t);
plan::Plan plan_topk(const TopkShape& s, const registry::Caps& caps, const tuning::Table& t);

// ak_plan for op sparse.nsa.compression / sparse.nsa.selection / sparse.nsa.topk / sparse.dsa.decode /
// sparse.indexer.
std::string plan_query(const std::string& op, plan::Query& q);

}  // namespace ak::sparse::planning
