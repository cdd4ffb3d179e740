// Tensor and the runtime under it: round trips of every dtype, casts against float64 oracles,
// random numbers, permutes, views, memory accounting and argument errors, on the CPU backend and
// (when a GPU is present) on CUDA.
//
// Tolerance rule: none. Every check here is exact: casts must equal the oracle's correctly rounded
// value bit for bit (NaN matches NaN, -0 must stay -0), copies and permutes must move bits
// unchanged, and the same seed must give identical bits on every device.
import assert from "node:assert/strict";
import {
  AttnkitError,
  type Device,
  type DType,
  DTYPES,
  manualSeed,
  memoryStats,
  parseDevice,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";
import { uniformAt } from "../reference/philox.ts";
import { roundE4m3 } from "../reference/mod.ts";
import {
  BFLOAT16,
  edgeValues,
  FLOAT16,
  FLOAT32,
  type FloatFormat,
  int64ToInt32,
  randomValues,
  roundBigIntToFormat,
  roundToFormat,
  toBool,
  toInt32,
  toInt64,
} from "../reference/rounding.ts";

// ---- helpers ----

function same(a: number, b: number): boolean {
  return Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));
}

/** Asserts exact equality element by element (NaN == NaN, -0 != 0), naming the first difference. */
function assertExact(actual: ArrayLike<number | bigint>, expected: ArrayLike<number | bigint>, what: string) {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i], e = expected[i];
    const ok = typeof a === "bigint" || typeof e === "bigint" ? BigInt(a) === BigInt(e) : same(a, e);
    if (!ok) assert.fail(`${what}: element ${i} is ${a}, expected ${e}`);
  }
}

function assertAttnkitError(fn: () => unknown, code: string, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof AttnkitError, `expected an AttnkitError, got ${e}`);
    assert.equal(e.code, code, e.message);
    assert.match(e.message, pattern);
    return true;
  });
}

// Independent decoders of 16-bit float patterns (not the library's).
function decodeF16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 10) & 31, man = bits & 1023;
  if (exp === 31) return man ? NaN : sign * Infinity;
  return sign * (exp === 0 ? man * 2 ** -24 : (1024 + man) * 2 ** (exp - 25));
}
function decodeBF16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 7) & 255, man = bits & 127;
  if (exp === 255) return man ? NaN : sign * Infinity;
  return sign * (exp === 0 ? man * 2 ** -133 : (128 + man) * 2 ** (exp - 134));
}
const allPatterns = () => Uint16Array.from({ length: 65536 }, (_, i) => i);

const FORMATS: Record<"float32" | "float16" | "bfloat16", FloatFormat> = {
  float32: FLOAT32,
  float16: FLOAT16,
  bfloat16: BFLOAT16,
};

/** Casts host values of `from` to `to` on the device and reads them back. */
function castOn(device: Device, values: Float64Array | BigInt64Array, from: DType, to: DType) {
  using src0 = Tensor.from(values, { dtype: from, device });
  using out = src0.cast(to);
  assert.equal(out.dtype, to);
  assert.equal(out.device, parseDevice(device).name);
  return out.toArray();
}

// ---- round trips ----

