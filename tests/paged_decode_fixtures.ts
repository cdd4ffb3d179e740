// The paged decode steps' float64 oracle and one checked case (tests/paged_decode.test.ts and the
// registry row's exercise in tests/variants.test.ts): the tolerance rule is stated in the test file.
import assert from "node:assert/strict";
import { type Device, type DType, lastPlan, recurrentGdnDecode, recurrentKdaDecode, Tensor } from "../mod.ts";
import { poison } from "./helpers.ts";
import { roundBf16 } from "../reference/mod.ts";
import { generator, normals } from "./oracle_checks.ts";

export interface Spec {
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

export function normalize(x: Float64Array): Float64Array {
  let s = 0;
  for (const v of x) s += v * v;
  const inv = 1 / Math.sqrt(s + 1e-6);
  return x.map((v) => v * inv);
}

/** One decode step in float64: advances `pool` (a host copy) and returns the output [B, H, V]. */
export function referenceStep(
  s: Spec,
  st: Step,
  aLog: Float64Array,
  dtBias: Float64Array,
  pool: Float64Array,
  indices: Int32Array,
  fresh: Uint8Array,
  scale: number,
): { out: Float64Array; magnitude: Float64Array } {
  const { B, H, HK, K, V } = s;
  const W = 2 * HK * K + H * V, group = H / HK, slotSize = H * V * K;
  const out = new Float64Array(B * H * V);
  // Per output, the size of the terms its float32 sums add (a cancelling sum is exact only to them).
  const magnitude = new Float64Array(B * H * V);
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
        let pred = 0, predSize = 0;
        for (let c = 0; c < K; c++) {
          const e = fresh[b] ? 0 : pool[base + j * K + c];
          pool[base + j * K + c] = decay[c] * e;
          pred += pool[base + j * K + c] * k[c];
          predSize += Math.abs(pool[base + j * K + c] * k[c]);
        }
        const u = beta * (v[j] - pred), uSize = beta * (Math.abs(v[j]) + predSize);
        let o = 0, size = 0;
        for (let c = 0; c < K; c++) {
          size += (Math.abs(pool[base + j * K + c]) + uSize * Math.abs(k[c])) * Math.abs(q[c]);
          pool[base + j * K + c] += u * k[c];
          o += pool[base + j * K + c] * q[c];
        }
        out[(b * H + h) * V + j] = scale * o;
        magnitude[(b * H + h) * V + j] = Math.abs(scale) * size;
      }
    }
  }
  return { out, magnitude };
}

/**
 * Rows of `n` values each: |a - r| <= tol |r| + atol s + abs, s the row's largest |r| or, given, largest
 * magnitude of the terms behind r; NaN where r is NaN (untouched).
 */
export function expectRowsClose(
  what: string,
  actual: ArrayLike<number>,
  ref: ArrayLike<number>,
  n: number,
  rel: number,
  abs = 0,
  magnitude?: ArrayLike<number>,
) {
  const atol = 2 ** -16;
  for (let start = 0; start < ref.length; start += n) {
    let scale = 0;
    for (let i = start; i < start + n; i++) {
      if (Number.isFinite(ref[i])) scale = Math.max(scale, Math.abs(ref[i]), magnitude?.[i] ?? 0);
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

export function randomIndices(s: Spec, rnd: () => number): { indices: Int32Array; fresh: Uint8Array } {
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

export function runCase(device: Device, s: Spec, seed: number): void {
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
    if (device === "cuda") {
      const fused = [32, 64, 128, 256].includes(K);
      const path = lastPlan()?.path ?? "";
      assert.ok(
        fused ? ["bulk", "fused"].includes(path) : path === "general",
        `the planned path at K=${K}: ${path}`,
      );
    }
    const { out: want, magnitude } = referenceStep(
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
      magnitude,
    );
    // The pool stores its dtype: the oracle's state is rounded the same way. A rounding may go the other
    // way after float32's different order (one ulp), so the next step starts from the device's own
    // state: a flipped rounding would otherwise show in the next outputs at 16-bit size.
    if (s.poolDtype === "bfloat16") {
      for (let i = 0; i < ref.length; i++) ref[i] = roundBf16(ref[i]);
      expectRowsClose(`step ${t} pool`, host(pool), ref, K, 2 * HALF_ULP.bfloat16);
      ref.set(host(pool));
    }
  }
  // A 16-bit pool: a rounding may go the other way after float32's different order (one ulp).
  expectRowsClose("pool", host(pool), ref, K, 2 * HALF_ULP[s.poolDtype]);
}
