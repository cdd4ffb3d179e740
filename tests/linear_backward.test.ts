// Backward of the delta rule and the gated delta rule: every gradient (dq, dk, dv, dbeta, dg,
// dInitialState) against the float64 oracle's hand-derived reverse mode (itself checked against
// finite differences in linear_reference.test.ts), for the loss sum(dO * o) + sum(dS_T * S_T).
// Fresh random inputs per test, gradient buffers NaN-poisoned before each run.
//
// Tolerance (relative RMS against float64 fed the same rounded inputs): float16/bfloat16 dq, dk, dv
// 0.008, dbeta, dg, dInitialState 0.02; float32 8e-5 and 2e-4, 100x tighter (linear_fixtures.ts).
// dbeta and dg are float32 whatever the dtype of beta and g, so their tolerance is that of q's dtype.
import assert from "node:assert/strict";
import {
  AttnkitError,
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  type DeltaSavedStates,
  type Device,
  type DType,
  GatedDeltaNetOp,
  recurrentDeltaRuleBackward,
  recurrentGatedDeltaRuleBackward,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, isHopper, withSeed } from "./helpers.ts";
import { type CaseSpec, DeltaCase, expectClose, expectSame, host, tol } from "./linear_fixtures.ts";

type Mode = { recurrent: true } | { recurrent: false; chunkSize: number };

/** Runs the functional backward for a case into poisoned buffers; returns them. */
function runBackward(c: DeltaCase, mode: Mode, dOutput: Tensor, dFinalState: Tensor | undefined) {
  const out = c.backwardBuffers();
  const options = { ...c.options(), dFinalState, out };
  const { q, k, v, g, beta } = c;
  if (c.spec.gated) {
    if (mode.recurrent) recurrentGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, options);
    else chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...options, chunkSize: mode.chunkSize });
  } else {
    if (mode.recurrent) recurrentDeltaRuleBackward(dOutput, q, k, v, beta, options);
    else chunkDeltaRuleBackward(dOutput, q, k, v, beta, { ...options, chunkSize: mode.chunkSize });
  }
  return out;
}

/**
 * The forward with `saveForBackward`, then the backward from its saved states into poisoned buffers;
 * returns the gradients and whether the forward stored states.
 */
function runSavedBackward(c: DeltaCase, dOutput: Tensor, dFinalState: Tensor | undefined) {
  const out = c.backwardBuffers();
  const { q, k, v, g, beta } = c;
  using r = c.spec.gated
    ? chunkGatedDeltaRule(q, k, v, g!, beta, { ...c.options(), saveForBackward: true })
    : chunkDeltaRule(q, k, v, beta, { ...c.options(), saveForBackward: true });
  const options = { ...c.options(), dFinalState, out, saved: r.saved };
  if (c.spec.gated) chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, options);
  else chunkDeltaRuleBackward(dOutput, q, k, v, beta, options);
  return { out, stored: r.saved!.stored };
}

