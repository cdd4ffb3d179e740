// Tensor math (indexing, element-wise ops with broadcasting, where, reductions, softmax family,
// matmul) against plain float64 loops on fresh random inputs, on the CPU backend and (with a GPU) on
// CUDA: every op, every dtype it takes, broadcasting, negative dims, empty tensors and size-1 dims.
//
// Results are freshly allocated; to catch an element a kernel leaves unwritten, each check first
// fills and frees a block of the result's size with NaN, so the allocator hands that memory back
// (host malloc and the CUDA pool both reuse a just-freed block of the same size).
//
// Tolerance rule (inputs are rounded to their dtype first, the oracle computes in float64 on those
// values): integer and bool results, comparisons, selections and copies are exact. Float results:
// |got - want| <= rtol * |want| + atol, with rtol = 2^-7 (bfloat16), 2^-10 (float16), 2^-20
// (float32: a few ulps of CUDA's float math library), 1e-12 (float64), and atol the smallest
// subnormal of the dtype. Sums and means accumulate in float64 on both backends, so the same rule
// holds for them. Matrix products add K * eps_acc * sum_k |a_ik b_kj| (eps_acc = 2^-23 for 16/32-bit
// dtypes, which CUDA accumulates in float32; 2^-52 for float64). The softmax family computes in
// float32 (float64 for float64) in steps, so it adds what rounding those steps costs: eps_c (|x - max|
// + 4) relative for softmax, eps_c (|x| + |logsumexp| + 4) for logSoftmax, eps_c (|max| + |logsumexp
// - max| + 4) for logsumexp (eps_c = 2^-23, or 2^-52).
// NaN passes only where the oracle itself is NaN.
import assert from "node:assert/strict";
import { contiguousStrides } from "../ffi/descriptor.ts";
import { AttnkitError, type Device, type DType, dtypeSize, Tensor, where } from "../mod.ts";
import { scatterRows } from "../ops/tensor_math/indexing.ts";
import { deviceTest, expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";

// ---- inputs ----

/** A seeded generator (mulberry32), so a failure replays from its seed. */
class Rng {
  #s: number;
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }
  next(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    return Math.sqrt(-2 * Math.log(1 - this.next())) * Math.cos(2 * Math.PI * this.next());
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }
}

type Kind = "normal" | "positive" | "nonzero";
const FLOATS: DType[] = ["float32", "float64", "float16", "bfloat16"];
const INTS: DType[] = ["int32", "int64"];
const ALL: DType[] = [...FLOATS, ...INTS, "bool"];

const isFloat = (d: DType) => FLOATS.includes(d);
const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

function randomValues(rng: Rng, n: number, dtype: DType, kind: Kind): Float64Array {
  return Float64Array.from({ length: n }, () => {
    if (dtype === "bool") return kind === "nonzero" ? 1 : rng.int(0, 1);
    if (!isFloat(dtype)) {
      const v = rng.int(-9, 9);
      return kind === "positive" ? Math.abs(v) + 1 : kind === "nonzero" && v === 0 ? 5 : v;
    }
    const v = rng.normal();
    return kind === "positive" ? Math.abs(v) + 0.125 : 2 * v;
  });
}

/** A random tensor on `device`, and its values as the device holds them (rounded to the dtype). */
function input(rng: Rng, shape: number[], dtype: DType, device: Device, kind: Kind = "normal") {
  const t = Tensor.from(randomValues(rng, numel(shape), dtype, kind), { shape, dtype, device });
  return { t, v: host(t) };
}

function host(t: Tensor): number[] {
  return Array.from(t.toArray() as ArrayLike<number | bigint>, Number);
}

/** Fills and frees a block the size of a result, so that a kernel's unwritten elements read NaN. */
function poisonPool(shape: readonly number[], dtype: DType, device: Device): void {
  Tensor.full([...shape], NaN, { dtype, device }).dispose();
}

// ---- checks ----

const RTOL: Record<string, number> = {
  bfloat16: 2 ** -7,
  float16: 2 ** -10,
  float32: 2 ** -20,
  float64: 1e-12,
};
const ATOL: Record<string, number> = {
  bfloat16: 1e-40,
  float16: 2 ** -24,
  float32: 1e-45,
  float64: 5e-324,
};

function assertClose(
  t: Tensor,
  want: readonly number[],
  shape: readonly number[],
  dtype: DType,
  what: string,
  extra?: (i: number) => number,
): void {
  assert.deepEqual(t.shape, shape, `${what}: shape`);
  assert.equal(t.dtype, dtype, `${what}: dtype`);
  const got = host(t);
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const g = got[i], w = want[i];
    let ok: boolean;
    if (Number.isNaN(w)) ok = Number.isNaN(g);
    else if (!Number.isFinite(w)) ok = g === w;
    else if (!isFloat(dtype)) ok = g === w;
    else ok = Math.abs(g - w) <= RTOL[dtype] * Math.abs(w) + ATOL[dtype] + (extra?.(i) ?? 0);
    if (!ok) assert.fail(`${what}: element ${i} is ${g}, expected ${w}`);
  }
}

