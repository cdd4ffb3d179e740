// One checked case of the paged decode steps against their float64 oracle (reference/paged_decode.ts),
// for tests/paged_decode.test.ts and the registry row's exercise in tests/variants.test.ts; the
// tolerance rule is reference/tolerance.ts's pagedDecodeTolerance, restated in the test file.
import assert from "node:assert/strict";
import { type Device, type DType, lastPlan, recurrentGdnDecode, recurrentKdaDecode, Tensor } from "../mod.ts";
import { poison } from "./helpers.ts";
import {
  pagedDecodeReference,
  pagedDecodeTolerance,
  roundBf16,
  rowToleranceBreach,
} from "../reference/mod.ts";
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

/**
 * Rows of `n` values each under the paged decode rule (reference/tolerance.ts, `rowToleranceBreach`):
 * |a - r| <= (2^-16 + rel) |r| + 2^-16 s + abs, s the row's largest |r| or, given, largest magnitude of
 * the terms behind r; NaN where r is NaN (untouched).
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
  const breach = rowToleranceBreach(actual, ref, n, { relative: rel, absolute: abs }, magnitude);
  if (!breach) return;
  const { index, actual: got, expected, rowScale } = breach;
  assert.fail(
    Number.isNaN(expected)
      ? `${what}[${index}]: expected the untouched NaN, got ${got}`
      : `${what}[${index}]: got ${got}, expected ${expected} (error ${
        Math.abs(got - expected)
      }, row scale ${rowScale})`,
  );
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
  const tolerance = pagedDecodeTolerance(s.dtype as "float32", s.poolDtype);
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
    const bounded = s.kind === "bounded";
    const want = pagedDecodeReference({
      B,
      H,
      HK,
      K,
      V,
      numSlots: slots,
      packedQkv: host(qkv),
      rawGate: host(rawGate),
      rawBeta: host(rawBeta),
      aLog: host(aLog),
      dtBias: host(dtBias),
      perChannel: s.perChannel,
      gateTransform: bounded ? "bounded" : "softplus",
      ...(bounded ? { lowerBound: s.lowerBound } : {}),
      stateCache: ref,
      stateIndices: indices,
      hasInitialState: t === 0 ? Array.from(fresh, (f) => !f) : undefined,
      scale,
    });
    ref.set(want.stateCache);
    expectRowsClose(
      `step ${t} output`,
      host(o),
      want.output,
      V,
      tolerance.output.relative,
      tolerance.output.absolute,
      want.outputMagnitude,
    );
    // The pool stores its dtype: the oracle's state is rounded the same way. A rounding may go the other
    // way after float32's different order (one ulp), so the next step starts from the device's own
    // state: a flipped rounding would otherwise show in the next outputs at 16-bit size.
    if (s.poolDtype === "bfloat16") {
      for (let i = 0; i < ref.length; i++) ref[i] = roundBf16(ref[i]);
      expectRowsClose(`step ${t} pool`, host(pool), ref, K, tolerance.state.relative);
      ref.set(host(pool));
    }
  }
  // A 16-bit pool: a rounding may go the other way after float32's different order (one ulp).
  expectRowsClose("pool", host(pool), ref, K, tolerance.state.relative);
}