deviceTest("every dtype round-trips host -> device -> host exactly", (device) => {
  const samples: Record<DType, Float64Array | BigInt64Array> = {
    float32: Float64Array.from([0, -0, 1.5, -3.25, 2 ** -149, 3.4028234663852886e38, NaN, -Infinity]),
    float64: Float64Array.from([0, -0, Math.PI, 5e-324, -Number.MAX_VALUE, NaN, Infinity, 1 / 3]),
    float16: Float64Array.from([0, -0, 1.5, -65504, 2 ** -24, 0.333251953125, NaN, Infinity]),
    bfloat16: Float64Array.from([0, -0, 1.5, -3.3895313892515355e38, 2 ** -133, 0.333984375, NaN, -Infinity]),
    float8_e4m3: Float64Array.from([0, -0, 1.5, -448, 2 ** -9, 0.3125, NaN, 240]),
    int32: Float64Array.from([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 123456, -7, 42]),
    int64: BigInt64Array.from([
      0n,
      1n,
      -1n,
      2n ** 63n - 1n,
      -(2n ** 63n),
      2n ** 53n + 1n,
      -12345678901234n,
      7n,
    ]),
    bool: Float64Array.from([0, 1, 1, 0, 0, 1, 0, 1]),
  };
  for (const dtype of DTYPES) {
    const values = samples[dtype];
    using t = Tensor.from(values, { dtype, device, shape: [2, 4] });
    assert.deepEqual(t.shape, [2, 4]);
    assert.equal(t.dtype, dtype);
    assertExact(t.toArray(), values, `${dtype} on ${device}`);
    using back = t.to("cpu");
    using again = back.to(device);
    assertExact(again.toArray(), values, `${dtype} via cpu and back`);
  }
});

deviceTest("every float16 and bfloat16 bit pattern survives a copy and widens exactly", (device) => {
  const bits = allPatterns();
  for (const [dtype, decode] of [["float16", decodeF16], ["bfloat16", decodeBF16]] as const) {
    using t = Tensor.from(bits, { dtype, device });
    assertExact(t.toRawBits(), bits, `${dtype} raw bits`);
    assertExact(t.toArray(), Array.from(bits, decode), `${dtype} -> float32`);
    using wide = t.cast("float64");
    assertExact(wide.toArray(), Array.from(bits, decode), `${dtype} -> float64`);
  }
});

// ---- casts against the float64 oracle ----

deviceTest(
  "float64 -> float32 / float16 / bfloat16 rounds to nearest even (subnormals, ties, overflow)",
  (device) =>
    withSeed((seed) => {
      const values = Float64Array.from([...edgeValues(), ...randomValues(20000, seed)]);
      for (const to of ["float32", "float16", "bfloat16"] as const) {
        const expected = Array.from(values, (x) => roundToFormat(x, FORMATS[to]));
        assertExact(castOn(device, values, "float64", to), expected, `float64 -> ${to}`);
      }
    }),
);

deviceTest(
  "float32 -> float16 / bfloat16 rounds once, from the float32 value",
  (device) =>
    withSeed((seed) => {
      const values = Float64Array.from(
        [...edgeValues(), ...randomValues(20000, seed)],
        (x) => roundToFormat(x, FLOAT32),
      );
      for (const to of ["float16", "bfloat16"] as const) {
        const expected = Array.from(values, (x) => roundToFormat(x, FORMATS[to]));
        using src = Tensor.from(values, { dtype: "float32", device });
        using out = src.cast(to);
        assertExact(out.toArray(), expected, `float32 -> ${to}`);
      }
    }),
);

deviceTest("float16 <-> bfloat16 for every bit pattern", (device) => {
  const bits = allPatterns();
  for (
    const [from, to, decode] of [["float16", "bfloat16", decodeF16], [
      "bfloat16",
      "float16",
      decodeBF16,
    ]] as const
  ) {
    using src = Tensor.from(bits, { dtype: from, device });
    using out = src.cast(to);
    const expected = Array.from(bits, (b) => roundToFormat(decode(b), FORMATS[to]));
    assertExact(out.toArray(), expected, `${from} -> ${to}`);
  }
});