function assertAttnkitError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `expected an AttnkitError, got ${e}`);
    assert.equal(e.code, "INVALID_ARGUMENT", e.message);
    assert.match(e.message, pattern);
    return true;
  });
}

// ---- the oracle's index arithmetic ----

const rowMajor = contiguousStrides;

function coords(i: number, shape: readonly number[]): number[] {
  const c = new Array<number>(shape.length);
  for (let d = shape.length - 1; d >= 0; d--) {
    c[d] = i % shape[d];
    i = Math.floor(i / shape[d]);
  }
  return c;
}

/** The flat index in an operand of `shape` that broadcasting maps output coordinates `c` to. */
function broadcastIndex(c: readonly number[], shape: readonly number[]): number {
  const lead = c.length - shape.length;
  const strides = rowMajor(shape);
  let k = 0;
  for (let d = 0; d < shape.length; d++) if (shape[d] !== 1) k += c[lead + d] * strides[d];
  return k;
}

function broadcastShape(...shapes: number[][]): number[] {
  const rank = Math.max(0, ...shapes.map((s) => s.length));
  return Array.from({ length: rank }, (_, i) => {
    const sizes = shapes.map((s) => s[i - (rank - s.length)] ?? 1);
    return sizes.find((n) => n !== 1) ?? 1;
  });
}

// ---- dtype rules, restated independently ----

// Kinds rank bool < integers < floats; within a kind the wider element wins, and two 16-bit floats meet in float32.
const kindOf = (d: DType) => (isFloat(d) ? 2 : d === "bool" ? 0 : 1);
function promote(a: DType, b: DType): DType {
  if (a === b) return a;
  if (kindOf(a) !== kindOf(b)) return kindOf(a) > kindOf(b) ? a : b;
  if (dtypeSize(a) === dtypeSize(b)) return "float32";
  return dtypeSize(a) > dtypeSize(b) ? a : b;
}
function promoteNumber(a: DType, v: number): DType {
  const k = Number.isSafeInteger(v) ? 1 : 2;
  return kindOf(a) >= k ? a : k === 2 ? "float32" : "int64";
}
const floatOf = (d: DType): DType => (isFloat(d) ? d : "float32");

// ---- element-wise ops ----

interface OpSpec {
  kind: Kind; // what inputs keep the op finite
  result: (d: DType) => DType;
  f: (x: number, y: number) => number;
  bool?: boolean;
}
const same = (d: DType): DType => (d === "bool" ? "int64" : d);
const keep = (d: DType): DType => d;
const toBool = (): DType => "bool";
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

const UNARY: Record<string, OpSpec> = {
  neg: { kind: "normal", result: same, f: (x) => -x },
  abs: { kind: "normal", result: same, f: (x) => Math.abs(x) },
  square: { kind: "normal", result: same, f: (x) => x * x },
  sqrt: { kind: "positive", result: floatOf, f: (x) => Math.sqrt(x) },
  exp: { kind: "normal", result: floatOf, f: (x) => Math.exp(x) },
  log: { kind: "positive", result: floatOf, f: (x) => Math.log(x) },
  sigmoid: { kind: "normal", result: floatOf, f: sigmoid },
  tanh: { kind: "normal", result: floatOf, f: (x) => Math.tanh(x) },
  logicalNot: { kind: "normal", result: toBool, f: (x) => Number(x === 0), bool: true },
  isNan: { kind: "normal", result: toBool, f: (x) => Number(Number.isNaN(x)), bool: true },
  isFinite: { kind: "normal", result: toBool, f: (x) => Number(Number.isFinite(x)), bool: true },
};

const BINARY: Record<string, OpSpec> = {
  add: { kind: "normal", result: same, f: (x, y) => x + y },
  sub: { kind: "normal", result: same, f: (x, y) => x - y },
  mul: { kind: "normal", result: same, f: (x, y) => x * y },
  div: { kind: "nonzero", result: floatOf, f: (x, y) => x / y },
  pow: { kind: "positive", result: floatOf, f: (x, y) => x ** y },
  maximum: { kind: "normal", result: keep, f: (x, y) => Math.max(x, y) },
  minimum: { kind: "normal", result: keep, f: (x, y) => Math.min(x, y) },
  eq: { kind: "normal", result: toBool, f: (x, y) => Number(x === y), bool: true },
  ne: { kind: "normal", result: toBool, f: (x, y) => Number(x !== y), bool: true },
  lt: { kind: "normal", result: toBool, f: (x, y) => Number(x < y), bool: true },
  le: { kind: "normal", result: toBool, f: (x, y) => Number(x <= y), bool: true },
  gt: { kind: "normal", result: toBool, f: (x, y) => Number(x > y), bool: true },
  ge: { kind: "normal", result: toBool, f: (x, y) => Number(x >= y), bool: true },
  logicalAnd: { kind: "normal", result: toBool, f: (x, y) => Number(x !== 0 && y !== 0), bool: true },
  logicalOr: { kind: "normal", result: toBool, f: (x, y) => Number(x !== 0 || y !== 0), bool: true },
};

