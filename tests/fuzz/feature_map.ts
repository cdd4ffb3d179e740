// The fuzz catalog's generator for feature-map linear attention: valid calls of the forward, the
// explicit backward, the result's backward and the support query on small random inputs (every phi,
// causal or not, cosformer weights inside or already applied, both layouts, three dtypes, T = 1 and
// odd T, head dims of 64 that the fused bidirectional kernels serve), and mutations that make a call certainly invalid.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers, dispose } from "./family.ts";

const { valid, invalid } = caseMakers("feature map");

/** The feature-map generator (registered in cases.ts). */
export function featureMap(rng: Rng, scope: Scope, bad: boolean): Case {
  const layout = rng.pick<ak.LinearLayout>(["bshd", "bhsd"]);
  const B = rng.int(1, 2), T = rng.pick([1, 2, 7, 33, 65]), H = rng.int(1, 3);
  // 64 now and then: the fused bidirectional kernels' sizes on CUDA.
  const K = rng.pick([2, 4, 8, 16, 64]), V = rng.pick([1, 8, 12, 64]);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16", "float16"]);
  const phi = rng.pick(ak.FEATURE_MAP_KINDS);
  const shape = (d: number) => (layout === "bshd" ? [B, T, H, d] : [B, H, T, d]);
  const q = scope.randn(shape(K), dtype, rng.int(0, 999));
  const k = scope.randn(shape(K), dtype, rng.int(0, 999));
  const v = scope.randn(shape(V), dtype, rng.int(0, 999));
  const options: Omit<ak.FeatureMapOptions, "out"> = { layout, phi, isCausal: rng.chance(0.5) };
  if (rng.chance(0.3)) options.eps = rng.pick([0.5, 1e-3]);
  if (rng.chance(0.3)) {
    options.cosWeight = scope.rand([T], rng.int(0, 999));
    options.sinWeight = scope.rand([T], rng.int(0, 999));
  } else if (phi !== "elu+1" && rng.chance(0.2)) {
    options.weightsApplied = true; // K is even
  }
  // The identity map's normaliser may come near 0 on random inputs: the output is then not bounded.
  const finite = phi !== "identity";
  if (!bad) {
    const dO = scope.randn(shape(V), dtype, 7);
    switch (rng.int(0, 3)) {
      case 0:
        return valid("forward", () => {
          const r = ak.featureMapLinearAttention(q, k, v, options);
          const out = scope.keep(r.output.clone());
          dispose(r);
          return out;
        }, finite);
      case 1:
        return valid("forward + result.backward", () => {
          using r = ak.featureMapLinearAttention(q, k, v, options);
          dispose(r.backward(dO));
        }, finite);
      case 2:
        return valid(
          "backward",
          () => dispose(ak.featureMapLinearAttentionBackward(dO, q, k, v, options)),
          finite,
        );
      default:
        return valid("supported", () => ak.featureMapLinearAttentionSupported(q, k, v, options), false);
    }
  }
  const call = (a: unknown, b: unknown, c: unknown, o: unknown) =>
    dispose(
      ak.featureMapLinearAttention(a as ak.Tensor, b as ak.Tensor, c as ak.Tensor, o as ak.FeatureMapOptions),
    );
  switch (rng.int(0, 7)) {
    case 0:
      return invalid(
        "layout missing or unknown",
        () => call(q, k, v, { ...options, layout: rng.pick([undefined, "thd", "bsh"]) }),
      );
    case 1:
      return invalid(
        "unknown option",
        () => call(q, k, v, { ...options, [rng.pick(["causal", "is_causal", "scale", "foo"])]: true }),
      );
    case 2:
      return invalid("bad option value", () =>
        call(
          q,
          k,
          v,
          rng.pick<object>([
            { ...options, phi: rng.pick(["elu", "softmax", 1]) },
            { ...options, eps: rng.pick([-1, NaN, "1", Infinity]) },
            { ...options, isCausal: rng.pick(["yes", 1]) },
            { ...options, weightsApplied: 1 },
          ]),
        ));
    case 3: {
      // k one size off, or of another dtype.
      const off = [...k.shape];
      off[rng.int(0, 3)] += 1;
      const other = dtype === "float32" ? "bfloat16" : "float32";
      return invalid(
        "k does not match q",
        () => call(q, rng.chance(0.5) ? scope.randn(off, dtype, 1) : scope.keep(k.cast(other)), v, options),
      );
    }
    case 4: {
      const off = [...v.shape];
      off[rng.int(0, 2)] += 1;
      return invalid(
        "v does not match q",
        () => call(q, k, rng.chance(0.5) ? scope.randn(off, dtype, 2) : "v", options),
      );
    }
    case 5: {
      const w = scope.rand([T + 1], 3);
      return invalid("cosformer weights", () =>
        call(
          q,
          k,
          v,
          rng.pick<object>([
            { ...options, cosWeight: w, sinWeight: w, weightsApplied: undefined },
            { ...options, cosWeight: scope.rand([T], 4), sinWeight: undefined },
            {
              ...options,
              cosWeight: scope.rand([T], 5),
              sinWeight: scope.rand([T], 6),
              weightsApplied: true,
            },
          ]),
        ));
    }
    case 6: {
      const dO = scope.randn(shape(V + 1), dtype, 8);
      return invalid(
        "backward with a dOutput of another shape",
        () => dispose(ak.featureMapLinearAttentionBackward(dO, q, k, v, options)),
      );
    }
    default: {
      const gone = scope.randn(shape(K), dtype, 9);
      gone.dispose();
      return invalid("a disposed input", () => call(gone, k, v, options));
    }
  }
}
