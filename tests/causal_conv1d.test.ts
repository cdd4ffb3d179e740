// The causal depthwise convolution (causalConv1d, causalConv1dBackward, the result's backward)
// against the float64 oracle (reference/causal_conv1d.ts), whose hand-derived backward is checked
// here against finite differences first. Fresh random inputs; every result is written into a
// NaN-poisoned buffer (`out`), so an element left unwritten fails. Widths 1..4 and 8, silu or none,
// dense and packed (empty and one-token sequences, a last offset below T), initial and final
// histories, three dtypes with float32 or 16-bit weights, odd channel counts, empty calls, errors.
//
// Tolerance rule (relative RMS error against the oracle fed the same rounded inputs): every sum is
// float32 and each result is rounded once to its dtype, so float32 results hold 1e-5 (at most a
// few hundred float32 additions), and 16-bit results the rounding of one store: bfloat16 4e-3
// (2^-9 relative at most), float16 5e-4 (2^-12). The final history copies inputs: exact.
import assert from "node:assert/strict";
import {
  causalConv1d,
  causalConv1dBackward,
  type CausalConv1dOptions,
  compare,
  type Device,
  type DType,
  Tensor,
} from "../mod.ts";
import {
  causalConv1dReference,
  causalConv1dReferenceBackward,
  type CausalConv1dReferenceInputs,
} from "../reference/causal_conv1d.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { expectFiniteDifferences, filled, generator } from "./oracle_checks.ts";

type FloatDType = "float32" | "bfloat16" | "float16";
const TOL: Record<FloatDType, number> = { float32: 1e-5, bfloat16: 4e-3, float16: 5e-4 };

const host = (t: Tensor) => Float64Array.from(t.toArray() as ArrayLike<number>);

// ---- the oracle on its own ----

Deno.test("causal conv1d oracle: a hand-computed case (width 3, history, packed)", () => {
  // Sequences [1, 2] and [3] with histories [10, 20] and [30, 40]; weight [a, b, c] = [1, 0.1, 0.01]:
  // y[p] = e[p] + 0.1 e[p + 1] + 0.01 e[p + 2] over the extended inputs.
  const r = causalConv1dReference({
    B: 1,
    T: 4,
    C: 1,
    W: 3,
    x: [1, 2, 3, 99],
    weight: [1, 0.1, 0.01],
    cuSeqlens: [0, 2, 3],
    initialState: [10, 20, 30, 40],
  });
  const close = (a: ArrayLike<number>, b: number[]) =>
    b.forEach((v, i) => assert.ok(Math.abs(a[i] - v) < 1e-12));
  close(r.output, [10 + 2 + 0.01, 20 + 0.1 + 0.02, 30 + 4 + 0.03, 0]);
  close(r.finalState, [1, 2, 40, 3]);
});

Deno.test("causal conv1d oracle: the backward equals finite differences", () => {
  const rand = generator(20240611);
  const problems: (Omit<CausalConv1dReferenceInputs, "x" | "weight" | "initialState"> & { h0: boolean })[] = [
    { B: 2, T: 5, C: 2, W: 1, h0: false },
    { B: 2, T: 5, C: 2, W: 2, h0: true, activation: "silu" },
    { B: 1, T: 9, C: 3, W: 3, h0: true, cuSeqlens: [0, 2, 2, 3, 7] },
    { B: 1, T: 8, C: 2, W: 4, h0: true, activation: "silu", cuSeqlens: [0, 1, 6, 6, 8] },
    { B: 1, T: 3, C: 1, W: 4, h0: false, activation: "swish", cuSeqlens: [0, 0, 3] },
  ];
  for (const { h0, ...shape } of problems) {
    const { B, T, C, W } = shape;
    const N = shape.cuSeqlens ? shape.cuSeqlens.length - 1 : B;
    const x = filled(B * T * C, rand, -2, 2), weight = filled(C * W, rand, -1, 1);
    const initialState = filled(N * (W - 1) * C, rand, -2, 2);
    const p: CausalConv1dReferenceInputs = {
      ...shape,
      x,
      weight,
      initialState: h0 ? initialState : undefined,
    };
    const dO = filled(B * T * C, rand, -1, 1), dF = filled(N * (W - 1) * C, rand, -1, 1);
    const loss = () => {
      const r = causalConv1dReference(p);
      let s = 0;
      r.output.forEach((v, i) => (s += v * dO[i]));
      r.finalState.forEach((v, i) => (s += v * dF[i]));
      return s;
    };
    const g = causalConv1dReferenceBackward(p, dO, dF);
    const what = JSON.stringify(shape);
    const check = { eps: 1e-6, tol: 1e-7, what };
    expectFiniteDifferences(x, g.dx, loss, { ...check, input: "x" });
    expectFiniteDifferences(weight, g.dweight, loss, { ...check, input: "weight" });
    if (h0 && W > 1) {
      expectFiniteDifferences(initialState, g.dInitialState, loss, { ...check, input: "initialState" });
    }
  }
});