deviceTest(
  "floats -> integers truncate toward zero and saturate; NaN -> 0; bool is value != 0",
  (device) =>
    withSeed((seed) => {
      const values = Float64Array.from([
        ...edgeValues(),
        2.5,
        -2.5,
        2.9999,
        -0.9,
        2 ** 31 - 1,
        2 ** 31 - 0.5,
        2 ** 31,
        -(2 ** 31),
        -(2 ** 31) - 1,
        2 ** 53 + 2,
        2 ** 63,
        -(2 ** 63),
        2 ** 62,
        -1e19,
        ...randomValues(2000, seed).map((x) => x * 1e-25),
      ]);
      assertExact(
        castOn(device, values, "float64", "int32"),
        Array.from(values, toInt32),
        "float64 -> int32",
      );
      assertExact(
        castOn(device, values, "float64", "int64"),
        Array.from(values, toInt64),
        "float64 -> int64",
      );
      assertExact(castOn(device, values, "float64", "bool"), Array.from(values, toBool), "float64 -> bool");
      // from narrower floats too: their values are exact in float64, so the same oracle applies
      for (const from of ["float32", "float16", "bfloat16"] as const) {
        const rounded = Array.from(values, (x) => roundToFormat(x, FORMATS[from]));
        using src = Tensor.from(Float64Array.from(rounded), { dtype: from, device });
        using i32 = src.cast("int32");
        using i64 = src.cast("int64");
        using b = src.cast("bool");
        assertExact(i32.toArray(), rounded.map(toInt32), `${from} -> int32`);
        assertExact(i64.toArray(), rounded.map(toInt64), `${from} -> int64`);
        assertExact(b.toArray(), rounded.map(toBool), `${from} -> bool`);
      }
    }),
);

deviceTest("integers and bools -> floats round once; int64 -> int32 saturates", (device) => {
  const big = [
    0n,
    1n,
    -1n,
    2049n,
    2051n,
    65519n,
    65520n,
    -65536n,
    16777217n,
    2n ** 53n + 1n,
    2n ** 60n + 2n ** 36n + 1n, // a float32 tie broken by the last bit: double rounding gets it wrong
    -(2n ** 60n + 2n ** 36n + 1n),
    2n ** 62n + 2n ** 38n, // an exact float32 tie (to even: down)
    2n ** 62n + 3n * 2n ** 38n, // an exact float32 tie (to even: up)
    2n ** 63n - 1n,
    -(2n ** 63n),
    2n ** 31n,
    -(2n ** 31n) - 1n,
  ];
  const i64 = BigInt64Array.from(big);
  for (const to of ["float32", "float16", "bfloat16"] as const) {
    const expected = big.map((v) => roundBigIntToFormat(v, FORMATS[to]));
    assertExact(castOn(device, i64, "int64", to), expected, `int64 -> ${to}`);
  }
  assertExact(castOn(device, i64, "int64", "float64"), big.map(Number), "int64 -> float64");
  assertExact(castOn(device, i64, "int64", "int32"), big.map(int64ToInt32), "int64 -> int32");
  assertExact(castOn(device, i64, "int64", "bool"), big.map((v) => (v !== 0n ? 1 : 0)), "int64 -> bool");

  const small = Float64Array.from([0, 1, -1, 2049, 2051, 65519, 65520, -(2 ** 31), 2 ** 31 - 1, 16777217]);
  for (const to of ["float32", "float16", "bfloat16"] as const) {
    const expected = Array.from(small, (x) => roundToFormat(x, FORMATS[to]));
    assertExact(castOn(device, small, "int32", to), expected, `int32 -> ${to}`);
  }
  assertExact(castOn(device, small, "int32", "int64"), Array.from(small, (x) => BigInt(x)), "int32 -> int64");

  const bools = Float64Array.from([0, 1, 1, 0]);
  for (const to of DTYPES) {
    const out = castOn(device, bools, "bool", to);
    assertExact(
      out,
      to === "int64" ? [0n, 1n, 1n, 0n] : [0, 1, 1, 0],
      `bool -> ${to}`,
    );
  }
});

deviceTest("fill rounds its value like a cast", (device) => {
  for (const x of [1 / 3, 65520, -1e-8, 2 ** -140, NaN, -Infinity, 3.7, -3.7, 1e10]) {
    for (const dtype of DTYPES) {
      using t = Tensor.full([5], x, { dtype, device });
      const expected = dtype === "float64"
        ? x
        : dtype in FORMATS
        ? roundToFormat(x, FORMATS[dtype as keyof typeof FORMATS])
        : dtype === "float8_e4m3"
        ? roundE4m3(x)
        : dtype === "int32"
        ? toInt32(x)
        : dtype === "int64"
        ? toInt64(x)
        : toBool(x);
      assertExact(t.toArray(), new Array(5).fill(expected), `fill(${x}) as ${dtype}`);
    }
  }
});

