// The paged decode steps (recurrentGdnDecode, recurrentKdaDecode) against a float64 oracle written
// here: grouped heads, padding indices (0 and negative), fresh slots holding NaN with
// hasInitialState false, slots that no sequence selects (NaN, bitwise untouched), float32 and bfloat16
// pools, float16 / bfloat16 / float32 rows, both KDA gate transforms, several steps in a row; and the
// steps against the training op (chunkKda on the same tokens, its gate from gateTransform). The
// output buffer is poisoned with NaN first.
//
// Tolerance rule, per element: |actual - oracle| <= rtol |oracle| + atol s, s the largest |oracle| of the
// row (or slot row). rtol, atol 2^-16 for float32 results (the steps' products over K in float32 at the
// worst, plus the norm's rounding); a 16-bit output adds half its ulp relative (2^-8 bfloat16, 2^-11
// float16) and, for float16, half its subnormal step (2^-25) absolute. A bfloat16 pool is rounded in the
// oracle too after every step (the op stores it so); its elements may then differ by one ulp where
// float32's order of operations tips a rounding.
import assert from "node:assert/strict";
import {
  chunkKda,
  type Device,
  type DType,
  gateTransform,
  recurrentGdnDecode,
  recurrentKdaDecode,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, poison, refuses, withSeed } from "./helpers.ts";
import { roundBf16 } from "../reference/mod.ts";
import { generator, normals } from "./oracle_checks.ts";

interface Spec {
  B: number;
  H: number;
  HK: number;
  K: number;
  V: number;
  slots: number;
  perChannel: boolean;
  kind?: "bounded" | "softplus";
  lowerBound?: number;
  dtype: DType;
  poolDtype: "float32" | "bfloat16";
  steps: number;
}

/** Host copies of one step's inputs, as the kernel sees them (after their rounding). */
interface Step {
  qkv: Float64Array;
  rawGate: Float64Array;
  rawBeta: Float64Array;
}

const HALF_ULP: Record<string, number> = { float32: 0, bfloat16: 2 ** -8, float16: 2 ** -11 };

const softplus = (x: number) => (x > 20 ? x : Math.log1p(Math.exp(x)));
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

function normalize(x: Float64Array): Float64Array {
  let s = 0;
  for (const v of x) s += v * v;
  const inv = 1 / Math.sqrt(s + 1e-6);
  return x.map((v) => v * inv);
}

/** One decode step in float64: advances `pool` (a host copy) and returns the output [B, H, V]. */
function referenceStep(
  s: Spec,
  st: Step,
  aLog: Float64Array,
  dtBias: Float64Array,
  pool: Float64Array,
  indices: Int32Array,
  fresh: Uint8Array,
  scale: number,
): Float64Array {
  const { B, H, HK, K, V } = s;
  const W = 2 * HK * K + H * V, group = H / HK, slotSize = H * V * K;
  const out = new Float64Array(B * H * V);
  for (let b = 0; b < B; b++) {
    const slot = indices[b];
    if (slot <= 0) continue;
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / group);
      const row = st.qkv.subarray(b * W, (b + 1) * W);
      const q = normalize(row.slice(hk * K, hk * K + K));
      const k = normalize(row.slice((HK + hk) * K, (HK + hk) * K + K));
      const v = row.subarray(2 * HK * K + h * V, 2 * HK * K + h * V + V);
      const a = Math.exp(aLog[h]);
      const decay = new Float64Array(K);
      for (let c = 0; c < K; c++) {
        const x = s.perChannel
          ? st.rawGate[(b * H + h) * K + c] + dtBias[h * K + c]
          : st.rawGate[b * H + h] + dtBias[h];
        const g = s.kind === "bounded" ? (s.lowerBound ?? -5) * sigmoid(a * x) : -a * softplus(x);
        decay[c] = Math.exp(g);
      }
      const beta = sigmoid(st.rawBeta[b * H + h]);
      const base = slot * slotSize + h * V * K;
      for (let j = 0; j < V; j++) {
        let pred = 0;
        for (let c = 0; c < K; c++) {
          const e = fresh[b] ? 0 : pool[base + j * K + c];
          pool[base + j * K + c] = decay[c] * e;
          pred += pool[base + j * K + c] * k[c];
        }
        const u = beta * (v[j] - pred);
        let o = 0;
        for (let c = 0; c < K; c++) {
          pool[base + j * K + c] += u * k[c];
          o += pool[base + j * K + c] * q[c];
        }
        out[(b * H + h) * V + j] = scale * o;
      }
    }
  }
  return out;
}

