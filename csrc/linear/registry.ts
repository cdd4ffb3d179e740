/**
 * The kernel registry of the chunked linear-attention family: every kernel the build compiles, with
 * its architecture, dtypes, head dims and tiles. The planner (planner.cpp) chooses among these rows;
 * adding a dtype, a head dim or a tile is one entry in an `instances` list.
 *
 * @example
 * ```ts
 * import { linearRegistry } from "./registry.ts";
 * console.log(linearRegistry.kernels.map((k) => `${k.stage}.${k.variant}`));
 * ```
 *
 * @module
 */
import type { KernelFamily } from "../../build/registry.ts";

const HALF = ["bfloat16", "float16"] as const;
const ALL = ["float32", "bfloat16", "float16"] as const;

// The gated linear family's chunked stages: [stage, launcher name, header, head dims, doc].
const GLA_STAGES: [string, string, string, number[], string][] = [
  [
    "linear.gla.prep",
    "Prep",
    "linear/gla/cuda/prep.cuh",
    [64, 128, 256],
    "A block per chunk and value head: the causal scores with the decay, the decayed q and k and " +
    "exp(gL), for the state pass (the split forward).",
  ],
  [
    "linear.gla.states",
    "States",
    "linear/gla/cuda/fwd.cuh",
    [64, 128],
    "The backward's recompute of the states: a block per sequence, value head and V tile of 64 walks " +
    "the chunks with the state in registers, storing the state before every chunk.",
  ],
  [
    "linear.gla.dstates",
    "DStates",
    "linear/gla/cuda/bwd.cuh",
    [64, 128],
    "The backward's reverse state pass: dS <- diag(exp(gL)) dS + (scale Q exp(gc))^T dO per chunk.",
  ],
  [
    "linear.gla.grads",
    "Grads",
    "linear/gla/cuda/bwd.cuh",
    [64, 128],
    "A block per chunk and value head: dq, dk, dv and the decay's gradient from the chunk's state " +
    "and state gradient (V in tiles of 64).",
  ],
];

