// The paged prefill on each state kernel of the fast forward (tests/variants.test.ts pins the row): on a
// float32 pool the kernel reads every sequence's start state from its slot ([V, K], read as [K, V]) and
// writes the final state back there, with no gather or scatter. The training op on the same row, given
// the same states, is the reference, bit for bit (same kernel, same arithmetic): outputs of the live
// sequences and their slots. A padding sequence (index 0) gets zero rows, a fresh slot (hasInitialState
// false, filled with NaN) starts from zero, and no other slot changes.
import assert from "node:assert/strict";
import { type KernelRow, rowName } from "../build/registry.ts";
import { chunkGatedDeltaRule, lastPlan, pagedChunkGdn, Tensor, type TuningSpec, withTuning } from "../mod.ts";
import { type CaseSpec, DeltaCase } from "./linear_fixtures.ts";

function sameBits(what: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    if (!Object.is(got[i], want[i])) assert.fail(`${what}[${i}]: got ${got[i]}, expected ${want[i]}`);
  }
}

/** `[.., A, B]` blocks of `x` transposed to `[.., B, A]`. */
function transposed(x: Float32Array, blocks: number, a: number, b: number): Float32Array {
  const y = new Float32Array(x.length);
  for (let m = 0; m < blocks; m++) {
    for (let i = 0; i < a; i++) {
      for (let j = 0; j < b; j++) y[m * a * b + j * a + i] = x[m * a * b + i * b + j];
    }
  }
  return y;
}

/** One paged call on `row` (pinned by `tuning`), against the training op on the same row. */
export function pagedChunkCase(row: KernelRow, spec: CaseSpec, tuning: TuningSpec, seed: number): void {
  using c = new DeltaCase("cuda", { ...spec, initialState: true }, seed);
  const { H, K, V } = spec, N = c.N, S = H * K * V;
  const what = `${rowName(row)} ${JSON.stringify(tuning)} ${JSON.stringify(spec)}`;
  // Sequence n in slot 2n + 1; sequence 1 is padding, the last one starts fresh.
  const indices = Array.from({ length: N }, (_, n) => (n === 1 ? 0 : 2 * n + 1));
  const resumes = (n: number) => n !== N - 1;
  const initKv = c.initialState!.toArray() as Float32Array;
  for (let n = 0; n < N; n++) if (!resumes(n)) initKv.fill(0, n * S, (n + 1) * S);
  const initVk = transposed(initKv, N * H, K, V);
  const slots = 2 * N + 1;
  const poolHost = Float32Array.from({ length: slots * S }, (_, i) => Math.sin(i));
  indices.forEach((s, n) => {
    if (s > 0) {
      poolHost.set(resumes(n) ? initVk.subarray(n * S, (n + 1) * S) : new Float32Array(S).fill(NaN), s * S);
    }
  });
  using pool = Tensor.from(poolHost, { shape: [slots, H, V, K], device: "cuda" });
  using idx = Tensor.from(indices, { dtype: "int32", device: "cuda" });
  using flags = Tensor.from(indices.map((_, n) => (resumes(n) ? 1 : 0)), { dtype: "bool", device: "cuda" });
  const options = { cuSeqlens: c.cuSeqlens, useQkL2norm: spec.l2norm ?? false, scale: spec.scale };
  using o = withTuning(tuning, () => {
    const out = pagedChunkGdn(c.q, c.k, c.v, c.g!, c.beta, pool, idx, { ...options, hasInitialState: flags });
    const plan = lastPlan();
    assert.ok(
      plan?.kernels.some((k) => k.name === rowName(row)),
      `${what}: the plan was ${JSON.stringify(plan)}`,
    );
    assert.equal(plan?.details.states, "pool slots, read and written by the state kernels", what);
    return out;
  });
  using initial = Tensor.from(initKv, { shape: [N, H, K, V], device: "cuda" });
  using r = withTuning(tuning, () =>
    chunkGatedDeltaRule(c.q, c.k, c.v, c.g!, c.beta, {
      ...c.options(),
      initialState: initial,
      outputFinalState: true,
    }));
  const got = o.toArray() as Float32Array, want = r.output.toArray() as Float32Array;
  const finals = transposed(r.finalState!.toArray() as Float32Array, N * H, K, V);
  const after = pool.toArray() as Float32Array;
  const rows = (n: number) => {
    const cu = spec.cuSeqlens;
    const [a, b] = cu ? [cu[n], cu[n + 1]] : [n * spec.T, (n + 1) * spec.T];
    return [a * H * V, b * H * V];
  };
  indices.forEach((s, n) => {
    const [a, b] = rows(n);
    if (s <= 0) {
      assert.ok(got.subarray(a, b).every((x) => x === 0), `${what}: padding sequence ${n}'s rows`);
      return;
    }
    sameBits(`${what}: sequence ${n}'s output`, got.subarray(a, b), want.subarray(a, b));
    sameBits(`${what}: slot ${s}`, after.subarray(s * S, (s + 1) * S), finals.subarray(n * S, (n + 1) * S));
  });
  for (let s = 0; s < slots; s++) {
    if (indices.includes(s)) continue;
    sameBits(
      `${what}: untouched slot ${s}`,
      after.subarray(s * S, (s + 1) * S),
      poolHost.subarray(s * S, (s + 1) * S),
    );
  }
}