function checkGradients(
  device: Device,
  spec: CaseSpec,
  mode: Mode | "saved",
  seed: number,
  onStored?: (stored: boolean) => void,
): void {
  using c = new DeltaCase(device, spec, seed);
  const { dOutput, dFinalState } = c.cotangents(seed);
  const saved = mode === "saved" ? runSavedBackward(c, dOutput, dFinalState) : undefined;
  const grads = saved?.out ?? runBackward(c, mode as Mode, dOutput, dFinalState);
  const ref = c.referenceBackward(dOutput, dFinalState);
  const t = tol(spec.dtype);
  const how = mode === "saved"
    ? "from saved states"
    : mode.recurrent
    ? "recurrent"
    : `chunk ${mode.chunkSize}`;
  const what = `${spec.dtype} ${how} ${JSON.stringify(spec)}`;
  expectClose(grads.dq, ref.dq, t.dqkv, `dq (${what})`);
  expectClose(grads.dk, ref.dk, t.dqkv, `dk (${what})`);
  expectClose(grads.dv, ref.dv, t.dqkv, `dv (${what})`);
  // dbeta and dg are float32 whatever the dtype of beta and g (never rounded to a 16-bit gate's).
  assert.equal(grads.dbeta.dtype, "float32");
  expectClose(grads.dbeta, ref.dbeta, t.dsmall, `dbeta (${what})`);
  if (spec.gated) expectClose(grads.dg!, ref.dg, t.dsmall, `dg (${what})`);
  else assert.equal(grads.dg, undefined);
  if (grads.dInitialState) {
    expectClose(grads.dInitialState, ref.dInitialState, t.dsmall, `dInitialState (${what})`);
  }
  if (spec.cuSeqlens) {
    // Tokens past the last sequence influence nothing: their gradients are exactly zero.
    const end = spec.cuSeqlens[spec.cuSeqlens.length - 1];
    for (const [name, g] of Object.entries(grads)) {
      if (!g || name === "dInitialState") continue;
      const row = g.numel / spec.T;
      assert.ok(
        host(g).subarray(end * row).every((x) => x === 0),
        `${name}: rows past cuSeqlens[N] are not zero`,
      );
    }
  }
  onStored?.(saved?.stored ?? false);
}

const DTYPES: DType[] = ["float32", "bfloat16", "float16"];

deviceTest(
  "delta rule backward: every gradient matches the float64 oracle (fp32/bf16/fp16, chunked and recurrent)",
  async (device) => {
    const specs: [Omit<CaseSpec, "dtype">, number][] = [
      [{ B: 2, T: 100, H: 4, HK: 2, K: 64, V: 32, gated: true }, 64],
      [{ B: 2, T: 130, H: 4, HK: 2, K: 64, V: 64, gated: true, l2norm: true }, 64],
      [{ B: 1, T: 77, H: 3, HK: 1, K: 32, V: 48, gated: false, l2norm: true, scale: 0.3 }, 32],
      [{ B: 1, T: 90, H: 2, K: 32, V: 32, gated: true, l2norm: true, gateDtype: "bfloat16" }, 128],
    ];
    for (const dtype of DTYPES) {
      for (const [spec, chunkSize] of specs) {
        for (const mode of [{ recurrent: false, chunkSize }, { recurrent: true }] as Mode[]) {
          await withSeed((seed) => checkGradients(device, { ...spec, dtype }, mode, seed));
        }
      }
    }
  },
);

deviceTest("delta rule backward: head dims 64/128/256, K != V and general sizes", async (device) => {
  const specs: CaseSpec[] = [
    { B: 1, T: 100, H: 1, K: 256, V: 256, dtype: "bfloat16", gated: true, l2norm: true },
    { B: 1, T: 60, H: 2, K: 128, V: 64, dtype: "float32", gated: true, l2norm: true },
    { B: 1, T: 70, H: 2, HK: 1, K: 64, V: 128, dtype: "float16", gated: false, l2norm: true },
    { B: 2, T: 50, H: 2, K: 128, V: 128, dtype: "bfloat16", gated: true, l2norm: true },
    { B: 1, T: 45, H: 2, K: 48, V: 80, dtype: "bfloat16", gated: true },
  ];
  for (const spec of specs) {
    await withSeed((seed) => checkGradients(device, spec, { recurrent: false, chunkSize: 64 }, seed));
  }
});

deviceTest(
  "delta rule backward: K = V = 256 (packed with empty, 1/63/65-token sequences; GQA; T = 1; fp16), recomputed and saved",
  async (device) => {
    // On CUDA with 16-bit inputs these take the tensor-core path of D = 256 (its own gradient kernels).
    const specs: CaseSpec[] = [
      {
        B: 1,
        T: 160,
        H: 2,
        HK: 1,
        K: 256,
        V: 256,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        cuSeqlens: [0, 0, 1, 64, 129, 129, 150],
      },
      { B: 4, T: 1, H: 4, HK: 2, K: 256, V: 256, dtype: "bfloat16", gated: true, l2norm: true },
      { B: 1, T: 130, H: 3, K: 256, V: 256, dtype: "float16", gated: false },
    ];
    for (const spec of specs) {
      for (const mode of [{ recurrent: false, chunkSize: 64 }, "saved"] as const) {
        await withSeed((seed) => checkGradients(device, spec, mode, seed));
      }
    }
  },
);

