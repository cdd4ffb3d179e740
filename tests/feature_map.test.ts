// Feature-map linear attention against the float64 oracle (reference/feature_map.ts), which forms
// every score explicitly and shares nothing with the composed paths: every phi, causal and
// bidirectional, cosformer weights applied inside and by the caller, eps, T = 1 and odd T, both
// layouts, the three dtypes. Outputs and gradients are written into NaN-poisoned buffers (`out`), and
// the pool is filled with NaN first, so an element left unwritten fails.
//
// Tolerance rule: FEATURE_MAP_TOLERANCE (reference/tolerance.ts), relative RMS error (RMS(actual -
// oracle) / RMS(oracle)) against the oracle fed the same rounded inputs. float32: 1e-5 (outputs) and 1e-4
// (gradients); all sums are float32 (the GPU's matrix products add in another order), the rest is the
// conditioning of the normaliser. bfloat16: 1e-2 and 2e-2; float16: 4e-3 and 8e-3: the features and the
// kernel's outputs are rounded to the input dtype once each (2^-8 and 2^-11 relative), a few roundings in
// a row. dq and dk that cancel get more (featureMapGradientTolerance: float32 calls and one token).
import assert from "node:assert/strict";
import {
  assertClose,
  AttnkitError,
  type Device,
  type DType,
  type FeatureMapKind,
  featureMapLinearAttention,
  featureMapLinearAttentionBackward,
  featureMapLinearAttentionSupported,
  type FeatureMapOptions,
  lastPlan,
  type LinearLayout,
  Tensor,
} from "../mod.ts";
import {
  featureMapLinearAttentionReference,
  featureMapLinearAttentionReferenceBackward,
  type FeatureMapReferenceInputs,
} from "../reference/feature_map.ts";
import { FEATURE_MAP_TOLERANCE, featureMapGradientTolerance } from "../reference/tolerance.ts";
import {
  fusedBidirectionalGradServes,
  fusedBidirectionalServes,
} from "../ops/linear/feature_map_bidirectional.ts";
import { deviceTest, expectNoLeak, poison, seededDeviceTest } from "./helpers.ts";

// The shipped rule (reference/tolerance.ts); featureMapGradientTolerance widens it for cancelling gradients.
const TOL = FEATURE_MAP_TOLERANCE;
const PHIS: FeatureMapKind[] = ["elu+1", "relu", "identity", "softmax_free"];

interface Spec {
  B: number;
  T: number;
  H: number;
  K: number;
  V: number;
  dtype: DType;
  layout: LinearLayout;
  phi: FeatureMapKind;
  isCausal: boolean;
  eps?: number;
  cosformer?: boolean;
}

/** Fills free pool memory with NaN: a large NaN tensor, returned to the pool at once. */
function poisonPool(device: Device): void {
  using big = Tensor.empty([device === "cpu" ? 1 << 18 : 16 << 20], { dtype: "float32", device });
  big.fill(NaN);
}

const host = (t: Tensor) => Float64Array.from(t.toArray() as ArrayLike<number>);
const toLayout = (
  t: Tensor,
  layout: LinearLayout,
) => (layout === "bshd" ? t.clone() : t.permute([0, 2, 1, 3]));
// Back from the layout: the same swap of the T and H axes.
const fromLayout = toLayout;

/** cosformer's weights cos(pi t / 2T), sin(pi t / 2T): every w_ij is positive. */
function cosformerWeights(T: number, device: Device): [Tensor, Tensor] {
  const angle = (t: number) => (Math.PI / 2) * t / T;
  return [
    Tensor.from(Float32Array.from({ length: T }, (_, t) => Math.cos(angle(t))), { device }),
    Tensor.from(Float32Array.from({ length: T }, (_, t) => Math.sin(angle(t))), { device }),
  ];
}

/** A random problem: tensors in bshd (the oracle's order), their host values, the weights. */
class Problem implements Disposable {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly dO: Tensor;
  readonly cos?: Tensor;
  readonly sin?: Tensor;
  readonly x: FeatureMapReferenceInputs;