// Rounds an oracle value as the op's dtype holds it: the int32 result of a float op is no concern
// (those give floats), but bool inputs to arithmetic count as int64 and comparisons are exact.
function rounded(v: number, dtype: DType): number {
  if (dtype === "int32") return v | 0;
  return v;
}

function callUnary(t: Tensor, name: string): Tensor {
  return (t as unknown as Record<string, () => Tensor>)[name]();
}
function callBinary(t: Tensor, name: string, other: Tensor | number): Tensor {
  return (t as unknown as Record<string, (o: Tensor | number) => Tensor>)[name](other);
}

const SHAPES: number[][] = [[7], [3, 5], [2, 1, 4], [1], [], [0, 3], [2, 3, 1, 5]];

deviceTest("unary ops match float64 loops on every dtype", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const [name, spec] of Object.entries(UNARY)) {
      for (const dtype of ALL) {
        if (dtype === "bool" && ["neg", "abs", "square"].includes(name)) continue; // bool counts as int64: below
        const shape = rng.pick(SHAPES);
        const { t, v } = input(rng, shape, dtype, device, spec.kind);
        using _t = t;
        const out = spec.result(dtype);
        poisonPool(shape, out, device);
        using r = callUnary(t, name);
        assertClose(r, v.map((x) => rounded(spec.f(x, 0), out)), shape, out, `${name} ${dtype} ${shape}`);
      }
    }
    // Arithmetic on bools counts them as int64.
    using b = Tensor.from([true, false, true], { dtype: "bool", device });
    using n = b.neg();
    assertClose(n, [-1, 0, -1], [3], "int64", "neg bool");
  }));

deviceTest("unary ops keep special values: NaN, infinities, signed zeros", (device) => {
  using x = Tensor.from(new Float64Array([NaN, Infinity, -Infinity, 0, -0, 1e300]), {
    dtype: "float32",
    device,
  });
  using e = x.exp();
  assertClose(e, [NaN, Infinity, 0, 1, 1, Infinity], [6], "float32", "exp specials");
  using s = x.sigmoid();
  assertClose(s, [NaN, 1, 0, 0.5, 0.5, 1], [6], "float32", "sigmoid specials");
  using f = x.isFinite();
  assertClose(f, [0, 0, 0, 1, 1, 0], [6], "bool", "isFinite");
  using nan = x.isNan();
  assertClose(nan, [1, 0, 0, 0, 0, 0], [6], "bool", "isNan");
  using big = Tensor.from([-1e30, 1e30], { dtype: "float64", device });
  using sb = big.sigmoid();
  assertClose(sb, [0, 1], [2], "float64", "sigmoid of large magnitudes");
});

const PAIRS: [number[], number[]][] = [
  [[3, 4], [3, 4]],
  [[3, 4], [4]],
  [[2, 1, 5], [3, 1]],
  [[1], [2, 3]],
  [[], [3]],
  [[4, 1], []],
  [[0, 3], [1, 3]],
  [[2, 3, 1, 1, 2], [1, 1, 4, 2]],
];

deviceTest("binary ops broadcast and match float64 loops on every dtype", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const [name, spec] of Object.entries(BINARY)) {
      for (const dtype of ALL) {
        const [sa, sb] = rng.pick(PAIRS);
        const a = input(rng, sa, dtype, device, spec.kind === "nonzero" ? "normal" : spec.kind);
        const b = input(rng, sb, dtype, device, spec.kind);
        using _a = a.t, _b = b.t;
        const shape = broadcastShape(sa, sb);
        const out = spec.result(dtype);
        poisonPool(shape, out, device);
        using r = callBinary(a.t, name, b.t);
        const want = Array.from({ length: numel(shape) }, (_, i) => {
          const c = coords(i, shape);
          return rounded(spec.f(a.v[broadcastIndex(c, sa)], b.v[broadcastIndex(c, sb)]), out);
        });
        assertClose(r, want, shape, out, `${name} ${dtype} ${sa} with ${sb}`);
        // The same op with the operands swapped broadcasts the other way.
        using s = callBinary(b.t, name, a.t);
        const swapped = Array.from({ length: numel(shape) }, (_, i) => {
          const c = coords(i, shape);
          return rounded(spec.f(b.v[broadcastIndex(c, sb)], a.v[broadcastIndex(c, sa)]), out);
        });
        assertClose(s, swapped, shape, out, `${name} ${dtype} ${sb} with ${sa}`);
      }
    }
  }));

