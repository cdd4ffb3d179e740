/**
 * The command line's feature-map case: `fmap` runs `featureMapLinearAttention(q, k, v, { phi, isCausal })`
 * (the library's default eps, 1e-6, or `--eps`; with `--cosformer` cosformer's position weights
 * `cos(pi t / 2T)`, `sin(pi t / 2T)` as `cosWeight` / `sinWeight`) on random inputs in the `"bshd"` layout
 * against the float64 oracle (`featureMapLinearAttentionReference` and its backward, every score formed
 * explicitly) under the feature-map tests' rule: the output held to `FEATURE_MAP_TOLERANCE`, dq, dk, dv
 * to `featureMapGradientTolerance` (the same bound, more for dq and dk where they cancel: float32 calls
 * and one token, whose dq and dk are of the order of eps). Causal unless `--bidirectional`;
 * `--feature-map` picks phi by the library's names (default `elu+1`, the function's).
 * FLOPs as bench/gla_side_by_side.ts counts its "feature" rows (`featureMapForwardFlops`).
 *
 * Inputs, drawn as tests/feature_map.test.ts draws them (where the bound holds): q and k standard normal
 * for elu+1 and softmax_free, normal with mean 1 for relu (mostly positive features) and uniform in
 * [0, 1] for the identity (positive features), so the normaliser, whose inverse is the output's
 * condition number, stays away from 0; v and the output gradient standard normal. Seeds seed (q),
 * seed + 1 (k), seed + 2 (v), seed + 5 (output gradient), as the other linear cases.
 *
 * @module
 */
import type { FeatureMapKind, FeatureMapOptions } from "../mod.ts";
import { FEATURE_MAP_KINDS, featureMapLinearAttention, Tensor } from "../mod.ts";
import type { FeatureMapReferenceInputs } from "../reference/feature_map.ts";
import {
  FEATURE_MAP_EPS,
  featureMapLinearAttentionReference,
  featureMapLinearAttentionReferenceBackward,
} from "../reference/feature_map.ts";
import { FEATURE_MAP_TOLERANCE, featureMapGradientTolerance } from "../reference/tolerance.ts";
import { featureMapForwardFlops, leastBytes, modeFactor } from "./flops.ts";
import { byRows } from "./linear_problem.ts";
import type { CaseSettings, CheckRow, Mode, OpCase } from "./problem.ts";
import { byRelRms, hostValues, poisoned, trainingCall } from "./problem.ts";
import { type OpName, refuseForeignFlag, type Shape, UsageError } from "./shape.ts";

// Multiply-adds per second of the quadratic oracle on one core (measured roughly; the estimate only
// decides whether to warn or refuse). Its work is a score per (query, key) pair over K + V dims; the
// backward's rate counts the gradient bounds' pass as well.
const ORACLE_RATES = { forward: 8e8, backward: 3e8 };

// The flag's spellings besides the library's names.
const PHI_ALIASES: Record<string, FeatureMapKind> = { elu: "elu+1", "softmax-free": "softmax_free" };

/** What the fmap flags chose. */
export interface FeatureMapFlags {
  /** The feature map. */
  phi: FeatureMapKind;
  /** Every token sees every other. */
  bidirectional: boolean;
  /** The normaliser's eps (undefined: the library's default). */
  eps?: number;
  /** cosformer's position weights are given. */
  cosformer?: boolean;
}

/**
 * Reads `--feature-map` (the library's names `elu+1`, `relu`, `identity`, `softmax_free`, or `elu`,
 * `softmax-free`; default `elu+1`) and `--bidirectional`; both are refused for another op.
 */
export function parseFeatureMapFlags(
  op: OpName,
  name: string | undefined,
  bidirectional: boolean | undefined,
  eps?: string,
  cosformer?: boolean,
): FeatureMapFlags {
  if (op !== "fmap") {
    refuseForeignFlag(op, "feature-map", name, "fmap");
    refuseForeignFlag(op, "bidirectional", bidirectional, "fmap");
    refuseForeignFlag(op, "eps", eps, "fmap");
    refuseForeignFlag(op, "cosformer", cosformer, "fmap");
    return { phi: "elu+1", bidirectional: false };
  }
  const text = (name ?? "elu+1").toLowerCase();
  const phi = PHI_ALIASES[text] ?? FEATURE_MAP_KINDS.find((k) => k === text);
  if (!phi) {
    throw new UsageError(
      `--feature-map: unknown feature map "${name}"; feature maps: ${FEATURE_MAP_KINDS.join(", ")}`,
    );
  }
  const epsValue = eps === undefined ? undefined : Number(eps);
  if (eps !== undefined && (eps.trim() === "" || !Number.isFinite(epsValue) || epsValue! < 0)) {
    throw new UsageError(`--eps: expected a number of at least 0, got "${eps}"`);
  }
  if (eps !== undefined && phi === "softmax_free") {
    throw new UsageError("--eps: softmax_free has no normaliser to add it to");
  }
  return { phi, bidirectional: bidirectional ?? false, eps: epsValue, cosformer: cosformer ?? false };
}

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function fmapOracleSeconds(shape: Shape, causal: boolean, batches: number, backward: boolean): number {
  const T = shape.seq;
  const pairs = causal ? T * (T + 1) / 2 : T * T;
  const work = batches * shape.heads * pairs * (shape.dim + shape.dimV);
  return work / ORACLE_RATES.forward + (backward ? work / ORACLE_RATES.backward : 0);
}