deviceTest("delta rule backward: T = 1, T not a multiple of the chunk, odd head counts", async (device) => {
  const cases: [Omit<CaseSpec, "dtype" | "gated">, number][] = [
    [{ B: 3, T: 1, H: 3, HK: 1, K: 64, V: 64 }, 64],
    [{ B: 1, T: 65, H: 3, K: 64, V: 64 }, 64],
    [{ B: 1, T: 63, H: 3, HK: 1, K: 128, V: 128 }, 64],
    [{ B: 1, T: 65, H: 3, K: 16, V: 32 }, 64],
    [{ B: 1, T: 33, H: 5, HK: 5, K: 32, V: 16 }, 32],
    [{ B: 1, T: 129, H: 1, K: 32, V: 32 }, 128],
  ];
  for (const [spec, chunkSize] of cases) {
    for (const gated of [true, false]) {
      await withSeed((seed) =>
        checkGradients(device, { ...spec, dtype: "bfloat16", gated, l2norm: true }, {
          recurrent: false,
          chunkSize,
        }, seed)
      );
    }
  }
});

deviceTest(
  "delta rule backward: packed sequences (empty, 1, 63, 65 tokens), zero gradients past the last",
  async (device) => {
    const cuSeqlens = [0, 0, 1, 64, 129, 129, 150];
    for (const dtype of ["float32", "bfloat16"] as const) {
      for (const gated of [true, false]) {
        await withSeed((seed) =>
          checkGradients(
            device,
            { B: 1, T: 160, H: 2, HK: 1, K: 64, V: 64, dtype, gated, l2norm: true, cuSeqlens },
            { recurrent: false, chunkSize: 64 },
            seed,
          )
        );
      }
    }
    // An empty sequence passes its state through: dInitialState = dFinalState there.
    await withSeed((seed) => {
      using c = new DeltaCase(device, {
        B: 1,
        T: 10,
        H: 1,
        K: 8,
        V: 8,
        dtype: "float32",
        gated: true,
        cuSeqlens: [0, 4, 4, 10],
      }, seed);
      const { dOutput, dFinalState } = c.cotangents(seed);
      const grads = runBackward(c, { recurrent: false, chunkSize: 64 }, dOutput, dFinalState);
      expectSame(
        host(grads.dInitialState!).subarray(64, 128),
        host(dFinalState).subarray(64, 128),
        "dInitialState of the empty sequence",
      );
    });
  },
);

