// The gated linear family's functions (chunkGla, recurrentGla, chunkSimpleGla, chunkRetention,
// chunkLinearAttn and their backward functions) against the float64 oracle on fresh random inputs,
// every result written into NaN-poisoned buffers first: outputs, final states and all gradients,
// across dtypes and edge shapes (T = 1, T not a multiple of 64, packed with empty and one-token
// sequences, odd head counts, grouped heads, K != V, head dims 40/64/128/136/192/200/256 (the backward
// above 128 key columns by key pieces on CUDA), gate spikes of -20
// and decays near 0).
//
// Tolerance rule (relative RMS, see tests/gla_ops_fixtures.ts): float32 5e-5 (outputs, states),
// 8e-5 (dq, dk, dv), 2e-4 (gate gradients, dInitialState); float16/bfloat16 0.005, 0.008, 0.02,
// relative to the RMS of the expected values; the decays' gradients (dgk, dg) 0.08 in 16 bits (a
// reverse cumsum of q dq - k dk, terms that largely cancel). dgGamma in 16 bits, a sum over tokens of
// per-token gradients that largely cancel: |error| <= 0.08 * sum over tokens of |dg_t| (per head).
import assert from "node:assert/strict";
import { type Device, explain, lastPlan, Tensor } from "../mod.ts";
import { deviceTest, specsTest, withSeed } from "./helpers.ts";
import { expectClose, GlaCase, type GlaSpec, host, leadingRows, tol } from "./gla_ops_fixtures.ts";
import { everyDtypeAndFn } from "./linear_case.ts";

/** Forward and backward of one case against the oracle. */
function checkCase(device: Device, spec: GlaSpec, seed: number): void {
  using c = new GlaCase(device, spec, seed);
  const t = tol(spec.dtype);
  const what = `${spec.fn} ${JSON.stringify({ ...spec, fn: undefined })}`;
  const ref = c.reference();
  const end = spec.cuSeqlens ? spec.cuSeqlens[spec.cuSeqlens.length - 1] : spec.T;
  const rows = (a: ArrayLike<number>, size: number) => leadingRows(a, end, size);
  using r = c.forward();
  const outRow = spec.H * spec.V;
  if (spec.cuSeqlens) {
    expectClose(rows(host(r.output), outRow), rows(ref.output, outRow), t.output, `output (${what})`);
  } else {
    expectClose(r.output, ref.output, t.output, `output (${what})`);
  }
  expectClose(r.finalState!, ref.finalState, t.state, `final state (${what})`);

  const { dOutput, dFinalState } = c.cotangents(seed);
  const g = c.referenceBackward(dOutput, dFinalState);
  // Both the result's own backward and the backward function, into poisoned buffers.
  using grads = c.backward(dOutput, dFinalState);
  expectClose(grads.dq, g.dq, t.dqkv, `dq (${what})`);
  expectClose(grads.dk, g.dk, t.dqkv, `dk (${what})`);
  expectClose(grads.dv, g.dv, t.dqkv, `dv (${what})`);
  if (c.gk) expectClose(grads.dgk!, g.dgk, t.dgate, `dgk (${what})`);
  else assert.equal(grads.dgk, undefined);
  if (c.g) expectClose(grads.dg!, g.dg, t.dgate, `dg (${what})`);
  else assert.equal(grads.dg, undefined);
  if (!c.gGamma) {
    assert.equal(grads.dgGamma, undefined);
  } else if (spec.dtype === "float32") {
    expectClose(grads.dgGamma!, g.dgGamma, t.dgate, `dgGamma (${what})`);
  } else {
    // A sum over every token of gradients that largely cancel: bounded by the scale of its terms.
    const scale = c.dgGammaScale(dOutput, dFinalState);
    const ours = host(grads.dgGamma!);
    for (let h = 0; h < spec.H; h++) {
      const err = Math.abs(ours[h] - g.dgGamma[h]);
      assert.ok(
        err <= t.dgate * scale[h],
        `dgGamma[${h}] ${ours[h]} vs ${g.dgGamma[h]} (bound ${t.dgate * scale[h]}; ${what})`,
      );
    }
  }
  if (c.initialState) expectClose(grads.dInitialState!, g.dInitialState, t.dsmall, `dInitialState (${what})`);
  using own = r.backward(dOutput, { dFinalState });
  expectClose(own.dq, g.dq, t.dqkv, `result.backward dq (${what})`);
  expectClose(own.dv, g.dv, t.dqkv, `result.backward dv (${what})`);
  if (spec.cuSeqlens) {
    // Tokens past the last sequence: gradients exactly zero.
    const past = (a: Float64Array, size: number) => a.slice(end * size);
    for (const [name, x, size] of [["dq", grads.dq, c.HK * spec.K], ["dv", grads.dv, outRow]] as const) {
      assert.ok(past(host(x), size).every((e) => e === 0), `${name} past the last sequence (${what})`);
    }
  }
}

