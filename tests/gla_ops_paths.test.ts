// The gated linear family against itself and the oracle along other paths: chunked == recurrent,
// one call == two calls chained through the state, "bhsd" == "bshd", decode stepped T times == the
// recurrence, the op classes (GLAFwdOp's chunk states, GLABwdOp reading them), linear attention's
// hand-derived normaliser backward against finite differences, and argument errors.
//
// Tolerances: against the oracle as in tests/gla_ops_fixtures.ts; two code paths on the same inputs
// agree within 1e-5 (float32) or the 16-bit output rounding 0.004 (pathTolerance).
import assert from "node:assert/strict";
import {
  AttnkitError,
  chunkGla,
  chunkGlaBackward,
  chunkLinearAttn,
  chunkRetention,
  chunkSimpleGla,
  GLABwdOp,
  GLADecodeFwdOp,
  GLAFwdOp,
  recurrentGla,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";
import { expectFiniteDifferences, generator } from "./oracle_checks.ts";
import {
  callBackward,
  callForward,
  expectAgree,
  expectClose,
  type Fn,
  GlaCase,
  host,
  pathTolerance,
  tol,
} from "./gla_ops_fixtures.ts";
import { poisoned } from "./linear_fixtures.ts";
import { native, unwrap } from "../ffi/library.ts";
import { GlaFlags } from "../ffi/symbols_linear.ts";

deviceTest("gla paths: chunked equals recurrent, forward and backward", async (device) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    await withSeed((seed) => {
      using c = new GlaCase(
        device,
        { fn: "chunkGla", B: 2, T: 150, H: 2, K: 32, V: 32, dtype, spikes: true },
        seed,
      );
      const o = { ...c.options(), outputFinalState: true };
      using a = chunkGla(c.q, c.k, c.v, c.gk!, o);
      using b = recurrentGla(c.q, c.k, c.v, c.gk!, o);
      const p = pathTolerance(dtype);
      expectAgree(a.output, host(b.output), p, `output ${dtype}`);
      expectAgree(a.finalState!, host(b.finalState!), p, `final state ${dtype}`);
      const { dOutput } = c.cotangents(seed);
      using ga = a.backward(dOutput);
      using gb = b.backward(dOutput);
      for (const name of ["dq", "dk", "dv", "dgk", "dInitialState"] as const) {
        expectAgree(
          ga[name]!,
          host(gb[name]!),
          name === "dgk" || name === "dInitialState" ? 2 * p : p,
          `${name} ${dtype}`,
        );
      }
    });
  }
});

deviceTest("gla paths: one call equals two calls chained through the state", async (device) => {
  const fns: Fn[] = ["chunkGla", "chunkSimpleGla", "chunkRetention", "chunkLinearAttn"];
  for (const fn of fns) {
    await withSeed((seed) => {
      using c = new GlaCase(
        device,
        { fn, B: 2, T: 130, H: 2, K: 16, V: 24, dtype: "float32", gGamma: true },
        seed,
      );
      const cut = 70;
      const part = (t: Tensor | undefined, from: number, to: number) => t && c.own(t.slice(1, from, to));
      const run = (from: number, to: number, initialState: Tensor | undefined) => {
        const o: Record<string, unknown> = { ...c.options(), initialState, outputFinalState: true };
        if (o.g) o.g = part(c.g, from, to);
        return callForward(
          fn,
          part(c.q, from, to)!,
          part(c.k, from, to)!,
          part(c.v, from, to)!,
          part(c.gk, from, to),
          o,
        );
      };
      using whole = run(0, 130, c.initialState);
      using first = run(0, cut, c.initialState);
      using second = run(cut, 130, first.finalState);
      const ref = c.reference();
      const rowSize = 2 * 24;
      const joined = new Float64Array(2 * 130 * rowSize);
      const [a, b] = [host(first.output), host(second.output)];
      for (let bi = 0; bi < 2; bi++) {
        joined.set(a.subarray(bi * cut * rowSize, (bi + 1) * cut * rowSize), bi * 130 * rowSize);
        joined.set(
          b.subarray(bi * (130 - cut) * rowSize, (bi + 1) * (130 - cut) * rowSize),
          (bi * 130 + cut) * rowSize,
        );
      }
      expectClose(joined, ref.output, 5e-5, `${fn}: chained output against the oracle`);
      expectAgree(joined, host(whole.output), 1e-5, `${fn}: chained output against one call`);
      expectAgree(second.finalState!, host(whole.finalState!), 1e-5, `${fn}: chained final state`);
    });
  }
});