// ---- random numbers ----

deviceTest("uniform numbers are Philox-4x32-10, bit for bit", (device) =>
  withSeed((seed) => {
    const n = 1001;
    using u = Tensor.rand([n], { dtype: "float64", device, seed, offset: 10 });
    const expected = Array.from({ length: n }, (_, i) => uniformAt(BigInt(seed), BigInt(10 + i)));
    assertExact(u.toArray(), expected, "rand float64");
    using scaled = Tensor.rand([n], { dtype: "float64", device, seed, offset: 10, low: -2, high: 6 });
    const s = scaled.toArray() as Float64Array;
    // low + u * (high - low), with a fused multiply-add: within one rounding of the exact value
    for (let i = 0; i < n; i++) assert.ok(Math.abs(s[i] - (-2 + 8 * expected[i])) <= 2 ** -49, `rand[${i}]`);
  }));

deviceTest(
  "the same seed gives the same numbers; offsets address one stream",
  (device) =>
    withSeed((seed) => {
      for (const dtype of ["float64", "float32", "bfloat16", "float16"] as const) {
        using a = Tensor.randn([3, 333], { dtype, device, seed });
        using b = Tensor.randn([3, 333], { dtype, device, seed });
        assertExact(a.toArray(), b.toArray(), `randn ${dtype} twice`);
        using c = Tensor.randn([3, 333], { dtype, device, seed: seed + 1 });
        const other = c.toArray() as Float32Array;
        const same = (a.toArray() as Float32Array).filter((x, i) => x === other[i]);
        assert.ok(same.length < 20, `a different seed should give different ${dtype} numbers`);
      }
      // element i draws from counter offset + i, whatever the tensor's shape or the offset's parity
      using whole = Tensor.randn([1000], { dtype: "float64", device, seed });
      for (const offset of [6, 5]) {
        using tail = Tensor.randn([1000 - offset], { dtype: "float64", device, seed, offset });
        assertExact(tail.toArray(), (whole.toArray() as Float64Array).subarray(offset), `offset ${offset}`);
      }
      // narrower dtypes are the float64 draws rounded once
      for (const dtype of ["float32", "bfloat16", "float16"] as const) {
        using narrow = Tensor.randn([1000], { dtype, device, seed });
        const expected = Array.from(whole.toArray() as Float64Array, (x) => roundToFormat(x, FORMATS[dtype]));
        assertExact(narrow.toArray(), expected, `randn ${dtype} = rounded float64 draws`);
      }
    }),
);

Deno.test({
  name: "random numbers are identical on CPU and CUDA" + (HAS_CUDA ? "" : " (no GPU: skipped)"),
  ignore: !HAS_CUDA,
  fn: () =>
    withSeed((seed) => {
      for (const dtype of ["float64", "float32", "bfloat16", "float16"] as const) {
        for (const make of [Tensor.randn, Tensor.rand]) {
          using cpu = make([4097], { dtype, device: "cpu", seed, offset: 3 });
          using gpu = make([4097], { dtype, device: "cuda", seed, offset: 3 });
          const name = `${make === Tensor.randn ? "randn" : "rand"} ${dtype}`;
          if (dtype === "float16" || dtype === "bfloat16") {
            assertExact(gpu.toRawBits(), cpu.toRawBits(), name);
          } else {
            assertExact(gpu.toArray(), cpu.toArray(), name);
          }
        }
      }
    }),
});

