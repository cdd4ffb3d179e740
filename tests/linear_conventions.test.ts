// The library-wide conventions as the delta-rule family follows them: a layout on every call (none
// assumed), "bhsd" computing what "bshd" computes, a backward refusing options that contradict its
// forward's, a forward result running its own backward, caller buffers staying the caller's,
// packed offsets from the host or the device, and float32 gate gradients.
//
// Comparisons: layouts and offset forms read the same values through the same kernels, so they must
// agree to the path tolerance (fp32 1e-5, 16-bit output rounding 0.004; linear_fixtures.ts) and the
// oracle's tolerances hold for the bhsd results too; a result's own backward runs the very call of
// the explicit backward, so those agree exactly.
import assert from "node:assert/strict";
import {
  AttnkitError,
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  type CuSeqlens,
  DeltaNetBwdOp,
  DeltaNetFwdOp,
  DeltaNetOp,
  type DeltaRuleGradients,
  type DeltaRuleResult,
  type Device,
  GatedDeltaNetBHTDFwdOp,
  GatedDeltaNetBwdOp,
  GatedDeltaNetOp,
  GatedDeltaNetPrefillBTHDFwdOp,
  type LinearLayout,
  recurrentDeltaRule,
  recurrentDeltaRuleBackward,
  recurrentGatedDeltaRule,
  recurrentGatedDeltaRuleBackward,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";
import {
  bhsdInputs,
  bshdValues,
  type CaseSpec,
  DeltaCase,
  expectAgree,
  expectClose,
  expectSame,
  host,
  pathTolerance,
  poisoned,
  toBhsd,
  tol,
} from "./linear_fixtures.ts";

/** Asserts fn throws an INVALID_ARGUMENT AttnkitError whose message matches `pattern`. */
function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    if (!(e instanceof AttnkitError)) throw new Error(`${pattern}: threw ${e} instead of an AttnkitError`);
    if (!pattern.test(e.message)) throw new Error(`message "${e.message}" does not match ${pattern}`);
    return e.code === "INVALID_ARGUMENT";
  });
}

type Inputs = { q: Tensor; k: Tensor; v: Tensor; g?: Tensor; beta: Tensor };
type Form = { gated: boolean; recurrent: boolean };
const FORMS: Form[] = [
  { gated: true, recurrent: false },
  { gated: false, recurrent: false },
  { gated: true, recurrent: true },
  { gated: false, recurrent: true },
];

/** The forward of a form, on inputs with options. */
function forward(form: Form, x: Inputs, options: Record<string, unknown>): DeltaRuleResult {
  const o = options as { layout: LinearLayout };
  const { q, k, v, g, beta } = x;
  if (form.gated) {
    return form.recurrent
      ? recurrentGatedDeltaRule(q, k, v, g!, beta, o)
      : chunkGatedDeltaRule(q, k, v, g!, beta, o);
  }
  return form.recurrent ? recurrentDeltaRule(q, k, v, beta, o) : chunkDeltaRule(q, k, v, beta, o);
}

/** The explicit backward of a form: output gradient first. */
function backward(form: Form, dO: Tensor, x: Inputs, options: Record<string, unknown>): DeltaRuleGradients {
  const o = options as { layout: LinearLayout };
  const { q, k, v, g, beta } = x;
  if (form.gated) {
    return form.recurrent
      ? recurrentGatedDeltaRuleBackward(dO, q, k, v, g!, beta, o)
      : chunkGatedDeltaRuleBackward(dO, q, k, v, g!, beta, o);
  }
  return form.recurrent
    ? recurrentDeltaRuleBackward(dO, q, k, v, beta, o)
    : chunkDeltaRuleBackward(dO, q, k, v, beta, o);
}

function formName(f: Form): string {
  return `${f.recurrent ? "recurrent" : "chunk"}${f.gated ? "Gated" : ""}DeltaRule`;
}

const GRADIENTS = ["dq", "dk", "dv", "dbeta", "dg", "dInitialState"] as const;

