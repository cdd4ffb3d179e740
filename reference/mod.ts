/**
 * Float64 oracles of attnkit's operators, and the tolerance rules its tests hold every kernel to: a
 * check of an op against the exact answer takes a few lines.
 *
 * The oracles take host arrays (a tensor's `toArray()`, which widens 16-bit values exactly) in the
 * `"bshd"` order, and compute plainly in float64: they are slow (about 10^8 multiply-adds a second)
 * and meant for small shapes, or a few batch rows of a large one.
 *
 * @example
 * ```ts
 * import { chunkDeltaRule, compare, Tensor } from "@attnkit/attnkit";
 * import { DELTA_RULE_TOLERANCE, deltaRuleReference } from "@attnkit/attnkit/reference";
 * const [B, T, H, D] = [1, 32, 2, 16];
 * using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 2, std: D ** -0.5 });
 * using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 3 });
 * using beta = Tensor.rand([B, T, H], { seed: 4 });
 * using r = chunkDeltaRule(q, k, v, beta, { layout: "bshd" });
 * const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
 * const oracle = deltaRuleReference({
 *   B, T, H, HK: H, K: D, V: D, scale: D ** -0.5, q: host(q), k: host(k), v: host(v), beta: host(beta),
 * });
 * const { relRms } = compare(r.output, oracle.output);
 * console.log(relRms <= DELTA_RULE_TOLERANCE.bfloat16.output ? "PASS" : "FAIL");
 * ```
 *
 * @module
 */
export {
  admits,
  attentionBackward as attentionReferenceBackward,
  attentionForward as attentionReference,
  attentionLoss as attentionReferenceLoss,
  type AttentionProblem,
  type BackwardResult as AttentionReferenceGradients,
  FLOAT64,
  float8Precision,
  type ForwardResult as AttentionReferenceOutputs,
  type Precision,
  roundBf16,
  roundF16,
  samePrecision,
} from "./attention.ts";
export { roundE4m3 } from "./rounding.ts";
export {
  causalConv1dReference,
  type CausalConv1dReferenceActivation,
  causalConv1dReferenceBackward,
  type CausalConv1dReferenceGradients,
  type CausalConv1dReferenceInputs,
  type CausalConv1dReferenceOutputs,
} from "./causal_conv1d.ts";
export {
  type DeltaReferenceGradients,
  type DeltaReferenceInputs,
  type DeltaReferenceOutputs,
  deltaRuleReference,
  deltaRuleReferenceBackward,
  L2NORM_EPS,
} from "./delta_rule.ts";
export {
  FEATURE_MAP_EPS,
  FEATURE_MAPS,
  type FeatureMap,
  featureMapLinearAttentionReference,
  featureMapLinearAttentionReferenceBackward,
  type FeatureMapReferenceGradients,
  type FeatureMapReferenceInputs,
} from "./feature_map.ts";
export {
  gateTransformReference,
  gateTransformReferenceBackward,
  type GateTransformReferenceGradients,
  type GateTransformReferenceInputs,
  type GateTransformReferenceKind,
} from "./gate_transform.ts";
export {
  gatedLinearReference,
  gatedLinearReferenceBackward,
  type GatedLinearReferenceGradients,
  type GatedLinearReferenceInputs,
  type GatedLinearReferenceOutputs,
  NORMALIZE_EPS,
  retentionLogDecay,
} from "./linear_attention.ts";
export {
  l2Normalize,
  pagedDecodeReference,
  type PagedDecodeReferenceInputs,
  type PagedDecodeReferenceOutputs,
} from "./paged_decode.ts";
export type { LinearReferenceProblem } from "./sequences.ts";
export {
  ATTENTION_TOLERANCE,
  attentionBound,
  type AttentionTolerance,
  DELTA_RULE_TOLERANCE,
  type DeltaRuleTolerance,
  FEATURE_MAP_TOLERANCE,
  featureMapGradientTolerance,
  type FeatureMapTolerance,
  GATE_GRADIENT_TOLERANCE,
  type GateFamily,
  PAGED_DECODE_BASE,
  pagedDecodeTolerance,
  roundingAllowance,
  type RowTolerance,
  type RowToleranceBreach,
  rowToleranceBreach,
} from "./tolerance.ts";
export {
  kdaReference,
  kdaReferenceBackward,
  type KdaReferenceGradients,
  type KdaReferenceInputs,
  type KdaReferenceOutputs,
} from "./kda.ts";
