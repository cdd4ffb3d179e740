// A NaN left in the device memory pool must not reach a gradient. The backward's workspaces and the
// forward's saved states come from the pool; rows past a chunk's length are padding that no stage
// writes, so a kernel that reads them and multiplies by zero would turn a stale NaN into a NaN
// gradient. The pool is filled with NaN first (a large NaN tensor, freed), then forward with saved
// states and backward run on shapes whose last chunks are partial.
import assert from "node:assert/strict";
import { chunkGatedDeltaRule, chunkGatedDeltaRuleBackward, type Device, Tensor } from "../mod.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";
import { type CaseSpec, DeltaCase, expectClose, host, tol } from "./linear_fixtures.ts";

/** Fills free pool memory with NaN: a large NaN tensor, returned to the pool at once. */
function poisonPool(device: Device): void {
  using big = Tensor.empty([device === "cpu" ? 1 << 20 : 96 << 20], { dtype: "float32", device });
  big.fill(NaN);
}

const SPECS: CaseSpec[] = [
  { B: 2, T: 150, H: 4, K: 128, V: 128, dtype: "bfloat16", gated: true, l2norm: true },
  { B: 1, T: 300, H: 3, K: 128, V: 128, dtype: "bfloat16", gated: true, cuSeqlens: [0, 22, 150, 300] },
  { B: 2, T: 100, H: 2, K: 64, V: 64, dtype: "float16", gated: true, l2norm: true },
];

deviceTest(
  "gated delta rule backward from saved states: NaN left in pool memory never reaches a gradient",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const spec of SPECS) {
          poisonPool(device);
          using c = new DeltaCase(device, spec, seed);
          const { dOutput, dFinalState } = c.cotangents(seed);
          using r = chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, {
            ...c.options(),
            saveForBackward: true,
          });
          poisonPool(device);
          const out = c.backwardBuffers();
          chunkGatedDeltaRuleBackward(dOutput, c.q, c.k, c.v, c.g!, c.beta, {
            ...c.options(),
            dFinalState,
            out,
            saved: r.saved,
          });
          const ref = c.referenceBackward(dOutput, dFinalState);
          const t = tol(spec.dtype);
          const what = JSON.stringify(spec);
          for (const [name, g] of Object.entries(out)) {
            if (g) assert.ok(host(g).every(Number.isFinite), `${name} has a non-finite value (${what})`);
          }
          expectClose(out.dq, ref.dq, t.dqkv, `dq (${what})`);
          expectClose(out.dk, ref.dk, t.dqkv, `dk (${what})`);
          expectClose(out.dv, ref.dv, t.dqkv, `dv (${what})`);
          expectClose(out.dg!, ref.dg, t.dsmall, `dg (${what})`);
          expectClose(out.dbeta, ref.dbeta, t.dsmall, `dbeta (${what})`);
        }
      })),
);
