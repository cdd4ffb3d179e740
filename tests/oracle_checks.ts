// Helpers of the tests that check the float64 oracles on their own (host arrays, no device): a seeded
// generator, filled and normal arrays, a gradient against central finite differences, and a close-to comparison.
import assert from "node:assert/strict";

/** A small seeded generator of uniform [0, 1) numbers (mulberry32). */
export function generator(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` numbers uniform in [low, high). */
export function filled(n: number, rand: () => number, low: number, high: number): Float64Array {
  return Float64Array.from({ length: n }, () => low + (high - low) * rand());
}

/** `n` numbers from N(0, std^2) (Box-Muller on the seeded generator), as float32. */
export function normals(rnd: () => number, n: number, std = 1): Float32Array {
  return Float32Array.from(
    { length: n },
    () => std * Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd()),
  );
}

/**
 * Throws unless `analytic` equals the central finite differences (step `eps`) of `loss` with respect to
 * every element of `values` (perturbed in place and restored), within `tol` times the largest numeric
 * gradient (at least 1); and unless the loss depends on `values` at all (a vacuous check fails).
 */
export function expectFiniteDifferences(
  values: Float64Array,
  analytic: ArrayLike<number>,
  loss: () => number,
  check: { eps: number; tol: number; what: string; input: string },
): void {
  const { eps, tol, what, input } = check;
  let worst = 0, scale = 0;
  for (let i = 0; i < values.length; i++) {
    const saved = values[i];
    values[i] = saved + eps;
    const up = loss();
    values[i] = saved - eps;
    const down = loss();
    values[i] = saved;
    const numeric = (up - down) / (2 * eps);
    worst = Math.max(worst, Math.abs(numeric - analytic[i]));
    scale = Math.max(scale, Math.abs(numeric));
  }
  assert.ok(scale > 0, `${what}: the loss does not depend on ${input} (test is vacuous)`);
  assert.ok(
    worst <= tol * Math.max(1, scale),
    `${what}: hand-derived gradient differs from finite differences by ${worst} (largest |grad| ${scale})`,
  );
}

/** Throws unless every element is finite and within `tol` times the largest |expected| (at least 1). */
export function expectNear(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  what: string,
  tol = 1e-12,
): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  let worst = 0, size = 0;
  for (let i = 0; i < actual.length; i++) {
    assert.ok(Number.isFinite(actual[i]), `${what}[${i}] is ${actual[i]}`);
    worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
    size = Math.max(size, Math.abs(expected[i]));
  }
  assert.ok(worst <= tol * Math.max(1, size), `${what}: differs by ${worst} (largest |value| ${size})`);
}
