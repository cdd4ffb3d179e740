// Gate transforms (gateTransform, boundGate and their backwards) against the float64 oracle
// (reference/gate_transform.ts, its hand-derived backward checked here against finite differences):
// both kinds, per head and per channel, four raw dtypes, rank 1 to 5, spikes of |raw| up to 1e30
// (softplus's overflow guard) and infinities, empty tensors, fastmath on and off, the native entry on
// strided views, and the determinism of the gradient sums. Every output is written into a
// NaN-poisoned buffer, so an element left unwritten fails.
//
// Tolerance rule, per element, with a = exp(aLog) of the element's head, L the lower bound and dg the
// gate's gradient: |actual - oracle| <= rtol |oracle| + atol s, where s is the element's natural
// scale: the gate a (softplus) or |L| (bounded); draw |dg| a (softplus) or |dg L| a (bounded); the
// aLog terms |dg| a (softplus) or |dg L| (bounded). The accurate math: rtol 2^-18, atol 2^-20 (a few
// float32 ulps; sigmoid's and exp's conditioning turns relative errors of a * x into absolute ones of
// that size). fastmath on CUDA: rtol 2^-16, atol 2^-18 (__expf's error grows with |x|, __logf's is
// absolute near 1). draw is then rounded to raw's dtype: plus half an ulp (2^-8 bfloat16, 2^-11
// float16, plus 2^-25 for float16's subnormals). The sums daLog and ddtBias: rtol times the sum of
// |terms| (the oracle's magnitudes) plus atol times the sum of the terms' scales, plus float32's
// summation bound (n + 300) 2^-24 times the magnitude (n rows per channel; the partial and lane adds
// are fewer than 300).
import assert from "node:assert/strict";
import {
  AttnkitError,
  BOUND_GATE_LOWER_BOUND,
  boundGate,
  boundGateBackward,
  type Device,
  gateTransform,
  gateTransformBackward,
  type GateTransformKind,
  Tensor,
} from "../mod.ts";
import { native, unwrap } from "../ffi/library.ts";
import {
  gateTransformReference,
  gateTransformReferenceBackward,
  type GateTransformReferenceInputs,
} from "../reference/gate_transform.ts";
import { deviceTest, expectNoLeak, poison, withSeed } from "./helpers.ts";
import { expectFiniteDifferences, filled, generator } from "./oracle_checks.ts";

type RawDType = "float16" | "bfloat16" | "float32" | "float64";
const RAW_DTYPES: RawDType[] = ["float32", "bfloat16", "float16", "float64"];
const KINDS: GateTransformKind[] = ["softplus", "bounded"];

const ACCURATE = { rtol: 2 ** -18, atol: 2 ** -20 };
const FAST = { rtol: 2 ** -16, atol: 2 ** -18 };
/** Half an ulp of each dtype's rounding, relative, and float16's subnormal step (half of it). */
const ROUNDING: Record<RawDType, { rel: number; abs: number }> = {
  float32: { rel: 2 ** -24, abs: 0 },
  float64: { rel: 2 ** -53, abs: 0 },
  bfloat16: { rel: 2 ** -8, abs: 0 },
  float16: { rel: 2 ** -11, abs: 2 ** -25 },
};

/** One problem's sizes and settings. */
interface Spec {
  /** raw's leading dims (any number of them). */
  lead: number[];
  H: number;
  /** Columns per head: a per-channel gate; absent: per head. */
  D?: number;
  dtype: RawDType;
  kind: GateTransformKind;
  lowerBound?: number;
  fastmath: boolean;
  /** Put spikes of large |raw| into raw (within the dtype's range). */
  spikes?: boolean;
}

const product = (xs: number[]) => xs.reduce((a, b) => a * b, 1);
const host = (t: Tensor) => Float64Array.from(t.toArray() as ArrayLike<number>);

/** The largest |raw| spike a dtype holds with room to spare. */
const spikeOf = (dtype: RawDType) => (dtype === "float16" ? 6e4 : 1e30);

/** Random inputs on the device (raw rounded to its dtype) and their exact host values. */
class Problem implements Disposable {
  readonly raw: Tensor;
  readonly aLog: Tensor;
  readonly dtBias: Tensor;
  readonly dGate: Tensor;
  readonly x: GateTransformReferenceInputs;
  readonly dg: Float64Array;
  readonly shape: number[];

