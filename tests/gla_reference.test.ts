// The float64 oracle of the gated linear-attention family (GLA, simple GLA, retention, linear
// attention) checked on its own: its hand-derived reverse mode against central finite differences,
// chaining through the state, packed sequences against separate calls, the variants against each
// other and against the parallel (quadratic) form computed here independently, gate spikes, T = 0 / 1,
// and refusal of bad inputs.
import assert from "node:assert/strict";
import { AttnkitError } from "../ffi/errors.ts";
import {
  gatedLinearReference,
  gatedLinearReferenceBackward,
  type GatedLinearReferenceGradients,
  type GatedLinearReferenceInputs,
  NORMALIZE_EPS,
  retentionLogDecay,
} from "../reference/linear_attention.ts";
import { withSeed } from "./helpers.ts";
import { expectNear, filled, generator } from "./oracle_checks.ts";
import { expectOracleGradients, randomQkv, randomState, type RecurrentShape } from "./recurrent_oracle.ts";

type Gates = { gk?: boolean; g?: boolean; gGamma?: boolean; normalize?: boolean };

type Inputs = GatedLinearReferenceInputs & {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  initialState: Float64Array;
};

function inputs(c: RecurrentShape, gates: Gates, rand: () => number): Inputs {
  return {
    ...c,
    // Positive q and k under normalize keep the normaliser away from 0 (as elu+1 features would).
    ...randomQkv(c, rand, gates.normalize ? 0.1 : -1),
    gk: gates.gk ? filled(c.B * c.T * c.H * c.K, rand, -0.7, 0) : undefined,
    g: gates.g ? filled(c.B * c.T * c.H, rand, -0.5, 0) : undefined,
    gGamma: gates.gGamma ? filled(c.H, rand, -0.3, -0.01) : undefined,
    normalize: gates.normalize,
    scale: 0.8,
    initialState: randomState(c, rand),
  };
}

type Field = "q" | "k" | "v" | "gk" | "g" | "gGamma" | "initialState";

function checkAgainstFiniteDifferences(c: RecurrentShape, gates: Gates, seed: number): void {
  const rand = generator(seed);
  const x = inputs(c, gates, rand);
  const fields: [Field, keyof GatedLinearReferenceGradients][] = [
    ["q", "dq"],
    ["k", "dk"],
    ["v", "dv"],
    ["initialState", "dInitialState"],
  ];
  if (gates.gk) fields.push(["gk", "dgk"]);
  if (gates.g) fields.push(["g", "dg"]);
  if (gates.gGamma) fields.push(["gGamma", "dgGamma"]);
  const oracle = { forward: gatedLinearReference, backward: gatedLinearReferenceBackward };
  expectOracleGradients(oracle, x, rand, fields, { tol: 1e-7, what: (grad) => grad });
}

// The parallel form, written here independently of the oracle's recurrence: with G_t the running sum of
// the log decays of the sequence (per key channel),
//   o_t = scale [ sum_{s<=t} sum_i q_ti k_si exp(G_ti - G_si) v_s + sum_i q_ti exp(G_ti) S0_i ]
// (normalize not covered). The per-channel log decay is gk + g + gGamma.
function parallelForm(x: Inputs): Float64Array {
  const { B, T, H, HK, K, V } = x;
  const scale = x.scale ?? K ** -0.5;
  const out = new Float64Array(B * T * H * V);
  const seqs = x.cuSeqlens
    ? x.cuSeqlens.slice(1).map((end, n) => ({ b: 0, begin: x.cuSeqlens![n], end, n }))
    : Array.from({ length: B }, (_, b) => ({ b, begin: 0, end: T, n: b }));
  for (const { b, begin, end, n } of seqs) {
    for (let h = 0; h < H; h++) {
      const hk = h / (H / HK) | 0;
      const logDecay = (t: number, i: number) =>
        (x.gk ? x.gk[((b * T + t) * H + h) * K + i] : 0) + (x.g ? x.g[(b * T + t) * H + h] : 0) +
        (x.gGamma ? x.gGamma[h] : 0);
      const G: number[][] = [];
      let run = new Array(K).fill(0);
      for (let t = begin; t < end; t++) {
        run = run.map((s, i) => s + logDecay(t, i));
        G.push(run);
      }
      const qk = (src: Float64Array, t: number, i: number) => src[((b * T + t) * HK + hk) * K + i];
      for (let t = begin; t < end; t++) {
        for (let c = 0; c < V; c++) {
          let o = 0;
          for (let s = begin; s <= t; s++) {
            let w = 0;
            for (let i = 0; i < K; i++) {
              w += qk(x.q, t, i) * qk(x.k, s, i) * Math.exp(G[t - begin][i] - G[s - begin][i]);
            }
            o += w * x.v[((b * T + s) * H + h) * V + c];
          }
          for (let i = 0; i < K; i++) {
            o += qk(x.q, t, i) * Math.exp(G[t - begin][i]) * x.initialState[((n * H + h) * K + i) * V + c];
          }
          out[((b * T + t) * H + h) * V + c] = scale * o;
        }
      }
    }
  }
  return out;
}