/** A random feature-map linear attention problem. */
export function fmapCase(settings: CaseSettings): OpCase {
  const { shape, dtype, device, seed } = settings;
  const phi = settings.phi ?? "elu+1", isCausal = !settings.bidirectional;
  const eps = settings.eps ?? FEATURE_MAP_EPS;
  const B = shape.batch, T = shape.seq, H = shape.heads, K = shape.dim, V = shape.dimV;
  const owned = new DisposableStack();
  const own = <X extends Tensor>(t: X) => owned.use(t);
  // Features as the tests draw them for this phi (see the module doc).
  const feature = (offset: number) =>
    own(
      phi === "identity"
        ? Tensor.rand([B, T, H, K], { dtype, device, seed: seed + offset, low: 0, high: 1 })
        : Tensor.randn([B, T, H, K], { dtype, device, seed: seed + offset, mean: phi === "relu" ? 1 : 0 }),
    );
  // cosformer's position weights, cos and sin of pi t / 2T (M = T, cosformer's shortest horizon).
  const angle = (t: number) => Math.PI * t / (2 * T);
  const cosHost = settings.cosformer ? Array.from({ length: T }, (_, t) => Math.cos(angle(t))) : undefined;
  const sinHost = settings.cosformer ? Array.from({ length: T }, (_, t) => Math.sin(angle(t))) : undefined;
  let q: Tensor,
    k: Tensor,
    v: Tensor,
    dO: Tensor,
    weights: Pick<FeatureMapOptions, "cosWeight" | "sinWeight">;
  try {
    q = feature(0);
    k = feature(1);
    v = own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
    dO = own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 5 }));
    weights = cosHost && sinHost
      ? {
        cosWeight: own(Tensor.from(cosHost, { dtype: "float32", device })),
        sinWeight: own(Tensor.from(sinHost, { dtype: "float32", device })),
      }
      : {};
  } catch (e) {
    owned.dispose();
    throw e;
  }
  const options: FeatureMapOptions = { layout: "bshd", phi, isCausal, eps: settings.eps, ...weights };
  const key = dtype as "float32";
  const tol = FEATURE_MAP_TOLERANCE[key];
  const draw = phi === "identity" ? "uniform [0, 1]" : phi === "relu" ? "normal, mean 1" : "standard normal";

  return {
    description: [
      `q, k [${B}, ${T}, ${H}, ${K}] ${dtype} (${draw})`,
      `v [${B}, ${T}, ${H}, ${V}] ${dtype}`,
      `phi ${phi}`,
      isCausal ? "causal" : "bidirectional",
      phi === "softmax_free" ? "no normaliser" : `eps ${settings.eps ?? FEATURE_MAP_EPS.toExponential(0)}`,
      ...(settings.cosformer ? ["cosformer weights cos, sin(pi t / 2T)"] : []),
      "no scale",
    ].join("; "),
    modes: ["fwd", "fwdbwd"],

    check(batches, backward, progress): CheckRow[] {
      using output = poisoned([B, T, H, V], dtype, device);
      using r = featureMapLinearAttention(q, k, v, { ...options, out: { output } });
      // The gradients into NaN-poisoned buffers too, so an element the backward leaves fails.
      using dq = poisoned(q.shape, dtype, device);
      using dk = poisoned(k.shape, dtype, device);
      using dv = poisoned(v.shape, dtype, device);
      using _grads = backward ? r.backward(dO, { out: { dq, dk, dv } }) : undefined;
      // The oracle's inputs, the first `batches` rows exactly as the op read them, one row at a time.
      const firstRows = (x: Tensor) => hostValues(x, batches * x.numel / B);
      const host = { q: firstRows(q), k: firstRows(k), v: firstRows(v), dO: firstRows(dO) };
      const row = (a: Float64Array, b: number) =>
        a.subarray(b * a.length / batches, (b + 1) * a.length / batches);
      const problem = (b: number): FeatureMapReferenceInputs => ({
        B: 1,
        T,
        H,
        K,
        V,
        q: row(host.q, b),
        k: row(host.k, b),
        v: row(host.v, b),
        phi,
        isCausal,
        eps,
        cosWeight: cosHost && cosHost.map(Math.fround),
        sinWeight: sinHost && sinHost.map(Math.fround),
      });
      const total = batches * (backward ? 2 : 1);
      let done = 0;
      const step = <R>(result: R) => (progress(++done, total), result);
      progress(0, total);
      const want = byRows(
        batches,
        ["output"],
        (b) => step({ output: featureMapLinearAttentionReference(problem(b)) }),
      );
      const rows = [byRelRms("output", firstRows(output), want.output!, tol.output)];
      if (!backward) return rows;
      const names = ["dq", "dk", "dv"] as const;
      const grads = byRows(
        batches,
        names,
        (b) => step(featureMapLinearAttentionReferenceBackward(problem(b), row(host.dO, b))),
      );
      const all = { ...problem(0), B: batches, q: host.q, k: host.k, v: host.v };
      const bounds = featureMapGradientTolerance(all, host.dO, { dq: grads.dq!, dk: grads.dk! }, key);
      const got = { dq, dk, dv };
      for (const name of names) rows.push(byRelRms(name, firstRows(got[name]), grads[name]!, bounds[name]));
      return rows;
    },

    call: (mode: Mode) =>
      trainingCall(
        mode,
        "fmap",
        () => own(Tensor.empty([B, T, H, V], { dtype, device })),
        (output) => featureMapLinearAttention(q, k, v, { ...options, out: output && { output } }),
        dO,
      ),

    flops: (mode: Mode) => featureMapForwardFlops(B, T, H, K, V) * modeFactor("linear", mode),

    // The forward's q, k, v read once, o (shaped like v) written once; no count for forward + backward.
    bytes: (mode: Mode) => mode === "fwd" ? leastBytes([q, k, v], [v]) : undefined,

    [Symbol.dispose]: () => owned.dispose(),
  };
}
