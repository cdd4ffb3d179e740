/**
 * The feature side of feature-map linear attention and the element-wise stages around the kernel,
 * each one pass of a native entry (float32 math per element, any float dtype in and out): phi
 * applied with the cosformer re-weighting folded into the feature dim (`[phi(x) cos, phi(x) sin]`,
 * so a plain dot product of two such rows is `(P_i . R_j) w_ij`) and a factor per token, the value
 * rows with their ones column, the normaliser's division, and the way back of each.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import type { DType } from "../dtype.ts";
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
 * disposed together when the call ends, whether it succeeded or threw.
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

/** The phi codes of the native stages (`AK_FMAP_*`); softmax_free maps like the identity. */
export const PHI_CODES: Record<FeatureMapKind, number> = {
  identity: 0,
  softmax_free: 0,
  "elu+1": 1,
  relu: 2,
};

/** The factor of token t's query row (`AK_FMAP_FACTOR_*`): 1, 1 / (t + 1), or 1 / T. */
export const TokenFactor = { NONE: 0, CAUSAL: 1, MEAN: 2 } as const;

/** How a call's rows are laid out and weighted. */
export interface RowSettings {
  /** The dim of the 4-D tensors that holds the token: 1 (`"bshd"`) or 2 (`"bhsd"`). */
  tokenDim: 1 | 2;
  /** cosformer's cosine weights, `[T]` float32 contiguous (given with `sin`). */
  cos?: Tensor;
  /** cosformer's sine weights, `[T]` float32 contiguous (given with `cos`). */
  sin?: Tensor;
}

/** A `[T]` weight as the native stages read it: float32, contiguous (`t` itself when it already is). */
export function weightAsRead(scope: Temporaries, t: Tensor): Tensor {
  if (t.dtype === "float32" && (t.shape[0] <= 1 || t.strides[0] === 1)) return t;
  return scope.temp(t.dtype === "float32" ? t.clone() : t.cast("float32"));
}

/** A column range `[a, b)` of a 4-D tensor. */
export type ColumnRange = [number, number];

/**
 * Splits n columns into the fewest pieces of at most `max` (a multiple of 8): equal widths, each a
 * multiple of 8 where n is, so every piece keeps the kernels' head-dim rule.
 */
export function columnPieces(n: number, max: number): ColumnRange[] {
  const count = Math.ceil(n / max);
  const width = Math.min(max, 8 * Math.ceil(n / (8 * count)));
  return Array.from({ length: count }, (_, i) => [i * width, Math.min(n, (i + 1) * width)]);
}

/** The sum of `ts`: the one tensor itself, else a float32 temp (pieces' gradients, rounded once). */
export function summed(scope: Temporaries, ts: Tensor[]): Tensor {
  if (ts.length === 1) return ts[0];
  let s = ts[0].dtype === "float32" ? ts[0] : scope.temp(ts[0].cast("float32"));
  for (const t of ts.slice(1)) s = scope.temp(s.add(t));
  return s;
}

/** Columns `[a, b)` of the 4-D tensor `t` as a descriptor of its memory (no copy); all of it by default. */
export function columnView(t: Tensor, op: string, range?: ColumnRange): Uint8Array<ArrayBuffer> {
  if (!range || (range[0] === 0 && range[1] === t.shape[3])) return t.descriptor(op);
  const [a, b] = range;
  return t.viewDescriptor([...t.shape.slice(0, 3), b - a], t.strides, op, a * t.strides[3]);
}

/** Copies `src` (columns `from`) into `dst` (columns `to`, as wide), casting. */
export function copyColumns(dst: Tensor, to: ColumnRange, src: Tensor, from: ColumnRange, op: string): void {
  unwrap(native().ak_copy(columnView(dst, op, to), columnView(src, op, from)), op);
}

