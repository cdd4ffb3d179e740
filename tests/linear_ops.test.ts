// The DeltaNet / Gated DeltaNet op classes: BHSD equals BTHD, the chunk states and WY factors mean
// what their doc says (checked against the oracle's states and residuals), the backward ops read the
// start state from S, the combined ops keep and release their inputs, the prefill chunk-size rule,
// and one op serving calls of different shapes. Outputs NaN-poisoned before each run.
//
// Tolerance: as linear_forward/backward (relative RMS vs float64: bf16/f16 0.005 outputs and
// states, 0.008 dq/dk/dv, 0.02 dbeta/dg; float32 100x tighter); layout and op-vs-function
// comparisons are exact or 1e-6 (the same arithmetic).
import assert from "node:assert/strict";
import {
  AttnkitError,
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  DeltaNetBwdOp,
  DeltaNetFwdOp,
  DeltaNetOp,
  GatedDeltaNetBHTDFwdOp,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetBwdOp,
  GatedDeltaNetOp,
  GatedDeltaNetPrefillBHTDFwdOp,
  GatedDeltaNetPrefillBTHDFwdOp,
  memoryStats,
  prefillChunkSize,
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
  host,
  pathTolerance,
  poisoned,
  tol,
} from "./linear_fixtures.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";

/** NaN-poisoned buffers for a forward op with chunk states and WY factors. */
function fwdBuffers(c: DeltaCase, layout: "bthd" | "bhtd", chunkSize: number) {
  const { B, T, H, K, V, dtype } = c.spec;
  const NC = Math.ceil(T / chunkSize);
  return {
    output: c.own(poisoned(layout === "bthd" ? [B, T, H, V] : [B, H, T, V], dtype, c.device)),
    chunkStates: c.own(poisoned([B, H, NC + 1, K, V], "float32", c.device)),
    aw: c.own(poisoned([B, H, T, chunkSize], "float32", c.device)),
    au: c.own(poisoned([B, H, T, chunkSize], "float32", c.device)),
  };
}

deviceTest("Gated DeltaNet ops: BHTD equals BTHD (output, chunk states, WY factors)", async (device) => {
  for (const dtype of ["float32", "bfloat16"] as const) {
    await withSeed((seed) => {
      const spec: CaseSpec = {
        B: 2,
        T: 100,
        H: 4,
        HK: 2,
        K: 64,
        V: 64,
        dtype,
        gated: true,
        l2norm: true,
        initialState: false,
      };
      using c = new DeltaCase(device, spec, seed);
      const bthd = fwdBuffers(c, "bthd", 64), bhtd = fwdBuffers(c, "bhtd", 64);
      const x = bhsdInputs(c);
      new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true }).forward(c.q, c.k, c.v, c.g!, c.beta, bthd);
      new GatedDeltaNetBHTDFwdOp({ useQkL2norm: true }).forward(x.q, x.k, x.v, x.g!, x.beta, bhtd);
      expectAgree(bshdValues(bhtd.output), host(bthd.output), pathTolerance(dtype), "output");
      for (const name of ["chunkStates", "aw", "au"] as const) {
        expectAgree(bhtd[name], host(bthd[name]), pathTolerance(dtype), name);
      }
      expectClose(bthd.output, c.reference().output, tol(dtype).output, `${dtype} output vs oracle`);
    });
  }
});