Deno.test("gla oracle: reverse mode equals finite differences (GLA, grouped heads, batch 2)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 2, T: 5, H: 4, HK: 2, K: 3, V: 2 }, { gk: true }, seed)
  );
});

Deno.test("gla oracle: reverse mode equals finite differences (all gates, packed, an empty sequence, uncovered tail)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences(
      { B: 1, T: 7, H: 2, HK: 1, K: 3, V: 2, cuSeqlens: [0, 2, 2, 5, 6] },
      { gk: true, g: true, gGamma: true },
      seed,
    )
  );
});

Deno.test("gla oracle: reverse mode equals finite differences (linear attention with normalize, K != V)", async () => {
  await withSeed((seed) =>
    checkAgainstFiniteDifferences({ B: 1, T: 6, H: 2, HK: 2, K: 4, V: 3 }, { normalize: true }, seed)
  );
  await withSeed((seed) =>
    checkAgainstFiniteDifferences(
      { B: 1, T: 5, H: 2, HK: 2, K: 2, V: 3, cuSeqlens: [0, 3, 5] },
      { normalize: true, g: true },
      seed,
    )
  );
});

Deno.test("gla oracle: the recurrence equals the parallel form (GLA, simple GLA, gate spikes of -20)", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    for (const gates of [{ gk: true }, { g: true, gGamma: true }, {}] as Gates[]) {
      const x = inputs({ B: 2, T: 9, H: 3, HK: 3, K: 3, V: 2 }, gates, rand);
      if (x.gk) { for (let i = 0; i < x.gk.length; i += 5) (x.gk as Float64Array)[i] = -20; }
      if (x.g) { for (let i = 0; i < x.g.length; i += 4) (x.g as Float64Array)[i] = -20; }
      const r = gatedLinearReference(x);
      expectNear(r.output, parallelForm(x), `output (${JSON.stringify(gates)})`, 1e-11);
      const grads = gatedLinearReferenceBackward(x, filled(r.output.length, rand, -1, 1), r.finalState);
      for (const [name, a] of Object.entries(grads)) {
        assert.ok(a.every(Number.isFinite), `${name}: not finite under a gate spike of -20`);
      }
    }
  });
});

Deno.test("gla oracle: one call equals two chained through the state (forward and backward)", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const [B, T, H, HK, K, V, cut] = [2, 7, 2, 1, 3, 2, 3];
    const x = inputs({ B, T, H, HK, K, V }, { gk: true, g: true, gGamma: true }, rand);
    const whole = gatedLinearReference(x);
    // Slices of the token axis [lo, hi) of a [B, T, ...rest] array.
    const part = (a: ArrayLike<number>, inner: number, lo: number, hi: number) => {
      const out = new Float64Array(B * (hi - lo) * inner);
      for (let b = 0; b < B; b++) {
        for (let t = lo; t < hi; t++) {
          for (let e = 0; e < inner; e++) {
            out[(b * (hi - lo) + t - lo) * inner + e] = a[(b * T + t) * inner + e];
          }
        }
      }
      return out;
    };
    const slice = (lo: number, hi: number, initialState: Float64Array): GatedLinearReferenceInputs => ({
      ...x,
      T: hi - lo,
      q: part(x.q, HK * K, lo, hi),
      k: part(x.k, HK * K, lo, hi),
      v: part(x.v, H * V, lo, hi),
      gk: part(x.gk!, H * K, lo, hi),
      g: part(x.g!, H, lo, hi),
      initialState,
    });
    const first = slice(0, cut, x.initialState), firstOut = gatedLinearReference(first);
    const second = slice(cut, T, firstOut.finalState), secondOut = gatedLinearReference(second);
    expectNear(secondOut.finalState, whole.finalState, "final state");
    expectNear(firstOut.output, part(whole.output, H * V, 0, cut), "output of the first part");
    expectNear(secondOut.output, part(whole.output, H * V, cut, T), "output of the second part");
    // Backward: the second call's dInitialState is the first call's dFinalState.
    const dO = filled(whole.output.length, rand, -1, 1), dHT = filled(whole.finalState.length, rand, -1, 1);
    const all = gatedLinearReferenceBackward(x, dO, dHT);
    const g2 = gatedLinearReferenceBackward(second, part(dO, H * V, cut, T), dHT);
    const g1 = gatedLinearReferenceBackward(first, part(dO, H * V, 0, cut), g2.dInitialState);
    expectNear(g1.dInitialState, all.dInitialState, "dInitialState");
    expectNear(g1.dq, part(all.dq, HK * K, 0, cut), "dq of the first part");
    expectNear(g2.dk, part(all.dk, HK * K, cut, T), "dk of the second part");
    expectNear(g1.dgk, part(all.dgk, H * K, 0, cut), "dgk of the first part");
    expectNear(g2.dv, part(all.dv, H * V, cut, T), "dv of the second part");
    expectNear(g1.dgGamma.map((d, h) => d + g2.dgGamma[h]), all.dgGamma, "dgGamma");
  });
});