deviceTest("gla paths: bhsd equals bshd (read in place), forward and backward", async (device) => {
  const fns: Fn[] = ["chunkGla", "chunkSimpleGla", "chunkLinearAttn"];
  for (const fn of fns) {
    await withSeed((seed) => {
      const spec = { fn, B: 2, T: 70, H: 4, HK: 2, K: 16, V: 8, dtype: "bfloat16" as const, gGamma: true };
      using c = new GlaCase(
        device,
        { ...spec, normalize: fn === "chunkLinearAttn" ? true : undefined },
        seed,
      );
      const swap = (t: Tensor | undefined) => t && c.own(t.permute(t.ndim === 4 ? [0, 2, 1, 3] : [0, 2, 1]));
      const back = (t: Tensor) => host(c.own(swap(t)!));
      const o = { ...c.options(), outputFinalState: true };
      using a = callForward(fn, c.q, c.k, c.v, c.gk, o);
      const ob: Record<string, unknown> = { ...o, layout: "bhsd" };
      if (c.g) ob.g = swap(c.g);
      using b = callForward(fn, swap(c.q)!, swap(c.k)!, swap(c.v)!, swap(c.gk), ob);
      const p = pathTolerance("bfloat16");
      expectAgree(back(b.output), host(a.output), p, `${fn} output`);
      expectAgree(b.finalState!, host(a.finalState!), 1e-5, `${fn} final state`);
      const { dOutput } = c.cotangents(seed);
      using ga = a.backward(dOutput);
      const { outputFinalState: _, ...backwardOptions } = ob;
      using gb = callBackward(
        fn,
        swap(dOutput)!,
        swap(c.q)!,
        swap(c.k)!,
        swap(c.v)!,
        swap(c.gk),
        backwardOptions,
      );
      for (const name of ["dq", "dk", "dv", "dgk", "dg"] as const) {
        if (ga[name] === undefined) continue;
        expectAgree(back(gb[name]!), host(ga[name]!), 2 * p, `${fn} ${name}`);
      }
      if (ga.dgGamma) expectAgree(gb.dgGamma!, host(ga.dgGamma), 1e-4, `${fn} dgGamma`);
    });
  }
});

deviceTest("gla paths: decode stepped T times equals the recurrence", async (device) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    await withSeed((seed) => {
      const T = 9;
      using c = new GlaCase(device, {
        fn: "chunkGla",
        B: 3,
        T,
        H: 4,
        HK: 2,
        K: 16,
        V: 24,
        dtype,
        spikes: true,
      }, seed);
      const ref = c.reference();
      const op = new GLADecodeFwdOp({ inPlace: true });
      using state = c.initialState!.clone();
      const rowSize = 4 * 24;
      const outputs = new Float64Array(3 * T * rowSize);
      for (let t = 0; t < T; t++) {
        const at = (x: Tensor) => c.own(x.select(1, t));
        const out = { output: c.own(poisoned([3, 4, 24], dtype, device)) };
        const r = op.forward(at(c.q), at(c.k), at(c.v), at(c.gk!), state, out);
        assert.equal(r.newState, state);
        const o = host(r.output);
        for (let b = 0; b < 3; b++) {
          outputs.set(o.subarray(b * rowSize, (b + 1) * rowSize), (b * T + t) * rowSize);
        }
      }
      expectClose(outputs, ref.output, tol(dtype).output, `decode outputs ${dtype}`);
      expectClose(state, ref.finalState, tol(dtype).state, `decode state ${dtype}`);
      // Not in place: a new state, the given one untouched.
      using before = state.clone();
      const step = new GLADecodeFwdOp({ scale: 0.5 }).forward(
        c.own(c.q.select(1, 0)),
        c.own(c.k.select(1, 0)),
        c.own(c.v.select(1, 0)),
        c.own(c.gk!.select(1, 0)),
        state,
      );
      c.own(step.output), c.own(step.newState);
      assert.notEqual(step.newState, state);
      expectAgree(state, host(before), 0, "state left alone");
    });
  }
});

