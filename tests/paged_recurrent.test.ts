// recurrentGatedDeltaRule and recurrentKda on a state pool (stateIndices): against the same op run with
// each sequence's slot as an explicit initial state. Dense and packed batches (an empty sequence, spare
// rows past the last offset), grouped heads, float32 and bfloat16 pools, a padding sequence (zero rows, its
// slot untouched), a fresh sequence whose slot holds NaN (never read), every unselected slot untouched bit
// for bit, the selected slots holding the final states (rounded as the pool stores them); and the refusals.
import assert from "node:assert/strict";
import { type Device, recurrentGatedDeltaRule, recurrentKda, Tensor } from "../mod.ts";
import { roundBf16 } from "../reference/mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { generator, normals } from "./oracle_checks.ts";

interface Case {
  kda: boolean;
  packed: boolean;
  poolDtype: "float32" | "bfloat16";
}

const CASES: Case[] = [
  { kda: false, packed: false, poolDtype: "float32" },
  { kda: false, packed: true, poolDtype: "bfloat16" },
  { kda: true, packed: true, poolDtype: "float32" },
  { kda: true, packed: false, poolDtype: "bfloat16" },
];

const host = (t: Tensor) => Float64Array.from(t.toArray() as ArrayLike<number>);

function runCase(device: Device, c: Case, seed: number): void {
  const rnd = generator(seed);
  const [N, H, HK, K, V, slots] = [3, 2, 1, 16, 8, 6];
  const cu = [0, 7, 7, 18];
  const [B, T] = c.packed ? [1, 20] : [N, 7];
  const indices = [4, 0, 2]; // sequence 1 is padding
  const resume = [1, 1, 0]; // sequence 2 starts fresh: its slot holds NaN
  const tensor = (shape: number[], std = 1) =>
    Tensor.from(normals(rnd, shape.reduce((a, b) => a * b, 1), std), { shape, device });
  using q = tensor([B, T, HK, K]);
  using k = tensor([B, T, HK, K], 0.25);
  using v = tensor([B, T, H, V]);
  using beta = Tensor.from(normals(rnd, B * T * H).map((x) => 1 / (1 + Math.exp(-x))), {
    shape: [B, T, H],
    device,
  });
  const gateShape = c.kda ? [B, T, H, K] : [B, T, H];
  using gate = Tensor.from(normals(rnd, gateShape.reduce((a, b) => a * b, 1)).map((x) => -0.1 * x * x), {
    shape: gateShape,
    device,
  });
  const slotSize = H * V * K;
  const poolHost = normals(rnd, slots * slotSize, 0.2);
  poolHost.fill(NaN, 2 * slotSize, 3 * slotSize);
  using pool = Tensor.from(poolHost, { shape: [slots, H, V, K], dtype: c.poolDtype, device });
  const before = host(pool);
  // The explicit initial states: the slot as stored, zero for padding and fresh sequences.
  const init = new Float32Array(N * slotSize);
  indices.forEach((slot, n) => {
    if (slot <= 0 || !resume[n]) return;
    for (let h = 0; h < H; h++) {
      for (let vi = 0; vi < V; vi++) {
        for (let ki = 0; ki < K; ki++) {
          const x = before[slot * slotSize + (h * V + vi) * K + ki];
          // GDN states are [N, H, K, V]; KDA's "vk" states are the pool's order.
          init[n * slotSize + (c.kda ? (h * V + vi) * K + ki : (h * K + ki) * V + vi)] = x;
        }
      }
    }
  });
  using initial = Tensor.from(init, { shape: c.kda ? [N, H, V, K] : [N, H, K, V], device });
  using stateIndices = Tensor.from(indices, { dtype: "int32", device });
  using hasInitialState = Tensor.from(resume, { dtype: "bool", device });
  const common = { layout: "bshd" as const, ...(c.packed ? { cuSeqlens: cu } : {}) };
  using want = c.kda
    ? recurrentKda(q, k, v, gate, beta, {
      ...common,
      initialState: initial,
      stateLayout: "vk",
      outputFinalState: true,
    })
    : recurrentGatedDeltaRule(q, k, v, gate, beta, {
      ...common,
      initialState: initial,
      outputFinalState: true,
    });
  const pooled = { ...common, initialState: pool, stateIndices, hasInitialState };
  using got = c.kda
    ? recurrentKda(q, k, v, gate, beta, pooled)
    : recurrentGatedDeltaRule(q, k, v, gate, beta, pooled);
  assert.equal(got.finalState, undefined);
  // Outputs: the live sequences' rows bit for bit, the padding sequence's rows zero.
  // Rows past the last packed offset are unspecified (never written): only the sequences' rows are read.
  const [o, w] = [got.output, want.output].map((t) => {
    using rows = t.slice(1, 0, c.packed ? cu[N] : T);
    return host(rows);
  });
  const row = H * V;
  for (let n = 0; n < N; n++) {
    const [start, end] = c.packed ? [cu[n], cu[n + 1]] : [n * T, (n + 1) * T];
    for (let i = start * row; i < end * row; i++) {
      assert.equal(o[i], indices[n] > 0 ? w[i] : 0, `output row ${Math.floor(i / row)} of sequence ${n}`);
    }
  }
  // The pool: selected live slots hold the final states (as stored), every other slot is untouched.
  const after = host(pool), final = host(want.finalState!);
  const store = c.poolDtype === "bfloat16" ? roundBf16 : (x: number) => Math.fround(x);
  for (let slot = 0; slot < slots; slot++) {
    const n = indices.indexOf(slot);
    for (let h = 0; h < H; h++) {
      for (let vi = 0; vi < V; vi++) {
        for (let ki = 0; ki < K; ki++) {
          const at = slot * slotSize + (h * V + vi) * K + ki;
          const expected = n < 0 || slot === 0
            ? before[at]
            : store(final[n * slotSize + (c.kda ? (h * V + vi) * K + ki : (h * K + ki) * V + vi)]);
          assert.ok(
            Object.is(after[at], expected),
            `slot ${slot} [${h}, ${vi}, ${ki}]: ${after[at]} vs ${expected}`,
          );
        }
      }
    }
  }
}