  constructor(readonly device: Device, readonly s: Spec, seed: number) {
    const { B, T, H, K, V, dtype } = s;
    // The normaliser is kept away from 0, where the output's condition number (1 / normaliser) would
    // swamp any tolerance: the identity map gets positive features, relu features mostly positive (mean
    // 1: a causal row 0 has a single term, and with mean 0.5 two relu vectors of 16 features overlapped
    // little often enough that dk's cancelling terms, rounded to bfloat16, failed about one seed in 25).
    const mean = s.phi === "relu" ? 1 : 0;
    const make = (shape: number[], n: number, kind: "feature" | "value") => {
      using f = kind === "feature" && s.phi === "identity"
        ? Tensor.rand(shape, { device, seed: seed + n, low: 0, high: 1 })
        : Tensor.randn(shape, { device, seed: seed + n, mean: kind === "feature" ? mean : 0 });
      return f.cast(dtype);
    };
    this.q = make([B, T, H, K], 1, "feature");
    this.k = make([B, T, H, K], 2, "feature");
    this.v = make([B, T, H, V], 3, "value");
    this.dO = make([B, T, H, V], 4, "value");
    if (s.cosformer) [this.cos, this.sin] = cosformerWeights(T, device);
    this.x = {
      B,
      T,
      H,
      K,
      V,
      q: host(this.q),
      k: host(this.k),
      v: host(this.v),
      phi: s.phi,
      isCausal: s.isCausal,
      eps: s.eps,
      cosWeight: this.cos ? host(this.cos) : undefined,
      sinWeight: this.sin ? host(this.sin) : undefined,
    };
  }

  options(): FeatureMapOptions {
    const { layout, phi, isCausal, eps } = this.s;
    return { layout, phi, isCausal, eps, cosWeight: this.cos, sinWeight: this.sin };
  }

  [Symbol.dispose](): void {
    for (const t of [this.q, this.k, this.v, this.dO, this.cos, this.sin]) t?.dispose();
  }
}

/** Runs the forward and both backwards into poisoned buffers and checks them against the oracle. */
function checkAgainstOracle(device: Device, s: Spec, seed: number): void {
  using p = new Problem(device, s, seed);
  const { layout } = s;
  using q = toLayout(p.q, layout);
  using k = toLayout(p.k, layout);
  using v = toLayout(p.v, layout);
  using dO = toLayout(p.dO, layout);
  const what = `${s.phi}, ${s.isCausal ? "causal" : "bidirectional"}, ${layout}, ${s.dtype}, T ${s.T}` +
    `${s.cosformer ? ", cosformer" : ""}${s.eps !== undefined ? `, eps ${s.eps}` : ""}`;
  const tol = TOL[s.dtype as "float32"];
  const expected = featureMapLinearAttentionReference(p.x);
  const grads = featureMapLinearAttentionReferenceBackward(p.x, host(p.dO));
  // The rule's bound, or more for dq and dk where they cancel (float32, or one token).
  const gradTol = featureMapGradientTolerance(p.x, host(p.dO), grads, s.dtype as "float32");

  poisonPool(device);
  using output = poison(Tensor.empty(v.shape, { dtype: s.dtype, device }));
  using r = featureMapLinearAttention(q, k, v, { ...p.options(), out: { output } });
  assert.equal(r.output, output, `${what}: the output is the caller's buffer`);
  using o = fromLayout(output, layout);
  assertClose(o, expected, { relRms: tol.output, name: `${what}: output` });

  // The explicit backward into poisoned buffers, and the result's own backward.
  poisonPool(device);
  using dq = poison(Tensor.empty(q.shape, { dtype: s.dtype, device }));
  using dk = poison(Tensor.empty(k.shape, { dtype: s.dtype, device }));
  using dv = poison(Tensor.empty(v.shape, { dtype: s.dtype, device }));
  featureMapLinearAttentionBackward(dO, q, k, v, { ...p.options(), out: { dq, dk, dv } });
  using own = r.backward(dO);
  for (
    const [name, got, again, want] of [
      ["dq", dq, own.dq, grads.dq],
      ["dk", dk, own.dk, grads.dk],
      ["dv", dv, own.dv, grads.dv],
    ] as const
  ) {
    using g = fromLayout(got, layout);
    assertClose(g, want, { relRms: gradTol[name], name: `${what}: ${name}` });
    assertClose(again, got, { maxAbs: 0, name: `${what}: r.backward ${name} equals the explicit backward` });
  }
}

