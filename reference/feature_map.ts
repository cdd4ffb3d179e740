/**
 * Float64 oracle of feature-map linear attention, written as plain quadratic attention (every score
 * formed explicitly, T x T per head) so that it shares nothing with a streaming or chunked kernel;
 * its reverse mode is derived by hand (checked against finite differences). Token-major host arrays
 * (the `"bshd"` layout): q, k `[B, T, H, K]`, v `[B, T, H, V]`, cosWeight / sinWeight `[T]`.
 *
 * With P = phi(q), R = phi(k) applied per element, w_ij = cos_i cos_j + sin_i sin_j under cosformer
 * weights (1 without), and j running over every token (bidirectional) or j <= i (causal):
 *   s_ij = (P_i . R_j) w_ij
 *   o_i  = sum_j s_ij v_j / (sum_j s_ij + eps)
 * The feature maps: `"elu+1"` elu(x) + 1, `"relu"` max(x, 0), `"identity"` x, and `"softmax_free"`
 * the identity map without the normaliser (o_i = sum_j s_ij v_j). No query scale.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkFields, count, expectLength, expectNumbers, FINITE, NUMBERS } from "./checks.ts";

/** The feature maps phi of feature-map linear attention. */
export type FeatureMap = "elu+1" | "relu" | "identity" | "softmax_free";

/** The feature maps, in the order the documentation lists them. */
export const FEATURE_MAPS: readonly FeatureMap[] = ["elu+1", "relu", "identity", "softmax_free"];

/**
 * The default epsilon added to the normaliser (outside the sum).
 *
 * @example
 * ```ts
 * import { FEATURE_MAP_EPS } from "@attnkit/attnkit/reference";
 * console.log(FEATURE_MAP_EPS); // 0.000001
 * ```
 */
export const FEATURE_MAP_EPS = 1e-6;

/** The inputs of one oracle run (float64 or float32 host arrays holding the exact input values). */
export interface FeatureMapReferenceInputs {
  /** Batch. */
  B: number;
  /** Tokens per batch row. */
  T: number;
  /** Heads. */
  H: number;
  /** Query/key head dimension. */
  K: number;
  /** Value head dimension. */
  V: number;
  /** `[B, T, H, K]`. */
  q: ArrayLike<number>;
  /** `[B, T, H, K]`. */
  k: ArrayLike<number>;
  /** `[B, T, H, V]`. */
  v: ArrayLike<number>;
  /** The feature map; `"elu+1"` when absent. */
  phi?: FeatureMap;
  /** Token i attends to tokens j <= i only; all tokens when false or absent. */
  isCausal?: boolean;
  /** Added to the normaliser; {@link FEATURE_MAP_EPS} when absent. */
  eps?: number;
  /** `[T]` cosformer cosine weight per position (given together with sinWeight). */
  cosWeight?: ArrayLike<number>;
  /** `[T]` cosformer sine weight per position (given together with cosWeight). */
  sinWeight?: ArrayLike<number>;
}

/** What the backward oracle returns. */
export interface FeatureMapReferenceGradients {
  /** `[B, T, H, K]`. */
  dq: Float64Array;
  /** `[B, T, H, K]`. */
  dk: Float64Array;
  /** `[B, T, H, V]`. */
  dv: Float64Array;
}

const INPUTS = {
  B: count(0),
  T: count(0),
  H: count(1),
  K: count(1),
  V: count(1),
  q: NUMBERS,
  k: NUMBERS,
  v: NUMBERS,
  phi: FEATURE_MAPS,
  isCausal: "boolean",
  eps: FINITE,
  cosWeight: NUMBERS,
  sinWeight: NUMBERS,
} as const;
const REQUIRED = ["B", "T", "H", "K", "V", "q", "k", "v"];