deviceTest(
  "linear conventions: a missing or unknown layout is refused with the list of layouts",
  (device) => {
    using c = new DeltaCase(device, { B: 1, T: 8, H: 2, K: 8, V: 8, dtype: "float32", gated: true }, 1);
    const { q, k, v, g, beta } = c;
    const list =
      /layout is required \(no layout is assumed\); expected one of "bshd" \[batch, seq, heads, dim\], "bhsd" \[batch, heads, seq, dim\]/;
    const never = undefined as unknown as { layout: LinearLayout };
    for (const form of FORMS) {
      refuses(() => forward(form, c, {}), list);
      refuses(() => backward(form, q, c, {}), list);
      refuses(() => forward(form, c, { layout: "thd" }), /layout got "thd"; expected one of "bshd"/);
    }
    refuses(() => chunkGatedDeltaRule(q, k, v, g!, beta, never), list);
    refuses(() => chunkGatedDeltaRuleBackward(q, q, k, v, g!, beta, never), list);
    refuses(() => new DeltaNetFwdOp(never), list);
    refuses(() => new DeltaNetBwdOp({} as never), list);
    refuses(() => new DeltaNetOp({ useQkL2norm: true } as never), list);
    refuses(() => new GatedDeltaNetBwdOp({} as never), list);
    refuses(() => new GatedDeltaNetOp({ layout: "BHSD" } as never), /layout got "BHSD"; expected one of/);
    // Classes whose name states the layout take it from the name and refuse the other one.
    refuses(
      () => new GatedDeltaNetBHTDFwdOp({ layout: "bshd" }),
      /this op reads "bhsd" \[batch, heads, seq, dim\]/,
    );
    // FLA's name for the choice points to ours.
    refuses(
      () => forward(FORMS[0], c, { head_first: true }),
      /unknown option 'head_first' \(did you mean 'layout'\?\)/,
    );
    // Shapes that contradict the layout are refused naming it.
    using gHeadFirst = Tensor.zeros([1, 2, 8], { device });
    refuses(
      () => chunkGatedDeltaRule(q, k, v, gHeadFirst, beta, { layout: "bshd" }),
      /g: expected shape \[B=1, T=8, H=2\], got \[1, 2, 8\].* \(layout "bshd" reads \[batch, seq, heads, dim\]\)/,
    );
  },
);

deviceTest(
  "linear conventions: bhsd gives what bshd gives (forward and backward, every function, packed too)",
  async (device) => {
    const specs: CaseSpec[] = [
      { B: 2, T: 70, H: 4, HK: 2, K: 32, V: 16, dtype: "float32", gated: true, l2norm: true },
      {
        B: 1,
        T: 100,
        H: 2,
        K: 64,
        V: 64,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        gateDtype: "bfloat16",
      },
      { B: 1, T: 90, H: 2, HK: 1, K: 32, V: 32, dtype: "float32", gated: true, cuSeqlens: [0, 0, 33, 90] },
    ];
    for (const spec of specs) {
      for (const form of FORMS) {
        await withSeed((seed) => {
          using c = new DeltaCase(device, { ...spec, gated: form.gated }, seed);
          const { dOutput, dFinalState } = c.cotangents(seed);
          const base = { ...c.options(), chunkSize: form.recurrent ? undefined : 32 };
          const bshd = forward(form, c, { ...base, outputFinalState: true });
          const xh = { q: toBhsd(c, c.q), k: toBhsd(c, c.k), v: toBhsd(c, c.v), beta: toBhsd(c, c.beta) };
          const x: Inputs = c.g ? { ...xh, g: toBhsd(c, c.g) } : xh;
          const bhsd = forward(form, x, { ...base, layout: "bhsd", outputFinalState: true });
          const what = `${formName(form)} ${JSON.stringify(spec)}`;
          const rows = spec.cuSeqlens ? spec.cuSeqlens[spec.cuSeqlens.length - 1] : spec.T;
          assert.deepEqual(bhsd.output.shape, [spec.B, spec.H, spec.T, spec.V]);
          const cut = (a: Float64Array) => a.subarray(0, rows * spec.H * spec.V); // packed: rows past the end unspecified
          expectAgree(
            cut(bshdValues(bhsd.output)),
            cut(host(bshd.output)),
            pathTolerance(spec.dtype),
            `output ${what}`,
          );
          expectAgree(bhsd.finalState!, host(bshd.finalState!), 1e-5, `final state ${what}`);
          if (!spec.cuSeqlens) {
            expectClose(bshdValues(bhsd.output), c.reference().output, tol(spec.dtype).output, what);
          }
          using gb = backward(form, dOutput, c, { ...base, dFinalState });
          using gh = backward(form, toBhsd(c, dOutput), x, { ...base, layout: "bhsd", dFinalState });
          assert.deepEqual(gh.dq.shape, x.q.shape);
          assert.deepEqual(gh.dbeta.shape, x.beta.shape);
          for (const name of GRADIENTS) {
            const a = gh[name], b = gb[name];
            if (b === undefined) {
              assert.equal(a, undefined, `${name} ${what}`);
              continue;
            }
            const values = name === "dInitialState" ? host(a!) : bshdValues(a!);
            const limit = name === "dq" || name === "dk" || name === "dv" ? pathTolerance(spec.dtype) : 1e-5;
            expectAgree(values, host(b), limit, `${name} ${what}`);
          }
          const ref = c.referenceBackward(dOutput, dFinalState);
          expectClose(bshdValues(gh.dq), ref.dq, tol(spec.dtype).dqkv, `dq vs oracle ${what}`);
          for (const t of [bshd, bhsd]) t[Symbol.dispose]();
        });
      }
    }
  },
);