// ---- the op against the oracle ----

interface Spec {
  B: number;
  T: number;
  C: number;
  W: number;
  dtype: FloatDType;
  weightDType: DType;
  silu?: boolean;
  cuSeqlens?: number[];
  h0?: boolean;
}

/** Runs the forward and both backwards into poisoned buffers and checks everything against the oracle. */
function checkCase(device: Device, s: Spec, seed: number): void {
  const { B, T, C, W, dtype } = s;
  const N = s.cuSeqlens ? s.cuSeqlens.length - 1 : B;
  const end = s.cuSeqlens ? s.cuSeqlens[N] : B * T; // active rows
  const make = (shape: number[], n: number, std = 1, type: DType = dtype) => {
    using f = Tensor.randn(shape, { device, seed: seed + n, std });
    return f.cast(type);
  };
  using x = make([B, T, C], 1);
  using weight = make([C, W], 2, 0.5, s.weightDType);
  using h0 = s.h0 ? make([N, W - 1, C], 3) : undefined;
  using dOutput = make([B, T, C], 4);
  using dFinal = make([N, W - 1, C], 5);
  const poisoned = (shape: readonly number[], type: DType = dtype) =>
    Tensor.empty(shape, { dtype: type, device }).fill(NaN);
  using output = poisoned([B, T, C]);
  using finalState = poisoned([N, W - 1, C]);
  const options: CausalConv1dOptions = {
    activation: s.silu ? "silu" : undefined,
    cuSeqlens: s.cuSeqlens,
    initialState: h0,
  };
  const p: CausalConv1dReferenceInputs = {
    B,
    T,
    C,
    W,
    x: host(x),
    weight: host(weight),
    activation: options.activation,
    cuSeqlens: s.cuSeqlens,
    initialState: h0 ? host(h0) : undefined,
  };
  const what = JSON.stringify(s);
  const ref = causalConv1dReference(p);
  using r = causalConv1d(x, weight, { ...options, out: { output, finalState } });
  assert.equal(r.output, output);
  const out = host(output);
  expectRel(out.subarray(0, end * C), ref.output.subarray(0, end * C), TOL[dtype], `output (${what})`);
  // Rows past the last offset are left as they were.
  assert.ok(out.subarray(end * C).every(Number.isNaN), `output rows past ${end} were written (${what})`);
  assert.deepEqual(Array.from(host(finalState)), Array.from(ref.finalState), `final state (${what})`);

  const g = causalConv1dReferenceBackward(p, host(dOutput), host(dFinal));
  const dweightDType: DType = seed % 2 === 0 ? "float32" : s.weightDType;
  const buffers = () => ({
    dx: poisoned([B, T, C]),
    dweight: poisoned([C, W], dweightDType),
    dInitialState: h0 ? poisoned([N, W - 1, C]) : undefined,
  });
  const first = buffers(), second = buffers();
  try {
    using a = r.backward(dOutput, { dFinalState: dFinal, out: first });
    using b = causalConv1dBackward(dOutput, x, weight, { ...options, dFinalState: dFinal, out: second });
    expectRel(host(a.dx), g.dx, TOL[dtype], `dx (${what})`);
    const dwTol = dweightDType === "float32" ? TOL.float32 : TOL[dweightDType as FloatDType];
    expectRel(host(a.dweight), g.dweight, dwTol, `dweight (${what})`);
    if (h0) expectRel(host(a.dInitialState!), g.dInitialState, TOL[dtype], `dInitialState (${what})`);
    else assert.equal(a.dInitialState, undefined);
    // The same call twice: the same bits (the weight gradient's reduction has a fixed order).
    for (const k of ["dx", "dweight", "dInitialState"] as const) {
      if (a[k] === undefined) continue;
      assert.deepEqual(
        host(b[k]!),
        host(a[k]!),
        `${k}: result.backward and causalConv1dBackward differ (${what})`,
      );
    }
  } finally {
    for (const t of [...Object.values(first), ...Object.values(second)]) t?.dispose();
  }
}

