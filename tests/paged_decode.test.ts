// The paged decode steps (recurrentGdnDecode, recurrentKdaDecode) against their float64 oracle
// (pagedDecodeReference, reference/paged_decode.ts): grouped heads, padding indices (0 and negative), fresh slots holding NaN with
// hasInitialState false, slots that no sequence selects (NaN, bitwise untouched), float32 and bfloat16
// pools, float16 / bfloat16 / float32 rows, both KDA gate transforms, several steps in a row; and the
// steps against the training op (chunkKda on the same tokens, its gate from gateTransform). The
// output buffer is poisoned with NaN first.
//
// Tolerance rule (pagedDecodeTolerance and rowToleranceBreach in reference/tolerance.ts), per element: |actual - oracle| <= rtol |oracle| + atol s, s the largest |oracle| of the
// row (or slot row) or, for outputs, the largest size of the terms the step's sums add (a dot product
// that cancels is exact only relative to its terms). rtol, atol 2^-16 for float32 results (the steps' products over K in float32 at the
// worst, plus the norm's rounding); a 16-bit output adds half its ulp relative (2^-8 bfloat16, 2^-11
// float16) and, for float16, half its subnormal step (2^-25) absolute. A bfloat16 pool is rounded in the
// oracle too after every step (the op stores it so); its elements may then differ by one ulp where
// float32's order of operations tips a rounding.
import assert from "node:assert/strict";
import {
  chunkKda,
  explain,
  gateTransform,
  lastPlan,
  recurrentGdnDecode,
  recurrentKdaDecode,
  Tensor,
  withTuning,
} from "../mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { generator, normals } from "./oracle_checks.ts";
import { expectRowsClose, runCase, type Spec } from "./paged_decode_fixtures.ts";
import { l2Normalize } from "../reference/mod.ts";

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

const CASES: Spec[] = [
  {
    B: 5,
    H: 4,
    HK: 4,
    K: 32,
    V: 24,
    slots: 9,
    perChannel: true,
    kind: "bounded",
    lowerBound: -5,
    dtype: "float32",
    poolDtype: "float32",
    steps: 3,
  },
  {
    B: 4,
    H: 3,
    HK: 3,
    K: 16,
    V: 16,
    slots: 6,
    perChannel: true,
    kind: "softplus",
    dtype: "bfloat16",
    poolDtype: "bfloat16",
    steps: 2,
  },
  {
    B: 6,
    H: 4,
    HK: 2,
    K: 64,
    V: 32,
    slots: 10,
    perChannel: false,
    kind: "softplus",
    dtype: "float32",
    poolDtype: "float32",
    steps: 3,
  },
  {
    B: 3,
    H: 6,
    HK: 3,
    K: 16,
    V: 8,
    slots: 5,
    perChannel: false,
    kind: "softplus",
    dtype: "float16",
    poolDtype: "bfloat16",
    steps: 2,
  },
  {
    B: 1,
    H: 1,
    HK: 1,
    K: 128,
    V: 128,
    slots: 2,
    perChannel: true,
    kind: "bounded",
    lowerBound: -1,
    dtype: "float32",
    poolDtype: "float32",
    steps: 1,
  },
  {
    B: 2,
    H: 2,
    HK: 1,
    K: 256,
    V: 20,
    slots: 4,
    perChannel: false,
    kind: "softplus",
    dtype: "bfloat16",
    poolDtype: "float32",
    steps: 2,
  },
];

deviceTest(
  "paged decode: float64 oracle, padding, fresh and untouched slots, grouped heads, 16-bit pools",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, s] of CASES.entries()) runCase(device, s, seed + 1000 * i);
      })),
);

