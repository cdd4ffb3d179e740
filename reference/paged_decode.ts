/**
 * Float64 oracle of the serving decode steps on a paged state pool (`recurrentGdnDecode`,
 * `recurrentKdaDecode`): one token per sequence, its preprocessing included. Host arrays, row-major:
 * the packed projection row `[B, 2 HK K + H V]` (`[Q of HK heads | K of HK heads | V of H heads]`), the
 * raw gate `[B, H]` (one per head) or `[B, H, K]` (one per key channel), the raw beta `[B, H]` and the
 * pool `[numSlots, H, V, K]`.
 *
 * Per sequence b on slot `stateIndices[b]` and value head h (q/k head h / (H / HK)):
 *   q, k = x / sqrt(sum x^2 + L2NORM_EPS)          (L2-normalised)
 *   g    = the gate transform of rawGate + dtBias     (gateTransformReference)
 *   beta = sigmoid(rawBeta)
 *   S <- S diag(exp(g));  u = beta (v - S k);  S <- S + u k^T;  o = scale S q
 * with S the slot's `[V, K]` state, zero where `hasInitialState[b]` is false. An index <= 0 is padding:
 * zero output, no slot touched.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import type { OptionKind } from "../ops/args.ts";
import { checkFields, checkNumbers, count, expectLength, FINITE, NUMBERS } from "./checks.ts";
import { L2NORM_EPS } from "./delta_rule.ts";
import { gateTransformReference, type GateTransformReferenceKind } from "./gate_transform.ts";
import { rowAt } from "./sequences.ts";

/**
 * The inputs of one paged decode step (host arrays holding the exact input values).
 *
 * @example
 * ```ts
 * import { type PagedDecodeReferenceInputs, pagedDecodeReference } from "@attnkit/attnkit/reference";
 * // One KDA sequence on slot 1 of 2, a bounded gate per key channel (K = 2, V = 1).
 * const x: PagedDecodeReferenceInputs = {
 *   B: 1, H: 1, HK: 1, K: 2, V: 1, numSlots: 2,
 *   packedQkv: [1, 0, 0, 1, 3], rawGate: [0, 0], rawBeta: [0], aLog: [0], dtBias: [0, 0],
 *   perChannel: true, gateTransform: "bounded", lowerBound: -5,
 *   stateCache: [0, 0, 0, 0], stateIndices: [1], hasInitialState: [false],
 * };
 * console.log(pagedDecodeReference(x).output[0]); // 0 (q is orthogonal to the key just written)
 * ```
 */
export interface PagedDecodeReferenceInputs {
  /** Sequences (one token each). */
  B: number;
  /** Value heads. */
  H: number;
  /** Query/key heads (divides H); each serves H / HK consecutive value heads. */
  HK: number;
  /** Key head dimension. */
  K: number;
  /** Value head dimension. */
  V: number;
  /** Slots in the pool. */
  numSlots: number;
  /** `[B, 2 HK K + H V]`: `[Q of HK heads | K of HK heads | V of H heads]`. */
  packedQkv: ArrayLike<number>;
  /** `[B, H]`, or `[B, H, K]` with `perChannel`: the raw gate projection. */
  rawGate: ArrayLike<number>;
  /** `[B, H]`: the raw write-gate projection. */
  rawBeta: ArrayLike<number>;
  /** `[H]`: the log of each head's gate amplitude. */
  aLog: ArrayLike<number>;
  /** `[H]`, or `[H, K]` with `perChannel`. */
  dtBias: ArrayLike<number>;
  /** A gate per key channel (KDA) rather than per head (Gated DeltaNet). */
  perChannel: boolean;
  /** `"softplus"` (Gated DeltaNet, KDA's option) or `"bounded"` (KDA's default). */
  gateTransform: GateTransformReferenceKind;
  /** The bounded transform's floor, at most 0 (default -5, as `recurrentKdaDecode`); not with `"softplus"`. */
  lowerBound?: number;
  /** `[numSlots, H, V, K]`: the pool before the step. */
  stateCache: ArrayLike<number>;
  /** `[B]`: sequence b's slot; <= 0 is padding. Positive indices are unique and below numSlots. */
  stateIndices: ArrayLike<number>;
  /** `[B]`: false (or 0) starts that sequence's slot from zero. Default: every slot resumes. */
  hasInitialState?: ArrayLike<number | boolean>;
  /** The query scale (default `1 / sqrt(K)`). */
  scale?: number;
}