/** Refuses oracle inputs whose fields are missing, mistyped or of the wrong lengths, naming `op`. */
export function checkFeatureMapInputs(op: string, x: FeatureMapReferenceInputs): void {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const { B, T, H, K, V } = x;
  expectLength(op, "x.q", x.q, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  expectLength(op, "x.k", x.k, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  expectLength(op, "x.v", x.v, B * T * H * V, `[${B}, ${T}, ${H}, ${V}]`);
  if ((x.cosWeight == null) !== (x.sinWeight == null)) {
    const missing = x.cosWeight == null ? "cosWeight" : "sinWeight";
    throw invalidArgument(op, `x.${missing}: required with the other cosformer weight`);
  }
  if (x.cosWeight) expectLength(op, "x.cosWeight", x.cosWeight, T, `[${T}]`);
  if (x.sinWeight) expectLength(op, "x.sinWeight", x.sinWeight, T, `[${T}]`);
  if (x.eps !== undefined && x.eps !== null && x.eps < 0) {
    throw invalidArgument(op, `x.eps: expected a number from 0, got ${x.eps}`);
  }
}

/** The feature map phi(x) and its derivative. */
export function featureMapPhi(phi: FeatureMap): { f: (x: number) => number; df: (x: number) => number } {
  switch (phi) {
    case "elu+1":
      return { f: (x) => (x > 0 ? x + 1 : Math.exp(x)), df: (x) => (x > 0 ? 1 : Math.exp(x)) };
    case "relu":
      return { f: (x) => (x > 0 ? x : 0), df: (x) => (x > 0 ? 1 : 0) };
    default:
      return { f: (x) => x, df: () => 1 };
  }
}

interface Head {
  P: Float64Array[];
  R: Float64Array[];
  /** s_ij, zero where j is masked. */
  s: Float64Array[];
  /** sum_j s_ij + eps, or 1 without the normaliser. */
  den: Float64Array;
  o: Float64Array[];
}

// The scores, normaliser and output of one (batch row, head).
function head(x: FeatureMapReferenceInputs, b: number, h: number): Head {
  const { T, H, K, V } = x;
  const phi = x.phi ?? "elu+1";
  const { f } = featureMapPhi(phi);
  const normalised = phi !== "softmax_free", eps = x.eps ?? FEATURE_MAP_EPS;
  const feature = (src: ArrayLike<number>, t: number) =>
    Float64Array.from({ length: K }, (_, i) => f(src[((b * T + t) * H + h) * K + i]));
  const P = Array.from({ length: T }, (_, t) => feature(x.q, t));
  const R = Array.from({ length: T }, (_, t) => feature(x.k, t));
  const s: Float64Array[] = [], o: Float64Array[] = [];
  const den = new Float64Array(T);
  for (let i = 0; i < T; i++) {
    const si = new Float64Array(T), oi = new Float64Array(V);
    let sum = 0;
    for (let j = 0; j < (x.isCausal ? i + 1 : T); j++) {
      let dot = 0;
      for (let c = 0; c < K; c++) dot += P[i][c] * R[j][c];
      const w = x.cosWeight ? x.cosWeight[i] * x.cosWeight[j] + x.sinWeight![i] * x.sinWeight![j] : 1;
      si[j] = dot * w;
      sum += si[j];
      const vBase = ((b * T + j) * H + h) * V;
      for (let c = 0; c < V; c++) oi[c] += si[j] * x.v[vBase + c];
    }
    den[i] = normalised ? sum + eps : 1;
    for (let c = 0; c < V; c++) oi[c] /= den[i];
    s.push(si), o.push(oi);
  }
  return { P, R, s, den, o };
}

/**
 * The forward pass in float64: the output `[B, T, H, V]`.
 *
 * @example
 * ```ts
 * import { featureMapLinearAttentionReference } from "@attnkit/attnkit/reference";
 * // Causal, relu: the first token sees only itself, so its output is its own value (up to eps).
 * const o = featureMapLinearAttentionReference({
 *   B: 1, T: 2, H: 1, K: 1, V: 1, q: [1, 2], k: [1, 3], v: [5, 7], phi: "relu", isCausal: true,
 * });
 * console.log(o[0].toFixed(5), o[1].toFixed(5)); // 5.00000 6.50000
 * ```
 */
export function featureMapLinearAttentionReference(x: FeatureMapReferenceInputs): Float64Array {
  checkFeatureMapInputs("featureMapLinearAttentionReference", x);
  const { B, T, H, V } = x;
  const output = new Float64Array(B * T * H * V);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const { o } = head(x, b, h);
      for (let t = 0; t < T; t++) output.set(o[t], ((b * T + t) * H + h) * V);
    }
  }
  return output;
}

