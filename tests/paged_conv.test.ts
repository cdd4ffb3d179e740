// The causal convolution over a paged history pool (pagedCausalConv1d, causalConv1dDecode) against the
// training op causalConv1d on the same tokens (itself held to a float64 oracle in causal_conv1d.test.ts):
// dense and packed batches (empty sequences, spare rows past the last offset), widths 2 to 8, three
// dtypes with float32 or 16-bit weights, SiLU or none, fresh slots holding NaN, padding indices (0 and
// negative) whose slots stay untouched, and a decode stepped T times. The output is poisoned with NaN
// first, so an unwritten row fails.
//
// Tolerance rule: histories are copies of inputs, so the pool must match bit for bit. Outputs: |a - r|
// <= 2^-20 + 2^-20 |r| for float32 (the two paths sum W products in different orders and precisions),
// plus one ulp of a 16-bit output (2^-7 bfloat16, 2^-10 float16, relative) where the roundings may part.
import assert from "node:assert/strict";
import {
  causalConv1d,
  causalConv1dDecode,
  type Device,
  type DType,
  pagedCausalConv1d,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, poison, refuses, withSeed } from "./helpers.ts";
import { generator, normals } from "./oracle_checks.ts";

const ULP: Record<string, number> = { float32: 0, bfloat16: 2 ** -7, float16: 2 ** -10 };

