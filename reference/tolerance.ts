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
