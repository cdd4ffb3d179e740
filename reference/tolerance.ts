/**
 * The tolerance rules attnkit's own tests hold every kernel to against the float64 oracles, stated
 * once so a user's check can apply the same bar.
 *
 * @module
 */
import { checkArgument, numberIn } from "../ops/args.ts";

/** Relative RMS error bounds of one dtype for the delta-rule family (DeltaNet, Gated DeltaNet). */
export interface DeltaRuleTolerance {
  /** The output. */
  readonly output: number;
  /** The final state. */
  readonly state: number;
  /** dq, dk, dv. */
  readonly dqkv: number;
  /** dbeta, dg and the initial state's gradient. */
  readonly dsmall: number;
}

/**
 * Relative RMS error (`RMS(actual - oracle) / RMS(oracle)`) allowed against the float64 oracle fed the
 * same (rounded) inputs. float16 / bfloat16: flash-linear-attention's rule (outputs and states 0.005,
 * dq / dk / dv 0.008, the small gradients 0.02). float32: 100x tighter, since the state and every sum
 * are fp32 or wider.
 *
 * @example
 * ```ts
 * import { DELTA_RULE_TOLERANCE } from "@attnkit/attnkit/reference";
 * console.log(DELTA_RULE_TOLERANCE.bfloat16.output); // 0.005
 * ```
 */
export const DELTA_RULE_TOLERANCE: Readonly<Record<"float32" | "float16" | "bfloat16", DeltaRuleTolerance>> =
  {
    bfloat16: { output: 0.005, state: 0.005, dqkv: 0.008, dsmall: 0.02 },
    float16: { output: 0.005, state: 0.005, dqkv: 0.008, dsmall: 0.02 },
    float32: { output: 5e-5, state: 5e-5, dqkv: 8e-5, dsmall: 2e-4 },
  };

/** The constants of FlashAttention's test rule, see {@link ATTENTION_TOLERANCE}. */
export interface AttentionTolerance {
  /** Multiple of the same-precision reference's max abs error allowed for the forward output. */
  readonly forwardFactor: number;
  /** Multiple allowed for dq, dk, dv. */
  readonly backwardFactor: number;
  /** Added to the bound (covers a reference error of 0). */
  readonly slack: number;
  /** The LSE: |error| <= lseRelative * max(1, |LSE|). */
  readonly lseRelative: number;
}

/**
 * FlashAttention's rule for softmax attention (float16 and bfloat16): the kernel's max abs error
 * against the float64 oracle must be at most 2x (output) or 3x (dq, dk, dv) the max abs error of a
 * same-precision reference computed the plain way (`samePrecision(dtype)`), plus 1e-5; the LSE within
 * 1e-3 relative. Any NaN, or a non-finite value where the oracle is finite, fails.
 *
 * @example
 * ```ts
 * import { ATTENTION_TOLERANCE, attentionBound } from "@attnkit/attnkit/reference";
 * console.log(ATTENTION_TOLERANCE.forwardFactor); // 2
 * console.log(attentionBound(0.004, "forward")); // 0.00801
 * ```
 */
export const ATTENTION_TOLERANCE: AttentionTolerance = {
  forwardFactor: 2,
  backwardFactor: 3,
  slack: 1e-5,
  lseRelative: 1e-3,
};

/**
 * The max abs error a softmax-attention kernel may have against the float64 oracle, given the max abs
 * error of the same-precision reference on the same inputs.
 *
 * @example
 * ```ts
 * import { attentionBound } from "@attnkit/attnkit/reference";
 * const bound = attentionBound(0.01, "backward"); // 0.03001
 * ```
 */
export function attentionBound(samePrecisionMaxAbs: number, direction: "forward" | "backward"): number {
  checkArgument("attentionBound", "samePrecisionMaxAbs", samePrecisionMaxAbs, numberIn(0, Number.MAX_VALUE));
  checkArgument("attentionBound", "direction", direction, ["forward", "backward"]);
  const factor = direction === "forward"
    ? ATTENTION_TOLERANCE.forwardFactor
    : ATTENTION_TOLERANCE.backwardFactor;
  return factor * samePrecisionMaxAbs + ATTENTION_TOLERANCE.slack;
}

/** The gated families whose decay gradients {@link GATE_GRADIENT_TOLERANCE} bounds. */
export type GateFamily = "gla" | "kda";

/**
 * Relative RMS error allowed for the gradient of a gated family's natural-log decays against the float64
 * oracle fed the same (rounded) inputs: `gla` for GLA's dgk and simple GLA's dg, `kda` for KDA's dgate.
 * The other outputs and gradients of these families follow {@link DELTA_RULE_TOLERANCE}.
 *
 * A chunked kernel forms a decay's gradient as a reverse cumulative sum over the sequence of terms
 * (`q dq - k dk`) that largely cancel, so the 16-bit operands leave it several times dq's error: float16 /
 * bfloat16 0.12 for GLA (simple GLA in bf16 on the H200, gates uniform in [-6, 0] over 60 seeds: median
 * 0.021, 90th percentile 0.034, worst 0.073; gates in [-0.25, 0]: worst 0.014) and 0.08 for KDA; a wrong
 * gradient is off by order 1. float32: the delta rule's bound for its small gradients (2e-4).
 *
 * @example
 * ```ts
 * import { DELTA_RULE_TOLERANCE, GATE_GRADIENT_TOLERANCE } from "@attnkit/attnkit/reference";
 * console.log(GATE_GRADIENT_TOLERANCE.gla.bfloat16); // 0.12
 * console.log(GATE_GRADIENT_TOLERANCE.kda.float32 === DELTA_RULE_TOLERANCE.float32.dsmall); // true
 * ```
 */
export const GATE_GRADIENT_TOLERANCE: Readonly<
  Record<GateFamily, Readonly<Record<"float32" | "float16" | "bfloat16", number>>>
> = {
  gla: { bfloat16: 0.12, float16: 0.12, float32: DELTA_RULE_TOLERANCE.float32.dsmall },
  kda: { bfloat16: 0.08, float16: 0.08, float32: DELTA_RULE_TOLERANCE.float32.dsmall },
};