  constructor(readonly device: Device, readonly s: Spec, seed: number) {
    const rand = generator(seed);
    const C = s.H * (s.D ?? 1), rows = product(s.lead);
    this.shape = [...s.lead, s.H, ...(s.D === undefined ? [] : [s.D])];
    const raw = filled(rows * C, rand, -6, 6);
    if (s.spikes) {
      const big = spikeOf(s.dtype);
      const values = [30, -30, 200, -200, 1e4, -1e4, big, -big].filter((v) => Math.abs(v) <= big);
      for (let i = 0; i < raw.length; i += 3) raw[i] = values[Math.floor(rand() * values.length)];
    }
    this.raw = Tensor.from(raw, { dtype: s.dtype, device, shape: this.shape });
    this.aLog = Tensor.from(filled(s.H, rand, -2, 2), { dtype: "float32", device });
    const biasShape = s.D === undefined ? [s.H] : [s.H, s.D];
    this.dtBias = Tensor.from(filled(C, rand, -1, 1), { dtype: "float32", device, shape: biasShape });
    this.dGate = Tensor.from(filled(rows * C, rand, -1, 1), { dtype: "float32", device, shape: this.shape });
    this.dg = host(this.dGate);
    // The kernels read raw as float32: the oracle is fed the same (float64 raw rounded once more).
    const rawValues = s.dtype === "float64"
      ? Float64Array.from(Float32Array.from(host(this.raw)))
      : host(this.raw);
    this.x = {
      rows,
      H: s.H,
      D: s.D,
      raw: rawValues,
      aLog: host(this.aLog),
      dtBias: host(this.dtBias),
      kind: s.kind,
      lowerBound: s.kind === "bounded" ? s.lowerBound ?? -5 : undefined,
    };
  }

  options() {
    const { kind, fastmath } = this.s;
    return kind === "bounded" ? { kind, lowerBound: this.x.lowerBound, fastmath } : { kind, fastmath };
  }

  /** The amplitude a of channel c. */
  amplitude(c: number): number {
    return Math.exp(this.x.aLog[Math.floor(c / (this.s.D ?? 1))]);
  }

  [Symbol.dispose](): void {
    for (const t of [this.raw, this.aLog, this.dtBias, this.dGate]) t.dispose();
  }
}

/** Throws unless every |actual[i] - expected[i]| <= bound(i) (NaN, or a non-finite mismatch, fails). */
function expectWithin(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  bound: (i: number) => number,
  what: string,
): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    const got = actual[i], want = expected[i];
    if (!Number.isFinite(want)) {
      assert.ok(Object.is(got, want) || got === want, `${what}[${i}]: ${got}, expected ${want}`);
      continue;
    }
    const err = Math.abs(got - want);
    assert.ok(err <= bound(i), `${what}[${i}]: ${got}, expected ${want} (error ${err}, bound ${bound(i)})`);
  }
}

/** The bounds of a call: fastmath matters on CUDA only (the CPU always computes the accurate forms). */
const tolOf = (s: Spec, device: Device) => (device === "cuda" && s.fastmath ? FAST : ACCURATE);

/** What a problem's spec says, for messages. */
function describe(p: Problem, layout = ""): string {
  const s = p.s;
  return `${s.kind}${s.kind === "bounded" ? ` ${p.x.lowerBound}` : ""}, ${
    s.D === undefined ? "per head" : "per channel"
  }, raw [${p.shape.join(", ")}] ${s.dtype}${layout}, fastmath ${s.fastmath}${s.spikes ? ", spikes" : ""}`;
}

/** A call's outputs read back in raw's logical (row-major) order. */
interface Outputs {
  gate: ArrayLike<number>;
  draw: ArrayLike<number>;
  daLog: ArrayLike<number>;
  ddtBias: ArrayLike<number>;
}

/** Checks a call's outputs against the oracle, with the bounds of the file's tolerance rule. */
function expectOracle(p: Problem, device: Device, out: Outputs, what: string): void {
  const s = p.s;
  const tol = tolOf(s, device);
  const C = s.H * (s.D ?? 1);
  const bounded = s.kind === "bounded", L = Math.abs(p.x.lowerBound ?? 0);
  const gateScale = (i: number) => (bounded ? L : p.amplitude(i % C));
  const expected = gateTransformReference(p.x);
  expectWithin(
    out.gate,
    expected,
    (i) => tol.rtol * Math.abs(expected[i]) + tol.atol * gateScale(i),
    `${what}: gate`,
  );

  const want = gateTransformReferenceBackward(p.x, p.dg);
  const round = ROUNDING[s.dtype];
  const dxScale = (i: number) => Math.abs(p.dg[i]) * p.amplitude(i % C) * (bounded ? L : 1);
  expectWithin(
    out.draw,
    want.draw,
    (i) => (tol.rtol + round.rel) * Math.abs(want.draw[i]) + tol.atol * dxScale(i) + round.abs,
    `${what}: draw`,
  );
  // The scales of the terms of each sum.
  const D = s.D ?? 1;
  const aScale = new Float64Array(s.H), dtScale = new Float64Array(C);
  for (let i = 0; i < p.dg.length; i++) {
    const c = i % C, h = Math.floor(c / D);
    aScale[h] += Math.abs(p.dg[i]) * (bounded ? L : p.amplitude(c));
    dtScale[c] += dxScale(i);
  }
  const summation = (n: number) => (n + 300) * 2 ** -24;
  expectWithin(
    out.ddtBias,
    want.ddtBias,
    (c) => (tol.rtol + summation(p.x.rows)) * want.ddtBiasMagnitude[c] + tol.atol * dtScale[c],
    `${what}: ddtBias`,
  );
  expectWithin(
    out.daLog,
    want.daLog,
    (h) => (tol.rtol + summation(p.x.rows * D)) * want.daLogMagnitude[h] + tol.atol * aScale[h],
    `${what}: daLog`,
  );
}