deviceTest(
  "Gated DeltaNet / DeltaNet forward ops: S holds the oracle's chunk-boundary states; Aw, Au give its residuals",
  async (device) => {
    const configs = [
      [true, 64, "float32", 16, 8],
      [false, 32, "float32", 16, 8],
      [true, 128, "float32", 16, 8],
      [true, 64, "bfloat16", 64, 64],
      [false, 64, "float16", 64, 64],
    ] as const;
    for (const [gated, chunkSize, dtype, K, V] of configs) {
      // float32: 1e-5; 16-bit inputs (exact in the oracle too): the bf16/f16 state tolerance.
      const limit = dtype === "float32" ? 1e-5 : tol(dtype).state;
      await withSeed((seed) => {
        const spec: CaseSpec = { B: 1, T: 150, H: 2, K, V, dtype, gated, initialState: false };
        using c = new DeltaCase(device, spec, seed);
        const out = fwdBuffers(c, "bhtd", chunkSize);
        const x = bhsdInputs(c);
        if (gated) new GatedDeltaNetBHTDFwdOp({ chunkSize }).forward(x.q, x.k, x.v, x.g!, x.beta, out);
        else new DeltaNetFwdOp({ layout: "bhsd", chunkSize }).forward(x.q, x.k, x.v, x.beta, out);
        const { T, H } = spec;
        const C = chunkSize, NC = Math.ceil(T / C), KV = K * V;
        const ref = deltaRuleReference({ ...c.hostInputs, checkpointEvery: C });
        expectClose(out.chunkStates, ref.checkpoints!, limit, `${dtype} chunk states`);
        // v_new = Au v - (Aw k) S_c must be the residual u_t = beta (v - S'^T k) of every token.
        const aw = host(out.aw), au = host(out.au), S = ref.checkpoints!;
        const { k, v } = c.hostInputs;
        const residual = new Float64Array(T * H * V);
        for (let h = 0; h < H; h++) {
          for (let t = 0; t < T; t++) {
            const c0 = Math.floor(t / C) * C, i = t - c0, L = Math.min(C, T - c0);
            const w = new Float64Array(K), u = new Float64Array(V);
            for (let j = 0; j < C; j++) {
              const fw = aw[(h * T + t) * C + j], fu = au[(h * T + t) * C + j];
              if (j > i || j >= L) {
                assert.ok(
                  fw === 0 && fu === 0,
                  `Aw/Au [${h}, ${t}, ${j}] outside the chunk's lower triangle is not 0`,
                );
                continue;
              }
              for (let r = 0; r < K; r++) w[r] += fw * k[((c0 + j) * H + h) * K + r];
              for (let s = 0; s < V; s++) u[s] += fu * v[((c0 + j) * H + h) * V + s];
            }
            const state = S.subarray((h * (NC + 1) + c0 / C) * KV);
            for (let s = 0; s < V; s++) {
              let ws = 0;
              for (let r = 0; r < K; r++) ws += w[r] * state[r * V + s];
              residual[(t * H + h) * V + s] = u[s] - ws;
            }
          }
        }
        expectClose(residual, ref.residual, limit, `${dtype} residuals from Aw, Au and S`);
      });
    }
  },
);

deviceTest("DeltaNet ops: BHSD forward and backward equal the token-major functions", async (device) => {
  await withSeed((seed) => {
    const spec: CaseSpec = {
      B: 2,
      T: 70,
      H: 3,
      HK: 1,
      K: 64,
      V: 64,
      dtype: "bfloat16",
      gated: false,
      l2norm: true,
    };
    using c = new DeltaCase(device, { ...spec, initialState: false }, seed);
    const x = bhsdInputs(c);
    using fwd = new DeltaNetFwdOp({ layout: "bhsd", useQkL2norm: true }).forward(x.q, x.k, x.v, x.beta);
    using ref = chunkDeltaRule(c.q, c.k, c.v, c.beta, { layout: "bshd", useQkL2norm: true });
    expectAgree(bshdValues(fwd.output), host(ref.output), pathTolerance("bfloat16"), "layouts agree");
    const { dOutput } = c.cotangents(seed);
    const dO = c.own(dOutput.permute([0, 2, 1, 3]));
    using grads = new DeltaNetBwdOp({ layout: "bhsd", useQkL2norm: true }).backward(
      dO,
      x.q,
      x.k,
      x.v,
      x.beta,
      fwd.chunkStates,
    );
    using want = chunkDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.beta, {
      layout: "bshd",
      useQkL2norm: true,
    });
    for (const name of ["dq", "dk", "dv", "dbeta"] as const) {
      expectAgree(bshdValues(grads[name]), host(want[name]), pathTolerance("bfloat16"), name);
    }
  });
});