/** A fixed seed for a case that only checks which path ran. */
const seed0 = (spec: GlaSpec) => spec.T * 31 + spec.V;

const FNS = ["chunkGla", "recurrentGla", "chunkSimpleGla", "chunkRetention", "chunkLinearAttn"] as const;

specsTest(
  "gla functions: forward and backward match the float64 oracle (fp32/bf16/fp16)",
  checkCase,
  everyDtypeAndFn(FNS, { B: 2, T: 70, H: 4, HK: 2, K: 32, V: 48 }),
);

specsTest("gla functions: simple GLA with g, gGamma or both; linear attention normalised", checkCase, [
  { fn: "chunkSimpleGla", B: 1, T: 90, H: 3, K: 32, V: 32, dtype: "float32", gGamma: true, g: false },
  { fn: "chunkSimpleGla", B: 2, T: 66, H: 2, K: 16, V: 24, dtype: "float32", gGamma: true },
  { fn: "chunkSimpleGla", B: 1, T: 100, H: 2, HK: 1, K: 32, V: 16, dtype: "bfloat16", gGamma: true },
  { fn: "chunkSimpleGla", B: 1, T: 40, H: 2, K: 16, V: 16, dtype: "float32", g: false, scale: 0.7 },
  { fn: "chunkLinearAttn", B: 2, T: 75, H: 2, K: 32, V: 32, dtype: "float32", normalize: true },
  { fn: "chunkLinearAttn", B: 1, T: 70, H: 4, HK: 2, K: 16, V: 8, dtype: "bfloat16", normalize: true },
  { fn: "chunkLinearAttn", B: 1, T: 50, H: 2, K: 16, V: 16, dtype: "float32", normalize: false },
]);

deviceTest(
  "gla functions: linear attention normalised over ones columns (float16 queries scaled, value pieces)",
  async (device) => {
    // On CUDA the split kernel divides only at bfloat16, K = V = 128: these run the chunk kernels over
    // [v | 1 | 1 | 0 ...] (V above 248 in two pieces), forward and backward.
    const specs: GlaSpec[] = [
      { fn: "chunkLinearAttn", B: 1, T: 200, H: 2, K: 64, V: 64, dtype: "float16", normalize: true },
      {
        fn: "chunkLinearAttn",
        B: 1,
        T: 220,
        H: 4,
        HK: 2,
        K: 64,
        V: 40,
        dtype: "bfloat16",
        normalize: true,
        cuSeqlens: [0, 1, 1, 130, 200],
      },
      { fn: "chunkLinearAttn", B: 2, T: 90, H: 1, K: 128, V: 256, dtype: "bfloat16", normalize: true },
    ];
    for (const spec of specs) {
      await withSeed((seed) => checkCase(device, spec, seed));
      if (device !== "cuda") continue;
      using c = new GlaCase(device, spec, seed0(spec));
      using _r = c.forward();
      assert.equal(lastPlan()?.path, "chunked", JSON.stringify(lastPlan()));
    }
  },
);

deviceTest(
  "gla functions: T = 1, T not a multiple of 64, odd heads, GQA, K != V, head dims",
  async (device) => {
    const shapes: Omit<GlaSpec, "fn" | "dtype">[] = [
      { B: 3, T: 1, H: 3, HK: 1, K: 16, V: 16 },
      { B: 1, T: 63, H: 5, K: 40, V: 24 },
      { B: 1, T: 65, H: 3, K: 64, V: 64 },
      { B: 1, T: 129, H: 2, HK: 1, K: 128, V: 32 },
      { B: 1, T: 70, H: 1, K: 256, V: 256 },
      { B: 1, T: 20, H: 2, K: 40, V: 100, initialState: false },
    ];
    for (const [i, shape] of shapes.entries()) {
      const fn = ([
        "chunkGla",
        "chunkSimpleGla",
        "chunkRetention",
        "chunkLinearAttn",
        "chunkGla",
        "recurrentGla",
      ] as const)[i];
      const dtype = (["float32", "bfloat16", "float16", "float32", "bfloat16", "float32"] as const)[i];
      await withSeed((seed) => checkCase(device, { ...shape, fn, dtype }, seed));
    }
  },
);