deviceTest("random moments: normal and uniform", (device) =>
  withSeed((seed) => {
    const n = 1 << 20;
    const sigma = 6 / Math.sqrt(n); // bounds are six standard errors: a false failure is ~1e-9
    using z = Tensor.randn([n], { dtype: "float32", device, seed, mean: 3, std: 0.5 });
    const zs = z.toArray() as Float32Array;
    let sum = 0, sq = 0, within = 0, fourth = 0;
    for (const x of zs) {
      const d = (x - 3) / 0.5;
      sum += d;
      sq += d * d;
      fourth += d ** 4;
      if (Math.abs(d) < 1) within++;
    }
    assert.ok(Math.abs(sum / n) < sigma, `normal mean ${3 + 0.5 * sum / n}`);
    assert.ok(Math.abs(sq / n - 1) < sigma * Math.SQRT2, `normal variance ${sq / n}`);
    assert.ok(Math.abs(fourth / n - 3) < sigma * Math.sqrt(96), `normal kurtosis ${fourth / n}`);
    assert.ok(Math.abs(within / n - 0.6826894921370859) < sigma * 0.466, `P(|z| < 1) = ${within / n}`);

    using u = Tensor.rand([n], { dtype: "float64", device, seed, low: -1, high: 3 });
    const us = u.toArray() as Float64Array;
    let usum = 0, usq = 0, low = Infinity, high = -Infinity;
    for (const x of us) {
      usum += x;
      usq += (x - 1) ** 2;
      low = Math.min(low, x);
      high = Math.max(high, x);
    }
    assert.ok(low >= -1 && high < 3, `uniform range [${low}, ${high}]`);
    assert.ok(Math.abs(usum / n - 1) < sigma * Math.sqrt(16 / 12), `uniform mean ${usum / n}`);
    assert.ok(Math.abs(usq / n - 16 / 12) < sigma * Math.sqrt(256 / 180), `uniform variance ${usq / n}`);
  }));

Deno.test("manualSeed makes unseeded draws reproducible, and successive draws differ", () => {
  manualSeed(1234);
  using a = Tensor.randn([64]);
  using b = Tensor.randn([64]);
  manualSeed(1234);
  using a2 = Tensor.randn([64]);
  assertExact(a2.toArray(), a.toArray(), "after manualSeed");
  assert.notDeepEqual(Array.from(b.toArray() as Float32Array), Array.from(a.toArray() as Float32Array));
});

// ---- permutes ----

/** Row-major permute on the host: out[i0..] = src[index with dims reordered]. */
function permuteReference<T>(values: ArrayLike<T>, shape: number[], dims: number[]): T[] {
  const outShape = dims.map((d) => shape[d]);
  const srcStrides = shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  const n = shape.reduce((a, b) => a * b, 1);
  const out: T[] = new Array(n);
  const idx = new Array(outShape.length).fill(0);
  for (let k = 0; k < n; k++) {
    let src = 0;
    for (let j = 0; j < dims.length; j++) src += idx[j] * srcStrides[dims[j]];
    out[k] = values[src];
    for (let j = outShape.length - 1; j >= 0; j--) {
      if (++idx[j] < outShape[j]) break;
      idx[j] = 0;
    }
  }
  return out;
}