/** Runs the forward and both backwards into poisoned buffers and checks them against the oracle. */
function checkAgainstOracle(device: Device, s: Spec, seed: number): void {
  using p = new Problem(device, s, seed);
  const what = describe(p);
  using gate = poison(Tensor.empty(p.shape, { dtype: "float32", device }));
  using r = gateTransform(p.raw, p.aLog, p.dtBias, { ...p.options(), out: { gate } });
  assert.equal(r.gate, gate, `${what}: the gate is the caller's buffer`);
  using draw = poison(Tensor.empty(p.shape, { dtype: s.dtype, device }));
  using daLog = poison(Tensor.empty([s.H], { dtype: "float32", device }));
  using ddtBias = poison(Tensor.empty(p.dtBias.shape, { dtype: "float32", device }));
  gateTransformBackward(p.dGate, p.raw, p.aLog, p.dtBias, { ...p.options(), out: { draw, daLog, ddtBias } });
  expectOracle(p, device, {
    gate: host(gate),
    draw: host(draw),
    daLog: host(daLog),
    ddtBias: host(ddtBias),
  }, what);

  // The result's own backward gives the same bits.
  using own = r.backward(p.dGate);
  for (
    const [name, a, b] of [["draw", own.draw, draw], ["daLog", own.daLog, daLog], [
      "ddtBias",
      own.ddtBias,
      ddtBias,
    ]] as const
  ) {
    assert.deepEqual(bits(a), bits(b), `${what}: r.backward's ${name} equals the explicit backward's`);
  }
}

