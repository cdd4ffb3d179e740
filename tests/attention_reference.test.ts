// Checks of the attention oracle itself (reference/attention.ts): its gradients against
// central finite differences of sum(dO * O), its mask rule on hand-worked rows, and its rounding.
import assert from "node:assert/strict";
import {
  admits,
  attentionBackward,
  attentionForward,
  attentionLoss,
  type AttentionProblem,
  FLOAT64,
  roundBf16,
  roundF16,
  samePrecision,
} from "../reference/attention.ts";

// A small deterministic generator so the finite-difference cases need no native library.
function randomArray(n: number, seed: number): Float64Array {
  let s = seed >>> 0;
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32) * 2 - 1;
  }
  return out;
}

function tinyProblem(mask: Partial<AttentionProblem>, seed: number): AttentionProblem {
  // Two sequences: (Sq 3, Skv 5) and (Sq 4, Skv 2, so causal leaves rows 0 and 1 empty); GQA 2 -> 1.
  const qStart = [0, 3, 7], kvStart = [0, 5, 7];
  const heads = 2, headsKv = 1, dim = 4;
  return {
    q: randomArray(7 * heads * dim, seed),
    k: randomArray(7 * headsKv * dim, seed + 1),
    v: randomArray(7 * headsKv * dim, seed + 2),
    qStart,
    kvStart,
    heads,
    headsKv,
    dim,
    smScale: 0.9,
    softcap: 0,
    causal: false,
    windowLeft: -1,
    windowRight: -1,
    ...mask,
  };
}

const finiteDifferenceCases: [string, Partial<AttentionProblem>][] = [
  ["full", {}],
  ["causal", { causal: true }],
  ["window both sides", { windowLeft: 1, windowRight: 1 }],
  ["causal, left window, softcap", { causal: true, windowLeft: 2, softcap: 0.7 }],
];

for (const [name, mask] of finiteDifferenceCases) {
  Deno.test(`attention oracle: gradients match finite differences (${name})`, () => {
    const p = tinyProblem(mask, 11);
    const dOut = randomArray(p.q.length, 99);
    const fwd = attentionForward(p);
    const grads = attentionBackward(p, dOut, fwd.output);
    const h = 1e-5;
    for (const [which, analytic] of [["q", grads.dq], ["k", grads.dk], ["v", grads.dv]] as const) {
      const x = p[which] as Float64Array;
      for (let e = 0; e < x.length; e++) {
        const keep = x[e];
        x[e] = keep + h;
        const up = attentionLoss(p, dOut);
        x[e] = keep - h;
        const down = attentionLoss(p, dOut);
        x[e] = keep;
        const numeric = (up - down) / (2 * h);
        assert.ok(
          Math.abs(numeric - analytic[e]) <= 1e-7 + 1e-6 * Math.abs(numeric),
          `d${which}[${e}]: analytic ${analytic[e]}, finite difference ${numeric}`,
        );
      }
    }
  });
}

Deno.test("attention oracle: mask rule (bottom-right causal, windows)", () => {
  const base = tinyProblem({}, 1);
  const causal = { ...base, causal: true };
  // Sq 2, Skv 3: row 0 sits at key position 1.
  assert.deepEqual([0, 1, 2].map((j) => admits(causal, 0, j, 2, 3)), [true, true, false]);
  assert.deepEqual([0, 1, 2].map((j) => admits(causal, 1, j, 2, 3)), [true, true, true]);
  // Sq 3, Skv 1: rows 0 and 1 sit before key 0 and admit nothing.
  assert.deepEqual([0, 1, 2].map((i) => admits(causal, i, 0, 3, 1)), [false, false, true]);
  const window = { ...base, windowLeft: 1, windowRight: 0 };
  assert.deepEqual([0, 1, 2, 3].map((j) => admits(window, 2, j, 4, 4)), [false, true, true, false]);
  const right = { ...base, windowLeft: -1, windowRight: 1 };
  assert.deepEqual([0, 1, 2, 3].map((j) => admits(right, 1, j, 4, 4)), [true, true, true, false]);
});

Deno.test("attention oracle: empty rows give output 0 and LSE -inf", () => {
  const p = tinyProblem({ causal: true }, 5);
  const { output, lse } = attentionForward(p);
  const Tq = 7, H = 2, D = 4;
  for (const t of [3, 4]) { // sequence 1, rows 0 and 1 (Sq 4 > Skv 2)
    for (let h = 0; h < H; h++) {
      assert.equal(lse[h * Tq + t], -Infinity);
      for (let d = 0; d < D; d++) assert.equal(output[(t * H + h) * D + d], 0);
    }
  }
  for (const t of [0, 1, 2, 5, 6]) assert.ok(Number.isFinite(lse[t]));
});

Deno.test("attention oracle: rounding helpers round to nearest even", () => {
  assert.equal(roundBf16(1 + 2 ** -8), 1); // tie -> even
  assert.equal(roundBf16(1 + 3 * 2 ** -8), 1 + 2 ** -6); // tie -> even (up)
  assert.equal(roundBf16(1 + 2 ** -8 + 2 ** -12), 1 + 2 ** -7);
  assert.equal(roundF16(1 + 2 ** -11), 1);
  assert.equal(roundF16(1 + 2 ** -11 + 2 ** -14), 1 + 2 ** -10);
  assert.ok(Number.isNaN(roundBf16(NaN)));
});

Deno.test("attention oracle: the same-precision reference is close but not exact", () => {
  const p = tinyProblem({ causal: true, softcap: 2 }, 3);
  const exact = attentionForward(p, FLOAT64).output;
  for (const dtype of ["bfloat16", "float16"] as const) {
    const plain = attentionForward(p, samePrecision(dtype)).output;
    let worst = 0;
    for (let i = 0; i < exact.length; i++) worst = Math.max(worst, Math.abs(plain[i] - exact[i]));
    assert.ok(worst > 0 && worst < (dtype === "bfloat16" ? 2e-2 : 3e-3), `${dtype}: max error ${worst}`);
  }
});