Deno.test("gla oracle: packed sequences equal separate calls; an empty sequence passes its state through", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const cu = [0, 3, 3, 7, 8];
    const [H, HK, K, V] = [2, 2, 2, 3];
    const x = inputs({ B: 1, T: 9, H, HK, K, V, cuSeqlens: cu }, { gk: true, g: true }, rand);
    const packed = gatedLinearReference(x);
    const dO = filled(packed.output.length, rand, -1, 1), dHT = filled(packed.finalState.length, rand, -1, 1);
    const grads = gatedLinearReferenceBackward(x, dO, dHT);
    const KV = H * K * V;
    for (let n = 0; n < cu.length - 1; n++) {
      const [lo, hi] = [cu[n], cu[n + 1]];
      const tokens = (a: ArrayLike<number>, inner: number) =>
        Float64Array.from({ length: (hi - lo) * inner }, (_, i) => a[lo * inner + i]);
      const one: GatedLinearReferenceInputs = {
        ...x,
        T: hi - lo,
        cuSeqlens: undefined,
        q: tokens(x.q, HK * K),
        k: tokens(x.k, HK * K),
        v: tokens(x.v, H * V),
        gk: tokens(x.gk!, H * K),
        g: tokens(x.g!, H),
        initialState: x.initialState.slice(n * KV, (n + 1) * KV),
      };
      const r = gatedLinearReference(one);
      expectNear(r.output, tokens(packed.output, H * V), `output of sequence ${n}`, 0);
      expectNear(
        r.finalState,
        packed.finalState.slice(n * KV, (n + 1) * KV),
        `final state of sequence ${n}`,
        0,
      );
      const g = gatedLinearReferenceBackward(one, tokens(dO, H * V), dHT.slice(n * KV, (n + 1) * KV));
      expectNear(g.dq, tokens(grads.dq, HK * K), `dq of sequence ${n}`, 0);
      expectNear(g.dgk, tokens(grads.dgk, H * K), `dgk of sequence ${n}`, 0);
      expectNear(
        g.dInitialState,
        grads.dInitialState.slice(n * KV, (n + 1) * KV),
        `dh0 of sequence ${n}`,
        0,
      );
    }
    // The empty sequence 1: its final state is its initial state, its dInitialState its dFinalState.
    assert.deepEqual(packed.finalState.slice(KV, 2 * KV), x.initialState.slice(KV, 2 * KV));
    assert.deepEqual(grads.dInitialState.slice(KV, 2 * KV), dHT.slice(KV, 2 * KV));
    // The uncovered tail (token 8) has zero output and zero gradients.
    assert.ok(packed.output.slice(8 * H * V).every((o) => o === 0));
    assert.ok(grads.dv.slice(8 * H * V).every((o) => o === 0));
  });
});