/** A tensor's bytes, for bit-for-bit comparisons. */
function bits(t: Tensor): Uint8Array {
  const v = t.toArray() as Float32Array;
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

// ---- the oracle on its own ----

Deno.test("gate oracle: known values, the overflow guard, and its refusals", () => {
  const base = { rows: 1, H: 1, aLog: [0], dtBias: [0] };
  const softplus = (raw: number) => gateTransformReference({ ...base, raw: [raw], kind: "softplus" })[0];
  assert.equal(softplus(0), -Math.LN2);
  assert.equal(softplus(1e30), -1e30, "softplus(x) = x for large x");
  assert.equal(softplus(-800), -0, "softplus underflows to 0");
  const bounded = (raw: number) =>
    gateTransformReference({ ...base, raw: [raw], kind: "bounded", lowerBound: -5 })[0];
  assert.equal(bounded(0), -2.5);
  assert.equal(bounded(1e30), -5);
  assert.equal(bounded(-1e30), -0);
  const g = gateTransformReferenceBackward({ ...base, raw: [1e30], kind: "bounded", lowerBound: -5 }, [1]);
  assert.ok(g.draw[0] === 0 && g.daLog[0] === 0, "a saturated sigmoid has no gradient (not 0 * inf)");
  const refuse = (x: object, pattern: RegExp) =>
    assert.throws(
      () => gateTransformReference({ ...base, raw: [0], ...x } as unknown as GateTransformReferenceInputs),
      pattern,
    );
  refuse({ kind: "bounded" }, /x\.lowerBound: expected a finite number <= 0/);
  refuse({ kind: "bounded", lowerBound: 1 }, /x\.lowerBound/);
  refuse({ kind: "softplus", lowerBound: -5 }, /no lower bound/);
  refuse({ kind: "sigmoid" }, /x\.kind/);
  refuse({ kind: "softplus", rows: 2 }, /x\.raw: holds 1 values, expected at least 2/);
});

Deno.test("gate oracle: the hand-derived backward matches finite differences", () => {
  const rand = generator(20240614);
  for (const kind of KINDS) {
    for (const D of [undefined, 3]) {
      const H = 2, rows = 5, C = H * (D ?? 1);
      const x: GateTransformReferenceInputs = {
        rows,
        H,
        D,
        raw: filled(rows * C, rand, -3, 3),
        aLog: filled(H, rand, -1, 1),
        dtBias: filled(C, rand, -1, 1),
        kind,
        lowerBound: kind === "bounded" ? -5 : undefined,
      };
      const dGate = filled(rows * C, rand, -1, 1);
      const loss = () => gateTransformReference(x).reduce((s, g, i) => s + g * dGate[i], 0);
      const g = gateTransformReferenceBackward(x, dGate);
      const what = `${kind}, ${D === undefined ? "per head" : "per channel"}`;
      const check = { eps: 1e-6, tol: 1e-7, what };
      expectFiniteDifferences(x.raw as Float64Array, g.draw, loss, { ...check, input: "raw" });
      expectFiniteDifferences(x.aLog as Float64Array, g.daLog, loss, { ...check, input: "aLog" });
      expectFiniteDifferences(x.dtBias as Float64Array, g.ddtBias, loss, { ...check, input: "dtBias" });
    }
  }
});

// ---- the ops against the oracle ----

// A test on each device with fresh seeds that leaves no tensor alive.
function leakFreeTest(name: string, body: (device: Device, seed: number) => void): void {
  deviceTest(name, (device) => expectNoLeak(device, () => withSeed((seed) => body(device, seed))));
}

// Every kind, raw dtype and fastmath setting.
function forEachSetting(
  body: (s: { kind: GateTransformKind; dtype: RawDType; fastmath: boolean }) => void,
): void {
  for (const kind of KINDS) {
    for (const dtype of RAW_DTYPES) for (const fastmath of [true, false]) body({ kind, dtype, fastmath });
  }
}

leakFreeTest(
  "gateTransform: both kinds, per head and per channel, every raw dtype, vs the oracle",
  (device, seed) => {
    forEachSetting(({ kind, dtype, fastmath }) => {
      const s = { kind, dtype, fastmath, lowerBound: kind === "bounded" ? -3.5 : undefined };
      checkAgainstOracle(device, { ...s, lead: [2, 37], H: 5 }, seed);
      checkAgainstOracle(device, { ...s, lead: [3, 9], H: 3, D: 20 }, seed + 1);
    });
  },
);

leakFreeTest(
  "gateTransform: spikes of |raw| up to 1e30 (softplus's overflow guard), every dtype",
  (device, seed) => {
    forEachSetting(({ kind, dtype, fastmath }) => {
      const s = { kind, dtype, fastmath, spikes: true };
      checkAgainstOracle(device, { ...s, lead: [1, 61], H: 4 }, seed);
      checkAgainstOracle(device, { ...s, lead: [2, 7], H: 2, D: 33 }, seed + 1);
    });
  },
);

leakFreeTest(
  "gateTransform: edge shapes (rank 1, one row, one channel, rank 5, odd sizes, lower bound 0)",
  (device, seed) => {
    const s = { dtype: "float32" as RawDType, fastmath: false };
    for (const kind of KINDS) {
      const b = kind === "bounded" ? { lowerBound: -5 } : {};
      checkAgainstOracle(device, { ...s, ...b, kind, lead: [], H: 7 }, seed);
      checkAgainstOracle(device, { ...s, ...b, kind, lead: [1, 1], H: 1 }, seed);
      checkAgainstOracle(device, { ...s, ...b, kind, lead: [1], H: 1, D: 1 }, seed);
      checkAgainstOracle(device, { ...s, ...b, kind, lead: [2, 3, 1, 5], H: 3, D: 5 }, seed);
      checkAgainstOracle(device, { ...s, ...b, kind, lead: [1, 13], H: 2, D: 257 }, seed);
    }
    checkAgainstOracle(device, { ...s, kind: "bounded", lowerBound: 0, lead: [3, 4], H: 2 }, seed);
  },
);

leakFreeTest(
  "gateTransform: many rows (several chunks of the sums), per head and per channel",
  (device, seed) => {
    for (const kind of KINDS) {
      const s = { kind, dtype: "bfloat16" as RawDType, fastmath: true };
      checkAgainstOracle(device, { ...s, lead: [3, 1111], H: 3 }, seed);
      checkAgainstOracle(device, { ...s, lead: [2, 700], H: 2, D: 6 }, seed);
    }
  },
);

// The vector path (channels a multiple of 8, contiguous, aligned): 264 channels (a partial tile of
// 8-channel groups), groups within a head (D = 88) and across heads (D = 12), per head with H = 16,
// and per head with H = 6 beside it (the generic path), each over 300+ rows (several chunks).
leakFreeTest(
  "gateTransform: the vector layout (channels a multiple of 8), per head and per channel, vs the oracle",
  (device, seed) => {
    for (const kind of KINDS) {
      for (const dtype of ["float32", "bfloat16", "float16"] as RawDType[]) {
        for (const fastmath of [true, false]) {
          const s = { kind, dtype, fastmath, lowerBound: kind === "bounded" ? -4 : undefined };
          checkAgainstOracle(device, { ...s, lead: [3, 101], H: 3, D: 88 }, seed);
          checkAgainstOracle(device, { ...s, lead: [1, 313], H: 2, D: 12 }, seed + 1);
          checkAgainstOracle(device, { ...s, lead: [2, 150], H: 16 }, seed + 2);
          checkAgainstOracle(device, { ...s, lead: [2, 151], H: 6 }, seed + 3);
        }
      }
    }
  },
);

// Enough rows (8.6M elements) that each thread of the vector path takes several batches of rows (5
// rows a thread: two forward batches, three backward ones, the last of each partial), the last chunk
// partial. On CUDA only: the CPU backend has no such batches, and the oracle takes seconds here.
leakFreeTest(
  "gateTransform: a large vector-path problem (several row batches per thread), vs the oracle",
  (device, seed) => {
    if (device === "cpu") return;
    const s: Spec = {
      kind: "bounded",
      lowerBound: -5,
      dtype: "bfloat16",
      fastmath: true,
      lead: [3, 1401],
      H: 16,
      D: 128,
    };
    checkAgainstOracle(device, s, seed);
  },
);

leakFreeTest(
  "boundGate: the bounded transform with lower bound -5, forward and backward",
  (device, seed) => {
    const s: Spec = {
      kind: "bounded",
      lowerBound: -5,
      dtype: "bfloat16",
      fastmath: true,
      lead: [2, 19],
      H: 3,
      D: 16,
    };
    using p = new Problem(device, s, seed);
    using a = boundGate(p.raw, p.aLog, p.dtBias);
    using b = gateTransform(p.raw, p.aLog, p.dtBias, {
      kind: "bounded",
      lowerBound: BOUND_GATE_LOWER_BOUND,
    });
    assert.deepEqual(bits(a.gate), bits(b.gate));
    using ga = boundGateBackward(p.dGate, p.raw, p.aLog, p.dtBias);
    using gb = b.backward(p.dGate);
    for (const name of ["draw", "daLog", "ddtBias"] as const) {
      assert.deepEqual(bits(ga[name]), bits(gb[name]), `boundGateBackward's ${name}`);
    }
  },
);

deviceTest("gateTransform: infinite raw gives the limits, not NaN", (device) => {
  using raw = Tensor.from(new Float32Array([Infinity, -Infinity, 0]), { device, shape: [3, 1] });
  using aLog = Tensor.zeros([1], { device });
  using dtBias = Tensor.zeros([1], { device });
  using dGate = Tensor.ones([3, 1], { device });
  // Compared with ===, so -0 and 0 are alike.
  const same = (got: ArrayLike<number>, want: number[], what: string) =>
    assert.ok(want.every((v, i) => got[i] === v), `${what}: ${Array.from(got)}, expected ${want}`);
  for (const fastmath of [true, false]) {
    using s = gateTransform(raw, aLog, dtBias, { kind: "softplus", fastmath });
    same(s.gate.toArray() as Float32Array, [-Infinity, 0], "softplus");
    using b = gateTransform(raw, aLog, dtBias, { kind: "bounded", lowerBound: -5, fastmath });
    const bounded = b.gate.toArray() as Float32Array;
    same(bounded, [-5, 0], "bounded");
    assert.ok(Math.abs(bounded[2] + 2.5) <= 1e-6, `bounded at 0: ${bounded[2]}, expected -2.5`);
    using g = b.backward(dGate);
    same(g.draw.toArray() as Float32Array, [0, 0], "a saturated sigmoid passes no gradient");
    assert.ok(Number.isFinite(g.daLog.item()), "daLog stays finite");
  }
});

// ---- determinism ----

leakFreeTest(
  "gateTransform backward: the same bits on every run (fixed-order sums)",
  (device, seed) => {
    // H 6 per head: the generic path; the others the vector path (H 16 per head; D 40: groups of 8
    // channels within a head; D 12: groups across heads).
    const shapes = [{ H: 6 }, { H: 16 }, { H: 6, D: 40 }, { H: 6, D: 12 }];
    for (const kind of KINDS) {
      for (const { H, D } of shapes) {
        const s: Spec = { kind, dtype: "bfloat16", fastmath: true, lead: [4, 1500], H, D };
        using p = new Problem(device, s, seed);
        const run = () => {
          using g = gateTransformBackward(p.dGate, p.raw, p.aLog, p.dtBias, p.options());
          return { draw: bits(g.draw), daLog: bits(g.daLog), ddtBias: bits(g.ddtBias) };
        };
        const first = run();
        for (let i = 0; i < 3; i++) assert.deepEqual(run(), first, `${kind}, H ${H}, D ${D}: run ${i + 2}`);
      }
    }
  },
);

Deno.test("gateTransform on the CPU: fastmath changes nothing (the CPU always computes the accurate forms)", () => {
  using p = new Problem("cpu", {
    kind: "softplus",
    dtype: "float32",
    fastmath: true,
    lead: [5, 9],
    H: 4,
    D: 3,
  }, 7);
  using a = gateTransform(p.raw, p.aLog, p.dtBias, { kind: "softplus", fastmath: true });
  using b = gateTransform(p.raw, p.aLog, p.dtBias, { kind: "softplus", fastmath: false });
  assert.deepEqual(bits(a.gate), bits(b.gate));
});

// ---- empty tensors ----

deviceTest(
  "gateTransform: empty tensors give empty gates and zero parameter gradients",
  (device) =>
    expectNoLeak(device, () => {
      const cases: [number[], number[]][] = [
        [[0, 5, 3], [3]], // no rows
        [[2, 0, 3, 4], [3, 4]],
        [[2, 3, 0], [0]], // no heads
        [[2, 3, 4, 0], [4, 0]], // no columns: daLog still [4] zeros
      ];
      for (const [shape, biasShape] of cases) {
        for (const kind of KINDS) {
          using raw = Tensor.empty(shape, { dtype: "bfloat16", device });
          using aLog = Tensor.zeros([biasShape[0]], { device });
          using dtBias = Tensor.zeros(biasShape, { device });
          using dGate = Tensor.empty(shape, { device });
          const options = kind === "bounded" ? { kind, lowerBound: -5 } : { kind };
          using r = gateTransform(raw, aLog, dtBias, options);
          assert.deepEqual(r.gate.shape, shape);
          using daLog = poison(Tensor.empty([biasShape[0]], { device }));
          using ddtBias = poison(Tensor.empty(biasShape, { device }));
          using g = r.backward(dGate, { out: { daLog, ddtBias } });
          assert.deepEqual(g.draw.shape, shape);
          for (const t of [daLog, ddtBias]) {
            assert.ok(
              (t.toArray() as Float32Array).every((v) => Object.is(v, 0)),
              `[${shape}] ${kind}: zeros`,
            );
          }
        }
      }
    }),
);

// ---- the native entry on strided views ----

leakFreeTest(
  "ak_gate_transform: strided raw, gate and gradients (a head-major view read in place)",
  (device, seed) => {
    // raw's memory is [B, H, T] while the call reads [B, T, H]; the gate and draw are written
    // through the same permuted strides.
    const [B, T, H] = [2, 11, 3];
    using p = new Problem(device, {
      kind: "softplus",
      dtype: "float16",
      fastmath: false,
      lead: [B, T],
      H,
    }, seed);
    using headMajor = p.raw.permute([0, 2, 1]);
    using dGateHeadMajor = p.dGate.permute([0, 2, 1]);
    using gate = poison(Tensor.empty([B, H, T], { device }));
    using draw = poison(Tensor.empty([B, H, T], { dtype: "float16", device }));
    using daLog = poison(Tensor.empty([H], { device }));
    using ddtBias = poison(Tensor.empty([H], { device }));
    const view = (t: Tensor) => t.viewDescriptor([B, T, H], [H * T, 1, T]);
    const op = "strided test";
    unwrap(
      native().ak_gate_transform_fwd(
        view(headMajor),
        p.aLog.descriptor(),
        p.dtBias.descriptor(),
        0,
        0,
        0,
        view(gate),
      ),
      op,
    );
    unwrap(
      native().ak_gate_transform_bwd(
        view(headMajor),
        p.aLog.descriptor(),
        p.dtBias.descriptor(),
        view(dGateHeadMajor),
        0,
        0,
        0,
        view(draw),
        daLog.descriptor(),
        ddtBias.descriptor(),
      ),
      op,
    );
    using contiguous = gateTransform(p.raw, p.aLog, p.dtBias, { kind: "softplus", fastmath: false });
    using grads = contiguous.backward(p.dGate);
    using gateBack = gate.permute([0, 2, 1]);
    using drawBack = draw.permute([0, 2, 1]);
    assert.deepEqual(bits(gateBack), bits(contiguous.gate), "gate through strides");
    assert.deepEqual(bits(drawBack), bits(grads.draw), "draw through strides");
    const near = (a: Tensor, b: Tensor, what: string) =>
      expectWithin(host(a), host(b), (i) => 1e-5 * (1 + Math.abs(host(b)[i])), what);
    near(daLog, grads.daLog, "daLog through strides");
    near(ddtBias, grads.ddtBias, "ddtBias through strides");
  },
);

/** A layout of raw's logical shape in a buffer of `size` elements: element offsets by strides. */
interface Layout {
  name: string;
  size: number;
  offset: number;
  strides: number[];
}

/**
 * Layouts of [B, T, H] or [B, T, H, D] (C = H D channels a multiple of 8): padded rows (the vector
 * path: one row stride, 16-byte aligned); and three the vector path must leave to the generic one: a
 * gap between the B slices (rows that merge into no single stride), a base one element past 16-byte
 * alignment, and head-major memory (channels not contiguous).
 */
function layoutsOf(B: number, T: number, H: number, D: number | undefined): Layout[] {
  const C = H * (D ?? 1);
  const channel = D === undefined ? [1] : [D, 1];
  const headMajor = D === undefined ? [H * T, 1, T] : [H * T * D, D, T * D, 1];
  return [
    { name: "padded rows", size: B * T * (C + 8), offset: 0, strides: [T * (C + 8), C + 8, ...channel] },
    {
      name: "a gap between batches",
      size: B * (T + 1) * C,
      offset: 0,
      strides: [(T + 1) * C, C, ...channel],
    },
    { name: "a misaligned base", size: B * T * C + 1, offset: 1, strides: [T * C, C, ...channel] },
    { name: "head-major", size: B * T * C, offset: 0, strides: headMajor },
  ];
}

/** The buffer offset of each logical element (row-major over shape). */
function offsetsOf(shape: number[], l: Layout): Int32Array {
  const n = product(shape);
  const at = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    let rest = i, o = l.offset;
    for (let d = shape.length - 1; d >= 0; d--) {
      o += (rest % shape[d]) * l.strides[d];
      rest = Math.floor(rest / shape[d]);
    }
    at[i] = o;
  }
  return at;
}