/** The linear family's table. */
export const linearRegistry: KernelFamily = {
  family: "linear",
  params: [
    "linear/delta/fwd/params.h",
    "linear/delta/bwd/fast.cuh",
    "linear/gla/cuda/params.h",
    "linear/kda/cuda/params.h",
    "linear/decode/params.h",
  ],
  kernels: [
    // ---- forward, chunked (the fast path) ----
    {
      stage: "linear.fwd.prep",
      variant: "mma",
      launcher: "ak::linear::cuda::FwdPrep",
      args: "fwd::PrepParams<T>",
      header: "linear/delta/fwd/prep.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "Stage 1, a block per chunk of 64 and value head: gate cumsum, K K^T with decay, " +
        "(I + L)^-1 in fp32 blocks, w = Aw K and u = Au V on mma.sync.",
      constraints: "K = V = D; 16-byte aligned rows",
    },
    {
      stage: "linear.fwd.prep",
      variant: "wgmma",
      launcher: "ak::linear::cuda::FwdPrepWgmma",
      args: "fwd::PrepParams<T>",
      header: "linear/delta/fwd/prep_sm90.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128, 256] }],
      doc: "Stage 1 as the mma row computes it, with K K^T, w = Aw K and u = Au V on wgmma (operands " +
        "read from shared memory once per warpgroup); w and u leave through the panels of k and v.",
      constraints: "K = V = D; 16-byte aligned rows",
    },
    {
      stage: "linear.fwd.state",
      variant: "mma",
      launcher: "ak::linear::cuda::FwdStateMma",
      args: "fwd::StateArgs<T>",
      header: "linear/delta/fwd/state_mma.cuh",
      arch: "sm80",
      instances: [
        { dtypes: HALF, d: [64], tiles: [32, 64] },
        { dtypes: HALF, d: [128], tiles: [32, 64, 128] },
        { dtypes: HALF, d: [256], tiles: [32, 64] },
      ],
      doc: "Stage 2 on mma.sync: a block per sequence, head and V tile walks the chunks with the " +
        "state in registers, fused with the output; tile = the V columns a block.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.fwd.state",
      variant: "wgmma",
      launcher: "ak::linear::cuda::FwdStateWgmma",
      args: "fwd::StateArgs<T>",
      header: "linear/delta/fwd/state_wgmma.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [256], tiles: [64] }],
      doc: "Stage 2 on wgmma, two warpgroups (W rows, Q rows) sharing each chunk step; can split the " +
        "state pass into segments and store the states for the backward.",
    },
    {
      stage: "linear.fwd.state",
      variant: "split",
      launcher: "ak::linear::cuda::FwdStateSplit",
      args: "fwd::StateArgs<T>",
      header: "linear/delta/fwd/state_split.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128], tiles: [32, 64, 128] }],
      doc: "Stage 2 on wgmma with the state chain on one warpgroup and the output on one (tile 128) " +
        "or two (tiles 64 and 32) others; TMA loads on fixed-length calls, cp.async on packed ones.",
    },
    // ---- forward, general path and decode ----
    {
      stage: "linear.fwd.recurrent",
      variant: "simt",
      launcher: "ak::linear::cuda::FwdRecurrent",
      args: "fwd::RecurrentParams<T>",
      header: "linear/delta/fwd/recurrent.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "The token-by-token recurrence in fp32, every head dim up to 256 and every dtype.",
    },
    {
      stage: "linear.fwd.wy",
      variant: "simt",
      launcher: "ak::linear::cuda::FwdWyGeneral",
      args: "fwd::WyParams<T>",
      header: "linear/delta/fwd/wy_general.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "The chunk-local WY factors Aw, Au in fp32, when the general path is asked for them.",
    },
    {
      stage: "linear.decode",
      variant: "simt",
      launcher: "ak::linear::cuda::Decode",
      args: "fwd::DecodeArgs<T>",
      header: "linear/delta/decode.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "One token a sequence: the state read once and written in place, fp32 or 16-bit states.",
    },
    {
      stage: "linear.decode",
      variant: "tile",
      launcher: "ak::linear::cuda::DecodeTile",
      args: "fwd::DecodeArgs<T>",
      header: "linear/delta/decode_tile.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [64, 128, 256] }],
      doc: "The same step on 8192-value state tiles (K x 8192 / K value columns) copied into shared memory " +
        "by cp.async, four warps a block: several tiles in flight per SM without registers holding them.",
      constraints: "K in {64, 128, 256}; 16-byte aligned rows of the state and the new state",
    },
    // ---- backward, tensor-core path ----
    {
      stage: "linear.bwd.prep",
      variant: "mma",
      launcher: "ak::linear::cuda::BwdPrep",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/prep.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "gc, A = (I + L)^-1 (split-bf16 products on tensor cores), w, u and P, a block per chunk " +
        "and head; only gc and P when the forward saved A and w.",
    },
    {
      stage: "linear.bwd.states",
      variant: "mma",
      launcher: "ak::linear::cuda::BwdStates",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/states.cuh",
      arch: "sm80",
      instances: [
        { dtypes: HALF, d: [64], tiles: [32, 64] },
        { dtypes: HALF, d: [128], tiles: [16, 32, 64] },
        { dtypes: HALF, d: [256], tiles: [32, 64] },
      ],
      doc: "The forward's state pass again (when the forward saved no states): the state before " +
        "every chunk and v_new; tile = the state columns a block.",
    },
    {
      stage: "linear.bwd.dstates",
      variant: "mma",
      launcher: "ak::linear::cuda::BwdDStates",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/dstates.cuh",
      arch: "sm80",
      instances: [
        { dtypes: HALF, d: [64], tiles: [32, 64] },
        { dtypes: HALF, d: [128, 256], tiles: [32, 64, 128] },
      ],
      doc: "The state gradient from the last chunk to the first, dv_new on the way; tile = the " +
        "state columns a block.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.bwd.dstates",
      variant: "split",
      launcher: "ak::linear::cuda::BwdDStatesSplit",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/dstates_split.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128], tiles: [32, 64] }],
      doc: "The same pass with the state gradient's chain alone on one warpgroup (wgmma: K dh, then " +
        "W^T dv_new) and the chunk-local products, loads and stores on another; tile = the state columns a block.",
    },
    {
      stage: "linear.bwd.grads",
      variant: "fused",
      launcher: "ak::linear::cuda::BwdGrads",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/grads.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128] }],
      doc: "Every chunk-local gradient fused in persistent blocks, the next item's tiles fetched as " +
        "buffers die (two K buffers at D 128).",
      constraints: "its shared memory fits the GPU (at D 128 only sm_90's does)",
    },
    {
      stage: "linear.bwd.grads",
      variant: "wgmma",
      launcher: "ak::linear::cuda::BwdGradsWgmma",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/grads_sm90.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128] }],
      doc: "The fused gradient kernel's steps with every product on wgmma, operands read from swizzled " +
        "tiles once per warpgroup and independent products issued together.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.bwd.grads",
      variant: "two_pass",
      launcher: "ak::linear::cuda::BwdGrads256",
      args: "bwd::StageArgs<T>",
      header: "linear/delta/bwd/grads256.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [256] }],
      doc: "The gradients at D 256 as two kernels, the products contracted over V, then over K.",
    },
    // ---- backward, general path ----
    {
      stage: "linear.bwd.general",
      variant: "simt",
      launcher: "ak::linear::cuda::BwdGeneral",
      args: "bwd::GeneralArgs",
      header: "linear/delta/bwd/general_entry.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "The backward in fp32 SIMT stages over padded chunks, any head dim up to 256 and chunk " +
        "size 32, 64 or 128.",
    },
    // ---- the gated linear family (GLA, simple GLA, retention, linear attention) ----
    // Variants are decay policies: "channel" (a decay per key channel, GLA) and "scalar" (one per
    // token and head, or none); d is K padded to 64, 128 or 256.
    ...GLA_STAGES.flatMap(([stage, name, header, d, doc]) =>
      (["channel", "scalar"] as const).map((variant) => ({
        stage,
        variant,
        launcher: `ak::linear::cuda::Gla${name}${variant === "channel" ? "Channel" : "Scalar"}`,
        args: stage === "linear.gla.dstates" || stage === "linear.gla.grads"
          ? "gla::BwdParams<T>"
          : stage === "linear.gla.prep"
          ? "gla::SplitParams<T>"
          : "gla::FwdParams<T>",
        header,
        arch: "sm80" as const,
        instances: [{ dtypes: HALF, d }],
        doc,
        constraints: "its shared memory fits the GPU",
      }))
    ),
    {
      stage: "linear.gla.pass",
      variant: "plain",
      launcher: "ak::linear::cuda::GlaPass",
      args: "gla::SplitParams<T>",
      header: "linear/gla/cuda/pass.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128, 256] }],
      doc: "A block per sequence, value head and V tile of 64 walks the chunks with the state in " +
        "registers and the next chunk's operands in flight: the output and the state update on mma.sync " +
        "(the split forward's second kernel; KDA's linear.kda.fwd is the same pass with the delta rule).",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.gla.pass",
      variant: "split",
      launcher: "ak::linear::cuda::GlaPassSplit",
      args: "fwd::StateArgs<T>",
      header: "linear/delta/fwd/state_split.cuh",
      arch: "sm90a",
      instances: [{ dtypes: HALF, d: [128], tiles: [64, 128] }],
      doc: "The scalar-decay forward (simple GLA, retention, linear attention) at K = V = 128 on the delta " +
        "rule's split state kernel without the delta rule: S <- e^gL S + K^T (V e^(gL - gc)) on one " +
        "warpgroup, the output on the others, q, k and v read in place; tile = the V columns a block.",
    },
    {
      stage: "linear.gla.pass",
      variant: "split_normalized",
      launcher: "ak::linear::cuda::GlaPassSplitNormalized",
      args: "fwd::StateArgs<T>",
      header: "linear/delta/fwd/state_split.cuh",
      arch: "sm90a",
      instances: [{ dtypes: ["bfloat16"], d: [128], tiles: [64, 128] }],
      doc: "Linear attention with its normaliser (`normalize`) at K = V = 128: the split row above, the " +
        "chain also carrying the keys' sum and each output row divided by sum_j P_ij + q . z + eps.",
    },
    // ---- KDA (the delta rule with a decay per key channel): prep, then the state pass ----
    {
      stage: "linear.kda.prep",
      variant: "channel",
      launcher: "ak::linear::cuda::KdaPrepChannel",
      args: "kda::FwdParams<T>",
      header: "linear/kda/cuda/prep.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128] }],
      doc: "A block per chunk and value head: the decayed k k scores and their fp32 triangular solve, " +
        "the WY factors w and u, the decayed q and k and the causal q k scores, for the state pass.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.kda.fwd",
      variant: "channel",
      launcher: "ak::linear::cuda::KdaFwdChannel",
      args: "kda::FwdParams<T>",
      header: "linear/kda/cuda/fwd.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128] }],
      doc: "A block per sequence, value head and V tile of 64 walks the chunks with the state in " +
        "registers and the next chunk's operands in flight: the corrected values, the output and the " +
        "state update on mma.sync.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.kda.dstates",
      variant: "channel",
      launcher: "ak::linear::cuda::KdaDStatesChannel",
      args: "kda::BwdParams<T>",
      header: "linear/kda/cuda/dstates.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128] }],
      doc:
        "The backward's reverse state pass: a block per sequence, value head and V tile walks the chunks " +
        "from the last with dS in registers, storing dS and the corrected values' gradient per chunk.",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.kda.grads",
      variant: "channel",
      launcher: "ak::linear::cuda::KdaGradsChannel",
      args: "kda::BwdParams<T>",
      header: "linear/kda/cuda/grads.cuh",
      arch: "sm80",
      instances: [{ dtypes: HALF, d: [64, 128] }],
      doc: "A block per chunk and value head: every gradient of the chunk through the WY factors, the " +
        "triangular solve and both score matrices (V in tiles of 64, the rest in fp32).",
      constraints: "its shared memory fits the GPU",
    },
    {
      stage: "linear.paged_decode",
      variant: "fused",
      launcher: "ak::linear::cuda::PagedDecodeFused",
      args: "paged::DecodeParams<T>",
      header: "linear/decode/fused.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "One paged decode step with its preprocessing: a block per sequence, value head and 128 / " +
        "(K / 32) state rows loaded straight into registers; a lane per K / 32 key channels, both dot " +
        "products of a row as warp sums.",
      constraints: "K in {32, 64, 128, 256}; the pool's rows 16-byte aligned",
    },
    {
      stage: "linear.paged_decode",
      variant: "bulk",
      launcher: "ak::linear::cuda::PagedDecodeBulk",
      args: "paged::DecodeParams<T>",
      header: "linear/decode/bulk.cuh",
      arch: "sm90a",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "The same step with a two-warp block per 4096-value state tile, brought into shared memory " +
        "by one bulk copy issued before the preprocessing (more bytes in flight per register).",
      constraints: "K in {32, 64, 128, 256}; the pool's rows 16-byte aligned",
    },
    {
      stage: "linear.gla.decode",
      variant: "simt",
      launcher: "ak::linear::cuda::GlaDecode",
      args: "gla::DecodeParams<T>",
      header: "linear/gla/cuda/decode.cuh",
      arch: "sm80",
      instances: [{ dtypes: ALL, d: [0] }],
      doc: "One decode step, a block per sequence and value head streaming its fp32 state once.",
    },
  ],
};