deviceTest(
  "binary ops with a number, and mixed dtypes, promote as documented",
  (device) =>
    withSeed((seed) => {
      const rng = new Rng(seed);
      for (const [name, spec] of Object.entries(BINARY)) {
        for (const dtype of ALL) {
          const shape = rng.pick(SHAPES);
          const { t, v } = input(rng, shape, dtype, device, spec.kind === "nonzero" ? "normal" : spec.kind);
          using _t = t;
          for (const scalar of [3, 0.5, -2]) {
            if (name === "pow" && scalar < 0 && !isFloat(dtype)) continue;
            const out = spec.bool ? "bool" : spec.result(promoteNumber(dtype, scalar));
            using r = callBinary(t, name, scalar);
            assertClose(
              r,
              v.map((x) => rounded(spec.f(x, scalar), out)),
              shape,
              out,
              `${name} ${dtype} ${scalar}`,
            );
          }
        }
      }
      // Tensors of two dtypes: the wider kind, then the wider dtype (float16 + bfloat16 -> float32).
      for (let trial = 0; trial < 24; trial++) {
        const [da, db] = [rng.pick(ALL), rng.pick(ALL)];
        const name = rng.pick(["add", "mul", "maximum", "lt", "div"]);
        const spec = BINARY[name];
        const a = input(rng, [3, 4], da, device, "positive");
        const b = input(rng, [4], db, device, "positive");
        using _a = a.t, _b = b.t;
        const out = spec.result(promote(da, db));
        using r = callBinary(a.t, name, b.t);
        const want = a.v.map((x, i) => rounded(spec.f(x, b.v[i % 4]), out));
        assertClose(r, want, [3, 4], out, `${name} ${da} with ${db}`);
      }
    }),
);

deviceTest("where picks by a bool mask, broadcasting tensors and numbers", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const dtype of ALL) {
      const cond = input(rng, [3, 1, 4], "bool", device);
      const a = input(rng, [2, 4], dtype, device);
      const b = input(rng, [3, 2, 1], dtype, device);
      using _c = cond.t, _a = a.t, _b = b.t;
      const shape = [3, 2, 4];
      poisonPool(shape, dtype, device);
      using r = where(cond.t, a.t, b.t);
      const want = Array.from({ length: numel(shape) }, (_, i) => {
        const c = coords(i, shape);
        return cond.v[broadcastIndex(c, [3, 1, 4])]
          ? a.v[broadcastIndex(c, [2, 4])]
          : b.v[broadcastIndex(c, [3, 2, 1])];
      });
      assertClose(r, want, shape, dtype, `where ${dtype}`);
      using s = where(cond.t, a.t, -Infinity);
      const out = promoteNumber(dtype, -Infinity);
      const wantS = Array.from({ length: 12 * 2 }, (_, i) => {
        const c = coords(i, shape);
        return cond.v[broadcastIndex(c, [3, 1, 4])] ? a.v[broadcastIndex(c, [2, 4])] : -Infinity;
      });
      assertClose(s, wantS, shape, out, `where ${dtype} with -Infinity`);
    }
    using c = Tensor.from([true, false], { dtype: "bool", device });
    using n = where(c, 1, 0);
    assertClose(n, [1, 0], [2], "int64", "where of two integers");
    using h = where(c, 0.5, 2);
    assertClose(h, [0.5, 2], [2], "float32", "where of a float and an integer");
  }));

// ---- reductions ----

function reduceOracle(
  v: readonly number[],
  shape: readonly number[],
  dims: readonly number[],
  f: (xs: number[]) => number,
): { shape: number[]; values: number[] } {
  const kept = shape.map((_, d) => d).filter((d) => !dims.includes(d));
  const outShape = kept.map((d) => shape[d]);
  const groups: number[][] = Array.from({ length: numel(outShape) }, () => []);
  for (let i = 0; i < v.length; i++) {
    const c = coords(i, shape);
    let k = 0;
    for (const d of kept) k = k * shape[d] + c[d];
    groups[k].push(v[i]);
  }
  return { shape: outShape, values: groups.map(f) };
}

const REDUCERS: Record<string, (xs: number[]) => number> = {
  sum: (xs) => xs.reduce((a, b) => a + b, 0),
  mean: (xs) => xs.reduce((a, b) => a + b, 0) / xs.length,
  max: (xs) => xs.some(Number.isNaN) ? NaN : Math.max(...xs),
  min: (xs) => xs.some(Number.isNaN) ? NaN : Math.min(...xs),
};

function reduceResult(name: string, dtype: DType): DType {
  if (name === "mean") return floatOf(dtype);
  if (name === "sum" && !isFloat(dtype)) return "int64";
  return dtype;
}

const REDUCE_CASES: { shape: number[]; dim?: number | number[] }[] = [
  { shape: [3, 5], dim: -1 },
  { shape: [3, 5], dim: 0 },
  { shape: [2, 3, 4], dim: [0, 2] },
  { shape: [2, 3, 4], dim: [-1, -2] },
  { shape: [2, 3, 4] },
  { shape: [7] },
  { shape: [] },
  { shape: [4, 1, 3], dim: 1 },
  { shape: [0, 3], dim: 1 },
  { shape: [3, 5000], dim: -1 }, // a long reduction: CUDA uses a whole block per output
  { shape: [5000, 3], dim: 0 },
];