deviceTest("linear conventions: the op classes compute the same in both layouts", async (device) => {
  await withSeed((seed) => {
    const spec: CaseSpec = { B: 2, T: 50, H: 2, K: 16, V: 16, dtype: "float32", gated: true, l2norm: true };
    using c = new DeltaCase(device, { ...spec, initialState: false }, seed);
    const { dOutput } = c.cotangents(seed);
    const x = bhsdInputs(c);
    for (const gated of [true, false]) {
      using a = gated ? new GatedDeltaNetOp({ layout: "bshd" }) : new DeltaNetOp({ layout: "bshd" });
      using b = gated ? new GatedDeltaNetOp({ layout: "bhsd" }) : new DeltaNetOp({ layout: "bhsd" });
      using oa = gated
        ? (a as GatedDeltaNetOp).forward(c.q, c.k, c.v, c.g!, c.beta)
        : (a as DeltaNetOp).forward(c.q, c.k, c.v, c.beta);
      using ob = gated
        ? (b as GatedDeltaNetOp).forward(x.q, x.k, x.v, x.g!, x.beta)
        : (b as DeltaNetOp).forward(x.q, x.k, x.v, x.beta);
      expectAgree(bshdValues(ob), host(oa), 1e-5, `output (gated ${gated})`);
      using ga = a.backward(dOutput);
      using gb = b.backward(toBhsd(c, dOutput));
      for (const name of ["dq", "dk", "dv", "dbeta"] as const) {
        expectAgree(bshdValues(gb[name]), host(ga[name]), 1e-5, `${name} (gated ${gated})`);
      }
    }
    using f = new DeltaNetFwdOp({ layout: "bshd" }).forward(c.q, c.k, c.v, c.beta);
    using fh = new DeltaNetFwdOp({ layout: "bhsd" }).forward(x.q, x.k, x.v, x.beta);
    expectAgree(bshdValues(fh.output), host(f.output), 1e-5, "DeltaNetFwdOp output");
    expectAgree(fh.chunkStates, host(f.chunkStates), 1e-5, "DeltaNetFwdOp chunk states (layout-free)");
    using gf = new GatedDeltaNetBwdOp({ layout: "bshd" }).backward(dOutput, c.q, c.k, c.v, c.g!, c.beta);
    using gh = new GatedDeltaNetBwdOp({ layout: "bhsd" }).backward(
      toBhsd(c, dOutput),
      x.q,
      x.k,
      x.v,
      x.g!,
      x.beta,
    );
    expectAgree(bshdValues(gh.dg), host(gf.dg), 1e-5, "GatedDeltaNetBwdOp dg");
  });
});