// The trailing arguments of ak_fmap_features and ak_fmap_feature_grad, in their order: the cosformer
// weights (null without them), the map, the factor and the token dim.
function mapArguments(phi: FeatureMapKind, factor: number, rows: RowSettings, op: string) {
  const weight = (t: Tensor | undefined) => (t ? t.descriptor(op) : null);
  return [weight(rows.cos), weight(rows.sin), PHI_CODES[phi], factor, rows.tokenDim] as const;
}

/** A new `[.., width]` tensor in `dtype`, with `like`'s first three dims and device, owned by `scope`. */
function rowsOfWidth(scope: Temporaries, like: Tensor, width: number, dtype: DType): Tensor {
  return scope.temp(Tensor.empty([...like.shape.slice(0, 3), width], { dtype, device: like.device }));
}

/**
 * The features of x (`[.., K]`, any float dtype) in `dtype`: `phi(x) * factor`, and with cosformer
 * weights `[phi(x) f cos, phi(x) f sin]` (`[.., 2K]`). Owned by `scope`.
 */
export function features(
  scope: Temporaries,
  x: Tensor,
  phi: FeatureMapKind,
  factor: number,
  rows: RowSettings,
  dtype: DType,
  op: string,
): Tensor {
  const K = x.shape[3];
  const width = rows.cos ? 2 * K : K;
  const out = rowsOfWidth(scope, x, width, dtype);
  unwrap(
    native().ak_fmap_features(out.descriptor(op), x.descriptor(op), ...mapArguments(phi, factor, rows, op)),
    op,
  );
  return out;
}

/** Writes the gradient of x into `dx` from the gradient of its features (any float dtype), reversing {@link features}. */
export function featureGradient(
  dx: Tensor,
  x: Tensor,
  dFeatures: Tensor,
  phi: FeatureMapKind,
  factor: number,
  rows: RowSettings,
  op: string,
): void {
  unwrap(
    native().ak_fmap_feature_grad(
      dx.descriptor(op),
      x.descriptor(op),
      dFeatures.descriptor(op),
      ...mapArguments(phi, factor, rows, op),
    ),
    op,
  );
}

/** Columns `range` of v as the kernel reads them, `[v | 1 | 0 ...]` (`width` columns) in `dtype`. */
export function valuesWithOnes(
  scope: Temporaries,
  v: Tensor,
  range: ColumnRange,
  width: number,
  dtype: DType,
  op: string,
): Tensor {
  const out = rowsOfWidth(scope, v, width, dtype);
  unwrap(native().ak_fmap_values(out.descriptor(op), columnView(v, op, range)), op);
  return out;
}

/**
 * Writes `num[.., :w] / (num[.., w] + eps * factor)` into columns `range` of `dst` (w columns):
 * `num` is the kernel's output over `[v | 1 ..]`.
 */
export function normalise(
  dst: Tensor,
  range: ColumnRange,
  num: Tensor,
  eps: number,
  factor: number,
  rows: RowSettings,
  op: string,
): void {
  unwrap(
    native().ak_fmap_normalise(columnView(dst, op, range), num.descriptor(op), eps, factor, rows.tokenDim),
    op,
  );
}

/**
 * The kernel's output gradient for columns `range` of the normalised output (the reverse of
 * {@link normalise}): `[dO / D rounded, dD high, dD low, 0 ...]`, `width` columns in `dtype`.
 */
export function normaliseGradient(
  scope: Temporaries,
  dOutput: Tensor,
  range: ColumnRange,
  num: Tensor,
  width: number,
  eps: number,
  factor: number,
  rows: RowSettings,
  dtype: DType,
  op: string,
): Tensor {
  const out = rowsOfWidth(scope, dOutput, width, dtype);
  unwrap(
    native().ak_fmap_normalise_grad(
      out.descriptor(op),
      columnView(dOutput, op, range),
      num.descriptor(op),
      eps,
      factor,
      rows.tokenDim,
    ),
    op,
  );
  return out;
}
