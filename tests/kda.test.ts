// KDA's functions (chunkKda, recurrentKda and their backward functions) against the float64 oracle on
// fresh random inputs, every result written into NaN-poisoned buffers first: output, final state and
// every gradient (dq, dk, dv, dgate, dbeta, dInitialState), across dtypes and edge shapes (T = 1, T
// around 64, odd heads, grouped heads, K != V, packed with empty and one-token sequences and a fixed
// capacity, gate spikes near -5 and -20); chunked == recurrent; two chained calls == one; the "vk"
// state layout == "kv" transposed; "bhsd" == "bshd"; empty calls; refusals.
//
// Tolerance rule (relative RMS, tests/kda_fixtures.ts): float32 5e-5 (output, states), 8e-5 (dq, dk,
// dv), 2e-4 (dgate, dbeta, dInitialState); float16/bfloat16 0.005, 0.008, 0.02 (dgate 0.08), relative
// to the RMS of the expected values. Two paths on the same inputs agree within 1e-5 (float32) or
// 0.004 (16 bits).
import assert from "node:assert/strict";
import {
  AttnkitError,
  chunkKda,
  chunkKdaBackward,
  type Device,
  explain,
  lastPlan,
  recurrentKda,
  Tensor,
} from "../mod.ts";
import { deviceTest, specsTest, withSeed } from "./helpers.ts";
import {
  expectAgree,
  expectClose,
  host,
  KdaCase,
  type KdaSpec,
  leadingRows,
  pathTolerance,
  swapLast,
  tol,
} from "./kda_fixtures.ts";
import { everyDtypeAndFn } from "./linear_case.ts";

/**
 * On CUDA, the path the planner promises for the call just made ran (chunked for 16-bit, K <= 128,
 * dims of 8).
 */
function expectPlannedPath(
  device: Device,
  op: "linear.kda.fwd" | "linear.kda.bwd",
  spec: KdaSpec,
  message: string,
): void {
  if (device !== "cuda") return;
  const dtype = spec.dtype as "float32" | "float16" | "bfloat16";
  const promised = explain({
    op,
    device: "cuda",
    dtype,
    k: spec.K,
    v: spec.V,
    recurrent: spec.fn === "recurrentKda",
  });
  assert.equal(lastPlan()?.path, promised.path, message);
}

/** Forward and backward of one case against the oracle. */
function checkCase(device: Device, spec: KdaSpec, seed: number): void {
  using c = new KdaCase(device, spec, seed);
  const t = tol(spec.dtype);
  const what = JSON.stringify(spec);
  const ref = c.reference();
  const end = spec.cuSeqlens ? spec.cuSeqlens[spec.cuSeqlens.length - 1] : spec.T;
  const outRow = spec.H * spec.V;
  using r = c.forward();
  if (end < spec.T || spec.cuSeqlens) {
    expectClose(
      leadingRows(host(r.output), end, outRow),
      leadingRows(ref.output, end, outRow),
      t.output,
      `output (${what})`,
    );
    // Fixed capacity: rows past the last offset are left untouched (still the poison).
    assert.ok(
      host(r.output).slice(end * outRow).every(Number.isNaN),
      `output rows past ${end} untouched (${what})`,
    );
  } else {
    expectClose(r.output, ref.output, t.output, `output (${what})`);
  }
  expectClose(host(r.finalState!), c.fromKv(ref.finalState), t.state, `final state (${what})`);
  expectPlannedPath(device, "linear.kda.fwd", spec, `the planned path ran (${what})`);

  const { dOutput, dFinalState } = c.cotangents(seed);
  const g = c.referenceBackward(dOutput, dFinalState);
  using grads = c.backward(dOutput, dFinalState);
  expectPlannedPath(device, "linear.kda.bwd", spec, `the planned backward path ran (${what})`);
  expectClose(grads.dq, g.dq, t.dqkv, `dq (${what})`);
  expectClose(grads.dk, g.dk, t.dqkv, `dk (${what})`);
  expectClose(grads.dv, g.dv, t.dqkv, `dv (${what})`);
  expectClose(grads.dgate, g.dgate, t.dgate, `dgate (${what})`);
  expectClose(grads.dbeta, g.dbeta, t.dsmall, `dbeta (${what})`);
  assert.equal(grads.dgate.dtype, "float32");
  assert.equal(grads.dbeta.dtype, "float32");
  if (c.initialState) {
    expectClose(host(grads.dInitialState!), c.fromKv(g.dInitialState), t.dsmall, `dInitialState (${what})`);
  } else {
    assert.equal(grads.dInitialState, undefined);
  }
  using own = r.backward(dOutput, { dFinalState });
  expectClose(own.dq, g.dq, t.dqkv, `result.backward dq (${what})`);
  expectClose(own.dgate, g.dgate, t.dgate, `result.backward dgate (${what})`);
  if (end < spec.T) {
    const past = (a: Float64Array, size: number) => a.slice(end * size);
    const rows: [string, Tensor, number][] = [
      ["dq", grads.dq, c.HK * spec.K],
      ["dk", grads.dk, c.HK * spec.K],
      ["dv", grads.dv, outRow],
      ["dgate", grads.dgate, spec.H * spec.K],
      ["dbeta", grads.dbeta, spec.H],
    ];
    for (const [name, x, size] of rows) {
      assert.ok(
        past(host(x), size).every((e) => e === 0),
        `${name} past the last sequence is zero (${what})`,
      );
    }
  }
}