/** Rows of `n` values each: |a - r| <= tol |r| + atol max|row of r|, NaN where r is NaN (untouched). */
function expectRowsClose(
  what: string,
  actual: ArrayLike<number>,
  ref: ArrayLike<number>,
  n: number,
  rel: number,
  abs = 0,
) {
  const atol = 2 ** -16;
  for (let start = 0; start < ref.length; start += n) {
    let scale = 0;
    for (let i = start; i < start + n; i++) {
      if (Number.isFinite(ref[i])) scale = Math.max(scale, Math.abs(ref[i]));
    }
    for (let i = start; i < start + n; i++) {
      if (Number.isNaN(ref[i])) {
        assert.ok(Number.isNaN(actual[i]), `${what}[${i}]: expected the untouched NaN, got ${actual[i]}`);
        continue;
      }
      const err = Math.abs(actual[i] - ref[i]);
      assert.ok(
        err <= (2 ** -16 + rel) * Math.abs(ref[i]) + atol * scale + abs,
        `${what}[${i}]: got ${actual[i]}, expected ${ref[i]} (error ${err}, row scale ${scale})`,
      );
    }
  }
}

function randomIndices(s: Spec, rnd: () => number): { indices: Int32Array; fresh: Uint8Array } {
  const free = Array.from({ length: s.slots - 1 }, (_, i) => i + 1);
  for (let i = free.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [free[i], free[j]] = [free[j], free[i]];
  }
  const indices = new Int32Array(s.B), fresh = new Uint8Array(s.B);
  for (let b = 0; b < s.B; b++) {
    const pad = b % 3 === 2;
    indices[b] = pad ? (b % 2 ? 0 : -1) : free.pop()!;
    fresh[b] = !pad && rnd() < 0.3 ? 1 : 0;
  }
  return { indices, fresh };
}

function runCase(device: Device, s: Spec, seed: number): void {
  const rnd = generator(seed);
  const { B, H, HK, K, V, slots } = s;
  const W = 2 * HK * K + H * V;
  const { indices, fresh } = randomIndices(s, rnd);
  const host = (t: Tensor) => Float64Array.from(t.toArray() as ArrayLike<number>);
  using aLog = Tensor.from(normals(rnd, H, 0.5), { device });
  using dtBias = Tensor.from(normals(rnd, s.perChannel ? H * K : H, 0.5), {
    shape: s.perChannel ? [H, K] : [H],
    device,
  });
  // Fresh slots and slots no sequence selects hold NaN: the first must not be read, the second not touched.
  const poolHost = normals(rnd, slots * H * V * K, 0.2);
  const slotSize = H * V * K;
  for (let slot = 0; slot < slots; slot++) {
    const b = Array.from(indices).indexOf(slot);
    if (b < 0 || fresh[b]) poolHost.fill(NaN, slot * slotSize, (slot + 1) * slotSize);
  }
  using pool = Tensor.from(poolHost, { shape: [slots, H, V, K], dtype: s.poolDtype, device });
  using idx = Tensor.from(indices, { dtype: "int32", device });
  using flags = Tensor.from(Array.from(fresh, (f) => (f ? 0 : 1)), { dtype: "bool", device });
  const ref = host(pool);
  const scale = 1 / Math.sqrt(K);
  for (let t = 0; t < s.steps; t++) {
    using qkv = Tensor.from(normals(rnd, B * W), { shape: [B, W], dtype: s.dtype, device });
    using rawGate = Tensor.from(normals(rnd, B * H * (s.perChannel ? K : 1), 2), {
      shape: s.perChannel ? [1, B, H, K] : [1, B, H],
      device,
    });
    using rawBeta = Tensor.from(normals(rnd, B * H, 2), { shape: [1, B, H], dtype: s.dtype, device });
    using out = poison(Tensor.empty([1, B, H, V], { dtype: s.dtype, device }));
    const options = { hasInitialState: t === 0 ? flags : undefined, out };
    const o = s.perChannel
      ? recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, {
        ...options,
        gateTransform: s.kind,
        ...(s.kind === "bounded" ? { lowerBound: s.lowerBound } : {}),
      })
      : recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, options);
    assert.equal(o, out, "the output is options.out itself");
    const want = referenceStep(
      s,
      { qkv: host(qkv), rawGate: host(rawGate), rawBeta: host(rawBeta) },
      host(aLog),
      host(dtBias),
      ref,
      indices,
      t === 0 ? fresh : new Uint8Array(B),
      scale,
    );
    expectRowsClose(
      `step ${t} output`,
      host(o),
      want,
      V,
      HALF_ULP[s.dtype],
      s.dtype === "float16" ? 2 ** -25 : 0,
    );
    // The pool stores its dtype: the oracle's state is rounded the same way before the next step.
    if (s.poolDtype === "bfloat16") { for (let i = 0; i < ref.length; i++) ref[i] = roundBf16(ref[i]); }
  }
  // A 16-bit pool: a rounding may go the other way after float32's different order (one ulp).
  expectRowsClose("pool", host(pool), ref, K, 2 * HALF_ULP[s.poolDtype]);
}