const base = { B: 2, H: 3, K: 8, V: 12, dtype: "float32" as DType, eps: undefined };

/** A spec from its sizes [B, T, H, K, V], dtype, layout and phi, and the rest. */
function specOf(
  [B, T, H, K, V]: [number, number, number, number, number],
  dtype: DType,
  layout: LinearLayout,
  phi: FeatureMapKind,
  rest: Pick<Spec, "isCausal" | "eps" | "cosformer">,
): Spec {
  return { B, T, H, K, V, dtype, layout, phi, ...rest };
}

seededDeviceTest(
  "feature map: every phi, causal and bidirectional, both layouts, odd T, vs the oracle",
  (device, seed) => {
    for (const phi of PHIS) {
      for (const isCausal of [true, false]) {
        for (const layout of ["bshd", "bhsd"] as const) {
          checkAgainstOracle(device, { ...base, T: 37, phi, isCausal, layout }, seed);
        }
      }
    }
  },
);

seededDeviceTest(
  "feature map: cosformer weights inside, every phi, causal and bidirectional",
  (device, seed) => {
    for (const phi of PHIS) {
      for (const isCausal of [true, false]) {
        const layout = isCausal ? "bhsd" : "bshd";
        checkAgainstOracle(device, { ...base, T: 29, phi, isCausal, layout, cosformer: true }, seed);
      }
    }
  },
);

seededDeviceTest(
  "feature map: eps, T = 1, T across the 64-token chunks, one head, K != V",
  (device, seed) => {
    for (const isCausal of [true, false]) {
      for (const eps of [0, 0.5, 3]) {
        // elu+1 keeps every score positive, so eps = 0 divides by no zero.
        checkAgainstOracle(device, { ...base, T: 9, phi: "elu+1", isCausal, layout: "bshd", eps }, seed);
      }
      for (const T of [1, 2, 64, 65, 130]) {
        const spec = {
          ...base,
          B: 1,
          H: 1,
          K: 5,
          V: 3,
          T,
          // One token's dq and dk are of the order of eps (o = v s / (s + eps)): a large eps makes them count.
          eps: T === 1 ? 0.5 : undefined,
          phi: "elu+1" as const,
          isCausal,
          layout: "bhsd" as const,
        };
        checkAgainstOracle(device, spec, seed);
      }
    }
  },
);

seededDeviceTest(
  "feature map: feature dims over 256 and value dims over 248 run in pieces",
  (device, seed) => {
    // cosformer doubles K = 136 to 272 features (two pieces); V = 250 with its ones columns, two more.
    for (const isCausal of [true, false]) {
      const spec = specOf([1, 20, 1, 136, 250], "float32", "bshd", "elu+1", { isCausal, cosformer: true });
      checkAgainstOracle(device, spec, seed);
    }
  },
);

seededDeviceTest(
  "feature map: bfloat16, float16 and float32 within their tolerance",
  (device, seed) => {
    // Head dims the fast path serves on a GPU (multiples of 8), cosformer doubling K to 32.
    for (const dtype of ["bfloat16", "float16", "float32"] as DType[]) {
      for (const isCausal of [true, false]) {
        for (
          const [phi, cosformer] of [["elu+1", false], ["relu", true], ["softmax_free", false]] as const
        ) {
          const spec = specOf([1, 70, 2, 16, 16], dtype, "bshd", phi, { isCausal, cosformer });
          checkAgainstOracle(device, spec, seed);
        }
      }
    }
  },
);

