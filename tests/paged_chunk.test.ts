// The chunked prefill on a paged state pool (pagedChunkKda, pagedChunkGdn) against the training ops it
// wraps (chunkKda, chunkGatedDeltaRule, each held to a float64 oracle in its own tests) run on the same
// tokens with each slot's state as the initial state: dense and packed batches (an empty sequence),
// padding indices (0 and negative: zero rows, slot untouched), fresh slots holding NaN, unselected slots
// untouched, float32 and bfloat16 pools, slots small and large (partial and whole tiles of the CUDA pool
// copies); indices past the pool or naming a slot twice refused with the pool untouched.
//
// Tolerance rule: the paged op runs the same kernels on the same inputs, so outputs and float32 slots
// match the direct call bit for bit; a bfloat16 pool holds the final state rounded to bfloat16 (compared
// with the direct call's state rounded the same way, bit for bit).
import assert from "node:assert/strict";
import { chunkGatedDeltaRule, chunkKda, type Device, pagedChunkGdn, pagedChunkKda, Tensor } from "../mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { roundBf16 } from "../reference/mod.ts";
import { generator, normals } from "./oracle_checks.ts";

function sameBits(what: string, got: ArrayLike<number>, want: ArrayLike<number>) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Object.is(got[i], want[i]), `${what}[${i}]: got ${got[i]}, expected ${want[i]}`);
  }
}

/** [N, H, V, K] host states -> [N, H, K, V]. */
function toKv(x: Float32Array, N: number, H: number, V: number, K: number): Float32Array {
  const y = new Float32Array(x.length);
  for (let n = 0; n < N * H; n++) {
    for (let v = 0; v < V; v++) {
      for (let k = 0; k < K; k++) y[n * K * V + k * V + v] = x[n * V * K + v * K + k];
    }
  }
  return y;
}

function runCase(
  device: Device,
  kda: boolean,
  packed: boolean,
  poolDtype: "float32" | "bfloat16",
  seed: number,
  [H, K, V]: readonly number[] = [2, 16, 24],
) {
  const rnd = generator(seed);
  const lengths = packed ? [20, 0, 37, 9] : [30, 30, 30];
  const N = lengths.length, B = packed ? 1 : N, T = packed ? 70 : 30;
  const cu = [0];
  for (const l of lengths) cu.push(cu[cu.length - 1] + l);
  const slots = N + 2;
  // Padding: sequence 1 of the dense batch (index -1), the last packed one (index 0); the packed
  // sequence 1 is empty and live (its state passes through).
  const indices = Array.from(
    { length: N },
    (_, n) => (n === (packed ? N - 1 : 1) ? (packed ? 0 : -1) : n + 1),
  );
  const fresh = Array.from({ length: N }, (_, n) => n === 2);
  const S = H * V * K;
  const poolHost = normals(rnd, slots * S, 0.3);
  for (let slot = 0; slot < slots; slot++) {
    const n = indices.indexOf(slot);
    if (n < 0 || fresh[n]) poolHost.fill(NaN, slot * S, (slot + 1) * S);
  }
  using pool = Tensor.from(poolHost, { shape: [slots, H, V, K], dtype: poolDtype, device });
  const before = pool.toArray() as Float32Array;
  using q = Tensor.from(normals(rnd, B * T * H * K), { shape: [B, T, H, K], dtype: "bfloat16", device });
  using k = Tensor.from(normals(rnd, B * T * H * K, 0.25), {
    shape: [B, T, H, K],
    dtype: "bfloat16",
    device,
  });
  using v = Tensor.from(normals(rnd, B * T * H * V), { shape: [B, T, H, V], dtype: "bfloat16", device });
  using gate = Tensor.from(Float32Array.from({ length: B * T * H * (kda ? K : 1) }, () => -0.5 * rnd()), {
    shape: kda ? [B, T, H, K] : [B, T, H],
    device,
  });
  using beta = Tensor.from(Float32Array.from({ length: B * T * H }, () => rnd()), {
    shape: [B, T, H],
    device,
  });
  using idx = Tensor.from(indices, { dtype: "int32", device });
  using flags = Tensor.from(fresh.map((f) => (f ? 0 : 1)), { dtype: "bool", device });
  const options = { hasInitialState: flags, ...(packed ? { cuSeqlens: cu } : {}) };
  using o = kda
    ? pagedChunkKda(q, k, v, gate, beta, pool, idx, options)
    : pagedChunkGdn(q, k, v, gate, beta, pool, idx, options);
  // The direct call: each live, resumed sequence's slot as its initial state, zeros for the others.
  const init = new Float32Array(N * S);
  indices.forEach((s, n) => {
    if (s > 0 && !fresh[n]) init.set(before.subarray(s * S, (s + 1) * S), n * S);
  });
  const common = { layout: "bshd" as const, outputFinalState: true, ...(packed ? { cuSeqlens: cu } : {}) };
  using initVk = Tensor.from(init, { shape: [N, H, V, K], device });
  using initKv = Tensor.from(toKv(init, N, H, V, K), { shape: [N, H, K, V], device });
  using r = kda
    ? chunkKda(q, k, v, gate, beta, {
      ...common,
      initialState: initVk,
      stateLayout: "vk",
    })
    : chunkGatedDeltaRule(q, k, v, gate, beta, {
      ...common,
      initialState: initKv,
    });
  // Rows past the last packed offset are unspecified (never written): only the sequences' rows are read.
  const tokens = packed ? cu[N] : T;
  const [got, want] = [o, r.output].map((t) => {
    using rows = t.slice(1, 0, tokens);
    return rows.toArray() as Float32Array;
  });
  const rowsOf = (
    n: number,
  ) => (packed ? [cu[n] * H * V, cu[n + 1] * H * V] : [n * T * H * V, (n + 1) * T * H * V]);
  const finals = r.finalState!.toArray() as Float32Array;
  const finalVk = kda ? finals : (() => {
    const y = new Float32Array(N * S);
    for (let m = 0; m < N * H; m++) {
      for (let kk = 0; kk < K; kk++) {
        for (let vv = 0; vv < V; vv++) y[m * S / H + vv * K + kk] = finals[m * K * V + kk * V + vv];
      }
    }
    return y;
  })();
  const after = pool.toArray() as Float32Array;
  indices.forEach((s, n) => {
    const [a, b] = rowsOf(n);
    if (s <= 0) {
      assert.ok(got.subarray(a, b).every((x) => x === 0), `sequence ${n} (padding): zero rows`);
      return;
    }
    sameBits(`sequence ${n} output`, got.subarray(a, b), want.subarray(a, b));
    const stored = finalVk.subarray(n * S, (n + 1) * S).map((
      x,
    ) => (poolDtype === "bfloat16" ? roundBf16(x) : x));
    sameBits(`slot ${s}`, after.subarray(s * S, (s + 1) * S), stored);
  });
  for (let slot = 0; slot < slots; slot++) {
    if (indices.includes(slot)) continue;
    sameBits(
      `untouched slot ${slot}`,
      after.subarray(slot * S, (slot + 1) * S),
      before.subarray(slot * S, (slot + 1) * S),
    );
  }
}

