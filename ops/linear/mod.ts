/**
 * Linear attention: DeltaNet and Gated DeltaNet.
 *
 * Functions in FLA's token-major layout (`chunkDeltaRule`, `recurrentDeltaRule`,
 * `chunkGatedDeltaRule`, `recurrentGatedDeltaRule` and their `...Backward` gradients), and the op
 * classes of TileOPs (`DeltaNetOp`, `GatedDeltaNetOp`, the forward, prefill, decode and backward
 * ops) over head-major or token-major tensors.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 2, 32]);
 * using k = Tensor.randn([1, 64, 2, 32]);
 * using v = Tensor.randn([1, 64, 2, 32]);
 * using g = Tensor.rand([1, 64, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 64, 2]);
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { useQkL2norm: true, outputFinalState: true });
 * ```
 *
 * @module
 */
export {
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  type ChunkDeltaRuleOptions,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  type DeltaRuleBackwardOptions,
  type DeltaRuleGradients,
  type DeltaRuleOptions,
  type DeltaRuleResult,
  recurrentDeltaRule,
  recurrentDeltaRuleBackward,
  recurrentGatedDeltaRule,
  recurrentGatedDeltaRuleBackward,
} from "./delta_rule.ts";
export {
  type DecodeResult,
  DeltaNetBwdOp,
  DeltaNetDecodeFwdOp,
  DeltaNetFwdOp,
  type DeltaNetFwdResult,
  type DeltaNetGradients,
  DeltaNetOp,
} from "./deltanet.ts";
export {
  GatedDeltaNetBHTDFwdOp,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetBwdOp,
  GatedDeltaNetDecodeFwdOp,
  type GatedDeltaNetFwdResult,
  type GatedDeltaNetGradients,
  GatedDeltaNetOp,
  GatedDeltaNetPrefillBHTDFwdOp,
  GatedDeltaNetPrefillBTHDFwdOp,
  type GatedDeltaNetPrefillResult,
  prefillChunkSize,
  type PrefillOpOptions,
} from "./gated_deltanet.ts";
export type { DecodeOpOptions, DeltaOpOptions } from "./op_support.ts";
export type { DeltaBackwardBuffers, DeltaForwardBuffers } from "./delta_native.ts";
export { DeltaSavedStates } from "./saved.ts";
