// The float64 oracle of KDA checked on its own: its hand-derived reverse mode against central finite
// differences (every input, grouped heads, packed sequences with empty and one-token ones, positive
// and strongly negative gates), agreement with the delta-rule oracle when the gate is the same on
// every channel, packed sequences against separate calls, and refusal of bad inputs.
import assert from "node:assert/strict";
import { AttnkitError } from "../ffi/errors.ts";
import { deltaRuleReference, deltaRuleReferenceBackward } from "../reference/delta_rule.ts";
import {
  kdaReference,
  kdaReferenceBackward,
  type KdaReferenceGradients,
  type KdaReferenceInputs,
} from "../reference/kda.ts";
import { withSeed } from "./helpers.ts";
import { expectNear, filled, generator } from "./oracle_checks.ts";
import { expectOracleGradients, randomQkv, randomState, type RecurrentShape } from "./recurrent_oracle.ts";

type Inputs = KdaReferenceInputs & {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  gate: Float64Array;
  beta: Float64Array;
  initialState: Float64Array;
};

function inputs(c: RecurrentShape, rand: () => number, gateLow = -0.7, gateHigh = 0): Inputs {
  return {
    ...c,
    ...randomQkv(c, rand),
    gate: filled(c.B * c.T * c.H * c.K, rand, gateLow, gateHigh),
    beta: filled(c.B * c.T * c.H, rand, 0, 1),
    scale: 0.8,
    initialState: randomState(c, rand),
  };
}

type Field = "q" | "k" | "v" | "gate" | "beta" | "initialState";

function checkAgainstFiniteDifferences(
  c: RecurrentShape,
  seed: number,
  gateLow?: number,
  gateHigh?: number,
): void {
  const rand = generator(seed);
  const x = inputs(c, rand, gateLow, gateHigh);
  const fields: [Field, keyof KdaReferenceGradients][] = [
    ["q", "dq"],
    ["k", "dk"],
    ["v", "dv"],
    ["gate", "dgate"],
    ["beta", "dbeta"],
    ["initialState", "dInitialState"],
  ];
  const oracle = { forward: kdaReference, backward: kdaReferenceBackward };
  expectOracleGradients(oracle, x, rand, fields, {
    tol: 1e-6,
    what: (grad) => `${grad} ${JSON.stringify(c)}`,
  });
}

Deno.test("kda oracle: the backward matches finite differences (dense, GQA, K != V)", async () => {
  await withSeed((seed) => checkAgainstFiniteDifferences({ B: 2, T: 5, H: 2, HK: 1, K: 3, V: 2 }, seed));
  await withSeed((seed) => checkAgainstFiniteDifferences({ B: 1, T: 4, H: 3, HK: 3, K: 2, V: 4 }, seed));
});

Deno.test("kda oracle: the backward matches finite differences (packed, empty and 1-token sequences)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 1, T: 9, H: 2, HK: 2, K: 2, V: 3, cuSeqlens: [0, 3, 3, 4, 8] }, seed)
  );
});

Deno.test("kda oracle: the backward matches finite differences (strong and positive gates)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 1, T: 5, H: 1, HK: 1, K: 3, V: 2 }, seed, -6, -4)
  );
  // Outside the documented range the recurrence is still exact, and so is its gradient.
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 1, T: 4, H: 1, HK: 1, K: 2, V: 2 }, seed, 0, 0.3)
  );
});