deviceTest(
  "linear conventions: a backward contradicting its forward's options is refused (with and without saved)",
  (device) => {
    using c = new DeltaCase(device, {
      B: 1,
      T: 40,
      H: 2,
      K: 16,
      V: 16,
      dtype: "float32",
      gated: true,
      initialState: true,
    }, 3);
    const { dOutput } = c.cotangents(3);
    const { q, k, v, g, beta } = c;
    const fwd = { layout: "bshd", useQkL2norm: true, initialState: c.initialState, chunkSize: 32 } as const;
    using r = chunkGatedDeltaRule(q, k, v, g!, beta, { ...fwd, saveForBackward: true });
    const cases: [Record<string, unknown>, RegExp][] = [
      [
        { useQkL2norm: false },
        /useQkL2norm: the forward .* ran with useQkL2norm: true, this backward with useQkL2norm: false/,
      ],
      [{ useQkL2norm: undefined }, /useQkL2norm: the forward .* ran with useQkL2norm: true/],
      [{ scale: 0.5 }, /scale: the forward .* ran with scale: 0.25, this backward with scale: 0.5/],
      [
        { chunkSize: 64 },
        /chunkSize: the forward .* ran with chunkSize: 32, this backward with chunkSize: 64/,
      ],
      [
        { initialState: undefined },
        /initialState: the forward .* ran with initialState, this backward without/,
      ],
      [
        { cuSeqlens: [0, 40] },
        /cuSeqlens: the forward .* ran without cuSeqlens, this backward with cuSeqlens/,
      ],
      // Same tensors read as [batch, heads, seq, dim]: every shape fits, so only the record tells.
      [
        { layout: "bhsd", initialState: undefined },
        /layout: the forward .* ran with layout: "bshd", this backward with layout: "bhsd"/,
      ],
    ];
    for (const [change, pattern] of cases) {
      const options = { ...fwd, ...change };
      refuses(() => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, options), pattern);
      refuses(
        () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...options, saved: r.saved }),
        pattern,
      );
    }
    refuses(
      () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...fwd, useQkL2norm: false }),
      /the forward on these inputs ran/,
    );
    refuses(
      () =>
        chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, {
          ...fwd,
          useQkL2norm: false,
          saved: r.saved,
        }),
      /the forward that made `saved` ran/,
    );
    // The forward's own options pass, with or without saved; so does the recurrent form (same math).
    chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, fwd)[Symbol.dispose]();
    chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...fwd, saved: r.saved })[Symbol.dispose]();
    const { chunkSize: _, ...noChunk } = fwd;
    recurrentGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, noChunk)[Symbol.dispose]();
    // A second forward on the same tensors with other options: a backward matching either passes.
    chunkGatedDeltaRule(q, k, v, g!, beta, { layout: "bshd" })[Symbol.dispose]();
    chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { layout: "bshd" })[Symbol.dispose]();
    chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, fwd)[Symbol.dispose]();
    refuses(
      () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { layout: "bshd", scale: 2 }),
      /scale: the forward on these inputs ran with scale: 0.25, this backward with scale: 2/,
    );
    // Inputs never seen in a forward (fresh tensors with the same values) are never refused.
    using q2 = q.clone();
    chunkGatedDeltaRuleBackward(dOutput, q2, k, v, g!, beta, { layout: "bshd", scale: 2 })[Symbol.dispose]();
    // The backward op classes check the same way.
    const [qh, kh, vh, gh, bh, dOh] = [q, k, v, g!, beta, dOutput].map((t) => toBhsd(c, t));
    using f = new GatedDeltaNetBHTDFwdOp({ useQkL2norm: true }).forward(qh, kh, vh, gh, bh);
    refuses(
      () => new GatedDeltaNetBwdOp({ layout: "bhsd" }).backward(dOh, qh, kh, vh, gh, bh, f.chunkStates),
      /GatedDeltaNetBwdOp: useQkL2norm: the forward on these inputs ran with useQkL2norm: true/,
    );
    new GatedDeltaNetBwdOp({ layout: "bhsd", useQkL2norm: true }).backward(
      dOh,
      qh,
      kh,
      vh,
      gh,
      bh,
      f.chunkStates,
    )
      [Symbol.dispose]();
  },
);