deviceTest(
  "recurrent forms on a state pool equal the op with each slot as its initial state",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        CASES.forEach((c, i) => runCase(device, c, seed + i));
      })),
);

deviceTest(
  "recurrent forms on a state pool refuse what the pool form cannot do, naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([2, 5, 1, 16], { device });
      using v = Tensor.randn([2, 5, 2, 8], { device });
      using g = Tensor.zeros([2, 5, 2], { device });
      using beta = Tensor.ones([2, 5, 2], { device });
      using pool = Tensor.zeros([3, 2, 8, 16], { device });
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using twice = Tensor.from([2, 2], { dtype: "int32", device });
      using flags = Tensor.from([1, 0], { dtype: "bool", device });
      const base = { layout: "bshd" as const, initialState: pool, stateIndices: idx };
      const run = (o: object) => recurrentGatedDeltaRule(q, q, v, g, beta, o as never);
      refuses(() => run({ ...base, layout: "bhsd" }), /layout: the pool form/);
      refuses(() => run({ ...base, initialState: undefined }), /initialState: with stateIndices/);
      refuses(() => run({ ...base, outputFinalState: true }), /outputFinalState/);
      refuses(() => run({ ...base, out: {} }), /out: not with stateIndices/);
      refuses(() => run({ ...base, checkIndices: "no" }), /checkIndices: expected a boolean/);
      refuses(
        () => run({ layout: "bshd", hasInitialState: flags }),
        /hasInitialState: only with stateIndices/,
      );
      refuses(() => run({ ...base, stateIndices: twice }), /both name slot 2/);
      using wrong = Tensor.zeros([3, 2, 16, 8], { device });
      refuses(() => run({ ...base, initialState: wrong }), /options\.initialState: expected shape/);
      using kdaGate = Tensor.zeros([2, 5, 2, 16], { device });
      refuses(
        () => recurrentKda(q, q, v, kdaGate, beta, { ...base, stateLayout: "kv" }),
        /stateLayout: the pool is/,
      );
      using r = run(base);
      assert.throws(() => r.backward(r.output), /inference only/);
      assert.ok((pool.toArray() as Float32Array).some((x) => x !== 0), "the slots advanced");
    }),
);