// Two [B, T1, ...] and [B, T2, ...] tensors joined along the tokens, on the host.
function joinTokens(a: Tensor, b: Tensor): Float64Array {
  const B = a.shape[0], rowA = a.numel / B, rowB = b.numel / B;
  const [x, y] = [host(a), host(b)];
  const out = new Float64Array(a.numel + b.numel);
  for (let i = 0; i < B; i++) {
    out.set(x.subarray(i * rowA, (i + 1) * rowA), i * (rowA + rowB));
    out.set(y.subarray(i * rowB, (i + 1) * rowB), i * (rowA + rowB) + rowA);
  }
  return out;
}

const FNS = ["chunkKda", "recurrentKda"] as const;

specsTest(
  "kda: forward and backward match the float64 oracle (fp32/bf16/fp16, GQA, K != V)",
  checkCase,
  everyDtypeAndFn(FNS, { B: 2, T: 70, H: 4, HK: 2, K: 32, V: 24 }),
);

specsTest("kda: T = 1, T around 64, odd heads, head dims, no initial state, scale, 16-bit gates", checkCase, [
  { fn: "chunkKda", B: 3, T: 1, H: 3, HK: 1, K: 16, V: 16, dtype: "float32" },
  { fn: "chunkKda", B: 1, T: 63, H: 5, K: 40, V: 24, dtype: "bfloat16" },
  { fn: "recurrentKda", B: 1, T: 65, H: 3, K: 64, V: 8, dtype: "float32", initialState: false },
  { fn: "chunkKda", B: 1, T: 129, H: 2, HK: 1, K: 128, V: 16, dtype: "float16", scale: 0.3 },
  { fn: "chunkKda", B: 2, T: 20, H: 2, K: 7, V: 5, dtype: "float32", gateDtype: "bfloat16" },
]);

specsTest("kda: packed sequences with empty and 1-token sequences, and a fixed capacity", checkCase, [
  // Terminal offset 70 below T = 80: rows past it untouched, their gradients zero.
  {
    fn: "chunkKda",
    B: 1,
    T: 80,
    H: 2,
    HK: 1,
    K: 16,
    V: 8,
    dtype: "float32",
    cuSeqlens: [0, 0, 1, 1, 40, 41, 70],
  },
  { fn: "recurrentKda", B: 1, T: 90, H: 3, K: 8, V: 16, dtype: "bfloat16", cuSeqlens: [0, 65, 66, 90] },
  // Every sequence empty: states pass through, nothing is written, every gradient is zero.
  { fn: "chunkKda", B: 1, T: 5, H: 1, K: 4, V: 4, dtype: "float32", cuSeqlens: [0, 0, 0] },
]);

specsTest("kda: gate spikes near -5 and -20, and gates near the documented bound", checkCase, [
  { fn: "chunkKda", B: 1, T: 100, H: 2, K: 32, V: 16, dtype: "float32", gateLow: -5, spike: -20 },
  { fn: "chunkKda", B: 1, T: 70, H: 2, K: 16, V: 16, dtype: "bfloat16", gateLow: -5.9, spike: -5 },
  { fn: "recurrentKda", B: 2, T: 40, H: 1, K: 16, V: 8, dtype: "float16", gateLow: -0.05, spike: -20 },
]);

