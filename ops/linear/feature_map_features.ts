/**
 * The feature side of feature-map linear attention: phi applied element by element, the cosformer
 * re-weighting folded into the feature dim (`[phi(x) cos, phi(x) sin]`, so a plain dot product of
 * two such rows is `(P_i . R_j) w_ij`), an optional factor per token, and the way back from a
 * feature gradient to the input's gradient. Everything is computed in float32 with tensor math on
 * the input's device.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import type { DType } from "../dtype.ts";
import { where } from "../tensor_math/elementwise.ts";
import { Tensor } from "../tensor.ts";

/**
 * The feature maps phi of {@link featureMapLinearAttention}: `"elu+1"` (elu(x) + 1), `"relu"`
 * (max(x, 0)), `"identity"` (x) and `"softmax_free"` (x, without the normaliser).
 *
 * @example
 * ```ts
 * import type { FeatureMapKind } from "@attnkit/attnkit";
 * const phi: FeatureMapKind = "elu+1";
 * ```
 */
export type FeatureMapKind = "elu+1" | "relu" | "identity" | "softmax_free";

/**
 * Every feature map {@link featureMapLinearAttention} takes.
 *
 * @example
 * ```ts
 * import { FEATURE_MAP_KINDS } from "@attnkit/attnkit";
 * console.log(FEATURE_MAP_KINDS.length); // 4
 * ```
 */
export const FEATURE_MAP_KINDS: readonly FeatureMapKind[] = ["elu+1", "relu", "identity", "softmax_free"];

/**
 * What one call makes and drops again: tensors and disposable results (of the kernels it calls),
 * disposed together when the call ends, whether it succeeded or threw. Results handed to the caller
 * are fresh copies made before that.
 */
export class Temporaries implements Disposable {
  #made: Disposable[] = [];

  /** Keeps `t` until the call ends. */
  temp<T extends Disposable>(t: T): T {
    this.#made.push(t);
    return t;
  }

  /** Disposes everything kept, newest first. */
  [Symbol.dispose](): void {
    for (const t of this.#made.reverse()) t[Symbol.dispose]();
    this.#made = [];
  }
}

/**
 * The cosformer weights and the per-token factor, float32, shaped to broadcast against a
 * `[B, T, H, K]` or `[B, H, T, K]` tensor (`[1, T, 1, 1]` or `[1, 1, T, 1]`).
 */
export interface TokenWeights {
  cos?: Tensor;
  sin?: Tensor;
  /** Multiplies the feature row of token t (before the cosformer weights). */
  factor?: Tensor;
}

/** phi(x) in float32 (x is float32). */
function applyPhi(scope: Temporaries, x: Tensor, phi: FeatureMapKind): Tensor {
  switch (phi) {
    case "elu+1": {
      // exp may overflow where x is large, but where() takes x + 1 there.
      const positive = scope.temp(x.gt(0));
      const e = scope.temp(x.exp()), shifted = scope.temp(x.add(1));
      return scope.temp(where(positive, shifted, e));
    }
    case "relu":
      return scope.temp(x.maximum(0));
    default:
      return x;
  }
}

/** `dF * phi'(x)` in float32: elu+1 -> 1 or exp(x), relu -> 1 or 0 (at x > 0 or not), identity -> 1. */
function throughPhi(scope: Temporaries, x: Tensor, dF: Tensor, phi: FeatureMapKind): Tensor {
  switch (phi) {
    case "elu+1": {
      const positive = scope.temp(x.gt(0));
      const slope = scope.temp(where(positive, 1, scope.temp(x.exp())));
      return scope.temp(dF.mul(slope));
    }
    case "relu":
      return scope.temp(where(scope.temp(x.gt(0)), dF, 0));
    default:
      return dF;
  }
}

/** Copies `src` (`[..., n]`) into columns `[at, at + n)` of `dst` (`[..., m]`, contiguous), casting. */
export function writeColumns(dst: Tensor, src: Tensor, at: number, op: string): void {
  unwrap(native().ak_copy(dst.viewDescriptor(src.shape, dst.strides, op, at), src.descriptor(op)), op);
}

/**
 * The features of x (`[..., K]`, any float dtype) in `dtype`: `phi(x) * factor`, and with cosformer
 * weights `[phi(x) * factor * cos, phi(x) * factor * sin]` (`[..., 2K]`). Owned by `scope` as a temp.
 */
export function features(
  scope: Temporaries,
  x: Tensor,
  phi: FeatureMapKind,
  w: TokenWeights,
  dtype: DType,
  op: string,
): Tensor {
  const x32 = x.dtype === "float32" ? x : scope.temp(x.cast("float32"));
  let f = applyPhi(scope, x32, phi);
  if (w.factor) f = scope.temp(f.mul(w.factor));
  if (!w.cos || !w.sin) return f.dtype === dtype ? f : scope.temp(f.cast(dtype));
  const K = x.shape[x.ndim - 1];
  const out = scope.temp(Tensor.empty([...x.shape.slice(0, -1), 2 * K], { dtype, device: x.device }));
  writeColumns(out, scope.temp(f.mul(w.cos)), 0, op);
  writeColumns(out, scope.temp(f.mul(w.sin)), K, op);
  return out;
}

/**
 * The gradient of x (float32, a temp of `scope`) from the gradient of its features (`[..., K']`,
 * any float dtype), reversing {@link features}.
 */
export function featureGradient(
  scope: Temporaries,
  x: Tensor,
  dFeatures: Tensor,
  phi: FeatureMapKind,
  w: TokenWeights,
): Tensor {
  const K = x.shape[x.ndim - 1];
  const d32 = dFeatures.dtype === "float32" ? dFeatures : scope.temp(dFeatures.cast("float32"));
  let dF = d32;
  if (w.cos && w.sin) {
    const c = scope.temp(scope.temp(d32.slice(-1, 0, K)).mul(w.cos));
    const s = scope.temp(scope.temp(d32.slice(-1, K)).mul(w.sin));
    dF = scope.temp(c.add(s));
  }
  if (w.factor) dF = scope.temp(dF.mul(w.factor));
  const x32 = x.dtype === "float32" ? x : scope.temp(x.cast("float32"));
  return throughPhi(scope, x32, dF, phi);
}