function expectClose(what: string, got: ArrayLike<number>, want: ArrayLike<number>, dtype: DType) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = 2 ** -20 + (2 ** -20 + ULP[dtype]) * Math.abs(want[i]);
    assert.ok(Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: got ${got[i]}, expected ${want[i]}`);
  }
}

function expectSameBits(what: string, got: ArrayLike<number>, want: ArrayLike<number>) {
  for (let i = 0; i < want.length; i++) {
    assert.ok(Object.is(got[i], want[i]), `${what}[${i}]: got ${got[i]}, expected ${want[i]}`);
  }
}

interface Spec {
  dtype: DType;
  weightDtype: DType;
  W: number;
  C: number;
  /** Sequence lengths (packed when `packed`, else a dense batch of equal lengths). */
  lengths: number[];
  packed: boolean;
  spare: number;
  silu: boolean;
}

function prefillCase(device: Device, s: Spec, seed: number): void {
  const rnd = generator(seed);
  const { C, W, dtype } = s;
  const N = s.lengths.length, H = W - 1;
  const T = s.packed ? s.lengths.reduce((a, b) => a + b, 0) + s.spare : s.lengths[0];
  const B = s.packed ? 1 : N;
  const offsets = [0];
  for (const l of s.lengths) offsets.push(offsets[offsets.length - 1] + l);
  const slots = N + 2;
  // Sequence n: slot n + 1, every third one padding (0 or -1), some fresh (their slot holds NaN).
  const indices = Array.from({ length: N }, (_, n) => (n % 3 === 2 ? -(n % 2) : n + 1));
  const fresh = Array.from({ length: N }, () => rnd() < 0.3);
  const poolHost = normals(rnd, slots * H * C);
  for (let slot = 0; slot < slots; slot++) {
    const n = indices.indexOf(slot);
    if (n < 0 || fresh[n]) poolHost.fill(NaN, slot * H * C, (slot + 1) * H * C);
  }
  using x = Tensor.from(normals(rnd, B * T * C), { shape: [B, T, C], dtype, device });
  using weight = Tensor.from(normals(rnd, C * W), { shape: [C, W], dtype: s.weightDtype, device });
  using pool = Tensor.from(poolHost, { shape: [slots, H, C], dtype, device });
  const before = pool.toArray() as Float32Array;
  using idx = Tensor.from(indices, { dtype: "int32", device });
  using flags = Tensor.from(fresh.map((f) => (f ? 0 : 1)), { dtype: "bool", device });
  using out = poison(Tensor.empty([B, T, C], { dtype, device }));
  const activation = s.silu ? "silu" as const : undefined;
  const y = pagedCausalConv1d(x, weight, pool, idx, {
    activation,
    hasInitialState: flags,
    out,
    ...(s.packed ? { cuSeqlens: offsets } : {}),
  });
  assert.equal(y, out);
  // The training op with each sequence's history as its initial state (zeros when fresh or padding).
  const init = new Float32Array(N * H * C);
  for (let n = 0; n < N; n++) {
    if (indices[n] > 0 && !fresh[n]) {
      init.set(before.subarray(indices[n] * H * C, (indices[n] + 1) * H * C), n * H * C);
    }
  }
  using initial = Tensor.from(init, { shape: [N, H, C], dtype, device });
  // Poisoned: the training op leaves the spare rows past the last offset unwritten.
  using refOut = poison(Tensor.empty([B, T, C], { dtype, device }));
  using r = causalConv1d(x, weight, {
    activation,
    initialState: initial,
    returnFinalState: true,
    ...(s.packed ? { cuSeqlens: offsets } : {}),
    out: { output: refOut },
  });
  const got = y.toArray() as Float32Array, want = r.output.toArray() as Float32Array;
  const gotPool = pool.toArray() as Float32Array, finals = r.finalState!.toArray() as Float32Array;
  for (let n = 0; n < N; n++) {
    const rows = s.packed ? [offsets[n], offsets[n + 1]] : [0, T];
    const base = s.packed ? 0 : n * T * C;
    const a = got.subarray(base + rows[0] * C, base + rows[1] * C);
    if (indices[n] <= 0) {
      assert.ok(a.every((v) => v === 0), `sequence ${n} (padding): expected zero rows`);
      continue;
    }
    expectClose(`sequence ${n}`, a, want.subarray(base + rows[0] * C, base + rows[1] * C), dtype);
    const slot = indices[n];
    expectSameBits(
      `slot ${slot}`,
      gotPool.subarray(slot * H * C, (slot + 1) * H * C),
      finals.subarray(n * H * C, (n + 1) * H * C),
    );
  }
  for (let slot = 0; slot < slots; slot++) {
    if (indices.includes(slot)) continue;
    expectSameBits(
      `untouched slot ${slot}`,
      gotPool.subarray(slot * H * C, (slot + 1) * H * C),
      before.subarray(slot * H * C, (slot + 1) * H * C),
    );
  }
  if (s.packed && s.spare > 0) {
    const tail = got.subarray(offsets[N] * C);
    assert.ok(tail.every((v) => Number.isNaN(v)), "rows past the last offset are left as they were");
  }
}

const SPECS: Spec[] = [
  {
    dtype: "float32",
    weightDtype: "float32",
    W: 4,
    C: 8,
    lengths: [5, 5, 5, 5],
    packed: false,
    spare: 0,
    silu: true,
  },
  {
    dtype: "bfloat16",
    weightDtype: "float32",
    W: 3,
    C: 16,
    lengths: [4, 0, 9, 1, 2],
    packed: true,
    spare: 3,
    silu: true,
  },
  {
    dtype: "float16",
    weightDtype: "float16",
    W: 2,
    C: 8,
    lengths: [1, 7, 0],
    packed: true,
    spare: 0,
    silu: false,
  },
  {
    dtype: "float32",
    weightDtype: "float32",
    W: 4,
    C: 3,
    lengths: [2, 2, 2],
    packed: false,
    spare: 0,
    silu: false,
  },
  // The wider windows the CUDA kernel unrolls (5 to 8), sequences shorter and longer than the history.
  ...[5, 6, 7, 8].map((W): Spec => ({
    dtype: W % 2 ? "float32" : "bfloat16",
    weightDtype: "float32",
    W,
    C: 8 * (W - 4),
    lengths: [3, W + 2, 0],
    packed: W % 2 === 0,
    spare: W % 2 === 0 ? 1 : 0,
    silu: W % 2 === 1,
  })),
];

deviceTest(
  "paged causal conv1d equals causalConv1d with each slot's history; padding and spare rows untouched",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, s] of SPECS.entries()) prefillCase(device, s, seed + 100 * i);
      })),
);

deviceTest(
  "causal conv1d decode stepped T times equals causalConv1d over the T tokens",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const rnd = generator(seed);
        for (const dtype of ["float32", "bfloat16"] as const) {
          const [N, T, C, W] = [3, 6, 8, 4];
          const xs = normals(rnd, N * T * C);
          using x = Tensor.from(xs, { shape: [N, T, C], dtype, device });
          using weight = Tensor.from(normals(rnd, C * W), { shape: [C, W], device });
          using r = causalConv1d(x, weight, { activation: "silu", returnFinalState: true });
          // Sequences 0..N-1 in slots 0..N-1 (no indices), all fresh at first (the pool holds NaN).
          using pool = Tensor.full([N, W - 1, C], NaN, { dtype, device });
          using fresh = Tensor.from(Array(N).fill(0), { dtype: "bool", device });
          const xr = x.toArray() as Float32Array, want = r.output.toArray() as Float32Array;
          for (let t = 0; t < T; t++) {
            const row = new Float32Array(N * C);
            for (let n = 0; n < N; n++) row.set(xr.subarray((n * T + t) * C, (n * T + t + 1) * C), n * C);
            using xt = Tensor.from(row, { shape: [N, C], dtype, device });
            using y = causalConv1dDecode(xt, weight, pool, {
              activation: "silu",
              hasInitialState: t === 0 ? fresh : undefined,
            });
            const w = new Float32Array(N * C);
            for (let n = 0; n < N; n++) w.set(want.subarray((n * T + t) * C, (n * T + t + 1) * C), n * C);
            expectClose(`${dtype} token ${t}`, y.toArray() as Float32Array, w, dtype);
          }
          expectSameBits(
            `${dtype} histories`,
            pool.toArray() as Float32Array,
            r.finalState!.toArray() as Float32Array,
          );
        }
      })),
);

deviceTest(
  "paged causal conv1d refuses bad calls with an AttnkitError naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      using x = Tensor.randn([1, 6, 8], { device });
      using x2 = Tensor.randn([2, 8], { device });
      using weight = Tensor.randn([8, 4], { device });
      using narrow = Tensor.randn([8, 1], { device });
      using pool = Tensor.zeros([3, 3, 8], { device });
      using bfPool = Tensor.zeros([3, 3, 8], { dtype: "bfloat16", device });
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using idx1 = Tensor.from([1], { dtype: "int32", device });
      refuses(() => pagedCausalConv1d(x2, weight, pool, idx), /x: expected \[B, T, C\]/);
      refuses(() => causalConv1dDecode(x, weight, pool), /x: expected \[N, C\]/);
      refuses(() => pagedCausalConv1d(x, narrow, pool, idx1), /weight: expected \[C, W\] with W >= 2/);
      refuses(() => pagedCausalConv1d(x, weight, bfPool, idx1), /stateCache: expected dtype float32/);
      refuses(
        () => pagedCausalConv1d(x, weight, pool, idx, { cuSeqlens: [0, 2, 7] }),
        /cu_seqlens|cuSeqlens/,
      );
      refuses(() => pagedCausalConv1d(x, weight, pool, idx1, { activation: "relu" as "silu" }), /activation/);
      refuses(() => causalConv1dDecode(x2, weight, pool, { stateIndices: idx1 }), /state_indices/);
      refuses(
        () => pagedCausalConv1d(x, weight, pool, idx1, { initialState: pool } as never),
        /initialState/,
      );
      using past = Tensor.from([3], { dtype: "int32", device });
      refuses(() => pagedCausalConv1d(x, weight, pool, past), /past the 3 slots/);
      using twice = Tensor.from([2, 2], { dtype: "int32", device });
      refuses(() => causalConv1dDecode(x2, weight, pool, { stateIndices: twice }), /both name slot 2/);
    }),
);

deviceTest(
  "paged causal conv1d with checkIndices false: the CPU still refuses, CUDA skips an index past the pool",
  (device) =>
    expectNoLeak(device, () => {
      using x2 = Tensor.randn([2, 8], { device });
      using weight = Tensor.randn([8, 4], { device });
      using pool = Tensor.full([3, 3, 8], NaN, { device });
      using past = Tensor.from([3, 1], { dtype: "int32", device });
      using fresh = Tensor.from([0, 0], { dtype: "bool", device });
      const call = () =>
        causalConv1dDecode(x2, weight, pool, {
          stateIndices: past,
          hasInitialState: fresh,
          checkIndices: false,
        });
      refuses(() => causalConv1dDecode(x2, weight, pool, { stateIndices: past }), /past the 3 slots/);
      using x3 = x2.reshape([2, 1, 8]);
      refuses(() => pagedCausalConv1d(x3, weight, pool, past, { checkIndices: 0 as never }), /checkIndices/);
      if (device === "cpu") return refuses(call, /past the 3 slots/);
      using y = call();
      const out = y.toArray() as Float32Array, slots = pool.toArray() as Float32Array;
      for (let c = 0; c < 8; c++) assert.equal(out[c], 0, `the skipped sequence's output, channel ${c}`);
      for (let i = 0; i < 24; i++) assert.ok(Number.isNaN(slots[i]), `slot 0 touched at ${i}`);
      for (let i = 24; i < 48; i++) assert.ok(Number.isFinite(slots[i]), `slot 1 not written at ${i - 24}`);
      for (let i = 48; i < 72; i++) assert.ok(Number.isNaN(slots[i]), `slot 2 touched at ${i - 48}`);
    }),
);