specsTest(
  "kda: the chunked kernel's shapes (16-bit, K 64 and 128, V tiles, packed, GQA, spikes)",
  checkCase,
  [
    // Packed: a 1-token and an empty sequence, chunk tails, 10 rows of capacity past the last offset.
    {
      fn: "chunkKda",
      B: 1,
      T: 200,
      H: 2,
      K: 128,
      V: 128,
      dtype: "bfloat16",
      gateLow: -5,
      spike: -20,
      cuSeqlens: [0, 1, 1, 64, 130, 190],
    },
    // Grouped heads 1 -> 4, V = 72 (a partial second tile), a state in the seed's [V, K] layout.
    { fn: "chunkKda", B: 2, T: 130, H: 4, HK: 1, K: 64, V: 72, dtype: "float16", stateLayout: "vk" },
    {
      fn: "chunkKda",
      B: 1,
      T: 64,
      H: 1,
      K: 128,
      V: 64,
      dtype: "bfloat16",
      gateLow: -5.9,
      initialState: false,
    },
  ],
);

deviceTest('kda: stateLayout "vk" matches the oracle and equals "kv" transposed', async (device) => {
  await withSeed((seed) => {
    const base = { fn: "chunkKda", B: 2, T: 30, H: 2, K: 8, V: 12, dtype: "float32" } as const;
    checkCase(device, { ...base, stateLayout: "vk" }, seed);
    using kv = new KdaCase(device, base, seed);
    using vk = new KdaCase(device, { ...base, stateLayout: "vk" }, seed);
    // The same inputs apart from the initial state: give vk kv's, transposed.
    using h0 = kv.initialState!.transpose(2, 3);
    using a = chunkKda(kv.q, kv.k, kv.v, kv.gate, kv.beta, { ...kv.options(), outputFinalState: true });
    using b = chunkKda(vk.q, vk.k, vk.v, vk.gate, vk.beta, {
      ...vk.options(),
      initialState: h0,
      outputFinalState: true,
    });
    expectAgree(b.output, host(a.output), 1e-6, "output");
    const { N, spec: { H, K, V } } = kv;
    expectAgree(b.finalState!, swapLast(host(a.finalState!), N, H, K, V), 1e-6, "final state [N, H, V, K]");
    using dO = Tensor.randn(a.output.shape, { device, seed: seed + 20 });
    using dHT = Tensor.randn([N, H, K, V], { device, seed: seed + 21 });
    using dHTvk = dHT.transpose(2, 3);
    using ga = a.backward(dO, { dFinalState: dHT });
    using gb = b.backward(dO, { dFinalState: dHTvk });
    expectAgree(gb.dInitialState!, swapLast(host(ga.dInitialState!), N, H, K, V), 1e-6, "dInitialState");
    expectAgree(gb.dgate, host(ga.dgate), 1e-6, "dgate");
  });
});

deviceTest('kda: chunked equals recurrent; "bhsd" equals "bshd"', async (device) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    await withSeed((seed) => {
      using c = new KdaCase(device, { fn: "chunkKda", B: 2, T: 77, H: 4, HK: 2, K: 16, V: 8, dtype }, seed);
      const o = { ...c.options(), outputFinalState: true };
      using a = chunkKda(c.q, c.k, c.v, c.gate, c.beta, o);
      using b = recurrentKda(c.q, c.k, c.v, c.gate, c.beta, o);
      const tolerance = pathTolerance(dtype);
      // A 16-bit chunked forward on CUDA is the kernel, whose products round their operands to the
      // inputs' type: the two forwards agree within the oracle's tolerance, which each is held to.
      const t = tol(dtype);
      const forward = dtype === "float32" ? { output: tolerance, state: tolerance } : t;
      expectAgree(b.output, host(a.output), forward.output, "recurrent output");
      expectAgree(b.finalState!, host(a.finalState!), forward.state, "recurrent final state");
      using dO = Tensor.randn(a.output.shape, { dtype, device, seed: seed + 30 });
      using ga = a.backward(dO);
      using gb = b.backward(dO);
      // Likewise the 16-bit chunked backward (the kernels) against the exact one.
      const grad = {
        dq: t.dqkv,
        dk: t.dqkv,
        dv: t.dqkv,
        dgate: t.dgate,
        dbeta: t.dsmall,
        dInitialState: t.dsmall,
      };
      for (const name of ["dq", "dk", "dv", "dgate", "dbeta", "dInitialState"] as const) {
        expectAgree(
          gb[name]!,
          host(ga[name]!),
          dtype === "float32" ? tolerance : grad[name],
          `recurrent ${name}`,
        );
      }
      // The same call on head-major copies.
      const bhsd = (t: Tensor) => c.own(t.ndim === 4 ? t.permute([0, 2, 1, 3]) : t.permute([0, 2, 1]));
      using h = chunkKda(bhsd(c.q), bhsd(c.k), bhsd(c.v), bhsd(c.gate), bhsd(c.beta), {
        ...o,
        layout: "bhsd",
      });
      using hOut = h.output.permute([0, 2, 1, 3]);
      expectAgree(hOut, host(a.output), tolerance, "bhsd output");
      using gh = h.backward(bhsd(dO));
      using ghGate = gh.dgate.permute([0, 2, 1, 3]);
      using ghBeta = gh.dbeta.permute([0, 2, 1]);
      expectAgree(ghGate, host(ga.dgate), tolerance, "bhsd dgate");
      expectAgree(ghBeta, host(ga.dbeta), tolerance, "bhsd dbeta");
    });
  }
});