const CASES: Spec[] = [
  {
    B: 5,
    H: 4,
    HK: 4,
    K: 32,
    V: 24,
    slots: 9,
    perChannel: true,
    kind: "bounded",
    lowerBound: -5,
    dtype: "float32",
    poolDtype: "float32",
    steps: 3,
  },
  {
    B: 4,
    H: 3,
    HK: 3,
    K: 16,
    V: 16,
    slots: 6,
    perChannel: true,
    kind: "softplus",
    dtype: "bfloat16",
    poolDtype: "bfloat16",
    steps: 2,
  },
  {
    B: 6,
    H: 4,
    HK: 2,
    K: 64,
    V: 32,
    slots: 10,
    perChannel: false,
    kind: "softplus",
    dtype: "float32",
    poolDtype: "float32",
    steps: 3,
  },
  {
    B: 3,
    H: 6,
    HK: 3,
    K: 16,
    V: 8,
    slots: 5,
    perChannel: false,
    kind: "softplus",
    dtype: "float16",
    poolDtype: "bfloat16",
    steps: 2,
  },
  {
    B: 1,
    H: 1,
    HK: 1,
    K: 128,
    V: 128,
    slots: 2,
    perChannel: true,
    kind: "bounded",
    lowerBound: -1,
    dtype: "float32",
    poolDtype: "float32",
    steps: 1,
  },
];

deviceTest(
  "paged decode: float64 oracle, padding, fresh and untouched slots, grouped heads, 16-bit pools",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, s] of CASES.entries()) runCase(device, s, seed + 1000 * i);
      })),
);