leakFreeTest(
  "ak_gate_transform: the vector path's layout test (padded rows; gaps, misalignment, head-major go generic)",
  (device, seed) => {
    const [B, T] = [2, 37];
    const op = "layout test";
    for (const dtype of ["float32", "bfloat16", "float16"] as RawDType[]) {
      for (const [H, D] of [[3, 8], [16, undefined]] as const) {
        const s: Spec = {
          kind: D === undefined ? "softplus" : "bounded",
          lowerBound: D === undefined ? undefined : -5,
          dtype,
          fastmath: false,
          lead: [B, T],
          H,
          D,
        };
        using p = new Problem(device, s, seed);
        for (const l of layoutsOf(B, T, H, D)) {
          const at = offsetsOf(p.shape, l);
          const spread = (values: ArrayLike<number>, dt: RawDType) => {
            const m = new Float64Array(l.size);
            at.forEach((o, i) => (m[o] = values[i]));
            return Tensor.from(m, { dtype: dt, device });
          };
          using raw = spread(host(p.raw), dtype);
          using dGate = spread(p.dg, "float32");
          using gate = poison(Tensor.empty([l.size], { device }));
          using draw = poison(Tensor.empty([l.size], { dtype, device }));
          using daLog = poison(Tensor.empty([H], { device }));
          using ddtBias = poison(Tensor.empty(p.dtBias.shape, { device }));
          const view = (t: Tensor) => t.viewDescriptor(p.shape, l.strides, op, l.offset);
          const kind = s.kind === "bounded" ? 1 : 0, lower = p.x.lowerBound ?? 0;
          unwrap(
            native().ak_gate_transform_fwd(
              view(raw),
              p.aLog.descriptor(),
              p.dtBias.descriptor(),
              kind,
              lower,
              0,
              view(gate),
            ),
            op,
          );
          unwrap(
            native().ak_gate_transform_bwd(
              view(raw),
              p.aLog.descriptor(),
              p.dtBias.descriptor(),
              view(dGate),
              kind,
              lower,
              0,
              view(draw),
              daLog.descriptor(),
              ddtBias.descriptor(),
            ),
            op,
          );
          const what = describe(p, ` (${l.name})`);
          const gateAll = host(gate), drawAll = host(draw);
          const pick = (all: Float64Array) => Float64Array.from(at, (o) => all[o]);
          expectOracle(p, device, {
            gate: pick(gateAll),
            draw: pick(drawAll),
            daLog: host(daLog),
            ddtBias: host(ddtBias),
          }, what);
          // Nothing written outside the view.
          const inView = new Uint8Array(l.size);
          at.forEach((o) => (inView[o] = 1));
          for (let o = 0; o < l.size; o++) {
            if (inView[o]) continue;
            assert.ok(
              Number.isNaN(gateAll[o]) && Number.isNaN(drawAll[o]),
              `${what}: element ${o} outside the view`,
            );
          }
        }
      }
    }
  },
);

