/**
 * The tolerance rules attnkit's own tests hold every kernel to against the float64 oracles, stated
 * once so a user's check can apply the same bar.
 *
 * @module
 */
import { checkArgument, numberIn } from "../ops/args.ts";
import { checkNumbers } from "./checks.ts";
import { BFLOAT16, FLOAT16, roundToFormat } from "./rounding.ts";
import { expectNumbers } from "./checks.ts";
import {
  checkFeatureMapInputs,
  FEATURE_MAP_EPS,
  featureMapPhi,
  type FeatureMapReferenceInputs,
} from "./feature_map.ts";

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
 * same-precision reference computed the plain way (`samePrecision(dtype)`), plus FlashAttention's
 * rounding allowance ({@link roundingAllowance}: about one unit in the last place of the dtype around the
 * values) and 1e-5; the LSE within 1e-3 relative. Any NaN, or a non-finite value where the oracle is
 * finite, fails.
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
 * error of the same-precision reference on the same inputs and the rounding allowance of the oracle's
 * values ({@link roundingAllowance}; 0 when left out).
 *
 * @example
 * ```ts
 * import { attentionBound, roundingAllowance } from "@attnkit/attnkit/reference";
 * const bound = attentionBound(0.01, "backward"); // 0.03001
 * const withRounding = attentionBound(0.004, "forward", roundingAllowance([0.79], "bfloat16")); // 0.0158225
 * ```
 */
export function attentionBound(
  samePrecisionMaxAbs: number,
  direction: "forward" | "backward",
  allowance = 0,
): number {
  checkArgument("attentionBound", "samePrecisionMaxAbs", samePrecisionMaxAbs, numberIn(0, Number.MAX_VALUE));
  checkArgument("attentionBound", "direction", direction, ["forward", "backward"]);
  checkArgument("attentionBound", "allowance", allowance, numberIn(0, Number.MAX_VALUE));
  const factor = direction === "forward"
    ? ATTENTION_TOLERANCE.forwardFactor
    : ATTENTION_TOLERANCE.backwardFactor;
  return factor * samePrecisionMaxAbs + allowance + ATTENTION_TOLERANCE.slack;
}

/**
 * FlashAttention's rounding allowance, the absolute term of its tests' bound: twice the largest error of
 * `(x + 0.3) - 0.3` computed in `dtype` (each step rounded to it) over the oracle's values x rounded to
 * `dtype`, i.e. about one unit in the last place of the values around `0.3 + |x|`. It keeps the rule
 * from failing a kernel whose error is one rounding of its output more than the reference's, which the
 * relative term alone does when few elements are compared and the reference happened to round well.
 *
 * @example
 * ```ts
 * import { roundingAllowance } from "@attnkit/attnkit/reference";
 * console.log(roundingAllowance([0.79, -0.1], "bfloat16")); // 0.0078125 (0.79 + 0.3 rounds by half a unit)
 * ```
 */
