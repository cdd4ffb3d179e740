/**
 * The kernel registry of sparse attention: NSA's compressed and selected branches, each on the tiled
 * attention block on CUDA cores or on tensor cores (16-bit, head dims 64 / 128 / 256) and on the per-item
 * kernels (any shape), DeepSeek's sparse decode on tensor cores (512 + 64 columns) or per item, the
 * lightning indexer on wgmma (float8 on Hopper) or mma.sync (64 heads of 128 dims) or per item, and NSA's
 * block selection on tensor cores or per item. The planner (planner.cpp) chooses between them.
 *
 * @example
 * ```ts
 * import { sparseRegistry } from "./registry.ts";
 * console.log(sparseRegistry.kernels.map((k) => `${k.stage}.${k.variant}`));
 * ```
 *
 * @module
 */
import type { KernelFamily, KernelSpec } from "../../build/registry.ts";

const HALF = ["bfloat16", "float16"] as const;
const ALL = ["float32", "bfloat16", "float16"] as const;

function branch(stage: string, name: string, what: string): KernelSpec[] {
  return [
    {
      stage: `sparse.nsa.${stage}`,
      variant: "tiled",
      launcher: `ak::sparse::cuda::${name}Tiled`,
      args: `::ak::sparse::Nsa${name}`,
      header: "sparse/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: `NSA's ${what} on the tiled attention block: 128 threads per (token, KV head) hold the group's ` +
        "query rows and walk the token's key slots 32 at a time (attention/tiled/block.h, sparse/tiled.h).",
      constraints: "K = V = D; group * D <= 4096; q, k, v on 16 bytes",
    },
    {
      stage: `sparse.nsa.${stage}`,
      variant: "mma",
      launcher: `ak::sparse::cuda::${name}Mma`,
      args: `::ak::sparse::Nsa${name}`,
      header: "sparse/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: `NSA's ${what} on tensor cores: the group's query rows as one m16 tile of mma.sync m16n8k16, ` +
        "64 key slots a tile (attention/tiled/mma_block.h, sparse/tiled.h).",
      constraints: "K = V = D; group <= 16; q, k, v on 16 bytes",
    },
    {
      stage: `sparse.nsa.${stage}`,
      variant: "item",
      launcher: `ak::sparse::cuda::${name}Item`,
      args: `::ak::sparse::Nsa${name}`,
      header: "sparse/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: `NSA's ${what}, a thread per (token, head, 32 value columns) (sparse/rows.h).`,
      constraints: "any head dims",
    },
  ];
}

const TOPK: KernelSpec[] = [
  {
    stage: "sparse.nsa.topk",
    variant: "mma",
    launcher: "ak::sparse::cuda::NsaTopkMma",
    args: "::ak::sparse::NsaTopk",
    header: "sparse/launch.cuh",
    arch: "sm80",
    instances: [{ dtypes: HALF, d: [64, 128, 256] }],
    doc:
      "NSA's block selection on tensor cores: a warp per (token, KV head), the group's query heads as one m16 " +
      "tile of mma.sync m16n8k16 against 32 compressed rows a step, the group's summed probabilities by a " +
      "butterfly, the step merged into the kept top S by rank (sparse/topk_block.h).",
    constraints: "group <= 16; selectedBlockNum <= 32; q, kCmp on 16 bytes",
  },
  {
    stage: "sparse.nsa.topk",
    variant: "item",
    launcher: "ak::sparse::cuda::NsaTopkItem",
    args: "::ak::sparse::NsaTopk",
    header: "sparse/launch.cuh",
    arch: "sm80",
    instances: [{ dtypes: ALL, d: [0] }],
    doc:
      "NSA's block selection, a thread per (token, KV head) scoring every visible compressed row (sparse/rows.h).",
    constraints: "any head dim, group and selected count",
  },
];

