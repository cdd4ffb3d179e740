// Decode (one token per sequence) of DeltaNet and Gated DeltaNet: stepped T times it equals the
// recurrence (the float64 oracle and the recurrent kernel); float32 keeps full float32 precision
// (no TF32); in-place updates; states in the dtype of q. Outputs NaN-poisoned before each step.
//
// Tolerance (relative RMS against float64): float16/bfloat16 0.005 (outputs, states); float32
// 2e-6 for one step and 5e-5 after T steps (far tighter: TF32 would be about 1e-3).
import assert from "node:assert/strict";
import {
  AttnkitError,
  DeltaNetDecodeFwdOp,
  type Device,
  type DType,
  GatedDeltaNetDecodeFwdOp,
  lastPlan,
  recurrentDeltaRule,
  recurrentGatedDeltaRule,
  Tensor,
  withTuning,
} from "../mod.ts";
import { deviceTest, withSeed } from "./helpers.ts";
import { type CaseSpec, DeltaCase, expectClose, expectSame, host, poisoned, tol } from "./linear_fixtures.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";

/** Token t of a [B, T, heads, D] (or [B, T, H]) host array as a [B, heads, D] device tensor. */
function step(
  values: ArrayLike<number>,
  shape: readonly number[],
  t: number,
  dtype: DType,
  device: Device,
): Tensor {
  const [B, T, ...rest] = shape;
  const row = rest.reduce((a, b) => a * b, 1);
  const out = new Float32Array(B * row);
  for (let b = 0; b < B; b++) for (let i = 0; i < row; i++) out[b * row + i] = values[(b * T + t) * row + i];
  return Tensor.from(out, { shape: [B, ...rest], dtype, device });
}

/** Runs T decode steps from the case's initial state; returns the stacked outputs and the last state. */
function decodeAll(c: DeltaCase, inPlace: boolean): { outputs: Float64Array; state: Tensor } {
  const { B, T, H, V, dtype, gated } = c.spec;
  const options = { useQkL2norm: c.spec.l2norm ?? false, scale: c.spec.scale, inPlace };
  const gatedOp = new GatedDeltaNetDecodeFwdOp(options);
  const plainOp = new DeltaNetDecodeFwdOp(options);
  const x = c.hostInputs;
  const gateDtype = c.spec.gateDtype ?? "float32";
  let state = c.own(c.initialState!.clone());
  const outputs = new Float64Array(B * T * H * V);
  for (let t = 0; t < T; t++) {
    const q = c.own(step(x.q, c.q.shape, t, dtype, c.device));
    const k = c.own(step(x.k, c.k.shape, t, dtype, c.device));
    const v = c.own(step(x.v, c.v.shape, t, dtype, c.device));
    const beta = c.own(step(x.beta, c.beta.shape, t, gateDtype, c.device));
    const output = c.own(poisoned([B, H, V], dtype, c.device));
    const r = gated
      ? gatedOp.forward(q, k, v, c.own(step(x.g!, c.g!.shape, t, gateDtype, c.device)), beta, state, {
        output,
      })
      : plainOp.forward(q, k, v, beta, state, { output });
    assert.equal(r.output, output);
    if (inPlace) assert.equal(r.newState, state, "inPlace returns the given state");
    else state = c.own(r.newState);
    const o = host(output);
    for (let b = 0; b < B; b++) outputs.set(o.subarray(b * H * V, (b + 1) * H * V), (b * T + t) * H * V);
  }
  return { outputs, state };
}

deviceTest(
  "decode: stepped T times equals the recurrence (oracle and recurrent kernel), gated and not",
  async (device) => {
    for (const dtype of ["float32", "bfloat16", "float16"] as const) {
      for (const gated of [true, false]) {
        await withSeed((seed) => {
          const spec: CaseSpec = { B: 3, T: 20, H: 4, HK: 2, K: 32, V: 48, dtype, gated, l2norm: true };
          using c = new DeltaCase(device, spec, seed);
          const { outputs, state } = decodeAll(c, false);
          const ref = c.reference();
          const t = tol(dtype);
          expectClose(outputs, ref.output, t.output, `${dtype} decoded outputs`);
          expectClose(state, ref.finalState, t.state, `${dtype} decoded state`);
          const options = { ...c.options(), outputFinalState: true };
          using rec = gated
            ? recurrentGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, options)
            : recurrentDeltaRule(c.q, c.k, c.v, c.beta, options);
          expectClose(outputs, host(rec.output), t.output, `${dtype} decode vs recurrent kernel`);
          expectClose(
            state,
            host(rec.finalState!),
            dtype === "float32" ? 1e-5 : t.state,
            `${dtype} state vs recurrent`,
          );
        });
      }
    }
  },
);

