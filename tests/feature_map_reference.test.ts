// The float64 oracle of feature-map linear attention checked on its own: its hand-derived reverse
// mode against central finite differences (every feature map, causal and bidirectional, cosformer
// weights), the quadratic form against the streaming recurrence and the cosformer split computed here
// independently, T = 0 / 1, and refusal of bad inputs.
import assert from "node:assert/strict";
import { AttnkitError } from "../ffi/errors.ts";
import {
  FEATURE_MAP_EPS,
  FEATURE_MAPS,
  type FeatureMap,
  featureMapLinearAttentionReference,
  featureMapLinearAttentionReferenceBackward,
  type FeatureMapReferenceInputs,
} from "../reference/feature_map.ts";
import { withSeed } from "./helpers.ts";
import { expectFiniteDifferences, expectNear, filled, generator } from "./oracle_checks.ts";

type Inputs = FeatureMapReferenceInputs & { q: Float64Array; k: Float64Array; v: Float64Array };

function inputs(
  B: number,
  T: number,
  H: number,
  K: number,
  V: number,
  phi: FeatureMap,
  rand: () => number,
): Inputs {
  // The identity map keeps features positive so the normaliser stays away from 0. ReLU features keep
  // |x| >= 0.1: a feature near 0 is a near-zero normaliser whose curvature puts the central
  // difference's own error (about (eps / x)^2 of the gradient) above the tolerance.
  const low = phi === "identity" ? 0.2 : -1;
  const features = (n: number) =>
    phi === "relu" ? filled(n, rand, 0.1, 1).map((x) => (rand() < 0.5 ? -x : x)) : filled(n, rand, low, 1);
  return {
    B,
    T,
    H,
    K,
    V,
    phi,
    q: features(B * T * H * K),
    k: features(B * T * H * K),
    v: filled(B * T * H * V, rand, -1, 1),
  };
}

function cosformer(T: number): { cosWeight: Float64Array; sinWeight: Float64Array } {
  const angle = (t: number) => Math.PI * (t + 1) / (2 * T);
  return {
    cosWeight: Float64Array.from({ length: T }, (_, t) => Math.cos(angle(t))),
    sinWeight: Float64Array.from({ length: T }, (_, t) => Math.sin(angle(t))),
  };
}

function checkAgainstFiniteDifferences(x: Inputs, rand: () => number): void {
  const dO = filled(x.B * x.T * x.H * x.V, rand, -1, 1);
  const grads = featureMapLinearAttentionReferenceBackward(x, dO);
  const loss = () => featureMapLinearAttentionReference(x).reduce((s, o, i) => s + o * dO[i], 0);
  const eps = 1e-6;
  for (const [input, grad] of [["q", "dq"], ["k", "dk"], ["v", "dv"]] as const) {
    const what = `${grad} (${x.phi}, ${x.isCausal ? "causal" : "bidirectional"}${
      x.cosWeight ? ", cosformer" : ""
    })`;
    expectFiniteDifferences(x[input], grads[grad], loss, { eps, tol: 1e-6, what, input });
  }
}

const PHI: Record<FeatureMap, (x: number) => number> = {
  "elu+1": (x) => (x > 0 ? x + 1 : Math.exp(x)),
  relu: (x) => Math.max(x, 0),
  identity: (x) => x,
  softmax_free: (x) => x,
};