deviceTest("kda: two chained calls equal one (forward, and backward through the state)", async (device) => {
  await withSeed((seed) => {
    const T = 90, cut = 37;
    using c = new KdaCase(device, { fn: "chunkKda", B: 2, T, H: 2, K: 16, V: 8, dtype: "float32" }, seed);
    const o = { ...c.options(), outputFinalState: true };
    using whole = chunkKda(c.q, c.k, c.v, c.gate, c.beta, o);
    const part = (t: Tensor, a: number, b: number) => c.own(t.slice(1, a, b));
    const args = (a: number, b: number) =>
      [part(c.q, a, b), part(c.k, a, b), part(c.v, a, b), part(c.gate, a, b), part(c.beta, a, b)] as const;
    using first = chunkKda(...args(0, cut), o);
    using second = chunkKda(...args(cut, T), { ...o, initialState: first.finalState });
    expectAgree(joinTokens(first.output, second.output), host(whole.output), 1e-5, "output of two calls");
    expectAgree(second.finalState!, host(whole.finalState!), 1e-5, "final state of two calls");
    using dO = Tensor.randn(whole.output.shape, { device, seed: seed + 40 });
    using dHT = Tensor.randn(whole.finalState!.shape, { device, seed: seed + 41 });
    using gw = whole.backward(dO, { dFinalState: dHT });
    using g2 = second.backward(part(dO, cut, T), { dFinalState: dHT });
    using g1 = first.backward(part(dO, 0, cut), { dFinalState: g2.dInitialState });
    for (const name of ["dq", "dgate", "dbeta"] as const) {
      expectAgree(joinTokens(g1[name], g2[name]), host(gw[name]), 1e-5, `${name} of two calls`);
    }
    expectAgree(g1.dInitialState!, host(gw.dInitialState!), 1e-5, "dInitialState of two calls");
  });
});

deviceTest("kda: empty calls (T = 0, B = 0) pass states through", (device) => {
  using q = Tensor.zeros([2, 0, 2, 8], { device });
  using v = Tensor.zeros([2, 0, 2, 4], { device });
  using gate = Tensor.zeros([2, 0, 2, 8], { device });
  using beta = Tensor.zeros([2, 0, 2], { device });
  using h0 = Tensor.randn([2, 2, 4, 8], { device, seed: 1 });
  const o = { layout: "bshd", initialState: h0, stateLayout: "vk", outputFinalState: true } as const;
  using r = chunkKda(q, q, v, gate, beta, o);
  assert.deepEqual(r.output.shape, [2, 0, 2, 4]);
  assert.deepEqual(host(r.finalState!), host(h0));
  using dHT = Tensor.randn([2, 2, 4, 8], { device, seed: 2 });
  using g = r.backward(v, { dFinalState: dHT });
  assert.deepEqual(host(g.dInitialState!), host(dHT));
  assert.deepEqual(g.dgate.shape, [2, 0, 2, 8]);
  using q0 = Tensor.zeros([0, 5, 1, 8], { device });
  using v0 = Tensor.zeros([0, 5, 1, 4], { device });
  using gate0 = Tensor.zeros([0, 5, 1, 8], { device });
  using beta0 = Tensor.zeros([0, 5, 1], { device });
  using e = recurrentKda(q0, q0, v0, gate0, beta0, { layout: "bshd", outputFinalState: true });
  assert.deepEqual(e.finalState!.shape, [0, 1, 8, 4]);
});

