/**
 * Context parallelism for Gated DeltaNet and KDA: one packed batch sharded over ranks, each running
 * its span and exchanging compact state summaries with an all-gather, equal to the unsharded op.
 *
 * @example
 * ```ts
 * import { ContextParallelPlan } from "@attnkit/attnkit";
 * const plan = ContextParallelPlan.fromFragments([0, 128], [[[0, 64]], [[64, 128]]], 0);
 * console.log(plan.successors[0]); // [{ rank: 1, fragment: 0 }]
 * ```
 *
 * @module
 */
export { type Communicator, SimulatedGroup } from "./communicator.ts";
export { ContextParallelPlan, type Fragment, type Slot, type Subsequence } from "./plan.ts";
export {
  chunkGdnPrepare,
  chunkKdaPrepare,
  type GdnPrepareOptions,
  type KdaPrepareOptions,
  type PreparedSpan,
} from "./prepare.ts";
export {
  contextParallelGdn,
  type ContextParallelGdnGradients,
  type ContextParallelGdnOptions,
  contextParallelKda,
  type ContextParallelKdaGradients,
  type ContextParallelKdaOptions,
  type ContextParallelLayout,
  type ContextParallelResult,
} from "./recipe.ts";
export { type SpanGradients } from "./family.ts";
export { composeSummaries, mergeState, neutralSummary, type StateSummary } from "./summaries.ts";
export { contextParallelConvHistory, type ConvHistory, type ConvHistoryOptions } from "./conv_history.ts";
export { NcclGroup, type NcclGroupOptions, ncclUniqueId, shareNcclId } from "./nccl.ts";
export {
  ContextParallelRouting,
  type ConvRouting,
  type RoutingOptions,
  type RoutingPasses,
} from "./routing.ts";
export { composeEntryStates, composeExitCotangents } from "./compose.ts";