deviceTest(
  "linear conventions: r.backward(dO) is the explicit backward with the forward's options",
  async (device) => {
    for (const form of FORMS) {
      await withSeed((seed) => {
        const spec: CaseSpec = {
          B: 1,
          T: 70,
          H: 2,
          K: 16,
          V: 16,
          dtype: "bfloat16",
          gated: form.gated,
          l2norm: true,
        };
        using c = new DeltaCase(device, { ...spec, cuSeqlens: [0, 30, 70], scale: 0.2 }, seed);
        const { dOutput, dFinalState } = c.cotangents(seed);
        const options = {
          ...c.options(),
          ...(form.recurrent ? {} : { chunkSize: 32, saveForBackward: true }),
        };
        using r = forward(form, c, options);
        using own = r.backward(dOutput, { dFinalState });
        const { saveForBackward: _, ...explicitOptions } = options as Record<string, unknown>;
        using explicit = backward(form, dOutput, c, { ...explicitOptions, dFinalState, saved: r.saved });
        for (const name of GRADIENTS) {
          if (explicit[name] === undefined) assert.equal(own[name], undefined);
          else expectSame(host(own[name]!), host(explicit[name]!), `${formName(form)} ${name}`);
        }
        // dFinalState defaults to zero, as in the explicit backward.
        using plain = r.backward(dOutput);
        using plainExplicit = backward(form, dOutput, c, explicitOptions);
        expectSame(host(plain.dk), host(plainExplicit.dk), `${formName(form)} dk without dFinalState`);
      });
    }
    // The result refers to its inputs: one disposed since the forward is named; so is a disposed result.
    using c = new DeltaCase(device, { B: 1, T: 10, H: 1, K: 8, V: 8, dtype: "float32", gated: true }, 4);
    const { dOutput } = c.cotangents(4);
    using beta = c.beta.clone();
    const r = chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, beta, { layout: "bshd" });
    beta.dispose();
    refuses(() => r.backward(dOutput), /chunkGatedDeltaRule\.backward: beta: disposed after the forward/);
    r[Symbol.dispose]();
    refuses(() => r.backward(dOutput), /the result was disposed/);
    using plain = chunkDeltaRule(c.q, c.k, c.v, c.beta, { layout: "bshd" });
    refuses(() => plain.backward(dOutput, { dg: 1 } as never), /unknown option 'dg'/);
    // Forward op results run their backward too.
    using f = new DeltaNetFwdOp({ layout: "bshd", useQkL2norm: true }).forward(c.q, c.k, c.v, c.beta);
    using a = f.backward(dOutput);
    using b = new DeltaNetBwdOp({ layout: "bshd", useQkL2norm: true }).backward(
      dOutput,
      c.q,
      c.k,
      c.v,
      c.beta,
    );
    for (const name of ["dq", "dk", "dv", "dbeta"] as const) expectSame(host(a[name]), host(b[name]), name);
  },
);

deviceTest(
  "linear conventions: buffers passed in out stay the caller's when results are disposed",
  async (device) => {
    using c = new DeltaCase(device, { B: 1, T: 20, H: 2, K: 16, V: 16, dtype: "float32", gated: true }, 5);
    const { dOutput } = c.cotangents(5);
    const { q, k, v, g, beta } = c;
    const fb = c.forwardBuffers();
    const bb = c.backwardBuffers();
    await expectNoLeak(device, () => {
      const r = chunkGatedDeltaRule(q, k, v, g!, beta, { ...c.options(), out: fb, saveForBackward: true });
      assert.equal(r.output, fb.output);
      const grads = r.backward(dOutput, { out: { dq: bb.dq, dg: bb.dg } });
      assert.equal(grads.dq, bb.dq);
      assert.equal(grads.dg, bb.dg);
      grads[Symbol.dispose]();
      r[Symbol.dispose]();
      const g2 = chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...c.options(), out: bb });
      g2[Symbol.dispose]();
      using prefill = new GatedDeltaNetPrefillBTHDFwdOp().forward(q, k, v, g!, beta, c.initialState, fb);
      assert.equal(prefill.finalState, fb.finalState);
      using fwd = new DeltaNetFwdOp({ layout: "bshd" }).forward(q, k, v, beta, { output: fb.output });
      assert.equal(fwd.output, fb.output);
    });
    for (const [name, t] of Object.entries({ ...fb, ...bb })) {
      assert.ok(!t!.disposed, `out.${name} was disposed with the result`);
      assert.ok(!host(t!).some(Number.isNaN), `out.${name} holds unwritten elements`);
    }
  },
);