function expectRel(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what: string): void {
  const c = compare(actual, expected);
  assert.equal(c.nanCount, 0, `${what}: ${c.nanCount} NaN`);
  assert.equal(c.nonFiniteMismatches, 0, `${what}: non-finite values`);
  assert.ok(c.relRms <= tol, `${what}: relative RMS error ${c.relRms.toExponential(3)} exceeds ${tol}`);
}

const WIDTHS = [1, 2, 3, 4, 8];

deviceTest(
  "causalConv1d: dense, every width, silu or none, with and without history",
  (device) =>
    withSeed((seed) => {
      let n = 0;
      for (const W of WIDTHS) {
        for (const silu of [false, true]) {
          const h0 = (W + Number(silu)) % 2 === 0;
          checkCase(
            device,
            { B: 2, T: 13, C: 37, W, dtype: "float32", weightDType: "float32", silu, h0 },
            seed + n++,
          );
        }
      }
    }),
);

deviceTest(
  "causalConv1d: packed sequences (empty, one token, shorter than the width, fixed capacity)",
  (device) =>
    withSeed((seed) => {
      const layouts = [
        [0, 1, 1, 4, 9, 20], // one token, empty, 3, 5, 11 tokens
        [0, 0, 2, 2, 17], // empty first, a trailing capacity of 4 rows
        [0, 0, 0], // nothing active: every output row untouched, dx all zero
        [0, 21], // one sequence filling the row
      ];
      let n = 0;
      for (const cu of layouts) {
        for (const W of [2, 3, 4]) {
          for (const h0 of [false, true]) {
            const silu = (n & 1) === 1;
            checkCase(
              device,
              { B: 1, T: 21, C: 19, W, dtype: "float32", weightDType: "float32", silu, h0, cuSeqlens: cu },
              seed + n++,
            );
          }
        }
      }
    }),
);

deviceTest("causalConv1d: 16-bit inputs with float32 or 16-bit weights", (device) =>
  withSeed((seed) => {
    let n = 0;
    for (const dtype of ["bfloat16", "float16"] as const) {
      for (const weightDType of ["float32", dtype] as const) {
        for (const W of [2, 4]) {
          checkCase(device, { B: 3, T: 33, C: 64, W, dtype, weightDType, silu: true, h0: true }, seed + n++);
          checkCase(
            device,
            {
              B: 1,
              T: 40,
              C: 24,
              W,
              dtype,
              weightDType,
              silu: false,
              h0: true,
              cuSeqlens: [0, 1, 1, 17, 35],
            },
            seed + n++,
          );
        }
      }
    }
  }));

