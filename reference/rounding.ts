// Float64 oracles for attnkit's casts, written from the IEEE 754 rules (no use of Math.fround, so
// they can also check it): floats round to nearest, ties to even, with subnormals and overflow to
// infinity; integers truncate toward zero and saturate, NaN -> 0; bool is value != 0.

/** A binary floating-point format: significand bits (with the implicit one) and exponent range. */
export interface FloatFormat {
  name: string;
  precision: number;
  minExponent: number; // of the smallest normal
  maxExponent: number; // of the largest finite
}

export const FLOAT32: FloatFormat = { name: "float32", precision: 24, minExponent: -126, maxExponent: 127 };
export const FLOAT16: FloatFormat = { name: "float16", precision: 11, minExponent: -14, maxExponent: 15 };
export const BFLOAT16: FloatFormat = { name: "bfloat16", precision: 8, minExponent: -126, maxExponent: 127 };

/** The largest finite value of a format. */
export function maxFinite(f: FloatFormat): number {
  return (2 - 2 ** (1 - f.precision)) * 2 ** f.maxExponent;
}

/** Exact floor(log2(a)) for a positive finite double. */
function exponentOf(a: number): number {
  let e = Math.floor(Math.log2(a));
  while (2 ** e > a) e--;
  while (2 ** (e + 1) <= a) e++;
  return e;
}

/** Rounds a double to the format, to nearest with ties to even. */
export function roundToFormat(x: number, f: FloatFormat): number {
  if (Number.isNaN(x) || x === 0 || !Number.isFinite(x)) return x;
  const a = Math.abs(x);
  const e = Math.max(exponentOf(a), f.minExponent); // subnormals share the smallest normal's spacing
  const ulp = 2 ** (e - f.precision + 1);
  const q = a / ulp; // exact: a power-of-two scaling
  const whole = Math.floor(q);
  const frac = q - whole; // exact: q < 2^precision <= 2^24
  const rounded = frac > 0.5 || (frac === 0.5 && whole % 2 === 1) ? whole + 1 : whole;
  let r = rounded * ulp;
  if (r > maxFinite(f)) r = Infinity;
  return x < 0 ? -r : r === 0 ? 0 : r;
}

// The finite non-negative float8_e4m3 values, by code (0 .. 0x7e): subnormals man * 2^-9, then
// (8 + man) * 2^(exp - 10). The code 0x7f is NaN.
const E4M3_VALUES = Array.from({ length: 127 }, (_, code) => {
  const exp = code >> 3, man = code & 7;
  return exp === 0 ? man * 2 ** -9 : (8 + man) * 2 ** (exp - 10);
});

/**
 * Rounds a double to float8_e4m3 (PyTorch's float8_e4m3fn: no infinities, largest finite 448) by
 * searching the table of its values: the nearest one, a tie going to the even code. Past 448 the next
 * candidate is 480 with the (odd) NaN code, so 464 rounds to 448 and anything above it, infinities
 * included, to NaN.
 *
 * @example
 * ```ts
 * import { roundE4m3 } from "@attnkit/attnkit/reference";
 * console.log(roundE4m3(0.3), roundE4m3(464), roundE4m3(465)); // 0.3125 448 NaN
 * ```
 */
export function roundE4m3(x: number): number {
  const a = Math.abs(x);
  if (!(a < 480)) return NaN; // NaN, infinities, and what is nearer 480 than 448
  let best = 0, bestCode = 0;
  for (let code = 1; code <= 127; code++) {
    const v = code === 127 ? 480 : E4M3_VALUES[code];
    const d = Math.abs(a - v), bestD = Math.abs(a - best);
    if (d < bestD || (d === bestD && code % 2 === 0 && bestCode % 2 === 1)) [best, bestCode] = [v, code];
  }
  if (bestCode === 127) return NaN;
  return x < 0 || Object.is(x, -0) ? -best : best;
}