deviceTest("sum, mean, max, min match float64 loops over dims, with keepDim", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const name of Object.keys(REDUCERS)) {
      for (const dtype of ALL) {
        for (const c of REDUCE_CASES) {
          if (name === "mean" && dtype === "bool") continue;
          const { t, v } = input(rng, c.shape, dtype, device);
          using _t = t;
          const dims = c.dim === undefined
            ? c.shape.map((_, d) => d)
            : (Array.isArray(c.dim) ? c.dim : [c.dim]).map((d) => (d < 0 ? d + c.shape.length : d));
          const oracle = reduceOracle(v, c.shape, dims, REDUCERS[name]);
          const out = reduceResult(name, dtype);
          const keepDim = rng.next() < 0.5;
          const shape = keepDim ? c.shape.map((s, d) => (dims.includes(d) ? 1 : s)) : oracle.shape;
          poisonPool(shape, out, device);
          using r = (t as unknown as Record<string, (d?: number | number[], o?: object) => Tensor>)[name](
            c.dim,
            {
              keepDim,
            },
          );
          const what = `${name} ${dtype} ${c.shape} over ${c.dim ?? "all"}${keepDim ? " keepDim" : ""}`;
          // A sum's rounding scales with the sum of the magnitudes, not with a result that cancels to near 0.
          const magnitude = name === "sum" || name === "mean"
            ? reduceOracle(v.map(Math.abs), c.shape, dims, REDUCERS[name]).values
            : undefined;
          assertClose(r, oracle.values, shape, out, what, magnitude && ((i) => RTOL[out] * magnitude[i]));
        }
      }
    }
  }));

deviceTest("reductions over empty dims: sum 0, mean NaN, max and min refused", (device) => {
  using x = Tensor.zeros([3, 0], { device });
  using s = x.sum(1);
  assertClose(s, [0, 0, 0], [3], "float32", "sum over nothing");
  using m = x.mean(-1);
  assertClose(m, [NaN, NaN, NaN], [3], "float32", "mean over nothing");
  assertAttnkitError(() => x.max(1), /hold no elements/);
  using e = x.max(0); // no outputs: nothing to refuse
  assert.deepEqual(e.shape, [0]);
  using i = Tensor.zeros([2, 0], { dtype: "int32", device });
  using si = i.sum();
  assertClose(si, [0], [], "int64", "integer sum over nothing");
});

deviceTest("max and min propagate NaN; integer sums are exact past 2^24", (device) => {
  using x = Tensor.from([[1, NaN, 3], [4, 5, 6]], { device });
  using mx = x.max(-1);
  assertClose(mx, [NaN, 6], [2], "float32", "max with NaN");
  using mn = x.min(1);
  assertClose(mn, [NaN, 4], [2], "float32", "min with NaN");
  using big = Tensor.full([1000], 2 ** 40 + 1, { dtype: "int64", device });
  using s = big.sum();
  assert.equal((s.toArray() as BigInt64Array)[0], 1000n * (2n ** 40n + 1n));
});

// ---- softmax family ----

// Each row's maximum and log-sum-exp, for every element of the row along `dim`.
function rowStats(
  v: readonly number[],
  shape: readonly number[],
  dim: number,
): { m: number[]; lse: number[] } {
  const stride = rowMajor(shape)[dim];
  const n = shape[dim];
  const m: number[] = [], lse: number[] = [];
  for (let i = 0; i < v.length; i++) {
    const c = coords(i, shape);
    const base = i - c[dim] * stride;
    const row = Array.from({ length: n }, (_, j) => v[base + j * stride]);
    m.push(Math.max(...row));
    lse.push(m[i] + Math.log(row.reduce((a, x) => a + Math.exp(x - m[i]), 0)));
  }
  return { m, lse };
}

deviceTest(
  "softmax, logSoftmax and logsumexp match float64 loops and stay stable",
  (device) =>
    withSeed((seed) => {
      const rng = new Rng(seed);
      for (const dtype of [...FLOATS, "int32"] as DType[]) {
        for (
          const [shape, dim] of [[[3, 7], -1], [[4, 5, 6], 1], [[9], 0], [[2, 1, 3], -2]] as [
            number[],
            number,
          ][]
        ) {
          const { t, v } = input(rng, shape, dtype, device);
          using _t = t;
          const d = dim < 0 ? dim + shape.length : dim;
          const out = floatOf(dtype);
          const { m, lse } = rowStats(v, shape, d);
          // The steps round to the compute dtype (float32, or float64): x - m loses eps_c |x - m|, which
          // exp turns into a relative error; x - logsumexp loses eps_c (|x| + |logsumexp|).
          const eps = dtype === "float64" ? 2 ** -52 : 2 ** -23;
          const want = v.map((x, i) => Math.exp(x - lse[i]));
          using p = t.softmax(dim);
          assertClose(
            p,
            want,
            shape,
            out,
            `softmax ${dtype} ${shape} ${dim}`,
            (i) => eps * (Math.abs(v[i] - m[i]) + 4) * want[i],
          );
          using lp = t.logSoftmax(dim);
          const wantLog = v.map((x, i) => x - lse[i]);
          assertClose(
            lp,
            wantLog,
            shape,
            out,
            `logSoftmax ${dtype} ${shape} ${dim}`,
            (i) => eps * (Math.abs(v[i]) + Math.abs(lse[i]) + 4),
          );
          using l = t.logsumexp(dim);
          const oracle = reduceOracle(v, shape, [d], (xs) => {
            const m = Math.max(...xs);
            return m + Math.log(xs.reduce((a, x) => a + Math.exp(x - m), 0));
          });
          const rowMax = reduceOracle(v, shape, [d], (xs) => Math.max(...xs)).values;
          assertClose(
            l,
            oracle.values,
            oracle.shape,
            out,
            `logsumexp ${dtype} ${shape} ${dim}`,
            (i) => eps * (Math.abs(rowMax[i]) + Math.abs(oracle.values[i] - rowMax[i]) + 4),
          );
        }
      }
      // Large and infinite scores: no overflow; a row of -Infinity has logsumexp -Infinity.
      using x = Tensor.from(new Float64Array([1000, 1000, -Infinity, -Infinity, 0, Infinity]), {
        shape: [3, 2],
        dtype: "float32",
        device,
      });
      using p = x.softmax(-1);
      assertClose(p, [0.5, 0.5, NaN, NaN, NaN, NaN], [3, 2], "float32", "softmax of large scores");
      using l = x.logsumexp(1, { keepDim: true });
      assertClose(
        l,
        [1000 + Math.log(2), -Infinity, Infinity],
        [3, 1],
        "float32",
        "logsumexp of large scores",
      );
      using e = Tensor.zeros([2, 0], { device });
      using le = e.logsumexp(-1);
      assertClose(le, [-Infinity, -Infinity], [2], "float32", "logsumexp over nothing");
    }),
);