// ---- refusals ----

deviceTest(
  'gateTransform: impl "reference" gives the CPU backend\'s bits, "fused" the kernels or a refusal',
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases = [
          { kind: "softplus" as const, lead: [3, 5], H: 4, D: 8 },
          { kind: "bounded" as const, lowerBound: -5, lead: [7], H: 6, D: undefined },
        ];
        for (const c of cases) {
          const shape = [...c.lead, c.H, ...(c.D ? [c.D] : [])];
          using raw = Tensor.randn(shape, { dtype: "bfloat16", device, seed });
          using aLog = Tensor.randn([c.H], { device, seed: seed + 1, std: 0.5 });
          using dtBias = Tensor.randn(c.D ? [c.H, c.D] : [c.H], { device, seed: seed + 2 });
          using dGate = Tensor.randn(shape, { device, seed: seed + 3 });
          const options = { kind: c.kind, lowerBound: c.lowerBound };
          // The CPU backend on copies of the same inputs.
          using rawC = raw.to("cpu"),
            aLogC = aLog.to("cpu"),
            dtBiasC = dtBias.to("cpu"),
            dGateC = dGate.to("cpu");
          using cpu = gateTransform(rawC, aLogC, dtBiasC, options);
          using cpuGrads = cpu.backward(dGateC);
          using ref = gateTransform(raw, aLog, dtBias, { ...options, impl: "reference" });
          assert.deepEqual(bits(ref.gate), bits(cpu.gate), `${c.kind}: reference gate`);
          // The result's backward keeps the forward's impl, as the backward function takes it.
          using refGrads = ref.backward(dGate);
          using refGrads2 = gateTransformBackward(dGate, raw, aLog, dtBias, {
            ...options,
            impl: "reference",
          });
          for (const g of [refGrads, refGrads2]) {
            assert.deepEqual(bits(g.daLog), bits(cpuGrads.daLog), `${c.kind}: reference daLog`);
            assert.deepEqual(bits(g.ddtBias), bits(cpuGrads.ddtBias), `${c.kind}: reference ddtBias`);
            assert.deepEqual(
              Array.from(g.draw.toArray() as Float32Array),
              Array.from(cpuGrads.draw.toArray() as Float32Array),
              `${c.kind}: reference draw`,
            );
          }
          if (device === "cpu") {
            assert.throws(
              () => gateTransform(raw, aLog, dtBias, { ...options, impl: "fused" }),
              (e) => e instanceof AttnkitError && /impl 'fused': the CPU has no fused kernel/.test(e.message),
            );
            continue;
          }
          using plain = gateTransform(raw, aLog, dtBias, options);
          using fused = gateTransform(raw, aLog, dtBias, { ...options, impl: "fused" });
          assert.deepEqual(bits(fused.gate), bits(plain.gate), `${c.kind}: fused is the kernels' call`);
        }
      })),
);