deviceTest(
  "Gated DeltaNet backward op: reads the start state from S and matches the oracle",
  async (device) => {
    await withSeed((seed) => {
      const [B, T, H, K, V] = [2, 90, 2, 64, 64];
      const spec: CaseSpec = { B, T, H, K, V, dtype: "bfloat16", gated: true, l2norm: true };
      using c = new DeltaCase(device, spec, seed);
      const x = bhsdInputs(c);
      // S with the case's initial state in entry 0 (the rest is not read).
      const NC = Math.ceil(T / 64), KV = K * V;
      const S = new Float32Array(B * H * (NC + 1) * KV).fill(NaN);
      const h0 = c.hostInputs.initialState!;
      for (let bh = 0; bh < B * H; bh++) S.set(h0.subarray(bh * KV, (bh + 1) * KV), bh * (NC + 1) * KV);
      const states = c.own(Tensor.from(S, { shape: [B, H, NC + 1, K, V], device }));
      const { dOutput } = c.cotangents(seed);
      const dO = c.own(dOutput.permute([0, 2, 1, 3]));
      const out = {
        dq: c.own(poisoned([B, H, T, K], "bfloat16", device)),
        dk: c.own(poisoned([B, H, T, K], "bfloat16", device)),
        dv: c.own(poisoned([B, H, T, V], "bfloat16", device)),
        dg: c.own(poisoned([B, H, T], "float32", device)),
        dbeta: c.own(poisoned([B, H, T], "float32", device)),
      };
      const grads = new GatedDeltaNetBwdOp({ layout: "bhsd", useQkL2norm: true }).backward(
        dO,
        x.q,
        x.k,
        x.v,
        x.g!,
        x.beta,
        states,
        out,
      );
      assert.equal(grads.dq, out.dq);
      const ref = c.referenceBackward(dOutput);
      const t = tol("bfloat16");
      expectClose(bshdValues(out.dq), ref.dq, t.dqkv, "dq");
      expectClose(bshdValues(out.dk), ref.dk, t.dqkv, "dk");
      expectClose(bshdValues(out.dv), ref.dv, t.dqkv, "dv");
      expectClose(bshdValues(out.dg), ref.dg, t.dsmall, "dg");
      expectClose(bshdValues(out.dbeta), ref.dbeta, t.dsmall, "dbeta");
    });
  },
);

deviceTest(
  "combined ops: forward then backward equals the functions; inputs kept and then released",
  async (device) => {
    await withSeed(async (seed) => {
      const spec: CaseSpec = {
        B: 1,
        T: 80,
        H: 2,
        K: 32,
        V: 32,
        dtype: "float32",
        gated: true,
        l2norm: true,
        initialState: false,
      };
      using c = new DeltaCase(device, spec, seed);
      const { dOutput } = c.cotangents(seed);
      const dO = c.own(dOutput.permute([0, 2, 1, 3]));
      using want = chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, { layout: "bshd", useQkL2norm: true });
      using wantGrads = chunkGatedDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.g!, c.beta, {
        layout: "bshd",
        useQkL2norm: true,
      });
      const x = bhsdInputs(c);
      await expectNoLeak(device, () => {
        using op = new GatedDeltaNetOp({ layout: "bhsd", useQkL2norm: true });
        // The op holds its own handles: the caller may dispose its inputs before backward.
        const copies = [x.q.clone(), x.k.clone(), x.v.clone(), x.g!.clone(), x.beta.clone()];
        using o = op.forward(copies[0], copies[1], copies[2], copies[3], copies[4]);
        for (const t of copies) t.dispose();
        assert.ok(op.holdsInputs);
        expectAgree(bshdValues(o), host(want.output), pathTolerance("float32"), "layouts agree");
        using grads = op.backward(dO);
        assert.ok(!op.holdsInputs, "inputs released after backward");
        for (const name of ["dq", "dk", "dv", "dg", "dbeta"] as const) {
          expectAgree(bshdValues(grads[name]), host(wantGrads[name]!), pathTolerance("float32"), name);
        }
        assert.throws(
          () => op.backward(dO),
          (e) => e instanceof AttnkitError && /call forward first/.test(e.message),
        );
        // A forward without backward keeps the inputs until dispose (here: the end of the scope).
        op.forward(x.q, x.k, x.v, x.g!, x.beta).dispose();
        assert.ok(op.holdsInputs);
      });
      await expectNoLeak(device, () => {
        const op = new DeltaNetOp({ layout: "bhsd" });
        op.forward(x.q, x.k, x.v, x.beta).dispose();
        op.forward(x.q, x.k, x.v, x.beta).dispose(); // the second forward replaces the first's inputs
        const before = memoryStats(device).threadBytesInUse;
        op.dispose();
        op.dispose();
        assert.equal(
          memoryStats(device).threadBytesInUse,
          before,
          "the kept inputs share the callers' memory",
        );
      });
    });
  },
);