// ---- matmul ----

const MATMUL_CASES: [number[], number[]][] = [
  [[3, 4], [4, 5]],
  [[17, 33], [33, 9]],
  [[2, 3, 4], [4, 5]],
  [[2, 1, 3, 4], [3, 4, 2]],
  [[5], [5, 3]],
  [[4, 5], [5]],
  [[6], [6]],
  [[3, 0], [0, 4]],
  [[0, 3], [3, 2]],
  [[1, 1], [1, 1]],
  [[2, 40, 70], [2, 70, 33]],
];

deviceTest("matmul matches float64 loops: batched, broadcast, 1-D, empty", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const dtype of [...FLOATS, ...INTS]) {
      for (const [sa, sb] of MATMUL_CASES) {
        const a = input(rng, sa, dtype, device);
        const b = input(rng, sb, dtype, device);
        using _a = a.t, _b = b.t;
        const a2 = sa.length === 1 ? [1, sa[0]] : sa;
        const b2 = sb.length === 1 ? [sb[0], 1] : sb;
        const [m, k, n] = [a2.at(-2)!, a2.at(-1)!, b2.at(-1)!];
        const batch = broadcastShape(a2.slice(0, -2), b2.slice(0, -2));
        const full = [...batch, m, n];
        const shape = [...batch, ...(sa.length > 1 ? [m] : []), ...(sb.length > 1 ? [n] : [])];
        const want: number[] = [], bound: number[] = [];
        for (let i = 0; i < numel(full); i++) {
          const c = coords(i, full);
          const z = c.slice(0, -2), [r, col] = c.slice(-2);
          let s = 0, abs = 0;
          for (let kk = 0; kk < k; kk++) {
            const x = a.v[broadcastIndex([...z, r, kk], a2)], y = b.v[broadcastIndex([...z, kk, col], b2)];
            s += x * y;
            abs += Math.abs(x * y);
          }
          want.push(rounded(s, dtype));
          bound.push(k * (dtype === "float64" ? 2 ** -52 : 2 ** -23) * abs);
        }
        poisonPool(shape, dtype, device);
        using r = a.t.matmul(b.t);
        assertClose(r, want, shape, dtype, `matmul ${dtype} ${sa} x ${sb}`, (i) => bound[i]);
      }
    }
    // Mixed dtypes promote; a transposed operand is read correctly.
    using x = Tensor.from([[1, 2], [3, 4]], { dtype: "int32", device });
    using y = Tensor.from([[0.5, 1], [1.5, 2]], { dtype: "float64", device });
    using yt = y.transpose(0, 1);
    using r = x.matmul(yt);
    assertClose(r, [2.5, 5.5, 5.5, 12.5], [2, 2], "float64", "int32 x float64");
  }));

// ---- indexing ----