// The causal form as a recurrence, written here independently: a running state S = sum phi(k) v^T and
// key sum z = sum phi(k); o_t = phi(q_t)^T S / (phi(q_t) . z + eps) (no division for softmax_free).
// Bidirectional: the same with the sums over the whole row.
function streaming(x: Inputs): Float64Array {
  const { B, T, H, K, V } = x;
  const phi = PHI[x.phi ?? "elu+1"], eps = x.eps ?? FEATURE_MAP_EPS;
  const out = new Float64Array(B * T * H * V);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const at = (t: number, d: number) => ((b * T + t) * H + h) * d;
      const S = new Float64Array(K * V), z = new Float64Array(K);
      const add = (t: number) => {
        for (let i = 0; i < K; i++) {
          const f = phi(x.k[at(t, K) + i]);
          z[i] += f;
          for (let c = 0; c < V; c++) S[i * V + c] += f * x.v[at(t, V) + c];
        }
      };
      if (!x.isCausal) { for (let t = 0; t < T; t++) add(t); }
      for (let t = 0; t < T; t++) {
        if (x.isCausal) add(t);
        const f = Array.from({ length: K }, (_, i) => phi(x.q[at(t, K) + i]));
        const den = x.phi === "softmax_free" ? 1 : f.reduce((s, fi, i) => s + fi * z[i], 0) + eps;
        for (let c = 0; c < V; c++) {
          out[at(t, V) + c] = f.reduce((s, fi, i) => s + fi * S[i * V + c], 0) / den;
        }
      }
    }
  }
  return out;
}

Deno.test("feature-map oracle: reverse mode equals finite differences (every map, causal and bidirectional)", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    for (const phi of FEATURE_MAPS) {
      for (const isCausal of [true, false]) {
        checkAgainstFiniteDifferences({ ...inputs(2, 5, 2, 3, 2, phi, rand), isCausal }, rand);
      }
    }
  });
});

Deno.test("feature-map oracle: reverse mode equals finite differences (cosformer weights, eps 1e-3)", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    for (const isCausal of [true, false]) {
      checkAgainstFiniteDifferences({
        ...inputs(1, 6, 2, 2, 3, "relu", rand),
        isCausal,
        eps: 1e-3,
        ...cosformer(6),
      }, rand);
    }
  });
});

Deno.test("feature-map oracle: the quadratic form equals the streaming recurrence (causal and bidirectional)", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    for (const phi of FEATURE_MAPS) {
      for (const isCausal of [true, false]) {
        const x = { ...inputs(2, 9, 3, 4, 5, phi, rand), isCausal };
        expectNear(featureMapLinearAttentionReference(x), streaming(x), `${phi}, causal ${isCausal}`);
      }
    }
  });
});

Deno.test("feature-map oracle: cosformer weights equal the identity map over [phi(x) cos, phi(x) sin] features", async () => {
  await withSeed((seed) => {
    const rand = generator(seed);
    const [B, T, H, K, V] = [1, 7, 2, 3, 2];
    for (const isCausal of [true, false]) {
      const x = { ...inputs(B, T, H, K, V, "relu", rand), isCausal, ...cosformer(T) };
      // Pre-applied weights: features of width 2K, the cosine half then the sine half.
      const split = (src: Float64Array) => {
        const out = new Float64Array(B * T * H * 2 * K);
        for (let t = 0; t < T; t++) {
          for (let h = 0; h < H; h++) {
            for (let i = 0; i < K; i++) {
              const f = Math.max(src[(t * H + h) * K + i], 0);
              out[(t * H + h) * 2 * K + i] = f * x.cosWeight[t];
              out[(t * H + h) * 2 * K + K + i] = f * x.sinWeight[t];
            }
          }
        }
        return out;
      };
      const pre: Inputs = {
        B,
        T,
        H,
        K: 2 * K,
        V,
        phi: "identity",
        isCausal,
        q: split(x.q),
        k: split(x.k),
        v: x.v,
      };
      expectNear(
        featureMapLinearAttentionReference(x),
        featureMapLinearAttentionReference(pre),
        `causal ${isCausal}`,
      );
      expectNear(featureMapLinearAttentionReference(pre), streaming(pre), `streaming, causal ${isCausal}`);
    }
  });
});