deviceTest("gla paths: GLAFwdOp chunk states and GLABwdOp reading them", async (device) => {
  // The last case reads 256-column chunk states by key pieces on CUDA.
  const cases = [["float32", 32, 16], ["bfloat16", 32, 16], ["bfloat16", 256, 24]] as const;
  for (const [dtype, K, V] of cases) {
    await withSeed((seed) => {
      const spec = { fn: "chunkGla" as const, B: 2, T: 130, H: 2, HK: 1, K, V, dtype };
      using c = new GlaCase(device, spec, seed);
      const t = tol(dtype);
      const ref = c.reference();
      const chunks = new GlaCase(device, spec, seed);
      const checkpoints = (() => {
        try {
          return (Object.assign(chunks.hostInputs, { checkpointEvery: 64 }), chunks.reference().checkpoints!);
        } finally {
          chunks.dispose();
        }
      })();
      const fwd = new GLAFwdOp({ chunkSize: 64, scale: c.hostInputs.scale });
      using r = fwd.forward(c.q, c.k, c.v, c.gk!, c.initialState);
      expectClose(r.output, ref.output, t.output, "GLAFwdOp output");
      expectClose(r.finalState, ref.finalState, t.state, "GLAFwdOp final state");
      assert.deepEqual(r.chunkStates.shape, [2, 4, 2, K, V]);
      using permuted = r.chunkStates.permute([0, 2, 1, 3, 4]); // oracle: [N, H, C, K, V]
      expectClose(permuted, checkpoints, t.state, "GLAFwdOp chunk states");
      const { dOutput, dFinalState } = c.cotangents(seed);
      const g = c.referenceBackward(dOutput, dFinalState);
      using ops = new GLABwdOp({ scale: c.hostInputs.scale }).backward(
        dOutput,
        c.q,
        c.k,
        c.v,
        c.gk!,
        r.chunkStates,
        dFinalState,
        true,
      );
      using own = r.backward(dOutput, { dFinalState });
      for (const [name, grads] of [["GLABwdOp", ops], ["GLAFwdOp result", own]] as const) {
        expectClose(grads.dq, g.dq, t.dqkv, `${name} dq`);
        expectClose(grads.dk, g.dk, t.dqkv, `${name} dk`);
        expectClose(grads.dv, g.dv, t.dqkv, `${name} dv`);
        expectClose(grads.dg, g.dgk, t.dgate, `${name} dg`);
        expectClose(grads.dInitialState!, g.dInitialState, t.dsmall, `${name} dInitialState`);
      }
    });
  }
});

deviceTest("gla paths: linear attention's normaliser backward matches finite differences", async (device) => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const [T, H, K, V] = [7, 2, 3, 2];
    const q = Float64Array.from({ length: T * H * K }, () => 0.2 + rand());
    const k = Float64Array.from({ length: T * H * K }, () => 0.2 + rand());
    const v = Float64Array.from({ length: T * H * V }, () => rand() - 0.5);
    const w = Float64Array.from({ length: T * H * V }, () => rand() - 0.5);
    const cuSeqlens = [0, 3, 3, 7];
    const tensor = (a: Float64Array, shape: number[]) => Tensor.from(Float32Array.from(a), { shape, device });
    const loss = () => {
      using tq = tensor(q, [1, T, H, K]), tk = tensor(k, [1, T, H, K]), tv = tensor(v, [1, T, H, V]);
      using r = chunkLinearAttn(tq, tk, tv, { layout: "bshd", normalize: true, cuSeqlens, scale: 0.8 });
      return host(r.output).reduce((s, o, i) => s + o * w[i], 0);
    };
    using tq = tensor(q, [1, T, H, K]), tk = tensor(k, [1, T, H, K]), tv = tensor(v, [1, T, H, V]);
    using dO = tensor(w, [1, T, H, V]);
    using r = chunkLinearAttn(tq, tk, tv, { layout: "bshd", normalize: true, cuSeqlens, scale: 0.8 });
    using grads = r.backward(dO);
    const check = { eps: 1e-2, tol: 2e-3, what: "normalised linear attention" };
    expectFiniteDifferences(q, host(grads.dq), loss, { ...check, input: "q" });
    expectFiniteDifferences(k, host(grads.dk), loss, { ...check, input: "k" });
    expectFiniteDifferences(v, host(grads.dv), loss, { ...check, input: "v" });
  });
});