deviceTest(
  "permutes: BTHD <-> BHTD and general orders, every dtype, aligned and ragged rows",
  (device) =>
    withSeed((seed) => {
      const cases: { shape: number[]; dims: number[] }[] = [
        { shape: [2, 5, 3, 64], dims: [0, 2, 1, 3] }, // BTHD -> BHTD, 16-byte rows
        { shape: [2, 3, 5, 64], dims: [0, 2, 1, 3] }, // and back
        { shape: [2, 7, 3, 5], dims: [0, 2, 1, 3] }, // rows of 5: no vector path
        { shape: [1, 4, 1, 8], dims: [0, 2, 1, 3] }, // size-1 dimensions
        { shape: [3, 4, 5, 6], dims: [2, 0, 3, 1] }, // general
        { shape: [2, 3, 4, 5, 6], dims: [4, 3, 2, 1, 0] }, // reversal, rank 5
        { shape: [0, 3, 2, 4], dims: [0, 2, 1, 3] }, // empty
        { shape: [17, 33], dims: [1, 0] },
      ];
      for (const dtype of DTYPES) {
        for (const { shape, dims } of cases) {
          const n = shape.reduce((a, b) => a * b, 1);
          // Distinct values where the dtype allows, so a misplaced element shows.
          const host: Float64Array | BigInt64Array = dtype === "int64"
            ? BigInt64Array.from({ length: n }, (_, i) => 2n ** 60n + BigInt(i) * 7n + BigInt(seed % 1000))
            : Float64Array.from({ length: n }, (_, i) =>
              dtype === "bool"
                ? (i * 7 + seed) % 3 === 0 ? 1 : 0
                : dtype.startsWith("int")
                ? i - 50
                : (i % 251) - 125.5);
          using t = Tensor.from(host, { dtype, device, shape });
          using p = t.permute(dims);
          assert.deepEqual(
            p.shape,
            dims.map((d) =>
              shape[d]
            ),
          );
          const expected = permuteReference(t.toArray() as ArrayLike<number | bigint>, shape, dims);
          assertExact(p.toArray(), expected, `${dtype} [${shape}] permute [${dims}]`);
          // the inverse order restores the original
          const inverse = dims.map((_, i) => dims.indexOf(i));
          using back = p.permute(inverse);
          assertExact(back.toArray(), t.toArray(), `${dtype} [${shape}] permute back`);
        }
      }
      using m = Tensor.from([[1, 2, 3], [4, 5, 6]], { device });
      using mt = m.transpose(-1, -2);
      assertExact(mt.toArray(), [1, 4, 2, 5, 3, 6], "transpose(-1, -2)");
    }),
);

// ---- views, lifetime and memory ----

deviceTest("reshape views share memory and outlive their source", (device) =>
  expectNoLeak(device, () => {
    const base = memoryStats(device).threadBytesInUse;
    const a = Tensor.arange(12, undefined, 1, { dtype: "float32", device });
    const v = a.reshape([3, -1]);
    assert.deepEqual(v.shape, [3, 4]);
    v.fill(7);
    assertExact(a.toArray(), new Array(12).fill(7), "writes through the view reach the source");
    a.dispose();
    assert.ok(a.disposed);
    assert.equal(memoryStats(device).threadBytesInUse - base, 48, "the view keeps the memory alive");
    assertExact(v.toArray(), new Array(12).fill(7), "the view still reads after the source is disposed");
    using w = v.reshape([2, 2, 3]);
    v.dispose();
    assertExact(w.toArray(), new Array(12).fill(7), "a view of a view");
  }));

deviceTest(
  "memory returns to its baseline after dispose and after thrown errors",
  (device) =>
    expectNoLeak(device, () => {
      const before = memoryStats(device);
      for (const dtype of DTYPES) {
        using a = Tensor.ones([7, 9], { dtype, device });
        using b = a.cast("float32");
        using c = b.permute([1, 0]);
        using d = c.to("cpu");
        using e = d.reshape([63]);
        using f = e.clone();
        f.copyFrom(e);
        assert.equal(`${f}`.startsWith("Tensor([63], float32, cpu"), true);
      }
      const failures: (() => unknown)[] = [
        () => {
          using a = Tensor.zeros([2, 3], { device });
          a.reshape([4]);
        },
        () => Tensor.zeros([2, 3], { device, dtype: "float8" as DType }),
        () => Tensor.from([1, 2, 3], { device, shape: [2, 2] }),
        () => Tensor.randn([4], { device, dtype: "int32" }),
        () => {
          using a = Tensor.zeros([3], { device });
          using b = Tensor.zeros([4], { device });
          a.copyFrom(b);
        },
        () => {
          using a = Tensor.zeros([3], { device });
          a.permute([0, 0]);
        },
        () => {
          using a = Tensor.zeros([3], { device });
          a.cast("int8" as DType);
        },
        () => Tensor.from(new Uint16Array(4), { device }),
      ];
      for (const fail of failures) assert.throws(fail, AttnkitError);
      // Live tensors, not live allocations: the allocation count is the process's, which other test
      // files running beside this one (Workers under --parallel) change; expectNoLeak checks this
      // thread's bytes.
      const after = memoryStats(device);
      assert.equal(after.liveTensors, before.liveTensors);
    }),
);