deviceTest("decode: in place gives the same outputs and state as a new state", async (device) => {
  await withSeed((seed) => {
    const spec: CaseSpec = { B: 2, T: 6, H: 2, K: 16, V: 16, dtype: "bfloat16", gated: true, l2norm: true };
    using c = new DeltaCase(device, spec, seed);
    const fresh = decodeAll(c, false);
    const inPlace = decodeAll(c, true);
    expectSame(inPlace.outputs, fresh.outputs, "in place vs new state");
    expectSame(host(inPlace.state), host(fresh.state), "in place vs new state");
  });
});

deviceTest("decode: float32 keeps full float32 precision (K = V = 128, no TF32)", async (device) => {
  await withSeed((seed) => {
    const spec: CaseSpec = {
      B: 4,
      T: 1,
      H: 4,
      HK: 1,
      K: 128,
      V: 128,
      dtype: "float32",
      gated: true,
      scale: 0.7,
    };
    using c = new DeltaCase(device, spec, seed);
    const { outputs, state } = decodeAll(c, false);
    const ref = c.reference();
    expectClose(outputs, ref.output, 2e-6, "fp32 decode output");
    expectClose(state, ref.finalState, 2e-6, "fp32 decode state");
  });
});

deviceTest(
  "decode: a state in the dtype of q (bfloat16, float16) is read and written in that dtype",
  async (device) => {
    for (const dtype of ["bfloat16", "float16"] as const) {
      await withSeed((seed) => {
        const spec: CaseSpec = { B: 2, T: 1, H: 2, K: 32, V: 32, dtype, gated: true, l2norm: true };
        using c = new DeltaCase(device, spec, seed);
        const state = c.own(c.initialState!.cast(dtype));
        const x = c.hostInputs;
        const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true });
        const output = c.own(poisoned([2, 2, 32], dtype, device));
        const newState = c.own(poisoned([2, 2, 32, 32], dtype, device));
        const r = op.forward(
          c.own(step(x.q, c.q.shape, 0, dtype, device)),
          c.own(step(x.k, c.k.shape, 0, dtype, device)),
          c.own(step(x.v, c.v.shape, 0, dtype, device)),
          c.own(step(x.g!, c.g!.shape, 0, "float32", device)),
          c.own(step(x.beta, c.beta.shape, 0, "float32", device)),
          state,
          { output, newState },
        );
        assert.equal(r.newState.dtype, dtype);
        const ref = deltaRuleReference({ ...x, initialState: host(state) });
        expectClose(output, ref.output, 0.005, `${dtype} output from a ${dtype} state`);
        expectClose(newState, ref.finalState, 0.005, `${dtype} new state`);
      });
    }
  },
);