deviceTest(
  'kda: impl "reference" runs the exact path, "fused" the kernels or an error naming why',
  async (device) => {
    await withSeed((seed) => {
      const spec: KdaSpec = { fn: "chunkKda", B: 1, T: 70, H: 2, K: 64, V: 64, dtype: "bfloat16" };
      using c = new KdaCase(device, spec, seed);
      const t = tol("bfloat16");
      const ref = c.reference();
      using exact = c.forward({ impl: "reference" });
      expectClose(exact.output, ref.output, t.output, "impl reference output");
      if (device === "cuda") assert.equal(lastPlan()?.path, "general");
      using dO = Tensor.randn(exact.output.shape, { dtype: "bfloat16", device, seed: seed + 40 });
      const g = c.referenceBackward(dO);
      using exactGrads = exact.backward(dO);
      expectClose(exactGrads.dq, g.dq, t.dqkv, "impl reference dq (the result's backward keeps impl)");
      if (device === "cuda") assert.equal(lastPlan()?.path, "general");
      const refused = (f: () => unknown, pattern: RegExp) =>
        assert.throws(f, (e) => e instanceof AttnkitError && pattern.test(e.message), String(pattern));
      if (device === "cpu") {
        // The CPU backend is the reference: nothing fused to run, whatever the sizes.
        refused(() => c.forward({ impl: "fused" }), /impl 'fused': the CPU has no fused kernel/);
        return;
      }
      using fused = c.forward({ impl: "fused" });
      assert.equal(lastPlan()?.path, "chunked");
      expectClose(fused.output, ref.output, t.output, "impl fused output");
      using fusedGrads = fused.backward(dO);
      assert.equal(lastPlan()?.path, "chunked");
      expectClose(fusedGrads.dgate, g.dgate, t.dgate, "impl fused dgate");
      // Calls the kernels cannot serve are refused with the planner's reason, never run elsewhere.
      using f32 = new KdaCase(device, { ...spec, dtype: "float32" }, seed);
      refused(() => f32.forward({ impl: "fused" }), /no fused kernel serves this call: float32 inputs/);
      using rec = new KdaCase(device, { ...spec, fn: "recurrentKda" }, seed);
      refused(() => rec.forward({ impl: "fused" }), /no fused kernel serves this call: the token-by-token/);
    });
  },
);

deviceTest("kda: bad calls are refused naming the argument", (device) => {
  using q = Tensor.randn([1, 6, 2, 8], { device });
  using v = Tensor.randn([1, 6, 2, 4], { device });
  using gate = Tensor.rand([1, 6, 2, 8], { device, low: -1, high: 0 });
  using beta = Tensor.rand([1, 6, 2], { device });
  using gateBad = Tensor.rand([1, 6, 2, 4], { device });
  using h0 = Tensor.randn([1, 2, 8, 4], { device });
  const refused = (f: () => unknown, pattern: RegExp) =>
    assert.throws(f, (e) => e instanceof AttnkitError && pattern.test(e.message), String(pattern));
  refused(() => chunkKda(q, q, v, gateBad, beta, { layout: "bshd" }), /gate/);
  refused(() => chunkKda(q, q, v, gate, gate, { layout: "bshd" }), /beta/);
  refused(() => chunkKda(q, q, v, gate, beta, { layout: "bshd", stateLayout: "hv" as "kv" }), /stateLayout/);
  refused(
    () => chunkKda(q, q, v, gate, beta, { layout: "bshd", initialState: h0, stateLayout: "vk" }),
    /initialState.*vk/,
  );
  refused(
    () => chunkKda(q, q, v, gate, beta, { layout: "bshd", fastmath: 1 as unknown as boolean }),
    /fastmath/,
  );
  refused(() => chunkKda(q, q, v, gate, beta, { layout: "bshd", chunkSize: 64 } as never), /chunkSize/);
  refused(() => chunkKda(q, q, v, gate, beta, { layout: "bshd", impl: "fast" as "fused" }), /impl/);
  refused(() => chunkKda(q, q, v, gate, beta, {} as never), /layout/);
  refused(() => chunkKda(q, q, v, gate, beta, { layout: "bshd", cuSeqlens: [0, 7] }), /cu_?seqlens/i);
  // A backward with another state layout than its forward on the same inputs.
  using r = chunkKda(q, q, v, gate, beta, { layout: "bshd", initialState: h0 });
  refused(
    () => chunkKdaBackward(v, q, q, v, gate, beta, { layout: "bshd", initialState: h0, stateLayout: "vk" }),
    /stateLayout/,
  );
  refused(() => chunkKdaBackward(v, q, q, v, gate, beta, { layout: "bshd" }), /initialState/);
  // fastmath is accepted and changes nothing on the exact paths.
  using f = chunkKda(q, q, v, gate, beta, { layout: "bshd", initialState: h0, fastmath: true });
  assert.deepEqual(host(f.output), host(r.output));
});