Deno.test("gla oracle: GLA with g = 0 is linear attention; GLA with a broadcast gate is simple GLA; retention is simple GLA", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const [B, T, H, K, V] = [1, 6, 3, 2, 3];
    const x = inputs({ B, T, H, HK: H, K, V }, {}, rand);
    const plain = gatedLinearReference(x);
    const zeroGate = gatedLinearReference({ ...x, gk: new Float64Array(B * T * H * K) });
    expectNear(zeroGate.output, plain.output, "GLA g = 0 vs linear attention", 0);
    expectNear(zeroGate.finalState, plain.finalState, "GLA g = 0 final state", 0);
    // Plain linear attention by hand: o_t = scale q_t^T (S0 + sum_{s<=t} k_s v_s^T).
    expectNear(plain.output, parallelForm(x), "linear attention vs the parallel form", 1e-12);

    // Simple GLA (scalar g per token) against GLA with g repeated over the K channels.
    const g = filled(B * T * H, rand, -1, 0);
    const gk = Float64Array.from({ length: B * T * H * K }, (_, i) => g[Math.floor(i / K)]);
    const simple = gatedLinearReference({ ...x, g }), gla = gatedLinearReference({ ...x, gk });
    expectNear(simple.output, gla.output, "simple GLA vs GLA with a broadcast gate");
    expectNear(simple.finalState, gla.finalState, "simple GLA vs GLA final state");
    const dO = filled(plain.output.length, rand, -1, 1);
    const dS = gatedLinearReferenceBackward({ ...x, g }, dO),
      dG = gatedLinearReferenceBackward({ ...x, gk }, dO);
    expectNear(
      dS.dg,
      Float64Array.from({ length: B * T * H }, (_, j) => {
        let sum = 0;
        for (let i = 0; i < K; i++) sum += dG.dgk[j * K + i];
        return sum;
      }),
      "simple GLA dg vs the sum over K of GLA's dg",
    );

    // Retention: decay log(1 - 2^(-5 - h)) per head, the same as a per-token gate of that value.
    const gamma = retentionLogDecay(H);
    for (let h = 0; h < H; h++) assert.ok(Math.abs(gamma[h] - Math.log(1 - 2 ** (-5 - h))) < 1e-15);
    const perToken = Float64Array.from({ length: B * T * H }, (_, j) => Math.log(1 - 2 ** (-5 - (j % H))));
    const retention = gatedLinearReference({ ...x, gGamma: gamma });
    const asSimple = gatedLinearReference({ ...x, g: perToken });
    expectNear(retention.output, asSimple.output, "retention vs simple GLA");
    expectNear(retention.finalState, asSimple.finalState, "retention vs simple GLA final state");
    const dR = gatedLinearReferenceBackward({ ...x, gGamma: gamma }, dO);
    const dA = gatedLinearReferenceBackward({ ...x, g: perToken }, dO);
    for (let h = 0; h < H; h++) {
      let sum = 0;
      for (let t = 0; t < T; t++) sum += dA.dg[t * H + h];
      assert.ok(Math.abs(dR.dgGamma[h] - sum) < 1e-12, `dgGamma[${h}] ${dR.dgGamma[h]} vs ${sum}`);
    }
    // The scale defaults to K^-0.5.
    const unscaled = gatedLinearReference({ ...x, scale: undefined });
    expectNear(unscaled.output, plain.output.map((o) => o / 0.8 * K ** -0.5), "scale default");
  });
});

Deno.test("gla oracle: normalize divides by scale q . (running key sum) + 1e-10", () => {
  const x: GatedLinearReferenceInputs = {
    B: 1,
    T: 2,
    H: 1,
    HK: 1,
    K: 2,
    V: 1,
    scale: 0.5,
    normalize: true,
    q: [1, 2, 3, 1],
    k: [1, 1, 2, 0.5],
    v: [4, -2],
    initialState: [1, 1],
  };
  const r = gatedLinearReference(x);
  // t = 0: S = S0 + k0 v0 = [5, 5]; u = 0.5 (5 + 10) = 7.5; z = 0.5 (1 + 2) = 1.5.
  // t = 1: S = [5 - 4, 5 - 1] = [1, 4]; u = 0.5 (3 + 4) = 3.5; keys [3, 1.5]; z = 0.5 (9 + 1.5) = 5.25.
  expectNear(
    r.output,
    [7.5 / (1.5 + NORMALIZE_EPS), 3.5 / (5.25 + NORMALIZE_EPS)],
    "normalised output",
    1e-15,
  );
  expectNear(r.finalState, [1, 4], "final state (normalize leaves the state alone)", 1e-15);
});