const DSA: KernelSpec[] = [
  {
    stage: "sparse.dsa.decode",
    variant: "wgmma",
    launcher: "ak::sparse::cuda::DsaWgmma",
    args: "::ak::sparse::DsaDecode",
    header: "sparse/dsa_sm90.cuh",
    arch: "sm90a",
    instances: [{ dtypes: HALF, d: [576] }],
    doc:
      "DeepSeek sparse decode on Hopper's wgmma: a block per (query, KV head, 64 query heads, split), 64 " +
      "listed cache rows a tile gathered by cp.async into the swizzled layout, two tiles in flight, two " +
      "warpgroups each scoring half of a tile's rows and owning half of the 512 value columns " +
      "(sparse/dsa_sm90.cuh). The planner's choice on Hopper for DSA and MLA decode where it serves.",
    constraints: "dim 512 + dimTail 64; query heads per KV head a multiple of 64; q, kv on 16 bytes",
  },
  {
    stage: "sparse.dsa.decode",
    variant: "mma",
    launcher: "ak::sparse::cuda::DsaMma",
    args: "::ak::sparse::DsaDecode",
    header: "sparse/launch.cuh",
    arch: "sm80",
    instances: [{ dtypes: HALF, d: [576] }],
    doc:
      "DeepSeek sparse decode on tensor cores: a block per (query, KV head, 16 query heads), the heads as " +
      "one m16 tile of mma.sync m16n8k16 over 64 listed cache rows a tile, each row loaded once for the scores " +
      "and, in its first 512 columns, the values (attention/tiled/mma_block.h, sparse/dsa_source.h).",
    constraints: "dim 512 + dimTail 64; q, kv on 16 bytes",
  },
  {
    stage: "sparse.dsa.decode",
    variant: "item",
    launcher: "ak::sparse::cuda::DsaItem",
    args: "::ak::sparse::DsaDecode",
    header: "sparse/launch.cuh",
    arch: "sm80",
    instances: [{ dtypes: ALL, d: [0] }],
    doc: "DeepSeek sparse decode, a thread per (query, head, 32 value columns) (sparse/rows.h).",
    constraints: "any dims",
  },
];

const INDEXER: KernelSpec[] = [
  {
    stage: "sparse.indexer",
    variant: "wgmma",
    launcher: "ak::sparse::cuda::IndexerWgmma",
    args: "::ak::sparse::Indexer",
    header: "sparse/indexer_sm90.cuh",
    arch: "sm90a",
    instances: [{ dtypes: ["float8_e4m3"], d: [128] }],
    doc:
      "The lightning indexer on Hopper's 8-bit tensor cores: 64 keys a tile (wgmma M) against 4 queries x 64 " +
      "heads (N 256) per consumer warpgroup, two warpgroups a block, keys by TMA through a ring, the " +
      "weighted ReLU head sum along the accumulator's columns (sparse/indexer_sm90.cuh).",
    constraints: "64 heads of 128 dims, float8_e4m3; q, k on 16 bytes",
  },
  {
    stage: "sparse.indexer",
    variant: "mma",
    launcher: "ak::sparse::cuda::IndexerMma",
    args: "::ak::sparse::Indexer",
    header: "sparse/launch.cuh",
    arch: "sm90a",
    instances: [{ dtypes: ["bfloat16", "float8_e4m3"], d: [128] }],
    doc:
      "The lightning indexer on tensor cores: a block per (2 queries, 512 keys), a query's 64 heads as four " +
      "m16 tiles of mma.sync (m16n8k16 bfloat16, m16n8k32 float8_e4m3) against 64 keys a tile, the weighted " +
      "ReLU head sum in the epilogue (sparse/indexer_block.h).",
    constraints: "64 heads of 128 dims; q, k on 16 bytes",
  },
  {
    stage: "sparse.indexer",
    variant: "item",
    launcher: "ak::sparse::cuda::IndexerItem",
    args: "::ak::sparse::Indexer",
    header: "sparse/launch.cuh",
    arch: "sm80",
    instances: [{ dtypes: ["bfloat16", "float8_e4m3"], d: [0] }],
    doc: "The lightning indexer, a thread per (query, key) logit (sparse/rows.h).",
    constraints: "any heads and head dim",
  },
];

/** The sparse family's table. */
export const sparseRegistry: KernelFamily = {
  family: "sparse",
  params: ["sparse/problem.h"],
  kernels: [
    ...branch("compression", "Compression", "compressed branch"),
    ...branch("selection", "Selection", "selected branch"),
    ...TOPK,
    ...DSA,
    ...INDEXER,
  ],
};
