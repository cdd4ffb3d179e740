// float8_e4m3 (PyTorch's float8_e4m3fn: 4 exponent bits, 3 mantissa bits, no infinities, largest finite 448)
// as a storage dtype: every value round-trips, casts from every float dtype round to nearest even as the
// table-searching oracle (reference roundE4m3) says, with 464 rounding to 448 and anything above it,
// infinities included, to NaN; fills, random draws, files; arithmetic is refused with the way out.
import assert from "node:assert/strict";
import { decodeNpy, decodeSafetensors, encodeNpy, encodeSafetensors, Tensor } from "../mod.ts";
import { roundE4m3 } from "../reference/mod.ts";
import { edgeValues, FLOAT16, FLOAT32, randomValues, roundToFormat } from "../reference/rounding.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

/** Every finite non-negative e4m3 value and its negation (the 254 finite codes but -0's twin). */
function allValues(): number[] {
  const out: number[] = [];
  for (let code = 0; code < 127; code++) {
    const exp = code >> 3, man = code & 7;
    const v = exp === 0 ? man * 2 ** -9 : (8 + man) * 2 ** (exp - 10);
    out.push(v, -v);
  }
  return out;
}

function sameValues(got: unknown, want: ArrayLike<number>, what: string): void {
  const g = got as ArrayLike<number>;
  assert.equal(g.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Object.is(g[i], want[i]), `${what}[${i}]: got ${g[i]}, expected ${want[i]}`);
  }
}

deviceTest(
  "float8_e4m3: every value round-trips and widens exactly to every float dtype",
  (device) =>
    expectNoLeak(device, () => {
      const values = Float64Array.from(allValues());
      using t = Tensor.from(values, { dtype: "float8_e4m3", device });
      assert.equal(t.nbytes, values.length);
      sameValues(t.toArray(), values, "float8_e4m3 -> float32");
      for (const to of ["float64", "float16", "bfloat16"] as const) {
        using wide = t.cast(to);
        sameValues(wide.toArray(), values, `float8_e4m3 -> ${to}`);
        using back = wide.cast("float8_e4m3");
        sameValues(back.toArray(), values, `${to} -> float8_e4m3`);
      }
    }),
);

deviceTest(
  "float8_e4m3: casts round to nearest even (ties, subnormals, 448 / 464 / 480, infinities)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const special = [
          0.3,
          464,
          464.0001,
          463.9,
          448,
          479.9,
          480,
          1e6,
          Infinity,
          -Infinity,
          NaN,
          -0,
          2 ** -10,
          3 * 2 ** -10,
          2 ** -10 * 1.0001,
          2 ** -6 - 2 ** -10,
          17,
          19,
          -19,
          0.0146484375,
        ];
        // Values spread over e4m3's range (and past it), plus float32's edge values.
        const spread = randomValues(6000, seed).map((x, i) => x * 2 ** ((i % 30) - 14));
        const values = Float64Array.from([...special, ...edgeValues(), ...spread]);
        using from64 = Tensor.from(values, { dtype: "float64", device });
        using out64 = from64.cast("float8_e4m3");
        sameValues(out64.toArray(), Array.from(values, roundE4m3), "float64 -> float8_e4m3");
        for (const [dtype, format] of [["float32", FLOAT32], ["float16", FLOAT16]] as const) {
          const rounded = Float64Array.from(values, (x) => roundToFormat(x, format));
          using src = Tensor.from(rounded, { dtype, device });
          using out = src.cast("float8_e4m3");
          sameValues(out.toArray(), Array.from(rounded, roundE4m3), `${dtype} -> float8_e4m3`);
        }
      })),
);

deviceTest("float8_e4m3: fill, random draws and files", (device) =>
  expectNoLeak(device, () => {
    using t = Tensor.empty([5, 3], { dtype: "float8_e4m3", device });
    t.fill(0.3);
    assert.ok((t.toArray() as Float32Array).every((x) => x === 0.3125));
    t.fill(1000);
    assert.ok((t.toArray() as Float32Array).every(Number.isNaN));
    using r = Tensor.randn([4096], { dtype: "float8_e4m3", device, seed: 3 });
    const drawn = r.toArray() as Float32Array;
    assert.ok(drawn.every((x) => Number.isFinite(x) && Object.is(roundE4m3(x), x)), "draws are e4m3 values");
    const mean = drawn.reduce((a, b) => a + b, 0) / drawn.length;
    assert.ok(Math.abs(mean) < 0.1, `mean ${mean}`);
    using back = decodeSafetensors(encodeSafetensors({ r }));
    sameValues(back.tensors.r.toArray(), drawn, "safetensors");
    assert.equal(back.tensors.r.dtype, "float8_e4m3");
    using npy = decodeNpy(encodeNpy(r));
    sameValues(npy.toArray(), drawn, "npy");
    assert.equal(npy.dtype, "float8_e4m3");
  }));

deviceTest("float8_e4m3: arithmetic is refused, naming the way out", (device) =>
  expectNoLeak(device, () => {
    using t = Tensor.ones([4], { dtype: "float8_e4m3", device });
    refuses(() => t.add(1), /float8_e4m3 has no arithmetic here; cast it to a wider float first/);
    refuses(() => t.sum(), /float8_e4m3/);
    using wide = t.cast("float32");
    using sum = wide.sum();
    assert.equal(sum.item(), 4);
  }));