deviceTest(
  "paged chunked prefill equals the training ops with each slot's state; padding untouched",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        let i = 0;
        for (const kda of [true, false]) {
          for (const packed of [false, true]) {
            for (const poolDtype of ["float32", "bfloat16"] as const) {
              runCase(device, kda, packed, poolDtype, seed + i++);
            }
          }
          runCase(device, kda, true, "float32", seed + i++, [2, 64, 64]);
        }
      })),
);

deviceTest(
  "paged chunked prefill refuses bad calls with an AttnkitError naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([2, 8, 2, 16], { device });
      using v = Tensor.randn([2, 8, 2, 16], { device });
      using gate = Tensor.zeros([2, 8, 2, 16], { device });
      using beta = Tensor.ones([2, 8, 2], { device });
      using pool = Tensor.zeros([3, 2, 16, 16], { device });
      using wrongPool = Tensor.zeros([3, 2, 16, 8], { device });
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using floatIdx = Tensor.from([1, 2], { device });
      using past = Tensor.from([1, 3], { dtype: "int32", device });
      using far = Tensor.from([2147483647, 1], { dtype: "int32", device });
      using twice = Tensor.from([2, 2], { dtype: "int32", device });
      refuses(() => pagedChunkKda(q, q, v, gate, beta, wrongPool, idx), /stateCache: expected shape/);
      refuses(() => pagedChunkKda(q, q, v, gate, beta, pool, floatIdx), /stateIndices: expected dtype int32/);
      pool.fill(0.5);
      for (const run of [pagedChunkKda, pagedChunkGdn]) {
        const gates = run === pagedChunkKda ? gate : beta;
        refuses(() => run(q, q, v, gates, beta, pool, past), /state_indices: entry 1 is 3, past the 3 slots/);
        refuses(() => run(q, q, v, gates, beta, pool, far), /state_indices: entry 0 is 2147483647, past/);
        refuses(() => run(q, q, v, gates, beta, pool, twice), /state_indices: .*slot 2/);
      }
      assert.ok((pool.toArray() as Float32Array).every((x) => x === 0.5), "the pool after refused calls");
      // Padding may repeat: two sequences at index 0 are zero rows and touch no slot.
      using padding = Tensor.from([0, 0], { dtype: "int32", device });
      using o = pagedChunkGdn(q, q, v, beta, beta, pool, padding);
      assert.ok((o.toArray() as Float32Array).every((x) => x === 0), "padding rows");
      assert.ok(
        (pool.toArray() as Float32Array).every((x) => x === 0.5),
        "the pool after a padding-only call",
      );
      refuses(
        () => pagedChunkKda(q, q, v, gate, beta, pool, idx, { outputFinalState: true } as never),
        /outputFinalState/,
      );
      refuses(
        () => pagedChunkGdn(q, q, v, beta, beta, pool, idx, { useQkL2norm: 1 } as never),
        /useQkL2norm/,
      );
      refuses(
        () => pagedChunkGdn(q, q, v, beta, beta, pool, idx, { checkIndices: "no" } as never),
        /checkIndices/,
      );
      // checkIndices: false reads nothing back on CUDA: the index past the pool is skipped there (its rows
      // are computed from a zero state, its slot is nowhere), the live slot advances; the CPU still refuses.
      using pastOnly = Tensor.from([3, 1], { dtype: "int32", device });
      const unchecked = () => pagedChunkGdn(q, q, v, beta, beta, pool, pastOnly, { checkIndices: false });
      if (device === "cpu") {
        refuses(unchecked, /past the 3 slots/);
      } else {
        unchecked().dispose();
        const after = pool.toArray() as Float32Array, slot = 2 * 16 * 16;
        assert.ok(after.subarray(0, slot).every((x) => x === 0.5), "slot 0 untouched");
        assert.ok(after.subarray(2 * slot).every((x) => x === 0.5), "slot 2 untouched");
        assert.ok(after.subarray(slot, 2 * slot).some((x) => x !== 0.5), "slot 1 advanced");
      }
    }),
);