deviceTest(
  "paged causal conv1d impl: 'reference' agrees with the default, 'fused' refuses where no kernel serves",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const W of [4, 9]) {
          const [N, C] = [3, 40];
          using x = Tensor.randn([N, C], { dtype: "bfloat16", device, seed });
          using weight = Tensor.randn([C, W], { device, seed: seed + 1 });
          using idx = Tensor.from([2, 0, 1], { dtype: "int32", device });
          using start = Tensor.randn([4, W - 1, C], { dtype: "bfloat16", device, seed: seed + 2 });
          using poolA = start.clone();
          using poolB = start.clone();
          using a = causalConv1dDecode(x, weight, poolA, { stateIndices: idx, activation: "silu" });
          using b = causalConv1dDecode(x, weight, poolB, {
            stateIndices: idx,
            activation: "silu",
            impl: "reference",
          });
          // float32 sums (fused) against float64 ones (reference), each rounded to bfloat16 once.
          expectClose(
            `W ${W}: outputs`,
            a.toArray() as Float32Array,
            b.toArray() as Float32Array,
            "bfloat16",
          );
          assert.deepEqual(poolA.toArray(), poolB.toArray(), `W ${W}: histories`);
          const fused = () => causalConv1dDecode(x, weight, poolA, { stateIndices: idx, impl: "fused" });
          if (device === "cpu") refuses(fused, /impl 'fused': the CPU has no fused kernel/);
          else if (W > 8) refuses(fused, /impl 'fused': the fused kernel serves W up to 8, got W = 9/);
          else fused().dispose();
        }
        using x1 = Tensor.zeros([1, 4], { device });
        using w1 = Tensor.zeros([4, 3], { device });
        using pool1 = Tensor.zeros([1, 2, 4], { device });
        refuses(
          () => causalConv1dDecode(x1, w1, pool1, { impl: "fast" as "fused" }),
          /impl: expected one of "fused", "reference"/,
        );
      })),
);