deviceTest(
  "gla functions: the backward above 128 key columns (on CUDA by pieces of key columns, sums of dv and dg)",
  async (device) => {
    const specs: [GlaSpec, number][] = [
      [{ fn: "chunkGla", B: 2, T: 150, H: 2, K: 256, V: 72, dtype: "bfloat16", spikes: true }, 2],
      [{
        fn: "chunkSimpleGla",
        B: 1,
        T: 200,
        H: 3,
        HK: 1,
        K: 192,
        V: 64,
        dtype: "float16",
        gGamma: true,
        cuSeqlens: [0, 70, 70, 71, 190],
      }, 2],
      [{ fn: "chunkRetention", B: 1, T: 100, H: 2, K: 136, V: 128, dtype: "bfloat16" }, 2],
      [{ fn: "chunkGla", B: 1, T: 65, H: 1, K: 200, V: 32, dtype: "float16", initialState: false }, 2],
    ];
    for (const [spec, pieces] of specs) {
      if (device === "cuda") {
        const { K: k, V: v } = spec;
        const dtype = spec.dtype as "bfloat16" | "float16";
        const plan = explain({ op: "linear.gla.bwd", device, dtype, k, v, channel: spec.fn === "chunkGla" });
        assert.equal(plan.path, "chunked");
        assert.equal(Number(plan.details.key_pieces), pieces, JSON.stringify(spec));
      }
      await withSeed((seed) => checkCase(device, spec, seed));
    }
  },
);

deviceTest(
  "gla functions: linear attention normalised, the backward in one native call (bfloat16, K = V = 128)",
  async (device) => {
    // On CUDA the split kernel recomputes the normalised output and the states, scans give the
    // normaliser's gradient: T past a chunk boundary, grouped heads, packed with empty and one-token
    // sequences, no initial state.
    const specs: GlaSpec[] = [
      { fn: "chunkLinearAttn", B: 2, T: 150, H: 3, K: 128, V: 128, dtype: "bfloat16", normalize: true },
      {
        fn: "chunkLinearAttn",
        B: 1,
        T: 130,
        H: 4,
        HK: 2,
        K: 128,
        V: 128,
        dtype: "bfloat16",
        normalize: true,
      },
      {
        fn: "chunkLinearAttn",
        B: 1,
        T: 200,
        H: 2,
        K: 128,
        V: 128,
        dtype: "bfloat16",
        normalize: true,
        cuSeqlens: [0, 0, 1, 129, 190],
        initialState: false,
      },
    ];
    for (const spec of specs) {
      await withSeed((seed) => checkCase(device, spec, seed));
      if (device !== "cuda") continue;
      using c = new GlaCase(device, spec, seed0(spec));
      using r = c.forward();
      using dO = Tensor.randn(r.output.shape, { dtype: "bfloat16", device });
      using _g = r.backward(dO);
      const plan = lastPlan();
      assert.equal(plan?.op, "linear.gla.bwd", JSON.stringify(plan));
      assert.equal(plan?.details.normaliser, "scans", JSON.stringify(plan));
    }
  },
);

deviceTest("gla functions: packed sequences with empty and one-token sequences", async (device) => {
  const cu = [0, 5, 5, 6, 70, 70, 101];
  for (const fn of FNS) {
    await withSeed((seed) =>
      checkCase(device, {
        fn,
        B: 1,
        T: 110,
        H: 2,
        K: 16,
        V: 24,
        dtype: "float32",
        cuSeqlens: cu,
        normalize: fn === "chunkLinearAttn" ? true : undefined,
        gGamma: fn === "chunkSimpleGla",
      }, seed)
    );
  }
  await withSeed((seed) =>
    checkCase(device, {
      fn: "chunkGla",
      B: 1,
      T: 80,
      H: 3,
      HK: 1,
      K: 32,
      V: 16,
      dtype: "bfloat16",
      cuSeqlens: [0, 1, 80],
    }, seed)
  );
});

specsTest("gla functions: gate spikes of -20, decays near 0 and 16-bit gates", checkCase, [
  { fn: "chunkGla", B: 1, T: 130, H: 2, K: 32, V: 32, dtype: "float32", spikes: true },
  { fn: "recurrentGla", B: 1, T: 70, H: 2, K: 32, V: 16, dtype: "float32", spikes: true },
  { fn: "chunkGla", B: 1, T: 100, H: 2, K: 64, V: 32, dtype: "float32", gateLow: -8 },
  { fn: "chunkSimpleGla", B: 1, T: 130, H: 2, K: 32, V: 32, dtype: "float32", spikes: true },
  { fn: "chunkSimpleGla", B: 1, T: 90, H: 2, K: 16, V: 16, dtype: "bfloat16", gateLow: -6 },
  {
    fn: "chunkGla",
    B: 1,
    T: 70,
    H: 2,
    K: 32,
    V: 32,
    dtype: "bfloat16",
    gateDtype: "bfloat16",
    spikes: true,
  },
  { fn: "chunkSimpleGla", B: 1, T: 70, H: 2, K: 16, V: 16, dtype: "float32", gateDtype: "float16" },
]);