deviceTest(
  "causalConv1d: channels a multiple of 8 (the tiled kernels on CUDA): runs crossing sequences, many blocks",
  (device) =>
    withSeed((seed) => {
      let n = 0;
      for (const W of [1, 2, 3, 4, 5]) {
        for (const dtype of ["float32", "bfloat16"] as const) {
          const silu = (W + n) % 2 === 0;
          // 300 rows: three block rows of 128; 264 channels: a second, partial block of channel groups.
          checkCase(
            device,
            { B: 2, T: 150, C: 264, W, dtype, weightDType: "float32", silu, h0: W % 2 === 1 },
            seed + n++,
          );
          checkCase(
            device,
            {
              B: 1,
              T: 300,
              C: 16,
              W,
              dtype,
              weightDType: dtype,
              silu: !silu,
              h0: W % 2 === 0,
              // one token, empty, sequences across 16-row runs and block rows, 40 rows of capacity
              cuSeqlens: [0, 1, 1, 19, 150, 151, 260],
            },
            seed + n++,
          );
        }
      }
    }),
);

deviceTest(
  "causalConv1d: T = 1, C = 1 and a long row (many parts in the weight gradient)",
  (device) =>
    withSeed((seed) => {
      checkCase(device, {
        B: 4,
        T: 1,
        C: 3,
        W: 4,
        dtype: "float32",
        weightDType: "float32",
        silu: true,
        h0: true,
      }, seed);
      checkCase(
        device,
        { B: 1, T: 7, C: 1, W: 3, dtype: "float32", weightDType: "float32", h0: true },
        seed + 1,
      );
      checkCase(
        device,
        {
          B: 1,
          T: 1500,
          C: 5,
          W: 4,
          dtype: "float32",
          weightDType: "float32",
          silu: true,
          cuSeqlens: [0, 700, 1433],
        },
        seed + 2,
      );
    }),
);

deviceTest("causalConv1d: empty calls", (device) =>
  expectNoLeak(device, () => {
    // No tokens: the history passes through, its gradient is dFinalState's, dweight is zero.
    using x = Tensor.empty([2, 0, 3], { device });
    using w = Tensor.randn([3, 3], { device, seed: 1 });
    using h0 = Tensor.randn([2, 2, 3], { device, seed: 2 });
    using dF = Tensor.randn([2, 2, 3], { device, seed: 3 });
    using r = causalConv1d(x, w, { initialState: h0, returnFinalState: true });
    assert.deepEqual(r.output.shape, [2, 0, 3]);
    assert.deepEqual(r.finalState!.toArray(), h0.toArray());
    using dO = Tensor.empty([2, 0, 3], { device });
    using g = r.backward(dO, { dFinalState: dF });
    assert.deepEqual(g.dInitialState!.toArray(), dF.toArray());
    assert.ok((g.dweight.toArray() as Float32Array).every((v) => v === 0));
    // No channels, no batch rows.
    for (const shape of [[2, 5, 0], [0, 5, 3]]) {
      using xe = Tensor.empty(shape, { device });
      using we = Tensor.empty([shape[2], 4], { device });
      using re = causalConv1d(xe, we, { activation: "silu", returnFinalState: true });
      assert.deepEqual(re.finalState!.shape, [shape[0], 3, shape[2]]);
      using dOe = Tensor.empty(shape, { device });
      using ge = re.backward(dOe);
      assert.deepEqual(ge.dweight.shape, [shape[2], 4]);
      if (shape[2] > 0) assert.ok((ge.dweight.toArray() as Float32Array).every((v) => v === 0));
    }
  }));

// ---- refusals ----