Deno.test("dispose is safe twice; a disposed tensor refuses every use", () => {
  const t = Tensor.ones([4]);
  t.dispose();
  t.dispose();
  assert.equal(`${t}`, "Tensor([4], float32, cpu, disposed)");
  for (
    const use of [
      () => t.toArray(),
      () => t.cast("float64"),
      () => t.to("cpu"),
      () => t.reshape([2, 2]),
      () => t.permute([0]),
      () => t.fill(1),
      () => t.clone(),
      () => t.descriptor(),
      () => t.item(),
    ]
  ) {
    assertAttnkitError(use, "INVALID_ARGUMENT", /disposed/);
  }
  using live = Tensor.ones([4]);
  assertAttnkitError(() => live.copyFrom(t), "INVALID_ARGUMENT", /source: the tensor was disposed/);
});

// ---- argument errors ----

deviceTest("bad input throws an AttnkitError that names the argument", (device) => {
  using t = Tensor.zeros([2, 3], { device });
  // dtype
  assertAttnkitError(
    () => Tensor.zeros([2], { dtype: "float8" as DType, device }),
    "INVALID_ARGUMENT",
    /dtype: expected one of float32/,
  );
  assertAttnkitError(() => t.cast("half" as DType), "INVALID_ARGUMENT", /Tensor\.cast: dtype: .*"half"/);
  assertAttnkitError(
    () => Tensor.randn([2], { dtype: "int64", device }),
    "INVALID_ARGUMENT",
    /dtype: random numbers need a floating dtype/,
  );
  assertAttnkitError(() => t.values("int32"), "INVALID_ARGUMENT", /dtype: the tensor holds float32/);
  assertAttnkitError(() => t.toRawBits(), "INVALID_ARGUMENT", /expected float16 or bfloat16/);
  assertAttnkitError(
    () => Tensor.from(new Uint16Array(2), { device }),
    "INVALID_ARGUMENT",
    /dtype: a Uint16Array holds raw/,
  );
  // shape
  assertAttnkitError(
    () => Tensor.zeros([2, -1], { device }),
    "INVALID_ARGUMENT",
    /shape: sizes must be non-negative/,
  );
  assertAttnkitError(() => Tensor.zeros([1.5], { device }), "INVALID_ARGUMENT", /shape/);
  assertAttnkitError(
    () => Tensor.zeros(new Array(9).fill(1), { device }),
    "INVALID_ARGUMENT",
    /shape: rank 9 exceeds 8/,
  );
  assertAttnkitError(
    () => Tensor.from([1, 2, 3], { shape: [2, 2], device }),
    "INVALID_ARGUMENT",
    /shape: \[2, 2\] holds 4/,
  );
  assertAttnkitError(() => Tensor.from([[1, 2], [3]], { device }), "INVALID_ARGUMENT", /data: ragged/);
  assertAttnkitError(
    () => Tensor.from(["a"] as unknown as number[], { device }),
    "INVALID_ARGUMENT",
    /data: expected numbers/,
  );
  assertAttnkitError(
    () => t.reshape([4]),
    "INVALID_ARGUMENT",
    /shape: \[4\] holds 4 elements, the tensor \[2, 3\] has 6/,
  );
  assertAttnkitError(() => t.reshape([-1, -1]), "INVALID_ARGUMENT", /at most one size may be -1/);
  assertAttnkitError(() => t.reshape([4, -1]), "INVALID_ARGUMENT", /cannot hold 6/);
  assertAttnkitError(() => t.permute([0, 2]), "INVALID_ARGUMENT", /dims: expected a permutation of 0\.\.1/);
  assertAttnkitError(() => t.transpose(0, 2), "INVALID_ARGUMENT", /dims: 0, 2 out of range/);
  assertAttnkitError(() => t.item(), "INVALID_ARGUMENT", /expected one element/);
  using other = Tensor.zeros([3, 2], { device });
  assertAttnkitError(
    () => t.copyFrom(other),
    "INVALID_ARGUMENT",
    /Tensor\.copyFrom: dst: expected shape \[3, 2\]/,
  );
  // values
  assertAttnkitError(() => t.fill("1" as unknown as number), "INVALID_ARGUMENT", /value: expected a number/);
  assertAttnkitError(() => Tensor.arange(0, 4, 0), "INVALID_ARGUMENT", /step/);
  // device
  assertAttnkitError(
    () => Tensor.zeros([2], { device: "gpu" }),
    "INVALID_ARGUMENT",
    /device: expected "cpu", "cuda" or "cuda:N", got "gpu"/,
  );
  assertAttnkitError(() => t.to("cuda:99"), "NO_DEVICE", /device: cuda:99 is not available/);
  assertAttnkitError(
    () => t.copyFrom(null as unknown as Tensor),
    "INVALID_ARGUMENT",
    /source: expected a Tensor/,
  );
});

