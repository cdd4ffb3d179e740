/**
 * The kernel registry of softmax attention: every kernel the build compiles, with its architecture,
 * dtypes and head dims. The planner (planner.cpp) chooses among these rows; adding a dtype or a head
 * dim is one entry in an `instances` list.
 *
 * @example
 * ```ts
 * import { attentionRegistry } from "./registry.ts";
 * console.log(attentionRegistry.kernels.map((k) => `${k.stage}.${k.variant}`));
 * ```
 *
 * @module
 */
import type { KernelFamily } from "../../build/registry.ts";

const HALF = ["bfloat16", "float16"] as const;

/** The attention family's table. */
export const attentionRegistry: KernelFamily = {
  family: "attention",
  params: ["attention/fwd/params.h", "attention/bwd/params.h", "attention/decode/problem.h"],
  kernels: [
    {
      stage: "attention.fwd",
      variant: "general",
      launcher: "ak::attention::cuda::FwdGeneral",
      args: "FwdGeneralArgs",
      header: "attention/fwd/general.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 192, 256] }],
      doc: "FlashAttention-2's schedule on mma.sync: 64 query rows a block, K and V double-buffered " +
        "with cp.async; D is the width built, smaller head dims are zero-padded to it.",
      constraints: "any head dim up to D (a multiple of 8), any strides with a contiguous last dimension",
    },
    {
      stage: "attention.fwd",
      variant: "wgmma",
      launcher: "ak::attention::cuda::FwdWgmma",
      args: "FwdParams",
      header: "attention/fwd/sm90.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [256] }],
      doc: "FlashAttention-3's structure: a TMA producer warpgroup, two wgmma consumer warpgroups " +
        "taking turns (ping-pong), one block per 128-row query tile.",
      constraints: "head dim = D; 16-byte aligned pointers and strides; some keys",
    },
    {
      stage: "attention.fwd",
      variant: "wgmma_persistent",
      launcher: "ak::attention::cuda::FwdWgmmaPersistent",
      args: "FwdParams",
      header: "attention/fwd/sm90_persistent.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [64, 128] }, { dtypes: ["float8_e4m3"], d: [128] }],
      doc: "The wgmma forward in persistent blocks that take work tiles from a queue, long tiles " +
        "first; three consumer warpgroups at D 64, two at D 128. float8_e4m3 (D 128): both products on " +
        "8-bit tensor cores, V transposed by a pre-pass, P rounded to e4m3 times 256, the output in 16 bits.",
      constraints: "head dim = D; 16-byte aligned pointers and strides; some keys",
    },
    {
      stage: "attention.bwd",
      variant: "general",
      launcher: "ak::attention::cuda::BwdGeneral",
      args: "BwdArgs",
      header: "attention/bwd/general.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "FlashAttention-2's backward on mma.sync: a block per key tile walks the query tiles of " +
        "its KV group; dQ by fp32 atomics, or in a fixed order when deterministic.",
      constraints: "any head dim up to D (a multiple of 8); the only kernel with the deterministic order",
    },
    {
      stage: "attention.bwd",
      variant: "wgmma",
      launcher: "ak::attention::cuda::BwdWgmma",
      args: "BwdArgs",
      header: "attention/bwd/sm90.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128] }],
      doc: "FlashAttention-3's backward: a TMA producer, two wgmma consumers of 64 keys each, dQ " +
        "staged in shared memory and added by one bulk reduction.",
      constraints: "head dim = D; not deterministic; no zero (broadcast) strides",
    },
    {
      stage: "attention.bwd",
      variant: "wgmma_v2",
      launcher: "ak::attention::cuda::BwdWgmmaV2",
      args: "BwdArgs",
      header: "attention/bwd/sm90_v2.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [64] }],
      doc: "The wgmma backward with K and V in registers, products ordered across query tiles, a " +
        "four-stage ring and consumer 1 reducing both consumers' dQ.",
      constraints: "head dim = D; not deterministic; no zero (broadcast) strides",
    },
    {
      stage: "attention.decode",
      variant: "tiled",
      launcher: "ak::attention::cuda::DecodeTiled",
      args: "decode::Problem",
      header: "attention/decode/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc:
        "Decode over a KV cache read in place: a block of 128 threads per (key split, KV head, sequence) " +
        "holds every query row of the KV head and walks its keys in tiles of 32 on CUDA cores " +
        "(attention/tiled/block.h); the splits' partial results are combined by their log-sum-exp.",
      constraints: "(H / Hkv) Sq D <= 4096; q, k, v on 16 bytes",
    },
    {
      stage: "attention.decode",
      variant: "warp",
      launcher: "ak::attention::cuda::DecodeWarp",
      args: "decode::Problem",
      header: "attention/decode/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "The same decode with each warp walking its own keys in registers: a lane owns 8 head-dim " +
        "columns, D / 8 lanes read a key, each lane group reads 8 keys (4 at more than 2 rows) a step with every " +
        "load issued first; the warps merge through shared memory at the end " +
        "(attention/tiled/warp_block.h).",
      constraints: "(H / Hkv) Sq <= 8; q, k, v on 16 bytes",
    },
    {
      stage: "attention.decode",
      variant: "mma",
      launcher: "ak::attention::cuda::DecodeMma",
      args: "decode::Problem",
      header: "attention/decode/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "The same decode with the query rows of a KV head as one m16 tile of mma.sync m16n8k16: scores " +
        "and P V on tensor cores, 64 keys a tile (attention/tiled/mma_block.h).",
      constraints: "(H / Hkv) Sq <= 16; q, k, v on 16 bytes",
    },
    {
      stage: "attention.decode",
      variant: "pipe",
      launcher: "ak::attention::cuda::DecodePipe",
      args: "decode::Problem",
      header: "attention/decode/launch.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc:
        "The tensor-core decode with the keys streamed through a ring of shared-memory stages (three, two " +
        "at head dim 256; 64 keys each, 16-byte asynchronous copies): each warp takes 16 keys of a stage and " +
        "keeps its own online softmax over the full head dim, fragments by ldmatrix, P passed from the score " +
        "fragments to P V in registers, one barrier a stage (attention/tiled/pipe_block.h).",
      constraints: "(H / Hkv) Sq <= 16; q, k, v on 16 bytes; shared memory 107 KB at D 128, 144 KB at D 256",
    },
  ],
};