deviceTest(
  "paged KDA decode stepped T times equals chunkKda on the same tokens",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const [T, H, K, V] = [7, 2, 16, 16];
        const rnd = generator(seed);
        const qh = normals(rnd, T * H * K), kh = normals(rnd, T * H * K), vh = normals(rnd, T * H * V);
        const rawGateHost = normals(rnd, T * H * K, 2), rawBetaHost = normals(rnd, T * H, 2);
        using aLog = Tensor.from(normals(rnd, H, 0.5), { device });
        using dtBias = Tensor.from(normals(rnd, H * K, 0.5), { shape: [H, K], device });
        using init = Tensor.from(normals(rnd, H * V * K, 0.3), { shape: [1, H, V, K], device });
        // The training op on normalised q and k, its gate from gateTransform, beta = sigmoid(rawBeta).
        const normRows = (x: Float32Array) => {
          const y = new Float32Array(x.length);
          for (let r = 0; r < x.length; r += K) y.set(normalize(Float64Array.from(x.subarray(r, r + K))), r);
          return y;
        };
        using qn = Tensor.from(normRows(qh), { shape: [1, T, H, K], device });
        using kn = Tensor.from(normRows(kh), { shape: [1, T, H, K], device });
        using v = Tensor.from(vh, { shape: [1, T, H, V], device });
        using rawGate = Tensor.from(rawGateHost, { shape: [1, T, H, K], device });
        using beta = Tensor.from(rawBetaHost.map(sigmoid), { shape: [1, T, H], device });
        using gate = gateTransform(rawGate, aLog, dtBias, {
          kind: "bounded",
          lowerBound: -5,
          fastmath: false,
        });
        using r = chunkKda(qn, kn, v, gate.gate, beta, {
          layout: "bshd",
          initialState: init,
          stateLayout: "vk",
          outputFinalState: true,
        });
        // The same tokens one at a time through slot 2 of a pool.
        const poolHost = new Float32Array(3 * H * V * K);
        poolHost.set(init.toArray() as Float32Array, 2 * H * V * K);
        using pool = Tensor.from(poolHost, { shape: [3, H, V, K], device });
        using idx = Tensor.from([2], { dtype: "int32", device });
        const want = r.output.toArray() as Float32Array;
        for (let t = 0; t < T; t++) {
          const row = new Float32Array(H * (2 * K + V));
          row.set(qh.subarray(t * H * K, (t + 1) * H * K), 0);
          row.set(kh.subarray(t * H * K, (t + 1) * H * K), H * K);
          row.set(vh.subarray(t * H * V, (t + 1) * H * V), 2 * H * K);
          using qkv = Tensor.from(row, { shape: [1, row.length], device });
          using g = Tensor.from(rawGateHost.subarray(t * H * K, (t + 1) * H * K), {
            shape: [1, 1, H, K],
            device,
          });
          using b = Tensor.from(rawBetaHost.subarray(t * H, (t + 1) * H), { shape: [1, 1, H], device });
          using o = recurrentKdaDecode(qkv, g, b, aLog, dtBias, pool, idx);
          expectRowsClose(
            `token ${t}`,
            o.toArray() as Float32Array,
            want.subarray(t * H * V, (t + 1) * H * V),
            V,
            0,
          );
        }
        const final = (pool.toArray() as Float32Array).subarray(2 * H * V * K);
        expectRowsClose("final state", final, r.finalState!.toArray() as Float32Array, K, 0);
      })),
);

deviceTest(
  "paged decode refuses bad calls with an AttnkitError naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      const [B, H, K, V] = [2, 2, 8, 8];
      using qkv = Tensor.randn([B, H * (2 * K + V)], { device });
      using rawGate = Tensor.randn([1, B, H, K], { device });
      using rawBeta = Tensor.randn([1, B, H], { device });
      using aLog = Tensor.zeros([H], { device });
      using dtBias = Tensor.zeros([H, K], { device });
      using pool = Tensor.zeros([3, H, V, K], { device });
      using idx = Tensor.from([1, 2], { dtype: "int32", device });
      using floatIdx = Tensor.from([1, 2], { device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, floatIdx),
        /stateIndices: expected dtype int32/,
      );
      refuses(
        () => recurrentKdaDecode(qkv, rawBeta, rawBeta, aLog, dtBias, pool, idx),
        /rawGate: expected shape/,
      );
      refuses(
        () => recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, aLog, pool, idx),
        /rawGate: expected shape/,
      );
      refuses(() =>
        recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, {
          gateTransform: "tanh" as "bounded",
        }), /gateTransform/);
      refuses(() =>
        recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, {
          gateTransform: "softplus",
          lowerBound: -5,
        }), /lowerBound/);
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { lowerBound: 1 }),
        /lowerBound/,
      );
      refuses(
        () =>
          recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { stateIndices: idx } as never),
        /stateIndices/,
      );
      using narrow = Tensor.randn([B, H * (2 * K + V) - 1], { device });
      refuses(
        () => recurrentKdaDecode(narrow, rawGate, rawBeta, aLog, dtBias, pool, idx),
        /packedQkv: a row of/,
      );
      using wrongOut = Tensor.empty([1, B, H, V], { dtype: "bfloat16", device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, idx, { out: wrongOut }),
        /options.out: expected dtype float32/,
      );
      using f16Pool = Tensor.zeros([3, H, V, K], { dtype: "float16", device });
      refuses(
        () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, f16Pool, idx),
        /stateCache: expected dtype/,
      );
      if (device === "cpu") {
        using past = Tensor.from([1, 3], { dtype: "int32", device });
        refuses(
          () => recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, past),
          /past the 3 slots/,
        );
      }
    }),
);