deviceTest(
  "paged KDA decode stepped T times equals chunkKda on the same tokens",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const [T, H, K, V] = [7, 2, 16, 16];
        const rnd = generator(seed);
        const qh = normals(rnd, T * H * K), kh = normals(rnd, T * H * K), vh = normals(rnd, T * H * V);
        const rawGateHost = normals(rnd, T * H * K, 2), rawBetaHost = normals(rnd, T * H, 2);
        using aLog = Tensor.from(normals(rnd, H, 0.5), { device });
        using dtBias = Tensor.from(normals(rnd, H * K, 0.5), { shape: [H, K], device });
        using init = Tensor.from(normals(rnd, H * V * K, 0.3), { shape: [1, H, V, K], device });
        // The training op on normalised q and k, its gate from gateTransform, beta = sigmoid(rawBeta).
        const normRows = (x: Float32Array) => {
          const y = new Float32Array(x.length);
          for (let r = 0; r < x.length; r += K) y.set(l2Normalize(x.subarray(r, r + K)), r);
          return y;
        };
        using qn = Tensor.from(normRows(qh), { shape: [1, T, H, K], device });
        using kn = Tensor.from(normRows(kh), { shape: [1, T, H, K], device });
        using v = Tensor.from(vh, { shape: [1, T, H, V], device });
        using rawGate = Tensor.from(rawGateHost, { shape: [1, T, H, K], device });
        using beta = Tensor.from(rawBetaHost.map(sigmoid), { shape: [1, T, H], device });
        using gate = gateTransform(rawGate, aLog, dtBias, {
          kind: "bounded",
          lowerBound: -5,
          fastmath: false,
        });
        using r = chunkKda(qn, kn, v, gate.gate, beta, {
          layout: "bshd",
          initialState: init,
          stateLayout: "vk",
          outputFinalState: true,
        });
        // The same tokens one at a time through slot 2 of a pool.
        const poolHost = new Float32Array(3 * H * V * K);
        poolHost.set(init.toArray() as Float32Array, 2 * H * V * K);
        using pool = Tensor.from(poolHost, { shape: [3, H, V, K], device });
        using idx = Tensor.from([2], { dtype: "int32", device });
        const want = r.output.toArray() as Float32Array;
        for (let t = 0; t < T; t++) {
          const row = new Float32Array(H * (2 * K + V));
          row.set(qh.subarray(t * H * K, (t + 1) * H * K), 0);
          row.set(kh.subarray(t * H * K, (t + 1) * H * K), H * K);
          row.set(vh.subarray(t * H * V, (t + 1) * H * V), 2 * H * K);
          using qkv = Tensor.from(row, { shape: [1, row.length], device });
          using g = Tensor.from(rawGateHost.subarray(t * H * K, (t + 1) * H * K), {
            shape: [1, 1, H, K],
            device,
          });
          using b = Tensor.from(rawBetaHost.subarray(t * H, (t + 1) * H), { shape: [1, 1, H], device });
          using o = recurrentKdaDecode(qkv, g, b, aLog, dtBias, pool, idx);
          expectRowsClose(
            `token ${t}`,
            o.toArray() as Float32Array,
            want.subarray(t * H * V, (t + 1) * H * V),
            V,
            0,
          );
        }
        const final = (pool.toArray() as Float32Array).subarray(2 * H * V * K);
        expectRowsClose("final state", final, r.finalState!.toArray() as Float32Array, K, 0);
      })),
);