// Each decode kernel on the shapes that break it: the tile kernel at K 64 / 128 / 256 (value columns in
// slices of 8192 / K, the last one partial), odd head counts with grouped q/k heads, fp32 and 16-bit states,
// in place or not; the register kernel pinned on the same calls; unaligned rows and other K on the register
// kernel under the planner. One step from a random state against the float64 oracle.
deviceTest(
  "decode: each kernel against the oracle (tile slices, GQA, 16-bit states, in place)",
  async (device) => {
    const cases: (CaseSpec & { state: "float32" | "input"; inPlace: boolean; kernel: "tile" | "simt" })[] = [
      {
        B: 3,
        T: 1,
        H: 3,
        HK: 1,
        K: 64,
        V: 200,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        state: "float32",
        inPlace: false,
        kernel: "tile",
      },
      {
        B: 2,
        T: 1,
        H: 5,
        HK: 5,
        K: 128,
        V: 80,
        dtype: "float16",
        gated: false,
        l2norm: true,
        state: "input",
        inPlace: true,
        kernel: "tile",
      },
      {
        B: 2,
        T: 1,
        H: 2,
        HK: 1,
        K: 256,
        V: 40,
        dtype: "float32",
        gated: true,
        state: "float32",
        inPlace: true,
        kernel: "tile",
      },
      {
        B: 1,
        T: 1,
        H: 4,
        HK: 2,
        K: 128,
        V: 128,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        state: "input",
        inPlace: false,
        kernel: "tile",
      },
      // Rows of 42 fp32 values are not 16-byte aligned; K 96 has no tile kernel.
      {
        B: 2,
        T: 1,
        H: 3,
        HK: 3,
        K: 64,
        V: 42,
        dtype: "float32",
        gated: true,
        state: "float32",
        inPlace: false,
        kernel: "simt",
      },
      {
        B: 2,
        T: 1,
        H: 2,
        HK: 1,
        K: 96,
        V: 32,
        dtype: "bfloat16",
        gated: true,
        l2norm: true,
        state: "float32",
        inPlace: true,
        kernel: "simt",
      },
    ];
    for (const [i, spec] of cases.entries()) {
      const pins = spec.kernel === "tile" ? [undefined, "simt"] : [undefined];
      for (const pin of pins) {
        await withSeed((seed) => {
          using c = new DeltaCase(device, spec, seed + i);
          const { B, H, K, V, dtype } = spec;
          const stateDtype = spec.state === "float32" ? "float32" : dtype;
          const state = c.own(c.initialState!.cast(stateDtype));
          const before = host(state);
          const x = c.hostInputs;
          const output = c.own(poisoned([B, H, V], dtype, device));
          const newState = spec.inPlace ? state : c.own(poisoned([B, H, K, V], stateDtype, device));
          const row = (t: Tensor) => c.own(t.reshape([t.shape[0], ...t.shape.slice(2)]));
          const args = [row(c.q), row(c.k), row(c.v)] as const;
          const run = () => {
            const kernelMap = pin && i % 2 === 0 ? { "linear.decode": pin } : undefined;
            const options = { useQkL2norm: spec.l2norm ?? false, inPlace: spec.inPlace, kernelMap };
            const out = { output, ...(spec.inPlace ? {} : { newState }) };
            return spec.gated
              ? new GatedDeltaNetDecodeFwdOp(options).forward(...args, row(c.g!), row(c.beta), state, out)
              : new DeltaNetDecodeFwdOp(options).forward(...args, row(c.beta), state, out);
          };
          // The register kernel pinned through the tuning table on odd cases, the op's kernelMap on even ones.
          const r = pin && i % 2 === 1 ? withTuning({ "linear.decode": pin }, run) : run();
          assert.equal(r.newState, newState);
          const name = `K ${K} V ${V} ${dtype} ${stateDtype} state, ${pin ?? "planner"}`;
          if (device !== "cpu") {
            const want = (pin ?? spec.kernel) === "tile" ? `tile<${dtype}, D${K}>` : `simt<${dtype}>`;
            assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [`linear.decode.${want}`], name);
          }
          const ref = deltaRuleReference({ ...x, initialState: before });
          const t = tol(dtype);
          expectClose(output, ref.output, t.output, `${name}: output`);
          expectClose(
            r.newState,
            ref.finalState,
            stateDtype === "float32" ? t.state : 0.005,
            `${name}: state`,
          );
        });
      }
    }
  },
);

deviceTest("decode: a kernel pinned where it cannot serve is refused, empty batches too", (device) => {
  // The op's kernelMap is checked when the op is built, on any device.
  const badMap = (kernelMap: unknown) =>
    assert.throws(
      () => new GatedDeltaNetDecodeFwdOp({ kernelMap } as { kernelMap: Record<string, string> }),
      (e: Error) => e instanceof AttnkitError && /options\.kernelMap/.test(e.message),
    );
  badMap({ "linear.fwd.state": "mma" });
  badMap({ "linear.decode": "fast" });
  badMap(["tile"]);
  if (device === "cpu") return;
  for (const B of [2, 0]) {
    const q = Tensor.zeros([B, 2, 96], { dtype: "bfloat16", device });
    const v = Tensor.zeros([B, 2, 32], { dtype: "bfloat16", device });
    const beta = Tensor.zeros([B, 2], { dtype: "float32", device });
    const state = Tensor.zeros([B, 2, 96, 32], { dtype: "float32", device });
    const refused = (e: Error) =>
      e instanceof AttnkitError && /linear\.decode=tile cannot serve this call: K is not 64/.test(e.message);
    try {
      const pin = { "linear.decode": "tile" };
      assert.throws(
        () => withTuning(pin, () => new DeltaNetDecodeFwdOp().forward(q, q, v, beta, state)),
        refused,
      );
      assert.throws(() => new DeltaNetDecodeFwdOp({ kernelMap: pin }).forward(q, q, v, beta, state), refused);
    } finally {
      for (const t of [q, v, beta, state]) t.dispose();
    }
  }
});
