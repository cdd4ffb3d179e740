/**
 * Numerical comparison helpers: how far an output is from a reference, and an assertion with a
 * readable failure. Non-finite values must match the reference's pattern (NaN where it has NaN,
 * the same infinities); a NaN where the reference is finite never passes.
 *
 * @module
 */
import { checkOptions, describeValue, numberIn } from "./args.ts";
import { invalidArgument } from "../ffi/errors.ts";
import { Tensor } from "./tensor.ts";

/** Values to compare: a tensor (any device, any dtype) or host numbers. */
export type Comparable = Tensor | ArrayLike<number> | BigInt64Array;

/** What {@link compare} measures. */
export interface Comparison {
  /** Elements compared. */
  count: number;
  /** Largest |actual - expected| over elements where both are finite. */
  maxAbs: number;
  /** Flat index of that element (-1 when none). */
  worstIndex: number;
  /** The actual and expected values there. */
  worstActual: number;
  /** The expected value at `worstIndex`. */
  worstExpected: number;
  /** Root mean square of the differences (finite pairs). */
  rms: number;
  /** Root mean square of the expected values (finite ones). */
  refRms: number;
  /** `rms / refRms` (0 when both are 0; Infinity when only the reference is 0). */
  relRms: number;
  /** Elements where actual is NaN. */
  nanCount: number;
  /** Elements whose non-finite pattern differs from the reference (NaN or inf in one, not the other). */
  nonFiniteMismatches: number;
  /** First such element (-1 when none). */
  firstNonFiniteMismatch: number;
}

/** Tolerances of {@link assertClose}; every one given must hold. */
export interface Tolerance {
  /** Elementwise: |a - e| <= atol + rtol * |e| (default atol 0 when rtol is given). */
  atol?: number;
  /** Elementwise relative part, with `atol`. */
  rtol?: number;
  /** Bound on relative RMS error, `RMS(a - e) / RMS(e)`. */
  relRms?: number;
  /** Bound on the largest absolute difference. */
  maxAbs?: number;
  /** A name for the failure message, e.g. `"output"`. */
  name?: string;
}

/** Thrown by {@link assertClose} when a tolerance fails. */
export class ToleranceError extends Error {
  /** The measurements behind the failure. */
  readonly comparison: Comparison;
  /** Makes the error. */
  constructor(message: string, comparison: Comparison) {
    super(message);
    this.name = "ToleranceError";
    this.comparison = comparison;
  }
}

function hostValues(
  x: Comparable,
  op: string,
  name: string,
): { values: ArrayLike<number>; shape?: readonly number[] } {
  if (x instanceof Tensor) {
    const arr = x.toArray();
    const values = arr instanceof BigInt64Array ? Float64Array.from(arr, Number) : arr;
    return { values, shape: x.shape };
  }
  if (x instanceof BigInt64Array) return { values: Float64Array.from(x, Number) };
  if (ArrayBuffer.isView(x)) return { values: x as unknown as ArrayLike<number> };
  const isArrayLike = typeof x === "object" && x !== null &&
    Number.isSafeInteger((x as ArrayLike<number>).length) &&
    (x as ArrayLike<number>).length >= 0;
  if (!isArrayLike) {
    throw invalidArgument(op, `${name}: expected a Tensor or an array of numbers, got ${describeValue(x)}`);
  }
  const values = x as ArrayLike<number>;
  for (let i = 0; i < values.length; i++) {
    if (typeof values[i] !== "number") {
      throw invalidArgument(op, `${name}: element ${i} is ${describeValue(values[i])}, not a number`);
    }
  }
  return { values };
}

/**
 * Measures how far `actual` is from `expected`: the same number of elements, and the same shape when
 * both are tensors (an AttnkitError otherwise).
 *
 * @example
 * ```ts
 * import { compare, Tensor } from "@attnkit/attnkit";
 * using a = Tensor.from([1, 2, 3.001]);
 * const c = compare(a, [1, 2, 3]);
 * console.log(c.maxAbs, c.relRms);
 * ```
 */
export function compare(actual: Comparable, expected: Comparable): Comparison {
  return compareValues(...hostPair(actual, expected, "compare"));
}

// Both sides on the host (each tensor copied once), checked to match in size and, for two tensors, shape.
function hostPair(
  actual: Comparable,
  expected: Comparable,
  op: string,
): [ArrayLike<number>, ArrayLike<number>] {
  const a = hostValues(actual, op, "actual"), e = hostValues(expected, op, "expected");
  if (a.shape && e.shape && a.shape.join(",") !== e.shape.join(",")) {
    throw invalidArgument(
      op,
      `expected: shape [${e.shape.join(", ")}] differs from actual [${a.shape.join(", ")}]`,
    );
  }
  if (a.values.length !== e.values.length) {
    throw invalidArgument(op, `expected: has ${e.values.length} elements, actual has ${a.values.length}`);
  }
  return [a.values, e.values];
}