/**
 * Reverse mode of {@link featureMapLinearAttentionReference} for the loss `sum(dOutput * output)`:
 * the gradients of q, k and v.
 *
 * @example
 * ```ts
 * import { featureMapLinearAttentionReferenceBackward } from "@attnkit/attnkit/reference";
 * // One token: o = v s / (s + eps), so do/dv = s / (s + eps), about 1.
 * const { dv } = featureMapLinearAttentionReferenceBackward(
 *   { B: 1, T: 1, H: 1, K: 1, V: 1, q: [1], k: [1], v: [3] },
 *   [1],
 * );
 * console.log(dv[0].toFixed(5)); // 1.00000
 * ```
 */
export function featureMapLinearAttentionReferenceBackward(
  x: FeatureMapReferenceInputs,
  dOutput: ArrayLike<number>,
): FeatureMapReferenceGradients {
  const op = "featureMapLinearAttentionReferenceBackward";
  checkFeatureMapInputs(op, x);
  const { B, T, H, K, V } = x;
  expectNumbers(op, "dOutput", dOutput, B * T * H * V, `[${B}, ${T}, ${H}, ${V}]`);
  const { df } = featureMapPhi(x.phi ?? "elu+1");
  const normalised = (x.phi ?? "elu+1") !== "softmax_free";
  const dq = new Float64Array(B * T * H * K), dk = new Float64Array(B * T * H * K);
  const dv = new Float64Array(B * T * H * V);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const { P, R, s, den, o } = head(x, b, h);
      const dP = Array.from({ length: T }, () => new Float64Array(K));
      const dR = Array.from({ length: T }, () => new Float64Array(K));
      for (let i = 0; i < T; i++) {
        const oBase = ((b * T + i) * H + h) * V;
        // o_i = num_i / den_i: dnum_i = dO_i / den_i, dden_i = -(dO_i . o_i) / den_i.
        const dNum = new Float64Array(V);
        let dDen = 0;
        for (let c = 0; c < V; c++) {
          dNum[c] = dOutput[oBase + c] / den[i];
          dDen -= dOutput[oBase + c] * o[i][c] / den[i];
        }
        if (!normalised) dDen = 0;
        for (let j = 0; j < (x.isCausal ? i + 1 : T); j++) {
          const vBase = ((b * T + j) * H + h) * V;
          // s_ij feeds num_i (times v_j) and den_i.
          let ds = dDen;
          for (let c = 0; c < V; c++) {
            ds += dNum[c] * x.v[vBase + c];
            dv[vBase + c] += s[i][j] * dNum[c];
          }
          const w = x.cosWeight ? x.cosWeight[i] * x.cosWeight[j] + x.sinWeight![i] * x.sinWeight![j] : 1;
          for (let c = 0; c < K; c++) {
            dP[i][c] += ds * w * R[j][c];
            dR[j][c] += ds * w * P[i][c];
          }
        }
      }
      for (let t = 0; t < T; t++) {
        const base = ((b * T + t) * H + h) * K;
        for (let c = 0; c < K; c++) {
          dq[base + c] = dP[t][c] * df(x.q[base + c]);
          dk[base + c] = dR[t][c] * df(x.k[base + c]);
        }
      }
    }
  }
  return { dq, dk, dv };
}