deviceTest("gla paths: bad arguments are refused naming them", (device) => {
  using q = Tensor.randn([1, 8, 2, 4], { device });
  using v = Tensor.randn([1, 8, 2, 4], { device });
  using gk = Tensor.rand([1, 8, 2, 4], { device, low: -1, high: 0 });
  using bad = Tensor.rand([1, 8, 2, 5], { device });
  using half = Tensor.randn([1, 8, 2, 4], { device, dtype: "bfloat16" });
  const refused = (fn: () => unknown, pattern: RegExp) =>
    assert.throws(fn, (e: unknown) => e instanceof AttnkitError && pattern.test(e.message));
  // deno-lint-ignore no-explicit-any
  const anyOptions = (o: unknown) => o as any;
  refused(() => chunkGla(q, q, v, gk, anyOptions({})), /layout/);
  refused(() => chunkGla(q, q, v, gk, anyOptions({ layout: "bshd", chunkSize: 64 })), /chunkSize/);
  refused(() => chunkGla(q, q, v, bad, { layout: "bshd" }), /gk/);
  refused(() => chunkGla(q, half, v, gk, { layout: "bshd" }), /\bk: /);
  refused(() => chunkSimpleGla(q, q, v, { layout: "bshd", g: gk }), /g:/);
  using gGamma = Tensor.zeros([3], { device });
  refused(() => chunkSimpleGla(q, q, v, { layout: "bshd", gGamma }), /gGamma/);
  refused(() => chunkLinearAttn(q, q, v, anyOptions({ layout: "bshd", normalize: "yes" })), /normalize/);
  refused(() => chunkRetention(q, q, v, { layout: "bshd", cuSeqlens: [0, 9] }), /cu_?seqlens/i);
  refused(() => chunkRetention(q, q, v, { layout: "bshd", scale: NaN }), /scale/);
  using r = chunkGla(q, q, v, gk, { layout: "bshd" });
  refused(() => r.backward(half), /dOutput/);
  refused(() => r.backward(v, anyOptions({ dfinalState: v })), /dfinalState/);
  refused(() => new GLAFwdOp({ chunkSize: 32 }), /chunkSize/);
  refused(() => new GLAFwdOp(anyOptions({ layout: "bhsd" })), /layout/);
  using state = Tensor.zeros([1, 2, 4, 4], { device, dtype: "bfloat16" });
  using q1 = Tensor.randn([1, 2, 4], { device });
  using g1 = Tensor.zeros([1, 2, 4], { device });
  refused(() => new GLADecodeFwdOp().forward(q1, q1, q1, g1, state), /state/);
  refused(() => new GLABwdOp().backward(v, q, q, v, gk, v), /\bh: /);
});