seededDeviceTest(
  "feature map: the fused bidirectional forward and backward at their tile sizes: odd T, T = 1, long sequences",
  (device, seed) => {
    // Feature dims (K, or 2K with cosformer) and value dims that are multiples of 64, which the
    // CUDA kernels serve; T = 700 and 1000 split each sequence over several blocks in both passes.
    const specs: Spec[] = [
      specOf([1, 150, 3, 64, 64], "bfloat16", "bshd", "elu+1", { isCausal: false }),
      specOf([2, 70, 1, 32, 128], "float16", "bhsd", "relu", { isCausal: false, cosformer: true }),
      specOf([1, 1, 2, 64, 64], "bfloat16", "bshd", "elu+1", { eps: 0.5, isCausal: false }),
      specOf([1, 700, 1, 128, 128], "bfloat16", "bhsd", "softmax_free", { isCausal: false, cosformer: true }),
      specOf([1, 1000, 1, 64, 64], "float16", "bshd", "identity", { isCausal: false }),
      specOf([1, 200, 2, 64, 128], "bfloat16", "bhsd", "relu", { isCausal: false, cosformer: true }),
    ];
    for (const spec of specs) {
      using p = new Problem(device, spec, seed);
      const call = { ...p.options(), q: p.q, k: p.k, v: p.v, eps: 1e-6, phi: spec.phi, isCausal: false };
      // The backward's kernels also need K a multiple of 64 and V of 64 or 128 (K = 32 takes the chunked path).
      assert.equal(
        fusedBidirectionalGradServes(call),
        device === "cpu" || (spec.K % 64 === 0 && (spec.V === 64 || spec.V === 128)),
        `${JSON.stringify(spec)}: the backward's path`,
      );
      assert.ok(fusedBidirectionalServes(call), `${JSON.stringify(spec)}: served by the fused forward`);
      checkAgainstOracle(device, spec, seed);
    }
  },
);

seededDeviceTest(
  "feature map: a long float16 sequence stays finite and accurate, causal and bidirectional",
  (device, seed) => {
    // Summed over 600 tokens, the scores (~ K e^2) would exceed float16's range; the paths keep
    // averages (the bidirectional one reads the whole sequence's state at every token).
    for (const isCausal of [true, false]) {
      const spec = specOf([1, 600, 1, 32, 8], "float16", "bshd", "elu+1", { isCausal });
      using p = new Problem(device, spec, seed);
      using r = featureMapLinearAttention(p.q, p.k, p.v, p.options());
      assertClose(r.output, featureMapLinearAttentionReference(p.x), {
        relRms: TOL.float16.output,
        name: `output (isCausal ${isCausal})`,
      });
    }
  },
);

seededDeviceTest(
  "feature map: cosformer with the weights already in q and k equals the weights inside",
  (device, seed) => {
    for (const isCausal of [true, false]) {
      const spec: Spec = { ...base, T: 23, phi: "relu", isCausal, layout: "bshd", cosformer: true };
      using p = new Problem(device, spec, seed);
      // The caller's features [relu(x) cos, relu(x) sin], made on the host.
      const { B, T, H, K } = spec;
      const weighted = (x: Float64Array) => {
        const out = new Float32Array(B * T * H * 2 * K);
        for (let row = 0; row < B * T * H; row++) {
          const t = Math.floor(row / H) % T;
          for (let i = 0; i < K; i++) {
            const f = Math.max(x[row * K + i], 0);
            out[row * 2 * K + i] = f * p.x.cosWeight![t];
            out[row * 2 * K + K + i] = f * p.x.sinWeight![t];
          }
        }
        return Tensor.from(out, { device, shape: [B, T, H, 2 * K] });
      };
      using q2 = weighted(p.x.q as Float64Array);
      using k2 = weighted(p.x.k as Float64Array);
      const options = { layout: "bshd" as const, phi: "relu" as const, isCausal, weightsApplied: true };
      using pre = featureMapLinearAttention(q2, k2, p.v, options);
      using inside = featureMapLinearAttention(p.q, p.k, p.v, p.options());
      const expected = featureMapLinearAttentionReference(p.x);
      assertClose(pre.output, expected, {
        relRms: TOL.float32.output,
        name: "weights applied by the caller",
      });
      assertClose(inside.output, expected, {
        relRms: TOL.float32.output,
        name: "weights applied inside",
      });
      // dv does not depend on where the weights were applied.
      using g = pre.backward(p.dO);
      const grads = featureMapLinearAttentionReferenceBackward(p.x, host(p.dO));
      assertClose(g.dv, grads.dv, {
        relRms: TOL.float32.grad,
        name: "dv, weights applied by the caller",
      });
    }
  },
);