/**
 * What the oracle returns.
 *
 * @example
 * ```ts
 * import { type PagedDecodeReferenceOutputs, pagedDecodeReference } from "@attnkit/attnkit/reference";
 * const r: PagedDecodeReferenceOutputs = pagedDecodeReference({
 *   B: 1, H: 1, HK: 1, K: 1, V: 1, numSlots: 2, packedQkv: [1, 1, 1], rawGate: [0], rawBeta: [0],
 *   aLog: [0], dtBias: [0], perChannel: false, gateTransform: "softplus",
 *   stateCache: [5, 0], stateIndices: [1],
 * });
 * console.log(r.stateCache[0], r.outputMagnitude[0] >= Math.abs(r.output[0])); // 5 true
 * ```
 */
export interface PagedDecodeReferenceOutputs {
  /** `[B, H, V]`; padding rows are 0. */
  output: Float64Array;
  /** `[numSlots, H, V, K]`: the pool after the step (slots no sequence names as given). */
  stateCache: Float64Array;
  /**
   * `[B, H, V]`: per output, the sum of the absolute values of the terms its dot products add, the
   * scale a float32 kernel's rounding error grows with where those sums cancel.
   */
  outputMagnitude: Float64Array;
}

// hasInitialState: booleans, or numbers (a bool tensor's toArray() gives 0 and 1).
const FLAGS: OptionKind = (v) =>
  Array.isArray(v) && v.every((x) => typeof x === "boolean")
    ? undefined
    : (NUMBERS as (v: unknown) => string | undefined)(v);
const INPUTS = {
  B: count(0),
  H: count(1),
  HK: count(1),
  K: count(1),
  V: count(1),
  numSlots: count(1),
  packedQkv: NUMBERS,
  rawGate: NUMBERS,
  rawBeta: NUMBERS,
  aLog: NUMBERS,
  dtBias: NUMBERS,
  perChannel: "boolean",
  gateTransform: ["softplus", "bounded"],
  lowerBound: FINITE,
  stateCache: NUMBERS,
  stateIndices: NUMBERS,
  hasInitialState: FLAGS,
  scale: FINITE,
} as const;
const REQUIRED = Object.keys(INPUTS).filter((k) => !["lowerBound", "hasInitialState", "scale"].includes(k));

// Refuses inputs whose fields are missing, mistyped or inconsistent, and indices the op refuses too
// (past the pool, or a slot named twice, which would make the order of the writes matter).
function checkInputs(op: string, x: PagedDecodeReferenceInputs): void {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const { B, H, HK, K, V, numSlots } = x;
  if (H % HK !== 0) throw invalidArgument(op, `x.HK: ${HK} does not divide the ${H} value heads`);
  const gateTail = x.perChannel ? `${H}, ${K}` : `${H}`;
  expectLength(op, "x.packedQkv", x.packedQkv, B * (2 * HK * K + H * V), `[${B}, 2 HK K + H V]`);
  expectLength(op, "x.rawGate", x.rawGate, B * H * (x.perChannel ? K : 1), `[${B}, ${gateTail}]`);
  expectLength(op, "x.rawBeta", x.rawBeta, B * H, `[${B}, ${H}]`);
  expectLength(op, "x.stateCache", x.stateCache, numSlots * H * V * K, `[${numSlots}, ${H}, ${V}, ${K}]`);
  expectLength(op, "x.stateIndices", x.stateIndices, B, `[${B}]`);
  if (x.hasInitialState) {
    expectLength(op, "x.hasInitialState", x.hasInitialState as ArrayLike<number>, B, `[${B}]`);
  }
  const seen = new Map<number, number>();
  for (let b = 0; b < B; b++) {
    const slot = x.stateIndices[b];
    if (!Number.isInteger(slot) || slot >= numSlots) {
      throw invalidArgument(op, `x.stateIndices: entry ${b} is ${slot}, not a slot of the ${numSlots}`);
    }
    if (slot <= 0) continue;
    if (seen.has(slot)) {
      throw invalidArgument(op, `x.stateIndices: entries ${seen.get(slot)} and ${b} both name slot ${slot}`);
    }
    seen.set(slot, b);
  }
}

/**
 * `x / sqrt(sum x^2 + L2NORM_EPS)`: the L2 norm the paged decode steps (and `useQkL2norm`) apply to q
 * and k.
 *
 * @example
 * ```ts
 * import { l2Normalize } from "@attnkit/attnkit/reference";
 * console.log(l2Normalize([3, 4])); // Float64Array [0.6, 0.8] (to about 1e-7)
 * ```
 */