deviceTest(
  "paged decode refuses bad calls with an AttnkitError naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      const [B, H, K, V] = [2, 2, 8, 8];
      using qkv = Tensor.randn([B, H * (2 * K + V)], { device });
      using rawGate = Tensor.randn([1, B, H, K], { device });
      using rawBeta = Tensor.randn([1, B, H], { device });
      using aLog = Tensor.zeros([H], { device });
      using dtBias = Tensor.zeros([H, K], { device });
      using pool = Tensor.zeros([3, H, V, K], { device });
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using floatIdx = Tensor.from([1, 2], { device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, floatIdx),
        /stateIndices: expected dtype int32/,
      );
      refuses(
        () => recurrentKdaDecode(qkv, rawBeta, rawBeta, aLog, dtBias, pool, idx),
        /rawGate: expected shape/,
      );
      refuses(
        () => recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, aLog, pool, idx),
        /rawGate: expected shape/,
      );
      refuses(() =>
        recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, {
          gateTransform: "tanh" as "bounded",
        }), /gateTransform/);
      refuses(() =>
        recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, {
          gateTransform: "softplus",
          lowerBound: -5,
        }), /lowerBound/);
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { lowerBound: 1 }),
        /lowerBound/,
      );
      refuses(
        () =>
          recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { stateIndices: idx } as never),
        /stateIndices/,
      );
      using narrow = Tensor.randn([B, H * (2 * K + V) - 1], { device });
      refuses(
        () => recurrentKdaDecode(narrow, rawGate, rawBeta, aLog, dtBias, pool, idx),
        /packedQkv: a row of/,
      );
      using wrongOut = Tensor.empty([1, B, H, V], { dtype: "bfloat16", device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { out: wrongOut }),
        /options.out: expected dtype float32/,
      );
      using f16Pool = Tensor.zeros([3, H, V, K], { dtype: "float16", device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, f16Pool, idx),
        /stateCache: expected dtype/,
      );
      using past = Tensor.from([1, 3], { dtype: "int32", device });
      using twice = Tensor.from([2, 2], { dtype: "int32", device });
      refuses(() => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, past), /past the 3 slots/);
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, twice),
        /entries 0 and 1 both name slot 2/,
      );
    }),
);

deviceTest(
  "paged decode at a fused kernel's K refuses indices past the pool or repeated before writing anything",
  (device) =>
    expectNoLeak(device, () => {
      const [B, H, K, V] = [3, 2, 32, 16];
      using qkv = Tensor.randn([B, H * (2 * K + V)], { dtype: "bfloat16", device });
      using rawGate = Tensor.randn([1, B, H], { device });
      using rawBeta = Tensor.randn([1, B, H], { device });
      using aLog = Tensor.zeros([H], { device });
      using dtBias = Tensor.zeros([H], { device });
      using pool = Tensor.randn([4, H, V, K], { device, seed: 7 });
      const before = pool.toArray();
      for (
        const [bad, why] of [[[1, 4, 2], /entry 1 is 4, past the 4 slots/], [
          [3, 0, 3],
          /entries 0 and 2/,
        ]] as const
      ) {
        using idx = Tensor.from(bad, { dtype: "int32", device });
        refuses(() => recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx), why);
      }
      assert.deepEqual(pool.toArray(), before, "a refused call leaves the pool as it was");
      // Padding entries may repeat: 0 and negative indices touch nothing.
      using padding = Tensor.from([0, -1, 0], { dtype: "int32", device });
      using out = recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, padding);
      assert.ok(
        Array.from(out.toArray() as ArrayLike<number>).every((x) => x === 0),
        "padding rows are zero",
      );
      assert.deepEqual(pool.toArray(), before, "padding leaves the pool as it was");
      // checkIndices: false skips the host read on CUDA: an index past the pool touches nothing there.
      using past = Tensor.from([0, 4, 0], { dtype: "int32", device });
      const unchecked = () =>
        recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, past, { checkIndices: false });
      if (device === "cpu") {
        refuses(unchecked, /past the 4 slots/);
      } else {
        using skipped = unchecked();
        assert.ok(
          Array.from(skipped.toArray() as ArrayLike<number>).every((x) => x === 0),
          "skipped rows are zero",
        );
        assert.deepEqual(pool.toArray(), before, "an index past the pool touches nothing");
      }
      refuses(
        () =>
          recurrentGdnDecode(
            qkv,
            rawGate,
            rawBeta,
            aLog,
            dtBias,
            pool,
            padding,
            { checkIndices: 1 } as never,
          ),
        /checkIndices/,
      );
    }),
);