Deno.test({
  name: "copies across devices keep the dtype" + (HAS_CUDA ? "" : " (no GPU: skipped)"),
  ignore: !HAS_CUDA,
  fn: () => {
    using cpu = Tensor.arange(8, undefined, 1, { dtype: "float32" });
    using gpu = Tensor.zeros([8], { dtype: "float32", device: "cuda" });
    gpu.copyFrom(cpu);
    assertExact(gpu.toArray(), cpu.toArray(), "cpu -> cuda copyFrom");
    using gpuHalf = Tensor.zeros([8], { dtype: "float16", device: "cuda" });
    assertAttnkitError(() => gpuHalf.copyFrom(cpu), "INVALID_ARGUMENT", /keeps the dtype/);
  },
});

// ---- reading ----

deviceTest("toString, item, values and clone", (device) => {
  using a = Tensor.from([[1, 2, 3], [4, 5, 6.5]], { device });
  assert.equal(`${a}`, `Tensor([2, 3], float32, ${parseDevice(device).name}, [1, 2, 3, 4, 5, 6.5])`);
  using big = Tensor.arange(10, undefined, 1, { device });
  assert.match(`${big}`, /^Tensor\(\[10\], int64, .*, \[0, 1, 2, 3, 4, 5, \.\.\.\]\)$/);
  using h = Tensor.from([1.5, -2], { dtype: "bfloat16", device });
  assert.match(`${h}`, /\[1\.5, -2\]/);
  using one = Tensor.full([1, 1], 3.5, { device, dtype: "float64" });
  assert.equal(one.item(), 3.5);
  const typed: Float64Array = one.values("float64");
  assert.equal(typed[0], 3.5);
  using c = a.clone();
  a.fill(0);
  assertExact(c.toArray(), [1, 2, 3, 4, 5, 6.5], "a clone owns its memory");
  using e = Tensor.empty([0, 4], { device });
  assert.equal(e.numel, 0);
  assert.equal(e.toArray().length, 0);
});

deviceTest("Tensor.arange forms the same values on every device and dtype as the host rule", (device) => {
  const cases: [number, number, number, DType][] = [
    [0, 17, 1, "int32"],
    [-5, 40, 3, "int64"],
    [0.5, 7, 0.25, "float32"],
    [3, -2, -0.5, "float64"],
    [0, 300, 1, "bfloat16"],
    [1, 2100, 7, "float16"],
    [0, 5, 1, "bool"],
    [0, 0, 1, "float32"],
  ];
  for (const [start, end, step, dtype] of cases) {
    using t = Tensor.arange(start, end, step, { dtype, device });
    const n = Math.max(0, Math.ceil((end - start) / step));
    using host = Tensor.from(Float64Array.from({ length: n }, (_, i) => start + i * step), { dtype });
    assert.deepEqual(t.shape, [n]);
    assert.deepEqual(t.toArray(), host.toArray(), `${dtype} ${start}..${end} by ${step}`);
  }
});