export function l2Normalize(x: ArrayLike<number>): Float64Array {
  checkNumbers("l2Normalize", "x", x);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += x[i] * x[i];
  const inverse = 1 / Math.sqrt(sum + L2NORM_EPS);
  return Float64Array.from(x, (v) => v * inverse);
}

/**
 * One paged decode step in float64: the output and the pool after it (a new array; the given pool is
 * left alone), with each output's magnitude for a tolerance that scales with it.
 *
 * @example
 * ```ts
 * import { pagedDecodeReference } from "@attnkit/attnkit/reference";
 * // Two sequences, the second padding; H = HK = 1, K = V = 1: q = k = 1 after the norm (to 1e-6), and
 * // slot 1, holding 0, takes u = beta v = 1 (rawBeta 0: beta 1/2; v 2), so o = K^-0.5 u k q = 1.
 * const r = pagedDecodeReference({
 *   B: 2, H: 1, HK: 1, K: 1, V: 1, numSlots: 2,
 *   packedQkv: [1, 1, 2, 1, 1, 2], rawGate: [0, 0], rawBeta: [0, 0], aLog: [0], dtBias: [0],
 *   perChannel: false, gateTransform: "softplus",
 *   stateCache: [7, 0], stateIndices: [1, 0],
 * });
 * console.log(r.output[0].toFixed(4), r.output[1]); // 1.0000 0
 * console.log(r.stateCache[0]); // 7 (slot 0: no sequence names it)
 * ```
 */
export function pagedDecodeReference(x: PagedDecodeReferenceInputs): PagedDecodeReferenceOutputs {
  const op = "pagedDecodeReference";
  checkInputs(op, x);
  const { B, H, HK, K, V, numSlots } = x;
  const bounded = x.gateTransform === "bounded";
  if (!bounded && x.lowerBound !== undefined && x.lowerBound !== null) {
    throw invalidArgument(op, 'x.lowerBound: "softplus" has no lower bound; leave it out');
  }
  const width = 2 * HK * K + H * V, group = H / HK, slotSize = H * V * K;
  const scale = x.scale ?? 1 / Math.sqrt(K);
  // [B, H] or [B, H, K] log decays (the transform checks dtBias, aLog and the bound).
  const gate = gateTransformReference({
    rows: B,
    H,
    D: x.perChannel ? K : undefined,
    raw: x.rawGate,
    aLog: x.aLog,
    dtBias: x.dtBias,
    kind: x.gateTransform,
    lowerBound: bounded ? x.lowerBound ?? -5 : undefined,
  });
  const pool = new Float64Array(numSlots * slotSize);
  for (let i = 0; i < pool.length; i++) pool[i] = x.stateCache[i];
  const output = new Float64Array(B * H * V), outputMagnitude = new Float64Array(B * H * V);
  const decay = new Float64Array(K);
  for (let b = 0; b < B; b++) {
    const slot = x.stateIndices[b];
    if (slot <= 0) continue;
    const resume = x.hasInitialState === undefined || Boolean(x.hasInitialState[b]);
    const row = b * width;
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / group);
      const q = l2Normalize(rowAt(x.packedQkv, row + hk * K, K));
      const k = l2Normalize(rowAt(x.packedQkv, row + (HK + hk) * K, K));
      const v = rowAt(x.packedQkv, row + 2 * HK * K + h * V, V);
      for (let c = 0; c < K; c++) decay[c] = Math.exp(gate[x.perChannel ? (b * H + h) * K + c : b * H + h]);
      const beta = 1 / (1 + Math.exp(-x.rawBeta[b * H + h]));
      const at = slot * slotSize + h * V * K;
      // Row j of S [V, K] is everything value channel j needs: decay, predict, correct, read out.
      for (let j = 0; j < V; j++) {
        const s = pool.subarray(at + j * K, at + (j + 1) * K);
        let predicted = 0, predictedSize = 0;
        for (let c = 0; c < K; c++) {
          s[c] = resume ? decay[c] * s[c] : 0;
          predicted += s[c] * k[c];
          predictedSize += Math.abs(s[c] * k[c]);
        }
        const u = beta * (v[j] - predicted), uSize = beta * (Math.abs(v[j]) + predictedSize);
        let o = 0, size = 0;
        for (let c = 0; c < K; c++) {
          size += (Math.abs(s[c]) + uSize * Math.abs(k[c])) * Math.abs(q[c]);
          s[c] += u * k[c];
          o += s[c] * q[c];
        }
        output[(b * H + h) * V + j] = scale * o;
        outputMagnitude[(b * H + h) * V + j] = Math.abs(scale) * size;
      }
    }
  }
  return { output, stateCache: pool, outputMagnitude };
}