deviceTest(
  "gla paths: ak_gla_bwd checks the normaliser's flag and eps itself",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.rand([1, 8, 2, 16], { device, dtype: "bfloat16" });
      using gk = Tensor.zeros([1, 8, 2, 16], { device });
      using dq = Tensor.empty([1, 8, 2, 16], { device, dtype: "bfloat16" });
      using dk = Tensor.empty([1, 8, 2, 16], { device, dtype: "bfloat16" });
      using dv = Tensor.empty([1, 8, 2, 16], { device, dtype: "bfloat16" });
      using dgk = Tensor.empty([1, 8, 2, 16], { device });
      const backward = (gates: boolean, eps: number) =>
        unwrap(
          native().ak_gla_bwd(
            q.descriptor(),
            q.descriptor(),
            q.descriptor(),
            gates ? gk.descriptor() : null,
            null,
            null,
            null,
            null,
            null,
            q.descriptor(),
            null,
            0.25,
            GlaFlags.NORMALIZE,
            dq.descriptor(),
            dk.descriptor(),
            dv.descriptor(),
            gates ? dgk.descriptor() : null,
            null,
            null,
            eps,
          ),
          "ak_gla_bwd",
        );
      const refused = (fn: () => unknown, pattern: RegExp) =>
        assert.throws(fn, (e: unknown) => e instanceof AttnkitError && pattern.test(e.message));
      refused(() => backward(true, 1e-6), /AK_GLA_NORMALIZE is for linear attention/);
      refused(() => backward(false, -1), /normalize_eps: expected a finite value >= 0/);
      refused(() => backward(false, NaN), /normalize_eps/);
      backward(false, 1e-6); // accepted: the normalised backward
      assert.ok(host(dq).every(Number.isFinite));
    }),
);

deviceTest("gla paths: empty shapes are defined and nothing leaks", async (device) => {
  await expectNoLeak(device, () => {
    using q = Tensor.randn([1, 0, 2, 8], { device });
    using v = Tensor.randn([1, 0, 2, 4], { device });
    using gk = Tensor.zeros([1, 0, 2, 8], { device });
    using h0 = Tensor.randn([1, 2, 8, 4], { device });
    using r = chunkGla(q, q, v, gk, { layout: "bshd", initialState: h0, outputFinalState: true });
    expectAgree(r.finalState!, host(h0), 0, "T = 0: the final state is the initial state");
    using grads = r.backward(v);
    assert.deepEqual(grads.dq.shape, [1, 0, 2, 8]);
    using l = chunkLinearAttn(q, q, v, { layout: "bshd", normalize: true, outputFinalState: true });
    using lg = l.backward(v);
    assert.deepEqual(lg.dk.shape, [1, 0, 2, 8]);
  });
  await expectNoLeak(device, () => {
    using q = Tensor.rand([1, 20, 2, 8], { device });
    using v = Tensor.randn([1, 20, 2, 4], { device });
    using r = chunkLinearAttn(q, q, v, { layout: "bshd", normalize: true, cuSeqlens: [0, 7, 20] });
    using _grads = r.backward(v);
    using s = chunkRetention(q, q, v, { layout: "bshd" });
    using _sg = s.backward(v);
    // A failing call frees what it made.
    assert.throws(() => chunkRetention(q, q, v, { layout: "bshd", cuSeqlens: [0, 30] }), AttnkitError);
    assert.throws(() => chunkLinearAttnBackwardBad(q, v), AttnkitError);
  });
});

function chunkLinearAttnBackwardBad(q: Tensor, v: Tensor) {
  using half = v.cast("bfloat16");
  using r = chunkLinearAttn(q, q, v, { layout: "bshd", normalize: true });
  return r.backward(half);
}

deviceTest("gla paths: a backward function with options contradicting the forward's is refused", (device) => {
  using q = Tensor.randn([1, 8, 2, 4], { device });
  using v = Tensor.randn([1, 8, 2, 4], { device });
  using gk = Tensor.rand([1, 8, 2, 4], { device, low: -1, high: 0 });
  using _r = chunkGla(q, q, v, gk, { layout: "bshd", scale: 0.3 });
  assert.throws(
    () => chunkGlaBackward(v, q, q, v, gk, { layout: "bshd" }),
    (e: unknown) => e instanceof AttnkitError && /scale/.test(e.message),
  );
  using ok = chunkGlaBackward(v, q, q, v, gk, { layout: "bshd", scale: 0.3 });
  assert.deepEqual(ok.dgk?.shape, [1, 8, 2, 4]);
});