deviceTest("linear conventions: packed offsets from the host equal offsets on the device", async (device) => {
  await withSeed((seed) => {
    const offsets = [0, 0, 17, 64, 65, 90];
    const spec: CaseSpec = {
      B: 1,
      T: 96,
      H: 2,
      K: 16,
      V: 16,
      dtype: "float32",
      gated: true,
      cuSeqlens: offsets,
    };
    using c = new DeltaCase(device, spec, seed);
    const { dOutput, dFinalState } = c.cotangents(seed);
    using int64 = Tensor.from(BigInt64Array.from(offsets, BigInt), { device });
    const forms: CuSeqlens[] = [
      offsets,
      Int32Array.from(offsets),
      BigInt64Array.from(offsets, BigInt),
      int64,
    ];
    const run = (cu: CuSeqlens) => {
      const options = { ...c.options(), cuSeqlens: cu, outputFinalState: true };
      const out = poisoned([1, 96, 2, 16], "float32", device);
      using r = chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, { ...options, out: { output: out } });
      const { outputFinalState: _, ...back } = options;
      using grads = chunkGatedDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.g!, c.beta, {
        ...back,
        dFinalState,
      });
      const values = {
        output: host(out).subarray(0, 90 * 32),
        finalState: host(r.finalState!),
        dq: host(grads.dq),
        dg: host(grads.dg!),
        dInitialState: host(grads.dInitialState!),
      };
      out.dispose();
      return values;
    };
    const want = run(c.cuSeqlens!);
    for (const cu of forms) {
      const got = run(cu);
      for (const name of Object.keys(want) as (keyof typeof want)[]) {
        expectSame(got[name], want[name], `${name} with cuSeqlens as ${cu.constructor.name}`);
      }
    }
    expectClose(
      want.output,
      c.reference().output.subarray(0, 90 * 32),
      tol("float32").output,
      "packed output",
    );
  });
});

deviceTest(
  "linear conventions: gate gradients are float32 in every layout and op",
  (device: Device) => {
    using c = new DeltaCase(device, {
      B: 1,
      T: 12,
      H: 2,
      K: 8,
      V: 8,
      dtype: "bfloat16",
      gated: true,
      gateDtype: "float16",
      initialState: false,
    }, 6);
    const { dOutput } = c.cotangents(6);
    const x = bhsdInputs(c);
    using a = chunkGatedDeltaRuleBackward(toBhsd(c, dOutput), x.q, x.k, x.v, x.g!, x.beta, {
      layout: "bhsd",
    });
    using b = new GatedDeltaNetBwdOp({ layout: "bhsd" }).backward(
      toBhsd(c, dOutput),
      x.q,
      x.k,
      x.v,
      x.g!,
      x.beta,
    );
    using d = new DeltaNetBwdOp({ layout: "bshd" }).backward(dOutput, c.q, c.k, c.v, c.beta);
    for (
      const [what, t] of [["dg", a.dg!], ["dbeta", a.dbeta], ["op dg", b.dg], ["op dbeta", b.dbeta], [
        "DeltaNet dbeta",
        d.dbeta,
      ]] as const
    ) {
      assert.equal(t.dtype, "float32", what);
    }
    assert.deepEqual(a.dg!.shape, [1, 2, 12]);
    assert.equal(a.dq.dtype, "bfloat16");
    const ref = c.referenceBackward(dOutput);
    expectClose(bshdValues(a.dg!), ref.dg, tol("bfloat16").dsmall, "dg (bhsd, float16 g)");
  },
);
