// The float64 delta-rule oracle checked on its own: a hand-computed step, and its hand-derived
// reverse mode against central finite differences on tiny shapes (every input, including the L2
// norm, grouped heads, packed sequences with an empty one and an uncovered tail).
import assert from "node:assert/strict";
import {
  type DeltaReferenceInputs,
  deltaRuleReference,
  deltaRuleReferenceBackward,
} from "../reference/delta_rule.ts";
import { withSeed } from "./helpers.ts";
import { filled, generator } from "./oracle_checks.ts";
import { expectOracleGradients, randomQkv, randomState, type RecurrentShape } from "./recurrent_oracle.ts";

interface Tiny extends RecurrentShape {
  gated: boolean;
  l2norm: boolean;
}

type TinyInputs = DeltaReferenceInputs & {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  g?: Float64Array;
  beta: Float64Array;
  initialState: Float64Array;
};

function tinyInputs(c: Tiny, rand: () => number): TinyInputs {
  return {
    ...c,
    ...randomQkv(c, rand),
    g: c.gated ? filled(c.B * c.T * c.H, rand, -0.7, 0) : undefined,
    beta: filled(c.B * c.T * c.H, rand, 0.1, 1),
    scale: 0.8,
    initialState: randomState(c, rand),
  };
}

function checkAgainstFiniteDifferences(c: Tiny, seed: number): void {
  const rand = generator(seed);
  const x = tinyInputs(c, rand);
  const fields: [
    "q" | "k" | "v" | "beta" | "initialState" | "g",
    "dq" | "dk" | "dv" | "dbeta" | "dInitialState" | "dg",
  ][] = [
    ["q", "dq"],
    ["k", "dk"],
    ["v", "dv"],
    ["beta", "dbeta"],
    ["initialState", "dInitialState"],
  ];
  if (c.gated) fields.push(["g", "dg"]);
  const oracle = { forward: deltaRuleReference, backward: deltaRuleReferenceBackward };
  expectOracleGradients(oracle, x, rand, fields, { tol: 1e-7, what: (grad) => grad });
}

Deno.test("delta-rule oracle: one gated step by hand (K = V = 1)", () => {
  const [s, q, k, v, g, beta, scale] = [0.7, 1.3, -0.4, 2.0, -0.25, 0.6, 0.9];
  const a = Math.exp(g);
  const u = beta * (v - a * s * k);
  const S = a * s + k * u;
  const r = deltaRuleReference({
    B: 1,
    T: 1,
    H: 1,
    HK: 1,
    K: 1,
    V: 1,
    q: [q],
    k: [k],
    v: [v],
    g: [g],
    beta: [beta],
    scale,
    initialState: [s],
  });
  assert.ok(Math.abs(r.finalState[0] - S) < 1e-15);
  assert.ok(Math.abs(r.output[0] - scale * S * q) < 1e-15);
  assert.ok(Math.abs(r.residual[0] - u) < 1e-15);
});

Deno.test("delta-rule oracle: two ungated steps by hand (K = 2, V = 1, grouped heads read one q/k head)", () => {
  // Two value heads share one q/k head; head 1 has a different v and beta.
  const k = [[1, 0], [0.6, 0.8]], q = [[0.5, -1], [2, 1]];
  const v = [[1, 3], [-2, 0.5]], beta = [[0.5, 1], [0.25, 0.75]];
  const expected: number[] = [];
  const states: number[][] = [[0, 0], [0, 0]];
  const out = [[0, 0], [0, 0]];
  for (let t = 0; t < 2; t++) {
    for (let h = 0; h < 2; h++) {
      const S = states[h];
      const p = S[0] * k[t][0] + S[1] * k[t][1];
      const u = beta[t][h] * (v[t][h] - p);
      S[0] += k[t][0] * u;
      S[1] += k[t][1] * u;
      out[t][h] = S[0] * q[t][0] + S[1] * q[t][1];
    }
  }
  expected.push(out[0][0], out[0][1], out[1][0], out[1][1]);
  const r = deltaRuleReference({
    B: 1,
    T: 2,
    H: 2,
    HK: 1,
    K: 2,
    V: 1,
    q: q.flat(),
    k: k.flat(),
    v: v.flat(),
    beta: beta.flat(),
    scale: 1,
  });
  assert.deepEqual(
    Array.from(r.output, (x) => Math.round(x * 1e12) / 1e12),
    expected.map((x) => Math.round(x * 1e12) / 1e12),
  );
  assert.deepEqual(
    Array.from(r.finalState, (x) => Math.round(x * 1e12) / 1e12),
    [...states[0], ...states[1]].map((x) => Math.round(x * 1e12) / 1e12),
  );
});

Deno.test("delta-rule oracle: reverse mode equals finite differences (gated, L2 norm, grouped heads, batch 2)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 2, T: 5, H: 4, HK: 2, K: 3, V: 2, gated: true, l2norm: true }, seed)
  );
});

Deno.test("delta-rule oracle: reverse mode equals finite differences (ungated, raw q/k)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 1, T: 6, H: 2, HK: 2, K: 4, V: 3, gated: false, l2norm: false }, seed)
  );
});

Deno.test("delta-rule oracle: reverse mode equals finite differences (packed, an empty sequence, uncovered tail)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences(
      { B: 1, T: 7, H: 2, HK: 1, K: 3, V: 2, gated: true, l2norm: true, cuSeqlens: [0, 2, 2, 5, 6] },
      seed,
    )
  );
});

Deno.test("delta-rule oracle: checkpoints are the states before every chunk and after the last token", () => {
  const rand = generator(7);
  const x = {
    ...tinyInputs({ B: 1, T: 7, H: 1, HK: 1, K: 2, V: 2, gated: true, l2norm: false }, rand),
    checkpointEvery: 3,
  };
  const full = deltaRuleReference(x);
  // State before token 3 = final state of the first 3 tokens.
  const prefix = deltaRuleReference({
    ...x,
    T: 3,
    q: x.q.slice(0, 6),
    k: x.k.slice(0, 6),
    v: x.v.slice(0, 6),
    g: x.g!.slice(0, 3),
    beta: x.beta.slice(0, 3),
    checkpointEvery: undefined,
  });
  assert.deepEqual(Array.from(full.checkpoints!.slice(4, 8)), Array.from(prefix.finalState));
  assert.deepEqual(Array.from(full.checkpoints!.slice(0, 4)), Array.from(x.initialState!));
  assert.deepEqual(Array.from(full.checkpoints!.slice(12, 16)), Array.from(full.finalState));
});