Deno.test("kda oracle: a gate equal on every channel is the gated delta rule", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const c = { B: 2, T: 7, H: 4, HK: 2, K: 5, V: 3 };
    const x = inputs(c, rand);
    const g = filled(c.B * c.T * c.H, rand, -1, 0);
    const gate = Float64Array.from({ length: g.length * c.K }, (_, i) => g[Math.floor(i / c.K)]);
    const kx = { ...x, gate };
    const dx = { ...x, g };
    const ours = kdaReference(kx), theirs = deltaRuleReference(dx);
    expectNear(ours.output, theirs.output, "output");
    expectNear(ours.finalState, theirs.finalState, "final state");
    const dO = filled(ours.output.length, rand, -1, 1), dHT = filled(ours.finalState.length, rand, -1, 1);
    const a = kdaReferenceBackward(kx, dO, dHT), b = deltaRuleReferenceBackward(dx, dO, dHT);
    for (const name of ["dq", "dk", "dv", "dbeta", "dInitialState"] as const) {
      expectNear(a[name], b[name], name);
    }
    // The scalar gate's gradient is the sum of the per-channel ones.
    const summed = Float64Array.from(
      b.dg,
      (_, i) => a.dgate.slice(i * c.K, (i + 1) * c.K).reduce((s, e) => s + e),
    );
    expectNear(summed, b.dg, "dgate summed over channels");
  });
});

Deno.test("kda oracle: packed sequences equal separate calls; rows past the end are zero", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const cu = [0, 4, 4, 5, 9];
    const c = { B: 1, T: 11, H: 2, HK: 1, K: 3, V: 2, cuSeqlens: cu };
    const x = inputs(c, rand);
    const packed = kdaReference(x);
    const KV = c.K * c.V;
    for (let n = 0; n + 1 < cu.length; n++) {
      const [b, e] = [cu[n], cu[n + 1]];
      const slice = (a: Float64Array, row: number) => a.slice(b * row, e * row);
      const one = kdaReference({
        B: 1,
        T: e - b,
        H: c.H,
        HK: c.HK,
        K: c.K,
        V: c.V,
        scale: x.scale,
        q: slice(x.q, c.HK * c.K),
        k: slice(x.k, c.HK * c.K),
        v: slice(x.v, c.H * c.V),
        gate: slice(x.gate, c.H * c.K),
        beta: slice(x.beta, c.H),
        initialState: x.initialState.slice(n * c.H * KV, (n + 1) * c.H * KV),
      });
      expectNear(packed.output.slice(b * c.H * c.V, e * c.H * c.V), one.output, `output of sequence ${n}`);
      expectNear(packed.finalState.slice(n * c.H * KV, (n + 1) * c.H * KV), one.finalState, `state ${n}`);
    }
    assert.ok(packed.output.slice(9 * c.H * c.V).every((o) => o === 0));
    const g = kdaReferenceBackward(x, filled(packed.output.length, rand, -1, 1));
    assert.ok(
      g.dq.slice(9 * c.K).every((o) => o === 0) && g.dgate.slice(9 * c.H * c.K).every((o) => o === 0),
    );
  });
});

Deno.test("kda oracle: checkpoints are the states every few tokens", () => {
  const rand = generator(3);
  const c = { B: 1, T: 5, H: 1, HK: 1, K: 2, V: 2 };
  const x = inputs(c, rand);
  const r = kdaReference({ ...x, checkpointEvery: 2 });
  assert.equal(r.checkpoints!.length, 4 * 4);
  expectNear(r.checkpoints!.slice(0, 4), x.initialState, "state before token 0");
  expectNear(r.checkpoints!.slice(12), r.finalState, "state after the last token");
});

Deno.test("kda oracle: bad inputs are refused naming the field", () => {
  const x = inputs({ B: 1, T: 2, H: 1, HK: 1, K: 2, V: 2 }, generator(1));
  const cases: [unknown, RegExp][] = [
    [{ ...x, gate: x.gate.slice(1) }, /x\.gate/],
    [{ ...x, beta: undefined }, /x\.beta: required/],
    [{ ...x, HK: 2 }, /x\.HK/],
    [{ ...x, scale: Infinity }, /x\.scale/],
  ];
  for (const [bad, message] of cases) {
    assert.throws(
      () => kdaReference(bad as KdaReferenceInputs),
      (e) => e instanceof AttnkitError && message.test(e.message),
    );
  }
  assert.throws(() => kdaReferenceBackward(x, [1]), /dOutput/);
});