deviceTest("slice, select and at follow Python's rules", (device) =>
  withSeed((seed) => {
    const rng = new Rng(seed);
    for (const dtype of ALL) {
      const shape = [4, 5, 3];
      const { t, v } = input(rng, shape, dtype, device);
      using _t = t;
      const at = (i: number, j: number, k: number) => v[(i * 5 + j) * 3 + k];
      const range = (a: number, b: number, s = 1) =>
        Array.from({ length: Math.max(0, Math.ceil((b - a) / s)) }, (_, i) => a + i * s);
      // slice(1, -4, 10, 2): rows 1 and 3 of dim 1 (the end clamps to 5)
      poisonPool([4, 2, 3], dtype, device);
      using s = t.slice(1, -4, 10, 2);
      assertClose(
        s,
        range(0, 4).flatMap((i) => [1, 3].flatMap((j) => range(0, 3).map((k) => at(i, j, k)))),
        [4, 2, 3],
        dtype,
        `slice ${dtype}`,
      );
      using e = t.slice(0, 3, 1); // empty: start past end
      assert.deepEqual(e.shape, [0, 5, 3]);
      using sel = t.select(-1, -2);
      assertClose(
        sel,
        range(0, 4).flatMap((i) => range(0, 5).map((j) => at(i, j, 1))),
        [4, 5],
        dtype,
        `select ${dtype}`,
      );
      using a1 = t.at(-1, "::2", null);
      assertClose(
        a1,
        [0, 2, 4].flatMap((j) => range(0, 3).map((k) => at(3, j, k))),
        [3, 1, 3],
        dtype,
        `at ${dtype}`,
      );
      using a2 = t.at("...", 0);
      assertClose(
        a2,
        range(0, 4).flatMap((i) => range(0, 5).map((j) => at(i, j, 0))),
        [4, 5],
        dtype,
        `at ... ${dtype}`,
      );
      using a3 = t.at("1:3", "-2:");
      assertClose(
        a3,
        [1, 2].flatMap((i) => [3, 4].flatMap((j) => range(0, 3).map((k) => at(i, j, k)))),
        [2, 2, 3],
        dtype,
        `at slices ${dtype}`,
      );
      using ix = t.indexSelect(1, [4, 0, -1, 2]);
      assertClose(
        ix,
        range(0, 4).flatMap((i) => [4, 0, 4, 2].flatMap((j) => range(0, 3).map((k) => at(i, j, k)))),
        [4, 4, 3],
        dtype,
        `indexSelect ${dtype}`,
      );
      using idx = Tensor.from(new Int32Array([3, 3, 0]), { device });
      using ix2 = t.indexSelect(0, idx);
      assertClose(
        ix2,
        [3, 3, 0].flatMap((i) => range(0, 5).flatMap((j) => range(0, 3).map((k) => at(i, j, k)))),
        [3, 5, 3],
        dtype,
        `indexSelect by tensor ${dtype}`,
      );
      using none = t.indexSelect(2, []);
      assert.deepEqual(none.shape, [4, 5, 0]);
    }
  }));

deviceTest(
  "row gathers and scatters move whole rows at any row width and alignment (16-byte units where they fit)",
  (device) =>
    expectNoLeak(device, () => {
      for (const dtype of ["bfloat16", "float8_e4m3", "float32"] as DType[]) {
        // 1024 elements: 16-byte units; 8 and 3: narrower ones; a view one row in: the start's alignment.
        for (const W of [1024, 8, 3]) {
          using big = Tensor.arange(8 * W, undefined, 1, { dtype: "float32", device });
          using cast = big.cast(dtype);
          using grid = cast.reshape([8, W]);
          for (const [label, src] of [["whole", grid], ["one row in", grid.at("1:")]] as const) {
            using _view = label === "whole" ? null : src;
            const values = Array.from(src.toArray() as ArrayLike<number>);
            const row = (r: number) => values.slice(r * W, (r + 1) * W);
            const picks = [src.shape[0] - 1, 0, 3, 3];
            using index = Tensor.from(new Int32Array(picks), { device });
            using got = src.indexSelect(0, index);
            const where = `${dtype} W ${W} ${label}`;
            assert.deepEqual(Array.from(got.toArray() as ArrayLike<number>), picks.flatMap(row), where);
            using dst = Tensor.zeros([src.shape[0], W], { dtype, device });
            using moved = src.at("0:2");
            using to = Tensor.from(new Int32Array([5, 1]), { device });
            scatterRows("test", dst, moved, to);
            const want = new Array(src.shape[0] * W).fill(0);
            for (let c = 0; c < W; c++) want[5 * W + c] = values[c], want[W + c] = values[W + c];
            assert.deepEqual(Array.from(dst.toArray() as ArrayLike<number>), want, `scatter ${where}`);
          }
        }
      }
    }),
);

deviceTest("broadcastTo, unsqueeze and squeeze", (device) => {
  using row = Tensor.from([1, 2, 3], { device });
  using grid = row.broadcastTo([2, 1, 3]);
  assertClose(grid, [1, 2, 3, 1, 2, 3], [2, 1, 3], "float32", "broadcastTo");
  using u = row.unsqueeze(-1);
  assert.deepEqual(u.shape, [3, 1]);
  using u0 = row.unsqueeze(0);
  assert.deepEqual(u0.shape, [1, 3]);
  using sq = grid.squeeze();
  assert.deepEqual(sq.shape, [2, 3]);
  using sq1 = grid.squeeze(-2);
  assertClose(sq1, [1, 2, 3, 1, 2, 3], [2, 3], "float32", "squeeze(-2)");
  assertAttnkitError(() => grid.squeeze(0), /size 2, not 1/);
  assertAttnkitError(() => row.broadcastTo([2, 2]), /does not broadcast|cannot be broadcast/);
  assertAttnkitError(() => row.broadcastTo([3, 1]), /cannot be broadcast/);
});

// ---- errors ----

