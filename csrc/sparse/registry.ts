/**
 * The kernel registry of sparse attention: NSA's compressed and selected branches, each on the tiled
 * attention block on CUDA cores or on tensor cores (16-bit, head dims 64 / 128 / 256) and on the per-item
 * kernels (any shape), and DeepSeek's sparse decode on tensor cores (512 + 64 columns) or per item. The
 * planner (planner.cpp) chooses between them; NSA's top-k and the indexer have one kernel each and are not
 * rows.
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

const DSA: KernelSpec[] = [
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

/** The sparse family's table. */
export const sparseRegistry: KernelFamily = {
  family: "sparse",
  params: ["sparse/problem.h"],
  kernels: [
    ...branch("compression", "Compression", "compressed branch"),
    ...branch("selection", "Selection", "selected branch"),
    ...DSA,
  ],
};