/** Rounds an integer (exactly, as a BigInt) to the format, to nearest with ties to even. */
export function roundBigIntToFormat(v: bigint, f: FloatFormat): number {
  const negative = v < 0n;
  const a = negative ? -v : v;
  let r: number;
  if (a < 2n ** 53n) {
    r = roundToFormat(Number(a), f);
  } else {
    const bits = a.toString(2).length;
    const shift = BigInt(bits - f.precision);
    let q = a >> shift;
    const rest = a - (q << shift);
    const half = 1n << (shift - 1n);
    if (rest > half || (rest === half && (q & 1n) === 1n)) q += 1n;
    r = Number(q) * 2 ** Number(shift);
    if (r > maxFinite(f)) r = Infinity;
  }
  return negative ? -r : r;
}

/** float -> int32: truncate toward zero, saturate, NaN -> 0. */
export function toInt32(x: number): number {
  if (Number.isNaN(x)) return 0;
  const t = Math.trunc(x) + 0; // integers have no -0
  return Math.min(2 ** 31 - 1, Math.max(-(2 ** 31), t));
}

/** float -> int64: truncate toward zero, saturate, NaN -> 0. */
export function toInt64(x: number): bigint {
  if (Number.isNaN(x)) return 0n;
  if (x >= 2 ** 63) return 2n ** 63n - 1n;
  if (x <= -(2 ** 63)) return -(2n ** 63n);
  return BigInt(Math.trunc(x));
}

/** int64 -> int32: saturate. */
export function int64ToInt32(v: bigint): number {
  return Number(v > 2n ** 31n - 1n ? 2n ** 31n - 1n : v < -(2n ** 31n) ? -(2n ** 31n) : v);
}

/** Any value -> bool: nonzero (NaN included) is true. */
export function toBool(x: number): number {
  return x !== 0 ? 1 : 0;
}

/**
 * Values that break casts: zeros, the edges of every format's normal and subnormal ranges, exact
 * ties (both parities) and their neighbours, overflow thresholds, infinities and NaN.
 */
export function edgeValues(): number[] {
  const out = [
    0,
    -0,
    1,
    -1,
    0.5,
    1 / 3,
    -2 / 3,
    Math.PI,
    1e-45,
    1e-40,
    1e-8,
    1e30,
    1e38,
    1e39,
    1e300,
    5e-324,
  ];
  out.push(NaN, Infinity, -Infinity, Number.MAX_VALUE, -Number.MAX_VALUE);
  for (const f of [FLOAT32, FLOAT16, BFLOAT16]) {
    const max = maxFinite(f);
    const topUlp = 2 ** (f.maxExponent - f.precision + 1);
    out.push(
      max,
      -max,
      max + topUlp / 2,
      max + topUlp / 2 - topUlp / 1024,
      max + topUlp / 4,
      -(max + topUlp / 2),
    );
    const minNormal = 2 ** f.minExponent;
    const minSub = 2 ** (f.minExponent - f.precision + 1);
    out.push(minNormal, minNormal - minSub, minNormal - minSub / 2, minSub, minSub / 2, minSub / 2 * 1.0001);
    out.push(minSub * 1.5, minSub * 2.5, -minSub / 2, minSub / 4, 3 * minSub);
    // ties just above 1: 1 + ulp/2 (to even: down) and 1 + 3 ulp/2 (to even: up), and near-ties
    const ulp1 = 2 ** (1 - f.precision);
    out.push(
      1 + ulp1 / 2,
      1 + 1.5 * ulp1,
      1 + ulp1 / 2 + 2 ** -52,
      1 + ulp1 / 2 - 2 ** -52,
      -(1 + 1.5 * ulp1),
    );
    out.push(1024 + 1024 * ulp1 / 2, 3 * 2 ** 20 + 2 ** 20 * 1.5 * ulp1);
  }
  return out;
}

/** Random doubles spread over every exponent the formats can hold (and beyond), both signs. */
export function randomValues(count: number, seed: number): number[] {
  let state = seed >>> 0 || 1;
  const next = () => {
    // xorshift32: fine for spreading test values, not for statistics
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 2 ** 32;
  };
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const exponent = Math.floor(next() * 300) - 160; // 2^-160 .. 2^139
    const mantissa = 1 + next() + next() * 2 ** -26; // more bits than float32 keeps
    out.push((next() < 0.5 ? -1 : 1) * mantissa * 2 ** exponent);
  }
  return out;
}