Deno.test("gla oracle: T = 1 by hand and T = 0 passes the state through", () => {
  // One token, K = 2, V = 1, per-channel decay: S = a * S0 + k v, o = scale q . S.
  const [q, k, v, gk, S0, scale] = [[0.5, -1], [2, 3], [1.5], [-0.2, -20], [0.7, -0.4], 0.9];
  const x: GatedLinearReferenceInputs = {
    B: 1,
    T: 1,
    H: 1,
    HK: 1,
    K: 2,
    V: 1,
    q,
    k,
    v,
    gk,
    initialState: S0,
    scale,
  };
  const S = [0, 1].map((i) => Math.exp(gk[i]) * S0[i] + k[i] * v[0]);
  const r = gatedLinearReference(x);
  expectNear(r.finalState, S, "final state", 1e-15);
  expectNear(r.output, [scale * (q[0] * S[0] + q[1] * S[1])], "output", 1e-15);
  const grads = gatedLinearReferenceBackward(x, [1], [0, 0]);
  // do/dgk_i = scale q_i a_i S0_i.
  expectNear(grads.dgk, [0, 1].map((i) => scale * q[i] * Math.exp(gk[i]) * S0[i]), "dgk", 1e-15);

  const empty: GatedLinearReferenceInputs = {
    B: 2,
    T: 0,
    H: 1,
    HK: 1,
    K: 2,
    V: 1,
    q: [],
    k: [],
    v: [],
    gk: [],
    initialState: [1, 2, 3, 4],
  };
  const e = gatedLinearReference(empty);
  assert.equal(e.output.length, 0);
  assert.deepEqual(Array.from(e.finalState), [1, 2, 3, 4]);
  const de = gatedLinearReferenceBackward(empty, [], [5, 6, 7, 8]);
  assert.deepEqual(Array.from(de.dInitialState), [5, 6, 7, 8]);
});

Deno.test("gla oracle: checkpoints are the states before every chunk and after the last token", () => {
  const rand = generator(11);
  const x = inputs({ B: 1, T: 5, H: 1, HK: 1, K: 2, V: 2 }, { gk: true }, rand);
  const r = gatedLinearReference({ ...x, checkpointEvery: 2 });
  const KV = 4;
  assert.equal(r.checkpoints!.length, 4 * KV);
  expectNear(r.checkpoints!.slice(0, KV), x.initialState, "checkpoint 0", 0);
  for (const [slot, tokens] of [[1, 2], [2, 4]]) {
    const upTo = gatedLinearReference({ ...x, T: tokens });
    expectNear(r.checkpoints!.slice(slot * KV, (slot + 1) * KV), upTo.finalState, `checkpoint ${slot}`, 0);
  }
  expectNear(r.checkpoints!.slice(3 * KV), r.finalState, "last checkpoint", 0);
});

Deno.test("gla oracle: bad inputs are refused with an AttnkitError naming the field", () => {
  const good: GatedLinearReferenceInputs = {
    B: 1,
    T: 2,
    H: 2,
    HK: 1,
    K: 1,
    V: 1,
    q: [1, 2],
    k: [1, 2],
    v: [1, 2, 3, 4],
  };
  gatedLinearReference(good);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ q: undefined }, /x\.q: required/],
    [{ HK: 3 }, /x\.HK/],
    [{ gk: [0, 0, 0] }, /x\.gk/],
    [{ g: [0] }, /x\.g:/],
    [{ gGamma: [0] }, /x\.gGamma/],
    [{ gk: "zeros" }, /x\.gk/],
    [{ normalize: 1 }, /x\.normalize/],
    [{ scale: NaN }, /x\.scale/],
    [{ B: 2, cuSeqlens: [0, 1] }, /cuSeqlens/],
    [{ cuSeqlens: [0, 3] }, /x\.cuSeqlens/],
    [{ cuSeqlens: [0, 2, 1] }, /x\.cuSeqlens/],
    [{ initialState: [0] }, /x\.initialState/],
    [{ T: -1 }, /x\.T/],
  ];
  for (const [change, message] of cases) {
    const x = { ...good, ...change } as GatedLinearReferenceInputs;
    assert.throws(() => gatedLinearReference(x), (e) => e instanceof AttnkitError && message.test(e.message));
  }
  const backward = (dO: unknown, dHT?: unknown) =>
    gatedLinearReferenceBackward(good, dO as number[], dHT as number[] | undefined);
  assert.throws(() => backward([1, 2, 3]), (e) => e instanceof AttnkitError && /dOutput/.test(e.message));
  assert.throws(() => backward("x"), (e) => e instanceof AttnkitError && /dOutput/.test(e.message));
  assert.throws(
    () => backward([1, 2, 3, 4], [1]),
    (e) => e instanceof AttnkitError && /dFinalState/.test(e.message),
  );
  assert.throws(() => retentionLogDecay(-1), AttnkitError);
});