deviceTest("ops: constructed once, called with other shapes and dtypes", async (device) => {
  const op = new GatedDeltaNetBTHDFwdOp({ chunkSize: 32, useQkL2norm: true });
  for (
    const spec of [
      { B: 1, T: 40, H: 2, K: 16, V: 16, dtype: "float32" },
      { B: 2, T: 77, H: 3, HK: 1, K: 32, V: 8, dtype: "bfloat16" },
    ] as const
  ) {
    await withSeed((seed) => {
      using c = new DeltaCase(device, { ...spec, gated: true, l2norm: true, initialState: false }, seed);
      using r = op.forward(c.q, c.k, c.v, c.g!, c.beta);
      expectClose(r.output, c.reference().output, tol(spec.dtype).output, `output ${JSON.stringify(spec)}`);
    });
  }
});

deviceTest(
  "prefill ops: chunk-size rule, BTHD and BHTD agree with the oracle, with and without a start state",
  async (device) => {
    assert.equal(prefillChunkSize(undefined, 1, 8, 128), 128);
    assert.equal(prefillChunkSize(undefined, 2, 4, 4096), 128);
    assert.equal(prefillChunkSize(undefined, 1, 9, 4096), 64);
    assert.equal(prefillChunkSize(undefined, 1, 8, 127), 64);
    assert.equal(prefillChunkSize(32, 1, 1, 4096), 32);
    for (const [B, H, T] of [[1, 4, 200], [2, 8, 70]]) {
      for (const initialState of [false, true]) {
        await withSeed((seed) => {
          const spec: CaseSpec = {
            B,
            T,
            H,
            K: 64,
            V: 64,
            dtype: "bfloat16",
            gated: true,
            l2norm: true,
            initialState,
          };
          using c = new DeltaCase(device, spec, seed);
          const ref = c.reference();
          const h0 = c.initialState;
          const out = c.forwardBuffers();
          const r = new GatedDeltaNetPrefillBTHDFwdOp({ useQkL2norm: true }).forward(
            c.q,
            c.k,
            c.v,
            c.g!,
            c.beta,
            h0,
            out,
          );
          assert.equal(r.output, out.output);
          expectClose(out.output, ref.output, 0.005, "BTHD prefill output");
          expectClose(out.finalState, ref.finalState, 0.005, "BTHD prefill state");
          const x = bhsdInputs(c);
          using s = new GatedDeltaNetPrefillBHTDFwdOp({ useQkL2norm: true }).forward(
            x.q,
            x.k,
            x.v,
            x.g!,
            x.beta,
            h0,
          );
          expectAgree(
            bshdValues(s.output),
            host(out.output),
            pathTolerance("bfloat16"),
            "BHTD vs BTHD prefill",
          );
          expectAgree(s.finalState, host(out.finalState), pathTolerance("float32"), "layouts agree");
        });
      }
    }
  },
);