deviceTest(
  "paged decode impl: fused only where a fused kernel serves the call, reference on the exact path",
  (device) =>
    expectNoLeak(device, () => {
      const step = (K: number, impl?: "fused" | "reference") => {
        const [B, H, V] = [2, 2, 8];
        using qkv = Tensor.randn([B, H * (2 * K + V)], { device, seed: 1 });
        using rawGate = Tensor.randn([1, B, H], { device, seed: 2 });
        using rawBeta = Tensor.randn([1, B, H], { device, seed: 3 });
        using aLog = Tensor.zeros([H], { device });
        using dtBias = Tensor.zeros([H], { device });
        using pool = Tensor.randn([3, H, V, K], { device, seed: 4, std: 0.1 });
        using idx = Tensor.from([2, 1], { dtype: "int32", device });
        using out = recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, impl ? { impl } : {});
        return {
          out: Float64Array.from(out.toArray() as Float32Array),
          pool: pool.toArray() as Float32Array,
        };
      };
      refuses(
        () => step(32, "fast" as never),
        /options\.impl: expected one of "fused", "reference", got "fast"/,
      );
      const reference = step(32, "reference");
      if (device === "cpu") {
        refuses(() => step(32, "fused"), /impl 'fused': the CPU has no fused kernel/);
        assert.deepEqual(step(32), reference, "on the CPU the default is the reference");
        return;
      }
      assert.equal(lastPlan()?.path, "general");
      const fused = step(32, "fused");
      assert.ok(["bulk", "fused"].includes(lastPlan()?.path ?? ""), `fused path: ${lastPlan()?.path}`);
      // The fused kernels add in float32, the reference in float64: agreement to float32 rounding.
      fused.out.forEach((x, i) =>
        assert.ok(Math.abs(x - reference.out[i]) <= 1e-5 * (1 + Math.abs(x)), `out ${i}`)
      );
      refuses(() => step(24, "fused"), /impl 'fused': no fused kernel serves this call: K is not 32/);
    }),
);

Deno.test("paged decode planner: a fused kernel for K of 32, 64, 128 or 256, else the general path and why", () => {
  const hopper = explain({ op: "linear.paged_decode", gpu: "h200", dtype: "bfloat16", k: 128 });
  assert.equal(hopper.path, "bulk");
  assert.deepEqual(hopper.kernels.map((k) => k.name), ["linear.paged_decode.bulk<bfloat16>"]);
  const wide = explain({ op: "linear.paged_decode", gpu: "h100", dtype: "float32", k: 256, channel: false });
  assert.deepEqual(wide.kernels.map((k) => k.name), ["linear.paged_decode.bulk<float32>"]);
  const ampere = explain({ op: "linear.paged_decode", gpu: "a100", dtype: "float16", k: 64 });
  assert.equal(ampere.path, "fused");
  assert.deepEqual(ampere.kernels.map((k) => k.name), ["linear.paged_decode.fused<float16>"]);
  const pinned = withTuning(
    { "linear.paged_decode": "fused" },
    () => explain({ op: "linear.paged_decode", gpu: "h200", dtype: "bfloat16", k: 128 }),
  );
  assert.equal(pinned.path, "fused");
  refuses(
    () =>
      withTuning(
        { "linear.paged_decode": "bulk" },
        () => explain({ op: "linear.paged_decode", gpu: "a100", dtype: "bfloat16", k: 128 }),
      ),
    /linear\.paged_decode=bulk cannot serve this call/,
  );
  const odd = explain({ op: "linear.paged_decode", gpu: "h200", k: 96 });
  assert.equal(odd.path, "general");
  assert.match(String(odd.details.why), /K is not 32, 64, 128 or 256/);
  const unaligned = explain({ op: "linear.paged_decode", gpu: "h200", k: 64, aligned: false });
  assert.match(String(unaligned.details.why), /16-byte aligned/);
});
