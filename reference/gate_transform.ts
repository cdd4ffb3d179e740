/**
 * Float64 oracle of the gate transforms, which turn a raw gate projection into a natural-log decay.
 * With x = raw + dtBias and a = exp(aLog) of the element's head:
 *   `"softplus"`: gate = -a softplus(x)                 (Mamba2 / Gated DeltaNet)
 *   `"bounded"`:  gate = lowerBound sigmoid(a x)          (Kimi Delta Attention)
 * and their reverse mode, derived by hand (checked against finite differences):
 *   softplus: dgate/dx = -a sigmoid(x),           dgate/daLog = gate
 *   bounded:  dgate/dx = lowerBound s'(a x) a,    dgate/daLog = lowerBound s'(a x) a x
 * with s'(z) = sigmoid(z) sigmoid(-z). Host arrays, row-major: raw `[rows, H]` (per head, dtBias `[H]`)
 * or `[rows, H, D]` (per channel, dtBias `[H, D]`), rows being the product of raw's leading dims.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkFields, count, expectLength, FINITE, NUMBERS } from "./checks.ts";

/** The transforms: `"softplus"` (unbounded below) and `"bounded"` (within `(lowerBound, 0)`). */
export type GateTransformReferenceKind = "softplus" | "bounded";

/** The inputs of one oracle run (float64 or float32 host arrays holding the exact input values). */
export interface GateTransformReferenceInputs {
  /** The product of raw's leading dims (B * T for `[B, T, H]`). */
  rows: number;
  /** Heads. */
  H: number;
  /** Columns per head of a per-channel gate (dtBias `[H, D]`); absent for a per-head gate (dtBias `[H]`). */
  D?: number;
  /** `[rows, H]` or `[rows, H, D]`. */
  raw: ArrayLike<number>;
  /** `[H]`: the log of each head's amplitude. */
  aLog: ArrayLike<number>;
  /** `[H]` or `[H, D]`. */
  dtBias: ArrayLike<number>;
  /** The transform. */
  kind: GateTransformReferenceKind;
  /** Required with `"bounded"` (finite, at most 0); refused with `"softplus"`. */
  lowerBound?: number;
}

/** What the backward oracle returns. */
export interface GateTransformReferenceGradients {
  /** `[rows, H]` or `[rows, H, D]`: the gradient of raw (and, summed over rows, of dtBias). */
  draw: Float64Array;
  /** `[H]`. */
  daLog: Float64Array;
  /** `[H]` or `[H, D]`. */
  ddtBias: Float64Array;
  /**
   * `[H]`: the sum of the absolute values of the terms summed into daLog, the scale that a float32
   * sum's rounding error grows with.
   */
  daLogMagnitude: Float64Array;
  /** `[H]` or `[H, D]`: the same for ddtBias. */
  ddtBiasMagnitude: Float64Array;
}

const INPUTS = {
  rows: count(0),
  H: count(0),
  D: count(0),
  raw: NUMBERS,
  aLog: NUMBERS,
  dtBias: NUMBERS,
  kind: ["softplus", "bounded"],
  lowerBound: FINITE,
} as const;
const REQUIRED = ["rows", "H", "raw", "aLog", "dtBias", "kind"];

/** Checks the inputs; returns the columns per head (1 for a per-head gate). */
function checkInputs(op: string, x: GateTransformReferenceInputs): number {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const D = x.D ?? 1;
  const channels = x.H * D;
  const tail = x.D === undefined ? `${x.H}` : `${x.H}, ${x.D}`;
  expectLength(op, "x.raw", x.raw, x.rows * channels, `[${x.rows}, ${tail}]`);
  expectLength(op, "x.aLog", x.aLog, x.H, `[${x.H}]`);
  expectLength(op, "x.dtBias", x.dtBias, channels, `[${tail}]`);
  if (x.kind === "bounded") {
    if (x.lowerBound === undefined || x.lowerBound === null || x.lowerBound > 0) {
      throw invalidArgument(
        op,
        `x.lowerBound: expected a finite number <= 0 with "bounded", got ${x.lowerBound}`,
      );
    }
  } else if (x.lowerBound !== undefined && x.lowerBound !== null) {
    throw invalidArgument(op, 'x.lowerBound: "softplus" has no lower bound; leave it out');
  }
  return D;
}