deviceTest(
  "delta rule backward: grouped heads give the sum of the repeated heads' dq and dk",
  async (device) => {
    await withSeed((seed) => {
      const spec: CaseSpec = {
        B: 1,
        T: 70,
        H: 6,
        HK: 2,
        K: 16,
        V: 16,
        dtype: "float32",
        gated: true,
        l2norm: true,
      };
      using c = new DeltaCase(device, spec, seed);
      const { dOutput, dFinalState } = c.cotangents(seed);
      const grouped = runBackward(c, { recurrent: false, chunkSize: 64 }, dOutput, dFinalState);
      const repeat = (a: ArrayLike<number>) => {
        const out = new Float32Array(70 * 6 * 16);
        for (let t = 0; t < 70; t++) {
          for (let h = 0; h < 6; h++) {
            for (let i = 0; i < 16; i++) out[(t * 6 + h) * 16 + i] = a[(t * 2 + Math.floor(h / 3)) * 16 + i];
          }
        }
        return c.own(Tensor.from(out, { shape: [1, 70, 6, 16], device }));
      };
      using r = chunkGatedDeltaRuleBackward(
        dOutput,
        repeat(c.hostInputs.q),
        repeat(c.hostInputs.k),
        c.v,
        c.g!,
        c.beta,
        {
          ...c.options(),
          dFinalState,
        },
      );
      for (const name of ["dq", "dk"] as const) {
        const rep = host(r[name]);
        const summed = new Float64Array(70 * 2 * 16);
        for (let t = 0; t < 70; t++) {
          for (let h = 0; h < 6; h++) {
            for (let i = 0; i < 16; i++) {
              summed[(t * 2 + Math.floor(h / 3)) * 16 + i] += rep[(t * 6 + h) * 16 + i];
            }
          }
        }
        expectClose(grouped[name], summed, 1e-5, `${name} grouped vs summed repeated`);
      }
      for (const name of ["dv", "dbeta", "dg", "dInitialState"] as const) {
        expectClose(grouped[name]!, host(r[name]!), 1e-5, `${name} grouped vs repeated`);
      }
    });
  },
);

deviceTest(
  "delta rule backward: dg and dbeta are float32 whatever the dtype of g and beta (16-bit gates lose nothing)",
  async (device) => {
    for (const gateDtype of ["float16", "bfloat16", "float64"] as const) {
      await withSeed((seed) => {
        using c = new DeltaCase(device, {
          B: 1,
          T: 20,
          H: 2,
          K: 16,
          V: 16,
          dtype: "float32",
          gated: true,
          gateDtype,
          l2norm: true,
          initialState: false,
        }, seed);
        const { dOutput } = c.cotangents(seed);
        using r = chunkGatedDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.g!, c.beta, {
          layout: "bshd",
          useQkL2norm: true,
        });
        assert.equal(r.dg!.dtype, "float32");
        assert.equal(r.dbeta.dtype, "float32");
        assert.equal(r.dq.dtype, "float32");
        assert.equal(r.dInitialState, undefined);
        // float32 inputs: the float32 tolerance holds, which a 16-bit dg (rel. error ~1e-3) would miss.
        const ref = c.referenceBackward(dOutput);
        expectClose(r.dg!, ref.dg, tol("float32").dsmall, `dg (${gateDtype} g)`);
        expectClose(r.dbeta, ref.dbeta, tol("float32").dsmall, `dbeta (${gateDtype} beta)`);
      });
    }
  },
);