deviceTest("gateTransform: bad calls are refused with the argument named", (device) => {
  using raw = Tensor.randn([2, 4, 3], { device });
  using aLog = Tensor.zeros([3], { device });
  using dtBias = Tensor.zeros([3], { device });
  using perChannel = Tensor.randn([2, 4, 3, 5], { device });
  using bias2 = Tensor.zeros([3, 5], { device });
  const refuse = (fn: () => unknown, pattern: RegExp) =>
    assert.throws(() => {
      const r = fn() as Disposable;
      r[Symbol.dispose]();
    }, (e: unknown) => e instanceof AttnkitError && pattern.test(e.message));
  const call = (o: unknown, r: unknown = raw, a: unknown = aLog, b: unknown = dtBias) =>
    gateTransform(r as Tensor, a as Tensor, b as Tensor, o as { kind: "softplus" });
  refuse(() => call(undefined), /options: required/);
  refuse(() => call({}), /options\.kind: required/);
  refuse(() => call({ kind: "sigmoid" }), /options\.kind: expected "softplus" or "bounded"/);
  refuse(() => call({ kind: "bounded" }), /options\.lowerBound: required with kind "bounded"/);
  refuse(
    () => call({ kind: "bounded", lowerBound: 1 }),
    /options\.lowerBound: expected a number in \[-3e38, 0\]/,
  );
  refuse(() => call({ kind: "bounded", lowerBound: NaN }), /options\.lowerBound/);
  refuse(() => call({ kind: "softplus", lowerBound: -5 }), /no lower bound/);
  refuse(
    () => call({ kind: "softplus", fastMath: true }),
    /unknown option 'fastMath' \(did you mean 'fastmath'\?\)/,
  );
  refuse(() => call({ kind: "softplus", lower_bound: -5 }), /did you mean 'lowerBound'/);
  refuse(() => call({ kind: "softplus", fastmath: 1 }), /options\.fastmath: expected a boolean/);
  refuse(() => call({ kind: "softplus", impl: "fast" }), /options\.impl/);
  refuse(() => call({ kind: "softplus" }, "raw"), /raw: expected a Tensor/);
  using ints = Tensor.zeros([2, 4, 3], { dtype: "int32", device });
  refuse(() => call({ kind: "softplus" }, ints), /raw: expected dtype/);
  using bfLog = Tensor.zeros([3], { dtype: "bfloat16", device });
  refuse(() => call({ kind: "softplus" }, raw, bfLog), /aLog: expected dtype float32/);
  using aLog4 = Tensor.zeros([4], { device });
  refuse(() => call({ kind: "softplus" }, raw, aLog4), /dtBias: expected shape \[H=4\]/);
  using bias3d = Tensor.zeros([3, 5, 1], { device });
  refuse(
    () => call({ kind: "softplus" }, raw, aLog, bias3d),
    /dtBias: expected shape \[H\] \(per-head gate\) or \[H, D\]/,
  );
  refuse(() => call({ kind: "softplus" }, raw, aLog, bias2), /raw: expected shape \[\.\.\., H=3, D=5\]/);
  refuse(() => call({ kind: "softplus" }, perChannel, aLog, dtBias), /raw: expected shape \[\.\.\., H=3\]/);
  using wrongOut = Tensor.empty([2, 4, 3], { dtype: "bfloat16", device });
  refuse(() => call({ kind: "softplus", out: { gate: wrongOut } }), /out\.gate: expected dtype float32/);
  refuse(() => call({ kind: "softplus", out: { output: wrongOut } }), /out: unknown option 'output'/);
  refuse(
    () => boundGate(raw, aLog, dtBias),
    /dtBias: expected \[H, D\] \(boundGate is for per-channel gates\)/,
  );
  refuse(() => boundGate(perChannel, aLog, bias2, { kind: "bounded" } as never), /unknown option 'kind'/);

  // Backwards.
  using dGate = Tensor.randn([2, 4, 3], { device });
  using r = gateTransform(raw, aLog, dtBias, { kind: "softplus" });
  using shortGrad = Tensor.randn([2, 4, 2], { device });
  refuse(() => r.backward(shortGrad), /dGate: expected shape \[2, 4, 3\]/);
  refuse(() => r.backward(dGate, { out: { draw: shortGrad } }), /out\.draw: expected shape/);
  using bfBias = dtBias.cast("bfloat16");
  refuse(() => r.backward(dGate, { out: { daLog: bfBias } }), /out\.daLog: expected dtype float32/);
  refuse(
    () => gateTransformBackward(dGate, raw, aLog, dtBias, { kind: "bounded", lowerBound: -5 }),
    /options\.kind: the forward on these inputs ran with kind "softplus"/,
  );
  {
    using fresh = Tensor.randn([2, 4, 3], { device });
    using f = gateTransform(fresh, aLog, dtBias, { kind: "softplus" });
    fresh.dispose();
    refuse(() => f.backward(dGate), /raw: disposed after the forward/);
  }
});