deviceTest(
  "feature map: empty calls give empty outputs and gradients",
  (device) =>
    expectNoLeak(device, () => {
      for (const shape of [[0, 4, 2, 8], [1, 0, 2, 8]]) {
        using q = Tensor.zeros(shape, { device });
        for (const isCausal of [true, false]) {
          using r = featureMapLinearAttention(q, q, q, { layout: "bshd", isCausal });
          assert.deepEqual(r.output.shape, shape);
          using dO = Tensor.zeros(shape, { device });
          using g = r.backward(dO);
          assert.deepEqual([g.dq.shape, g.dk.shape, g.dv.shape], [shape, shape, shape]);
        }
      }
    }),
);

deviceTest(
  "feature map: featureMapLinearAttentionSupported says which calls the fast path serves",
  (device) => {
    using bf = Tensor.zeros([1, 8, 2, 16], { dtype: "bfloat16", device });
    using bf12 = Tensor.zeros([1, 8, 2, 12], { dtype: "bfloat16", device });
    using bf4 = Tensor.zeros([1, 8, 2, 4], { dtype: "bfloat16", device });
    using f32 = Tensor.zeros([1, 8, 2, 16], { device });
    const [cos, sin] = cosformerWeights(8, device);
    using _c = cos, _s = sin;
    const gpu = device !== "cpu";
    assert.equal(featureMapLinearAttentionSupported(bf, bf, bf, { layout: "bshd", isCausal: true }), gpu);
    assert.equal(featureMapLinearAttentionSupported(bf, bf, bf, { layout: "bshd" }), gpu);
    assert.equal(featureMapLinearAttentionSupported(f32, f32, f32, { layout: "bshd" }), false, "float32");
    assert.equal(featureMapLinearAttentionSupported(bf12, bf12, bf, { layout: "bshd" }), false, "K = 12");
    // cosformer doubles the feature dim: K = 4 becomes 8.
    const weights = { layout: "bshd" as const, cosWeight: cos, sinWeight: sin };
    assert.equal(featureMapLinearAttentionSupported(bf4, bf4, bf, weights), gpu, "cosformer, K' = 8");
    // The general path gives the fast path's result where both run (here: the CPU's float32 path).
    if (gpu) {
      using q = Tensor.randn([1, 40, 2, 16], { dtype: "bfloat16", device, seed: 1 });
      using r = featureMapLinearAttention(q, q, q, { layout: "bshd", isCausal: true });
      using qc = q.to("cpu");
      using qf = qc.cast("float32");
      using rc = featureMapLinearAttention(qf, qf, qf, { layout: "bshd", isCausal: true });
      assertClose(r.output, rc.output, { relRms: TOL.bfloat16.output, name: "fast path vs general path" });
    }
  },
);

function refused(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => e instanceof AttnkitError && pattern.test(e.message));
}