deviceTest("bad calls are refused with an AttnkitError naming the argument", (device) => {
  using x = Tensor.randn([2, 3], { device });
  using y = Tensor.randn([4, 3], { device });
  assertAttnkitError(() => x.add(y), /other: shape \[4, 3\] does not broadcast/);
  assertAttnkitError(() => x.add("1" as unknown as number), /other: expected a Tensor or a number/);
  assertAttnkitError(() => x.sum(2), /dim: 2 is out of range for a tensor of rank 2/);
  assertAttnkitError(() => x.sum([0, -2]), /names a dim twice/);
  assertAttnkitError(() => x.sum(0.5), /dim: expected an integer/);
  assertAttnkitError(() => x.sum(0, { keepdim: true } as never), /did you mean 'keepDim'/);
  assertAttnkitError(() => x.matmul(y), /3 columns against 4 rows/);
  assertAttnkitError(() => x.matmul(3 as unknown as Tensor), /other: expected a Tensor/);
  using mask = x.gt(0);
  using maskT = mask.transpose(0, 1);
  assertAttnkitError(() => mask.matmul(maskT), /no bool tensors/);
  assertAttnkitError(() => where(x, x, x), /cond: expected a bool tensor/);
  assertAttnkitError(() => x.select(0, 2), /index 2 is out of range for dim 0 of size 2/);
  assertAttnkitError(() => x.slice(1, 0, 2, 0), /step of 1 or more/);
  assertAttnkitError(() => x.at(0, 0, 0), /3 indices for a tensor of rank 2/);
  assertAttnkitError(() => x.at("1:2:x"), /slice string/);
  assertAttnkitError(() => x.at("...", "..."), /at most one/);
  assertAttnkitError(() => x.indexSelect(1, [3]), /indices\[0\]: 3 is out of range/);
  assertAttnkitError(() => x.indexSelect(1, [0.5]), /indices\[0\]: expected an integer/);
  assertAttnkitError(() => x.softmax(2), /out of range/);
  const gone = Tensor.zeros([2], { device });
  gone.dispose();
  assertAttnkitError(() => gone.exp(), /disposed/);
  assertAttnkitError(() => x.mul(gone), /other: the tensor was disposed/);
});

Deno.test({
  name: `tensors on different devices are refused [cuda]${HAS_CUDA ? "" : " (no GPU: skipped)"}`,
  ignore: !HAS_CUDA,
  fn: () => {
    using a = Tensor.ones([3], { device: "cpu" });
    using b = Tensor.ones([3], { device: "cuda" });
    assertAttnkitError(() => a.add(b), /other: expected device cpu \(same as this tensor\), got cuda:0/);
    assertAttnkitError(() => b.matmul(a), /other: expected device cuda:0/);
    using c = b.gt(0);
    assertAttnkitError(() => where(c, a, 0), /a: expected device cuda:0 \(same as cond\)/);
  },
});

deviceTest("tensor math gives back every byte it takes", async (device) => {
  await expectNoLeak(device, () => {
    using x = Tensor.randn([4, 6], { device, seed: 3, dtype: "bfloat16" });
    using y = Tensor.randn([6], { device, seed: 4 });
    using xt = x.transpose(0, 1), mask = x.gt(0), wrong = Tensor.zeros([5], { device });
    using a = x.add(y), b = x.softmax(-1), c = x.logsumexp([0, 1]), d = x.matmul(xt);
    using e = x.at(1, "::2"), f = x.indexSelect(0, [1, 1]), g = where(mask, x, 0), h = x.mean();
    void [a, b, c, d, e, f, g, h];
    assert.throws(() => x.add(wrong));
  });
});

deviceTest(
  "scatterRows writes the named rows of every dtype and leaves the others (the CPU refuses a row outside)",
  (
    device,
  ) =>
    expectNoLeak(device, () => {
      for (const dtype of ["float32", "bfloat16", "float8_e4m3", "int32"] as DType[]) {
        using dst = Tensor.zeros([6, 2, 3], { dtype, device });
        using flat = Tensor.arange(12, undefined, 1, { dtype, device });
        using src = flat.reshape([2, 2, 3]);
        using index = Tensor.from([4, 1], { dtype: "int32", device });
        scatterRows("test", dst, src, index);
        const got = Array.from(dst.toArray() as ArrayLike<number>);
        const want = new Array(36).fill(0);
        for (let e = 0; e < 6; e++) want[4 * 6 + e] = e, want[1 * 6 + e] = 6 + e;
        assert.deepEqual(got, want, dtype);
      }
      using dst = Tensor.zeros([3, 2], { device });
      using src = Tensor.ones([1, 2], { device });
      using empty = Tensor.empty([0, 2], { device });
      using none = Tensor.from(new Int32Array(0), { dtype: "int32", device });
      scatterRows("test", dst, empty, none);
      assert.throws(() => {
        using wrong = Tensor.from([1], { dtype: "float32", device });
        scatterRows("test", dst, src, wrong);
      }, /index: expected dtype int32/);
      if (device === "cpu") {
        using outside = Tensor.from([3], { dtype: "int32", device });
        assert.throws(
          () => scatterRows("test", dst, src, outside),
          /index: entry 0 is 3, outside dst's 3 rows/,
        );
      }
      assert.deepEqual(Array.from(dst.toArray() as Float32Array), [0, 0, 0, 0, 0, 0]);
    }),
);