/** log(1 + e^x) without overflow or cancellation. */
function softplus(x: number): number {
  return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)));
}

/** 1 / (1 + e^-z), stable on both sides. */
function sigmoid(z: number): number {
  const e = Math.exp(-Math.abs(z));
  return z >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/** sigmoid(z) sigmoid(-z), 0 (not NaN) where it underflows. */
function sigmoidSlope(z: number): number {
  const e = Math.exp(-Math.abs(z));
  return e / ((1 + e) * (1 + e));
}

/**
 * The gate (`[rows, H]` or `[rows, H, D]`, float64) of raw.
 *
 * @example
 * ```ts
 * import { gateTransformReference } from "@attnkit/attnkit/reference";
 * const gate = gateTransformReference({
 *   rows: 2, H: 1, raw: [0, 1], aLog: [0], dtBias: [0], kind: "bounded", lowerBound: -5,
 * });
 * console.log(gate[0]); // -2.5 (sigmoid(0) = 1/2)
 * ```
 */
export function gateTransformReference(x: GateTransformReferenceInputs): Float64Array {
  const D = checkInputs("gateTransformReference", x);
  const channels = x.H * D;
  const out = new Float64Array(x.rows * channels);
  for (let r = 0; r < x.rows; r++) {
    for (let c = 0; c < channels; c++) {
      const a = Math.exp(x.aLog[Math.floor(c / D)]);
      const v = x.raw[r * channels + c] + x.dtBias[c];
      out[r * channels + c] = x.kind === "bounded" ? x.lowerBound! * sigmoid(a * v) : -a * softplus(v);
    }
  }
  return out;
}

/**
 * The gradients of the loss `sum(dGate * gate)` with respect to raw, aLog and dtBias (float64), and the
 * magnitudes of the sums behind aLog's and dtBias's.
 *
 * @example
 * ```ts
 * import { gateTransformReferenceBackward } from "@attnkit/attnkit/reference";
 * const g = gateTransformReferenceBackward(
 *   { rows: 2, H: 1, raw: [0, 0], aLog: [0], dtBias: [0], kind: "softplus" },
 *   [1, 1],
 * );
 * console.log(g.ddtBias[0]); // -1 (two rows of -sigmoid(0))
 * ```
 */
export function gateTransformReferenceBackward(
  x: GateTransformReferenceInputs,
  dGate: ArrayLike<number>,
): GateTransformReferenceGradients {
  const op = "gateTransformReferenceBackward";
  const D = checkInputs(op, x);
  const channels = x.H * D;
  expectLength(op, "dGate", dGate, x.rows * channels, "raw's elements");
  const draw = new Float64Array(x.rows * channels);
  const daLog = new Float64Array(x.H), daLogMagnitude = new Float64Array(x.H);
  const ddtBias = new Float64Array(channels), ddtBiasMagnitude = new Float64Array(channels);
  for (let r = 0; r < x.rows; r++) {
    for (let c = 0; c < channels; c++) {
      const h = Math.floor(c / D), i = r * channels + c;
      const a = Math.exp(x.aLog[h]);
      const v = x.raw[i] + x.dtBias[c];
      let dx: number, da: number;
      if (x.kind === "bounded") {
        const z = a * v, slope = sigmoidSlope(z);
        const t = dGate[i] * x.lowerBound! * slope;
        dx = t * a;
        da = slope === 0 ? 0 : t * z;
      } else {
        dx = -dGate[i] * a * sigmoid(v);
        da = -dGate[i] * a * softplus(v);
      }
      draw[i] = dx;
      ddtBias[c] += dx;
      ddtBiasMagnitude[c] += Math.abs(dx);
      daLog[h] += da;
      daLogMagnitude[h] += Math.abs(da);
    }
  }
  return { draw, daLog, ddtBias, daLogMagnitude, ddtBiasMagnitude };
}