Deno.test("feature-map oracle: T = 1 by hand, T = 0 is empty, eps and the default map", () => {
  // One token, elu+1 with a negative entry: o = v * s / (s + eps), s = phi(q) . phi(k).
  const x: FeatureMapReferenceInputs = {
    B: 1,
    T: 1,
    H: 1,
    K: 2,
    V: 1,
    q: [0.5, -2],
    k: [1, -1],
    v: [3],
    eps: 0.25,
  };
  const s = 1.5 * 2 + Math.exp(-2) * Math.exp(-1);
  expectNear(featureMapLinearAttentionReference(x), [3 * s / (s + 0.25)], "T = 1 output", 1e-15);
  expectNear(
    featureMapLinearAttentionReference({ ...x, isCausal: true }),
    [3 * s / (s + 0.25)],
    "T = 1 causal",
    1e-15,
  );
  const d = featureMapLinearAttentionReferenceBackward(x, [1]);
  expectNear(d.dv, [s / (s + 0.25)], "T = 1 dv", 1e-15);
  // do/ds = v eps / (s + eps)^2; ds/dq_0 = phi(k_0) = 2 (q_0 > 0).
  expectNear(d.dq.slice(0, 1), [3 * 0.25 / (s + 0.25) ** 2 * 2], "T = 1 dq", 1e-15);
  // softmax_free: no normaliser, o = s v.
  const free = featureMapLinearAttentionReference({ ...x, phi: "softmax_free" });
  expectNear(free, [3 * (0.5 * 1 + 2)], "softmax_free", 1e-15);

  const empty: FeatureMapReferenceInputs = {
    B: 2,
    T: 0,
    H: 3,
    K: 2,
    V: 2,
    q: [],
    k: [],
    v: [],
    isCausal: true,
  };
  assert.equal(featureMapLinearAttentionReference(empty).length, 0);
  const de = featureMapLinearAttentionReferenceBackward(empty, []);
  assert.equal(de.dq.length + de.dk.length + de.dv.length, 0);
});

Deno.test("feature-map oracle: a relu-zeroed score row stays finite (the eps keeps 0 / 0 away)", () => {
  // Causal relu with the first key all negative: token 0's score is 0, its output 0 / eps = 0.
  const x: FeatureMapReferenceInputs = {
    B: 1,
    T: 2,
    H: 1,
    K: 2,
    V: 1,
    q: [1, 1, 1, 1],
    k: [-1, -2, 1, 0],
    v: [5, 7],
    phi: "relu",
    isCausal: true,
  };
  const o = featureMapLinearAttentionReference(x);
  assert.equal(o[0], 0);
  expectNear([o[1]], [7 / (1 + FEATURE_MAP_EPS)], "second token", 1e-15);
  const d = featureMapLinearAttentionReferenceBackward(x, [1, 1]);
  assert.ok([...d.dq, ...d.dk, ...d.dv].every(Number.isFinite));
});

Deno.test("feature-map oracle: bad inputs are refused with an AttnkitError naming the field", () => {
  const good: FeatureMapReferenceInputs = { B: 1, T: 2, H: 1, K: 1, V: 1, q: [1, 2], k: [1, 2], v: [1, 2] };
  featureMapLinearAttentionReference(good);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ v: undefined }, /x\.v: required/],
    [{ phi: "elu" }, /x\.phi/],
    [{ isCausal: "yes" }, /x\.isCausal/],
    [{ eps: -1 }, /x\.eps/],
    [{ eps: Infinity }, /x\.eps/],
    [{ cosWeight: [1, 1] }, /x\.sinWeight/],
    [{ sinWeight: [1, 1] }, /x\.cosWeight/],
    [{ cosWeight: [1], sinWeight: [0] }, /x\.cosWeight/],
    [{ k: [1] }, /x\.k/],
    [{ K: 0 }, /x\.K/],
  ];
  for (const [change, message] of cases) {
    const x = { ...good, ...change } as FeatureMapReferenceInputs;
    assert.throws(
      () => featureMapLinearAttentionReference(x),
      (e) => e instanceof AttnkitError && message.test(e.message),
      JSON.stringify(change),
    );
  }
  assert.throws(
    () => featureMapLinearAttentionReferenceBackward(good, [1]),
    (e) => e instanceof AttnkitError && /dOutput/.test(e.message),
  );
});