function compareValues(a: ArrayLike<number>, e: ArrayLike<number>): Comparison {
  let maxAbs = 0, worst = -1, sumSq = 0, refSq = 0, nan = 0, mismatches = 0, firstMismatch = -1;
  for (let i = 0; i < a.length; i++) {
    const x = a[i], y = e[i];
    if (Number.isNaN(x)) nan++;
    const xf = Number.isFinite(x), yf = Number.isFinite(y);
    if (!xf || !yf) {
      const same = (Number.isNaN(x) && Number.isNaN(y)) || x === y;
      if (!same) {
        mismatches++;
        if (firstMismatch < 0) firstMismatch = i;
      }
      continue;
    }
    const d = Math.abs(x - y);
    if (d > maxAbs || worst < 0) {
      maxAbs = d;
      worst = i;
    }
    sumSq += d * d;
    refSq += y * y;
  }
  const n = Math.max(1, a.length);
  const rms = Math.sqrt(sumSq / n), refRms = Math.sqrt(refSq / n);
  return {
    count: a.length,
    maxAbs,
    worstIndex: worst,
    worstActual: worst >= 0 ? a[worst] : NaN,
    worstExpected: worst >= 0 ? e[worst] : NaN,
    rms,
    refRms,
    relRms: refRms === 0 ? (rms === 0 ? 0 : Infinity) : rms / refRms,
    nanCount: nan,
    nonFiniteMismatches: mismatches,
    firstNonFiniteMismatch: firstMismatch,
  };
}

function coords(index: number, shape: readonly number[] | undefined): string {
  if (!shape || index < 0) return `${index}`;
  const c: number[] = [];
  let rest = index;
  for (let i = shape.length - 1; i >= 0; i--) {
    c.unshift(rest % shape[i]);
    rest = Math.floor(rest / shape[i]);
  }
  return `[${c.join(", ")}]`;
}

/**
 * Throws a {@link ToleranceError} unless `actual` is within every given tolerance of `expected`
 * and has the reference's non-finite pattern. Returns the comparison when it passes.
 *
 * @example
 * ```ts
 * import { assertClose, Tensor } from "@attnkit/attnkit";
 * using out = Tensor.from([1.0005, 2], { dtype: "bfloat16" });
 * assertClose(out, [1, 2], { relRms: 5e-3, name: "output" });
 * ```
 */
export function assertClose(actual: Comparable, expected: Comparable, tol: Tolerance): Comparison {
  const bound = numberIn(0);
  checkOptions(
    "assertClose",
    tol,
    { atol: bound, rtol: bound, relRms: bound, maxAbs: bound, name: "string" },
    "tol",
  );
  if ([tol?.atol, tol?.rtol, tol?.relRms, tol?.maxAbs].every((t) => t === undefined)) {
    // An assertion with no bound would only check the NaN pattern: almost surely a mistake.
    throw invalidArgument("assertClose", `tol: give at least one of atol, rtol, relRms, maxAbs`);
  }
  const shape = actual instanceof Tensor ? actual.shape : undefined;
  const [a, e] = hostPair(actual, expected, "assertClose");
  const c = compareValues(a, e);
  const name = tol.name ?? "value";
  const problems: string[] = [];
  if (c.nonFiniteMismatches > 0) {
    const i = c.firstNonFiniteMismatch;
    problems.push(
      `${c.nonFiniteMismatches} element(s) differ in non-finite pattern, first at ${coords(i, shape)}: ` +
        `got ${a[i]}, expected ${e[i]}`,
    );
  }
  if (tol.relRms !== undefined && !(c.relRms <= tol.relRms)) {
    problems.push(`relative RMS error ${c.relRms.toExponential(3)} exceeds ${tol.relRms}`);
  }
  if (tol.maxAbs !== undefined && !(c.maxAbs <= tol.maxAbs)) {
    problems.push(`max abs error ${c.maxAbs.toExponential(3)} exceeds ${tol.maxAbs}`);
  }
  if (tol.atol !== undefined || tol.rtol !== undefined) {
    const atol = tol.atol ?? 0, rtol = tol.rtol ?? 0;
    let bad = 0, first = -1, worstRatio = 0;
    for (let i = 0; i < a.length; i++) {
      if (!Number.isFinite(a[i]) || !Number.isFinite(e[i])) continue;
      const allowed = atol + rtol * Math.abs(e[i]);
      const d = Math.abs(a[i] - e[i]);
      if (d > allowed) {
        bad++;
        const ratio = allowed > 0 ? d / allowed : Infinity;
        if (first < 0 || ratio > worstRatio) [first, worstRatio] = [i, ratio];
      }
    }
    if (bad > 0) {
      problems.push(
        `${bad} element(s) outside atol ${atol} + rtol ${rtol}; worst at ${coords(first, shape)}: ` +
          `got ${a[first]}, expected ${e[first]}`,
      );
    }
  }
  if (problems.length > 0) {
    const where = c.worstIndex >= 0
      ? `; largest difference at ${
        coords(c.worstIndex, shape)
      }: got ${c.worstActual}, expected ${c.worstExpected}`
      : "";
    throw new ToleranceError(
      `${name}: ${problems.join("; ")} (${c.count} elements, max abs ${c.maxAbs.toExponential(3)}, ` +
        `rel RMS ${c.relRms.toExponential(3)}, NaN ${c.nanCount}${where})`,
      c,
    );
  }
  return c;
}