export function roundingAllowance(expected: ArrayLike<number>, dtype: "float16" | "bfloat16"): number {
  checkNumbers("roundingAllowance", "expected", expected);
  checkArgument("roundingAllowance", "dtype", dtype, ["float16", "bfloat16"]);
  const format = dtype === "float16" ? FLOAT16 : BFLOAT16;
  const r = (x: number) => roundToFormat(x, format);
  let worst = 0;
  for (let i = 0; i < expected.length; i++) {
    const x = r(expected[i]);
    const error = Math.abs(r(r(x + 0.3) - 0.3) - x);
    if (error > worst) worst = error; // NaN never raises it: the rule fails NaN on its own.
  }
  return 2 * worst;
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

/** Relative RMS error bounds of one dtype for feature-map linear attention: {@link FEATURE_MAP_TOLERANCE}. */
export interface FeatureMapTolerance {
  /** The output. */
  readonly output: number;
  /** dq, dk, dv. */
  readonly grad: number;
}

/**
 * Relative RMS error (`RMS(actual - oracle) / RMS(oracle)`) allowed for feature-map linear attention
 * (`featureMapLinearAttention` and its backward, every feature map, causal or bidirectional) against the
 * float64 oracle fed the same (rounded) inputs. float32: 1e-5 (output) and 1e-4 (dq, dk, dv): every sum is
 * float32 (a GPU's matrix products add in another order), the rest is the conditioning of the normaliser.
 * bfloat16: 1e-2 and 2e-2; float16: 4e-3 and 8e-3: the features and the kernel's outputs are rounded to
 * the input dtype once each (2^-8 and 2^-11 relative), a few roundings in a row.
 *
 * The rule assumes a normaliser away from 0, whose inverse is the output's condition number: the tests
 * draw positive features for the identity map and relu inputs of mean 1. dq and dk, which can cancel,
 * get more on some calls: {@link featureMapGradientTolerance} gives a call's gradient bounds.
 *
 * @example
 * ```ts
 * import { compare, featureMapLinearAttention, Tensor } from "@attnkit/attnkit";
 * import { FEATURE_MAP_TOLERANCE, featureMapLinearAttentionReference } from "@attnkit/attnkit/reference";
 * const [B, T, H, D] = [1, 16, 2, 8];
 * using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", seed: 3 });
 * using r = featureMapLinearAttention(q, k, v, { layout: "bshd", phi: "elu+1", isCausal: true });
 * const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
 * const oracle = featureMapLinearAttentionReference({
 *   B, T, H, K: D, V: D, q: host(q), k: host(k), v: host(v), phi: "elu+1", isCausal: true,
 * });
 * console.log(compare(r.output, oracle).relRms <= FEATURE_MAP_TOLERANCE.bfloat16.output); // true
 * ```
 */
export const FEATURE_MAP_TOLERANCE: Readonly<
  Record<"float32" | "float16" | "bfloat16", FeatureMapTolerance>
> = {
  float32: { output: 1e-5, grad: 1e-4 },
  bfloat16: { output: 1e-2, grad: 2e-2 },
  float16: { output: 4e-3, grad: 8e-3 },
};

/**
 * The relative RMS bounds of one feature-map call's dq, dk and dv under the tests' rule:
 * `FEATURE_MAP_TOLERANCE[dtype].grad`, or for dq and dk, where they may cancel, 8 rounding units of the
 * dtype times the gradient's condition number if that is larger. dq and dk are sums of terms that can
 * cancel (`ds_ij = dO_i . (v_j - o_i) / den_i`, then `dP_i = sum_j ds_ij w_ij R_j`): each element's float
 * error is a few roundings of the terms' magnitudes, so the relative RMS error can reach the rounding
 * unit times RMS(magnitudes) / RMS(gradient). The tests widen the bound so for float32 calls, whose
 * rule is ~1,700 units (only a call that really cancels gets more, e.g. two tokens with
 * `phi(k_0) s_1 - phi(k_1) s_0` nearly 0), and for one token, where the formula itself cancels
 * (`o = v s / (s + eps)` leaves dq and dk of the order of eps); 16-bit calls of more tokens keep the rule.
 * `gradients` are the oracle's (`featureMapLinearAttentionReferenceBackward(x, dOutput)`); the cost is
 * that of the oracle's backward.
 *
 * @example
 * ```ts
 * import {
 *   FEATURE_MAP_TOLERANCE,
 *   featureMapGradientTolerance,
 *   featureMapLinearAttentionReferenceBackward,
 * } from "@attnkit/attnkit/reference";
 * // One token: dq and dk are of the order of eps, so their bound is the conditioned one.
 * const x = { B: 1, T: 1, H: 1, K: 2, V: 2, q: [0.5, -1], k: [1, 0.3], v: [1, 2] };
 * const dOutput = [1, -1];
 * const grads = featureMapLinearAttentionReferenceBackward(x, dOutput);
 * const bound = featureMapGradientTolerance(x, dOutput, grads, "bfloat16");
 * console.log(bound.dv === FEATURE_MAP_TOLERANCE.bfloat16.grad, bound.dq > bound.dv); // true true
 * ```
 */
export function featureMapGradientTolerance(
  x: FeatureMapReferenceInputs,
  dOutput: ArrayLike<number>,
  gradients: { dq: ArrayLike<number>; dk: ArrayLike<number> },
  dtype: "float32" | "float16" | "bfloat16",
): { dq: number; dk: number; dv: number } {
  const op = "featureMapGradientTolerance";
  checkArgument(op, "dtype", dtype, ["float32", "float16", "bfloat16"]);
  checkFeatureMapInputs(op, x);
  const { B, T, H, K, V } = x;
  expectNumbers(op, "dOutput", dOutput, B * T * H * V, `[${B}, ${T}, ${H}, ${V}]`);
  expectNumbers(op, "gradients.dq", gradients?.dq, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  expectNumbers(op, "gradients.dk", gradients?.dk, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  const rule = FEATURE_MAP_TOLERANCE[dtype].grad;
  if (dtype !== "float32" && T !== 1) return { dq: rule, dk: rule, dv: rule };
  const phi = x.phi ?? "elu+1";
  const { f, df } = featureMapPhi(phi);
  const unit = dtype === "float32" ? 2 ** -24 : dtype === "float16" ? 2 ** -11 : 2 ** -8;
  const normalised = phi !== "softmax_free", eps = x.eps ?? FEATURE_MAP_EPS;
  // The magnitudes of the terms each element of dq and dk sums, head by head.
  const magQ = new Float64Array(B * T * H * K), magK = new Float64Array(B * T * H * K);
  const P = new Float64Array(T * K), R = new Float64Array(T * K); // phi(q), phi(k)
  const dP = new Float64Array(T * K), dR = new Float64Array(T * K); // |phi'(q)|, |phi'(k)|
  const s = new Float64Array(T), o = new Float64Array(V);
  const at = (t: number, b: number, h: number, d: number) => ((b * T + t) * H + h) * d;
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      for (let t = 0; t < T; t++) {
        for (let c = 0; c < K; c++) {
          const qc = x.q[at(t, b, h, K) + c], kc = x.k[at(t, b, h, K) + c];
          P[t * K + c] = f(qc);
          R[t * K + c] = f(kc);
          dP[t * K + c] = Math.abs(df(qc));
          dR[t * K + c] = Math.abs(df(kc));
        }
      }
      const w = (i: number, j: number) =>
        x.cosWeight ? x.cosWeight[i] * x.cosWeight[j] + x.sinWeight![i] * x.sinWeight![j] : 1;
      for (let i = 0; i < T; i++) {
        const last = x.isCausal ? i + 1 : T;
        let den = 0;
        for (let j = 0; j < last; j++) {
          let dot = 0;
          for (let c = 0; c < K; c++) dot += P[i * K + c] * R[j * K + c];
          s[j] = dot * w(i, j);
          den += s[j];
        }
        den = normalised ? den + eps : 1;
        for (let c = 0; c < V; c++) {
          let acc = 0;
          for (let j = 0; j < last; j++) acc += s[j] * x.v[at(j, b, h, V) + c];
          o[c] = acc / den;
        }
        const dOi = at(i, b, h, V);
        let dOo = 0;
        for (let c = 0; c < V; c++) dOo += normalised ? Math.abs(dOutput[dOi + c] * o[c]) : 0;
        for (let j = 0; j < last; j++) {
          const vj = at(j, b, h, V);
          let m = dOo;
          for (let c = 0; c < V; c++) m += Math.abs(dOutput[dOi + c] * x.v[vj + c]);
          m *= Math.abs(w(i, j)) / den;
          const qi = at(i, b, h, K), kj = at(j, b, h, K);
          for (let c = 0; c < K; c++) {
            magQ[qi + c] += m * Math.abs(R[j * K + c]) * dP[i * K + c];
            magK[kj + c] += m * Math.abs(P[i * K + c]) * dR[j * K + c];
          }
        }
      }
    }
  }
  const rms = (a: ArrayLike<number>) => {
    let sum = 0;
    for (let i = 0; i < a.length; i++) sum += a[i] * a[i];
    return Math.sqrt(sum / Math.max(a.length, 1));
  };
  const conditioned = (
    mag: Float64Array,
    g: ArrayLike<number>,
  ) => (rms(g) > 0 ? 8 * unit * rms(mag) / rms(g) : 0);
  return {
    dq: Math.max(rule, conditioned(magQ, gradients.dq)),
    dk: Math.max(rule, conditioned(magK, gradients.dk)),
    dv: rule,
  };
}

/**
 * One result's terms in the paged decode rule ({@link pagedDecodeTolerance}, {@link rowToleranceBreach}):
 * what its dtype's rounding adds to the float32 base.
 *
 * @example
 * ```ts
 * import { type RowTolerance, rowToleranceBreach } from "@attnkit/attnkit/reference";
 * const float32: RowTolerance = { relative: 0, absolute: 0 };
 * console.log(rowToleranceBreach([1.000001], [1], 1, float32)); // undefined
 * ```
 */
export interface RowTolerance {
  /** Added to the relative term 2^-16. */
  readonly relative: number;
  /** The absolute term. */
  readonly absolute: number;
}

/**
 * The float32 base of the paged decode rule: 2^-16 relative, and 2^-16 of the row's scale.
 *
 * @example
 * ```ts
 * import { PAGED_DECODE_BASE } from "@attnkit/attnkit/reference";
 * console.log(PAGED_DECODE_BASE); // 0.0000152587890625
 * ```
 */
export const PAGED_DECODE_BASE = 2 ** -16;

// Half a unit in the last place, relative: a 16-bit result's own rounding.
const HALF_ULP = { float32: 0, bfloat16: 2 ** -8, float16: 2 ** -11 } as const;

/**
 * The rule attnkit's tests hold the paged decode steps (`recurrentGdnDecode`, `recurrentKdaDecode`) to,
 * per element of a row (an output row of V values, a state row of K):
 *   |actual - oracle| <= (2^-16 + relative) |oracle| + 2^-16 s + absolute,
 * s the row's largest |oracle| or, for outputs, the largest magnitude of the terms behind them
 * (`outputMagnitude` of `pagedDecodeReference`: a dot product that cancels is exact only relative to
 * its terms). 2^-16 covers float32 products over K and the norm's rounding. A 16-bit output adds half
 * its ulp relative (2^-8 bfloat16, 2^-11 float16) and, for float16, half its subnormal step (2^-25)
 * absolute; a bfloat16 pool, compared with the oracle's state rounded to bfloat16, two half ulps (a
 * rounding that float32's order of operations tips the other way).
 *
 * @example
 * ```ts
 * import { pagedDecodeTolerance } from "@attnkit/attnkit/reference";
 * const t = pagedDecodeTolerance("bfloat16", "float32");
 * console.log(t.output.relative, t.state.relative); // 0.00390625 0
 * ```
 */
export function pagedDecodeTolerance(
  outputDtype: "float32" | "float16" | "bfloat16",
  stateDtype: "float32" | "bfloat16",
): { output: RowTolerance; state: RowTolerance } {
  checkArgument("pagedDecodeTolerance", "outputDtype", outputDtype, ["float32", "float16", "bfloat16"]);
  checkArgument("pagedDecodeTolerance", "stateDtype", stateDtype, ["float32", "bfloat16"]);
  return {
    output: { relative: HALF_ULP[outputDtype], absolute: outputDtype === "float16" ? 2 ** -25 : 0 },
    state: { relative: 2 * HALF_ULP[stateDtype], absolute: 0 },
  };
}

/**
 * An element past the row rule's bound, as {@link rowToleranceBreach} finds it.
 *
 * @example
 * ```ts
 * import { type RowToleranceBreach, rowToleranceBreach } from "@attnkit/attnkit/reference";
 * const breach: RowToleranceBreach | undefined = rowToleranceBreach([0, 5], [0, 4], 2, { relative: 0, absolute: 0 });
 * console.log(breach?.index, breach?.rowScale); // 1 4
 * ```
 */
export interface RowToleranceBreach {
  /** Its index. */
  index: number;
  /** The value compared. */
  actual: number;
  /** The oracle's. */
  expected: number;
  /** The bound it broke (NaN where the oracle is NaN and the value is not). */
  bound: number;
  /** The row's scale s. */
  rowScale: number;
}

/**
 * The first element of `actual` (rows of `rowLength` values) past the paged decode rule against the
 * oracle's values ({@link pagedDecodeTolerance} states it), or undefined when every element holds.
 * Where the oracle is NaN (a value that must stay untouched) the element must be NaN too; any other
 * NaN breaks the rule.
 *
 * @example
 * ```ts
 * import { pagedDecodeTolerance, rowToleranceBreach } from "@attnkit/attnkit/reference";
 * const { output } = pagedDecodeTolerance("float32", "float32");
 * console.log(rowToleranceBreach([1, 2 + 1e-6], [1, 2], 2, output)); // undefined
 * console.log(rowToleranceBreach([1, 2.01], [1, 2], 2, output)?.index); // 1
 * ```
 */
export function rowToleranceBreach(
  actual: ArrayLike<number>,
  oracle: ArrayLike<number>,
  rowLength: number,
  tolerance: RowTolerance,
  magnitude?: ArrayLike<number>,
): RowToleranceBreach | undefined {
  const op = "rowToleranceBreach";
  checkNumbers(op, "oracle", oracle);
  expectNumbers(op, "actual", actual, oracle.length, "one value per oracle value");
  checkArgument(op, "rowLength", rowLength, numberIn(1, 2 ** 31 - 1, true));
  if (magnitude !== undefined) expectNumbers(op, "magnitude", magnitude, oracle.length, "one per value");
  for (let start = 0; start < oracle.length; start += rowLength) {
    const end = Math.min(start + rowLength, oracle.length);
    let rowScale = 0;
    for (let i = start; i < end; i++) {
      if (Number.isFinite(oracle[i])) rowScale = Math.max(rowScale, Math.abs(oracle[i]), magnitude?.[i] ?? 0);
    }
    for (let i = start; i < end; i++) {
      const expected = oracle[i], value = actual[i];
      if (Number.isNaN(expected)) {
        if (!Number.isNaN(value)) return { index: i, actual: value, expected, bound: NaN, rowScale };
        continue;
      }
      const bound = (PAGED_DECODE_BASE + tolerance.relative) * Math.abs(expected) +
        PAGED_DECODE_BASE * rowScale + tolerance.absolute;
      // Written so that a NaN value fails.
      if (!(Math.abs(value - expected) <= bound)) {
        return { index: i, actual: value, expected, bound, rowScale };
      }
    }
  }
  return undefined;
}