deviceTest("causalConv1d: bad input is refused, naming the argument", (device) => {
  using x = Tensor.randn([1, 6, 4], { device, seed: 1 });
  using w = Tensor.randn([4, 3], { device, seed: 2 });
  const conv = (xx: unknown, ww: unknown, o?: unknown) =>
    causalConv1d(xx as Tensor, ww as Tensor, o as CausalConv1dOptions)[Symbol.dispose]();
  using wide = Tensor.randn([4, 9], { device });
  refuses(() => conv(x, wide), /weight: the width W .* 1\.\.8, got 9/);
  using w16 = Tensor.randn([4, 3], { device, dtype: "float16" });
  refuses(() => conv(x, w16), /weight: expected dtype float32, got float16/);
  using wc = Tensor.randn([5, 3], { device });
  refuses(() => conv(x, wc), /weight: expected shape/);
  using x2 = Tensor.randn([6, 4], { device });
  refuses(() => conv(x2, w), /x: expected shape/);
  refuses(() => conv(x, w, { activation: "relu" }), /options\.activation: expected one of "silu", "swish"/);
  refuses(
    () => conv(x, w, { cu_seqlens: [0, 6] }),
    /unknown option 'cu_seqlens' \(did you mean 'cuSeqlens'\?\)/,
  );
  refuses(() => conv(x, w, { returnFinalState: 1 }), /options\.returnFinalState: expected a boolean/);
  refuses(() => conv(x, w, { cuSeqlens: [0, 4, 2] }), /cu_seqlens: must be nondecreasing/);
  refuses(() => conv(x, w, { cuSeqlens: [0, 7] }), /cu_seqlens: the last offset 7 exceeds/);
  refuses(() => conv(x, w, { cuSeqlens: [0] }), /cuSeqlens: expected at least 2 offsets/);
  using xb = Tensor.randn([2, 6, 4], { device });
  refuses(() => conv(xb, w, { cuSeqlens: [0, 6] }), /x: packed input .* batch size 1, got 2/);
  using h = Tensor.randn([2, 2, 4], { device });
  refuses(
    () => conv(x, w, { initialState: h, cuSeqlens: [0, 2, 4, 6] }),
    /initialState: expected shape \[3, 2, 4\]/,
  );
  using h16 = Tensor.randn([1, 2, 4], { device, dtype: "bfloat16" });
  refuses(() => conv(x, w, { initialState: h16 }), /initialState: expected dtype float32 \(x's\)/);
  using small = Tensor.empty([1, 5, 4], { device });
  refuses(() => conv(x, w, { out: { output: small } }), /out\.output: expected shape/);
  refuses(() => conv(x, w, { out: { output: x } }), /out\.output: must not be one of the inputs/);
  refuses(() => conv(x, w, { out: { dx: x } }), /unknown option 'dx'/);
  using xi = Tensor.zeros([1, 6, 4], { device, dtype: "int32" });
  refuses(() => conv(xi, w), /x: expected dtype float16 \| bfloat16 \| float32/);

  using r = causalConv1d(x, w);
  using dF = Tensor.randn([1, 2, 4], { device });
  refuses(() => r.backward(x, { dFinalState: dF }), /dFinalState: the forward returned no final state/);
  using dO16 = Tensor.randn([1, 6, 4], { device, dtype: "float16" });
  refuses(() => r.backward(dO16), /dOutput: expected dtype float32/);
  using dOs = Tensor.randn([1, 6, 3], { device });
  refuses(() => r.backward(dOs), /dOutput: expected shape/);
  refuses(
    () => causalConv1dBackward(x, x, w, { out: { dInitialState: dF } }),
    /out\.dInitialState: no initialState was given/,
  );
  using wb = Tensor.randn([4, 3], { device, dtype: "bfloat16" });
  using xbf = Tensor.randn([1, 6, 4], { device, dtype: "bfloat16" });
  using dw16 = Tensor.empty([4, 3], { device, dtype: "float16" });
  refuses(
    () => causalConv1dBackward(xbf, xbf, wb, { out: { dweight: dw16 } }),
    /out\.dweight: expected dtype/,
  );

  const gone = Tensor.randn([1, 6, 4], { device });
  using rg = causalConv1d(gone, w);
  gone.dispose();
  refuses(() => rg.backward(x), /x: disposed after the forward/);
});