deviceTest(
  "feature map: bad calls are refused with a message naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([1, 6, 2, 4], { device, seed: 1 });
      using v = Tensor.randn([1, 6, 2, 3], { device, seed: 2 });
      using q16 = q.cast("bfloat16");
      using odd = Tensor.randn([1, 6, 2, 5], { device, seed: 3 });
      using v7 = Tensor.randn([1, 6, 7, 3], { device, seed: 4 });
      using w = Tensor.ones([6], { device });
      using w7 = Tensor.ones([7], { device });
      const ok = { layout: "bshd" as const };
      const call = (o: unknown, a = q, b = q, c = v) =>
        featureMapLinearAttention(a, b, c, o as FeatureMapOptions);
      refused(() => call({}), /layout is required/);
      refused(() => call({ layout: "bthd" }), /layout/);
      refused(() => call({ ...ok, causal: true }), /did you mean 'isCausal'/);
      refused(() => call({ ...ok, phi: "elu" }), /phi/);
      refused(() => call({ ...ok, eps: -1 }), /eps/);
      refused(() => call({ ...ok, eps: NaN }), /eps/);
      refused(() => call({ ...ok, isCausal: 1 }), /isCausal/);
      refused(() => call({ ...ok, cosWeight: w }), /sinWeight: required/);
      refused(() => call({ ...ok, cosWeight: w7, sinWeight: w7 }), /cosWeight: expected shape/);
      refused(
        () => call({ ...ok, weightsApplied: true, phi: "relu", cosWeight: w, sinWeight: w }),
        /weightsApplied/,
      );
      refused(() => call({ ...ok, weightsApplied: true, phi: "relu" }, odd, odd), /weightsApplied: .*even/);
      refused(() => call({ ...ok, weightsApplied: true }), /weightsApplied: phi "elu\+1"/);
      refused(() => call(ok, q, q16), /k: expected dtype float32/);
      refused(() => call(ok, q, odd), /k: expected shape/);
      refused(() => call(ok, q, q, q16), /v: expected dtype/);
      refused(() => call({ layout: "bhsd" }, q, q, v7), /v: expected shape/);
      refused(() => call(ok, q, q, "v" as never), /v: expected a Tensor/);
      refused(() => call({ ...ok, out: { output: q } }), /out.output: expected shape/);
      refused(() => call({ ...ok, out: { dq: q } }), /unknown option 'dq'/);
      refused(() => featureMapLinearAttentionBackward(q, q, q, v, ok), /dOutput: expected shape/);
      refused(() => featureMapLinearAttentionBackward(v, q, q, v, { ...ok, out: { dv: q } }), /out.dv/);
      refused(
        () => featureMapLinearAttentionSupported(q, q, v, { layout: "bshd", phi: "tanh" as "relu" }),
        /phi/,
      );
      // The result's backward reads the forward's inputs, so it refuses one disposed since.
      const k = q.clone();
      using r = featureMapLinearAttention(q, k, v, ok);
      refused(() => r.backward(v, { out: { output: v } } as never), /unknown option 'output'/);
      k.dispose();
      refused(() => r.backward(v), /k: disposed after the forward/);
    }),
);

seededDeviceTest(
  "feature map: the causal forward and backward with the normaliser in the kernel (128 features and values, bfloat16)",
  (device, seed) => {
    // The CUDA planner fuses the normaliser at these sizes (lastPlan names the split state kernel);
    // a tail chunk, both layouts, eps and cosformer's doubled features (K 64 -> 128).
    const specs: Spec[] = [
      specOf([2, 150, 3, 128, 128], "bfloat16", "bshd", "elu+1", { isCausal: true }),
      specOf([1, 200, 2, 64, 128], "bfloat16", "bhsd", "relu", {
        isCausal: true,
        cosformer: true,
        eps: 0.25,
      }),
    ];
    for (const [i, spec] of specs.entries()) {
      checkAgainstOracle(device, spec, seed + i);
      if (device === "cpu") continue;
      using p = new Problem(device, spec, seed + i);
      using q = toLayout(p.q, spec.layout);
      using k = toLayout(p.k, spec.layout);
      using v = toLayout(p.v, spec.layout);
      using r = featureMapLinearAttention(q, k, v, p.options());
      const plan = lastPlan();
      assert.equal(plan?.path, "state_split", JSON.stringify(plan));
      assert.ok(
        plan?.kernels[0].name.startsWith("linear.gla.pass.split_normalized"),
        JSON.stringify(plan),
      );
      // The backward: one normalised backward call on the features, the normaliser's gradient by scans.
      using _g = r.backward(v);
      const bwd = lastPlan();
      assert.equal(bwd?.op, "linear.gla.bwd", JSON.stringify(bwd));
      assert.equal(bwd?.details.normaliser, "scans", JSON.stringify(bwd));
    }
  },
);
