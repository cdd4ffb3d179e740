/**
 * Linear attention: DeltaNet and Gated DeltaNet.
 *
 * Functions in flash-linear-attention's style (`chunkDeltaRule`, `recurrentDeltaRule`,
 * `chunkGatedDeltaRule`, `recurrentGatedDeltaRule` and their `...Backward` gradients, output
 * gradient first), and the op classes of TileOPs (`DeltaNetOp`, `GatedDeltaNetOp`, the forward,
 * prefill, decode and backward ops). Every call names its `layout`: `"bshd"` (`[batch, seq, heads,
 * dim]`) or `"bhsd"` (`[batch, heads, seq, dim]`). A forward result runs its own backward.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 2, 32]);
 * using k = Tensor.randn([1, 64, 2, 32]);
 * using v = Tensor.randn([1, 64, 2, 32]);
 * using g = Tensor.rand([1, 64, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 64, 2]);
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", useQkL2norm: true, outputFinalState: true });
 * using dO = Tensor.randn([1, 64, 2, 32]);
 * using grads = r.backward(dO);
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
  chunkGdn,
  type DeltaRuleBackwardOptions,
  type DeltaRuleGradients,
  type DeltaRuleOptions,
  type DeltaRuleResult,
  type DeltaRuleResultBackwardOptions,
  recurrentDeltaRule,
  recurrentDeltaRuleBackward,
  recurrentGatedDeltaRule,
  recurrentGatedDeltaRuleBackward,
  recurrentGdn,
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
export type {
  DecodeOpOptions,
  DeltaCombinedOpOptions,
  DeltaKernelOptions,
  DeltaOpOptions,
  DeltaTunedOpOptions,
  NamedLayoutOpOptions,
  OpResultBackwardOptions,
} from "./op_support.ts";
export type { DeltaBackwardBuffers, DeltaForwardBuffers, DeltaKernelChoice } from "./delta_native.ts";
export type { DeltaCallOptions } from "./consistency.ts";
export { type LinearLayout } from "./layouts.ts";
export { type DeltaSavedCall, DeltaSavedStates } from "./saved.ts";
export { chunkGla, chunkGlaBackward, recurrentGla, recurrentGlaBackward } from "./gla.ts";
export {
  chunkRetention,
  chunkRetentionBackward,
  chunkSimpleGla,
  chunkSimpleGlaBackward,
  type SimpleGlaBackwardOptions,
  type SimpleGlaOptions,
} from "./simple_gla.ts";
export {
  chunkLinearAttn,
  chunkLinearAttnBackward,
  type LinearAttnBackwardOptions,
  type LinearAttnOptions,
} from "./linear_attn.ts";
export type {
  GlaBackwardOptions,
  GlaGradients,
  GlaOptions,
  GlaResult,
  GlaResultBackwardOptions,
} from "./gla_functional.ts";
export type { GlaBackwardBuffers, GlaForwardBuffers } from "./gla_native.ts";
export {
  GLABwdOp,
  GLADecodeFwdOp,
  type GlaDecodeOpOptions,
  GLAFwdOp,
  type GLAFwdResult,
  type GlaOpGradients,
  type GlaOpOptions,
  type GlaOpResultBackwardOptions,
} from "./gla_op_classes.ts";
export {
  type FeatureMapBackwardOptions,
  type FeatureMapGradientBuffers,
  type FeatureMapGradients,
  featureMapLinearAttention,
  featureMapLinearAttentionBackward,
  featureMapLinearAttentionSupported,
  type FeatureMapOptions,
  type FeatureMapResult,
  type FeatureMapResultBackwardOptions,
} from "./feature_map.ts";
export { FEATURE_MAP_KINDS, type FeatureMapKind } from "./feature_map_features.ts";
export {
  causalConv1d,
  type CausalConv1dActivation,
  causalConv1dBackward,
  type CausalConv1dBackwardOptions,
  type CausalConv1dGradientBuffers,
  type CausalConv1dGradients,
  type CausalConv1dOptions,
  type CausalConv1dResult,
  type CausalConv1dResultBackwardOptions,
} from "./causal_conv1d.ts";
export {
  BOUND_GATE_LOWER_BOUND,
  boundGate,
  boundGateBackward,
  type BoundGateBackwardOptions,
  type BoundGateOptions,
  GATE_TRANSFORM_KINDS,
  gateTransform,
  gateTransformBackward,
  type GateTransformBackwardOptions,
  type GateTransformGradientBuffers,
  type GateTransformGradients,
  type GateTransformKind,
  type GateTransformOptions,
  type GateTransformResult,
  type GateTransformResultBackwardOptions,
} from "./gate_transform.ts";
export {
  pagedChunkGdn,
  type PagedChunkGdnOptions,
  pagedChunkKda,
  type PagedChunkOptions,
} from "./paged_chunk.ts";
export { type PooledResult, type PoolOptions, type RecurrentPoolOptions } from "./pool_run.ts";
export { ReplayState, type ReplayStateShape } from "./replay_state.ts";
export {
  causalConv1dDecode,
  type CausalConv1dDecodeOptions,
  pagedCausalConv1d,
  type PagedCausalConv1dOptions,
} from "./paged_conv.ts";
export {
  activeTokenMask,
  type MaskedGradients,
  maskInactiveTokenGradients,
  maskInactiveTokens,
} from "./token_mask.ts";
export {
  type GdnDecodeOptions,
  type KdaDecodeOptions,
  recurrentGdnDecode,
  recurrentKdaDecode,
} from "./paged_decode.ts";
export {
  chunkKda,
  chunkKdaBackward,
  type KdaBackwardOptions,
  type KdaGradients,
  type KdaOptions,
  type KdaResult,
  type KdaResultBackwardOptions,
  recurrentKda,
  recurrentKdaBackward,
} from "./kda.ts";
export type { KdaBackwardBuffers, KdaForwardBuffers, KdaStateLayout } from "./kda_native.ts";
export * from "./context_parallel/mod.ts";