// The forward may keep the state before every chunk (and v - w S) for the backward: on CUDA at
// K = V = 128 with 16-bit inputs its Hopper kernel does, and the backward then skips recomputing
// them. Same oracle and tolerances; on other devices and the CPU the forward stores nothing and the
// backward recomputes, so the same checks run there too.
deviceTest(
  "delta rule backward: from the forward's saved states (fixed, packed, GQA, T = 1)",
  async (device) => {
    const specs: CaseSpec[] = [
      { B: 2, T: 130, H: 3, HK: 1, K: 128, V: 128, dtype: "bfloat16", gated: true, l2norm: true },
      // T = 1 with several sequences and heads: dg of one token is a cancellation of large sums (the
      // initial state's term), so a handful of elements makes a fragile relative RMS (seed 4052261334
      // gave 7e-2 over 2 elements, saved or recomputed alike; 16 elements: at most 4e-3 over 41 seeds).
      { B: 4, T: 1, H: 4, HK: 2, K: 128, V: 128, dtype: "bfloat16", gated: true, l2norm: true },
      { B: 1, T: 200, H: 2, HK: 1, K: 128, V: 128, dtype: "float16", gated: false, l2norm: true },
      {
        B: 1,
        T: 160,
        H: 2,
        K: 128,
        V: 128,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        cuSeqlens: [0, 0, 1, 64, 129, 129, 150],
      },
      { B: 1, T: 96, H: 2, K: 64, V: 64, dtype: "bfloat16", gated: true, l2norm: true },
      { B: 1, T: 100, H: 2, HK: 1, K: 256, V: 256, dtype: "bfloat16", gated: true, l2norm: true },
    ];
    const hopper = isHopper(device);
    for (const spec of specs) {
      await withSeed((seed) => {
        let stored = false;
        checkGradients(device, spec, "saved", seed, (x) => stored = x);
        // The Hopper forward stores them at K = V = 128 and 256 (so this test reaches the backward's
        // saved paths: the tensor-core ones at 128 and 256, the general one when it is forced).
        const expected = hopper && (spec.K === 128 || spec.K === 256);
        assert.equal(stored, expected, `states stored for ${JSON.stringify(spec)} on ${device}`);
      });
    }
    // The saved states are device memory: released with the result, by the combined op's backward,
    // or by disposing the op when no backward follows.
    using c = new DeltaCase(device, { ...specs[0], B: 1, T: 70 }, 5);
    const { dOutput } = c.cotangents(5);
    const bhtd = (t: Tensor) => c.own(t.permute(t.ndim === 4 ? [0, 2, 1, 3] : [0, 2, 1]));
    const [q, k, v, g, beta, dO] = [c.q, c.k, c.v, c.g!, c.beta, dOutput].map(bhtd);
    await expectNoLeak(device, () => {
      using r = chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, {
        layout: "bshd",
        saveForBackward: true,
        useQkL2norm: true,
      });
      using op = new GatedDeltaNetOp({ layout: "bhsd", useQkL2norm: true });
      using o = op.forward(q, k, v, g, beta);
      using grads = op.backward(dO);
      using unused = new GatedDeltaNetOp({ layout: "bhsd" });
      using o2 = unused.forward(q, k, v, g, beta);
      assert.ok([r, o, grads, o2].length > 0);
    });
  },
);

deviceTest("delta rule backward: saved states from another call, or disposed, are refused", (device) => {
  using c = new DeltaCase(device, { B: 1, T: 8, H: 1, K: 8, V: 8, dtype: "float32", gated: true }, 1);
  const { dOutput } = c.cotangents(1);
  const { q, k, v, g, beta } = c;
  // A handle from a forward of other sizes, and one of the ungated rule.
  using other = new DeltaCase(device, { B: 1, T: 9, H: 1, K: 8, V: 8, dtype: "float32", gated: true }, 2);
  using fromOther = chunkGatedDeltaRule(other.q, other.k, other.v, other.g!, other.beta, {
    ...other.options(),
    saveForBackward: true,
  });
  assert.throws(
    () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...c.options(), saved: fromOther.saved }),
    (e: unknown) =>
      e instanceof AttnkitError &&
      /saved: from a forward of B=1 T=9 .*, but this backward is B=1 T=8/.test(e.message),
  );
  using ungated = chunkDeltaRule(q, k, v, beta, { ...c.options(), saveForBackward: true });
  assert.throws(
    () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...c.options(), saved: ungated.saved }),
    (e: unknown) =>
      e instanceof AttnkitError &&
      /saved: from a forward of the delta rule, but this backward is of the gated/.test(e.message),
  );
  const r = chunkGatedDeltaRule(q, k, v, g!, beta, { ...c.options(), saveForBackward: true });
  const saved = r.saved!;
  r[Symbol.dispose]();
  assert.ok(saved.disposed, "disposing the result disposes its saved states");
  assert.throws(
    () => chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, { ...c.options(), saved }),
    (e: unknown) => e instanceof AttnkitError && /saved: the saved states were disposed/.test(e.message),
  );
  assert.throws(
    () =>
      chunkGatedDeltaRuleBackward(dOutput, q, k, v, g!, beta, {
        ...c.options(),
        saved: {} as DeltaSavedStates,
      }),
    (e: unknown) =>
      e instanceof AttnkitError && /saved: expected the saved states a forward returned/.test(e.message),
  );
});
