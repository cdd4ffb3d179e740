/**
 * Feature-map linear attention (Katharopoulos et al.'s linear transformer, cosformer): softmax
 * replaced by a kernel `phi(q_i) . phi(k_j)`, so attention costs O(T) instead of O(T^2). With
 * P = phi(q), R = phi(k) per element, cosformer weights `w_ij = cos_i cos_j + sin_i sin_j` (1
 * without), and j over every token (bidirectional) or j <= i (causal):
 *
 *   s_ij = (P_i . R_j) w_ij,   o_i = sum_j s_ij v_j / (sum_j s_ij + eps)
 *
 * There is no query scale. `"softmax_free"` is the identity map without the normaliser
 * (`o_i = sum_j s_ij v_j`). Both forms run on the gated-linear chunk kernel without decay (the
 * bidirectional one as two calls: the whole sequence's state, then every query read against it),
 * with one-pass native stages for the features, the normaliser and their gradients; both are O(T)
 * in memory.
 *
 * q, k `[B, T, H, K]` and v `[B, T, H, V]` (`"bshd"`) or `[B, H, T, *]` (`"bhsd"`) share one dtype
 * (float16, bfloat16 or float32) and device; the output is shaped like v in that dtype; cosWeight
 * and sinWeight are `[T]` float tensors on the same device.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import {
  expectDType,
  expectForwardTensorsLive,
  expectSameDevice,
  expectShape,
  expectTensor,
} from "../checks.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { FEATURE_MAP_KINDS, type FeatureMapKind, Temporaries } from "./feature_map_features.ts";
import { type FeatureMapCall, writeGradients, writeOutput } from "./feature_map_paths.ts";
import { type LinearLayout, linearLayout, sequencePattern, warnIfLayoutLooksSwapped } from "./layouts.ts";
import { callerBuffers, disposable } from "./results.ts";

/** Options of {@link featureMapLinearAttention} and its backward. */
export interface FeatureMapOptions {
  /**
   * Required: `"bshd"` (q `[B, T, H, K]`) or `"bhsd"` (q `[B, H, T, K]`); the output and gradients
   * come back in the same layout.
   */
  layout: LinearLayout;
  /** The feature map (default `"elu+1"`); see {@link FeatureMapKind}. */
  phi?: FeatureMapKind;
  /** Token i attends to tokens j <= i only (default false: every token). */
  isCausal?: boolean;
  /** Added to the normaliser, outside the sum (default 1e-6; 0 or more). Unused by `"softmax_free"`. */
  eps?: number;
  /**
   * cosformer's cosine weight per position, `[T]` (given with `sinWeight`): the scores become
   * `(P_i . R_j)(cos_i cos_j + sin_i sin_j)`. cosformer proper uses `cos(pi t / (2 M))`,
   * `sin(pi t / (2 M))` with M >= T, and phi `"relu"`.
   */
  cosWeight?: Tensor;
  /** cosformer's sine weight per position, `[T]` (given with `cosWeight`). */
  sinWeight?: Tensor;
  /**
   * The cosformer re-weighting is already in q and k: their feature dim (even) holds
   * `[x cos, x sin]` per token, so no weights are given and none are applied; phi then maps those
   * features as they are (`"relu"` commutes with non-negative weights; `"elu+1"` does not and is
   * refused). Default false.
   */
  weightsApplied?: boolean;
  /**
   * A buffer to write the output into instead of a new tensor (exact shape, dtype of q, same device).
   * It stays the caller's: disposing the result leaves it alone.
   */
  out?: { output?: Tensor };
}

/** Buffers for the gradients (exact shape, dtype of q, same device); they stay the caller's. */
export interface FeatureMapGradientBuffers {
  /** For dq. */
  dq?: Tensor;
  /** For dk. */
  dk?: Tensor;
  /** For dv. */
  dv?: Tensor;
}

/** Options of {@link featureMapLinearAttentionBackward}: the forward's, with gradient buffers. */
export interface FeatureMapBackwardOptions extends Omit<FeatureMapOptions, "out"> {
  /** Buffers to write the gradients into instead of new tensors. */
  out?: FeatureMapGradientBuffers;
}

/** Options of a forward result's own {@link FeatureMapResult.backward}. */
export interface FeatureMapResultBackwardOptions {
  /** Buffers to write the gradients into instead of new tensors. */
  out?: FeatureMapGradientBuffers;
}

/** The gradients; `using` disposes them. */
export interface FeatureMapGradients extends Disposable {
  /** Shaped like q, dtype of q. */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
}

/** What {@link featureMapLinearAttention} returns; `using` disposes the output. */
export interface FeatureMapResult extends Disposable {
  /** Shaped like v, dtype of q. */
  output: Tensor;
  /**
   * Gradients of this forward from the output's gradient (shaped like `output`): the same as
   * {@link featureMapLinearAttentionBackward} with the forward's inputs and options (it recomputes
   * the forward's intermediate sums rather than keeping them). The result refers to the inputs: one
   * disposed since the forward is refused, naming it.
   */
  backward(dOutput: Tensor, options?: FeatureMapResultBackwardOptions): FeatureMapGradients;
}

const OPTIONS: OptionSpec = {
  layout: "any",
  phi: FEATURE_MAP_KINDS,
  isCausal: "boolean",
  eps: (v) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? undefined : "a finite number from 0"),
  cosWeight: "any",
  sinWeight: "any",
  weightsApplied: "boolean",
  out: "object",
};
const RESULT_BACKWARD: OptionSpec = { out: "object" };
const FLOATS: readonly DType[] = ["float16", "bfloat16", "float32"];
const FAST_DTYPES: readonly DType[] = ["float16", "bfloat16"];
/** The largest head dim (K', V) the gated-linear CUDA kernels serve; both must be multiples of 8. */
const FAST_MAX_DIM = 256;

interface CheckedCall extends FeatureMapCall {
  /** The feature dim the kernels see: 2K with cosformer weights, else K. */
  featureDim: number;
  /** The call's `out` (checked where it is used). */
  out?: unknown;
}

function checkCall(op: string, q: unknown, k: unknown, v: unknown, options: unknown): CheckedCall {
  const o = checkOptions<FeatureMapBackwardOptions | FeatureMapOptions>(op, options, OPTIONS);
  const layout = linearLayout(op, o.layout);
  const tq = expectTensor(op, "q", q), tk = expectTensor(op, "k", k), tv = expectTensor(op, "v", v);
  expectDType(op, "q", tq, FLOATS);
  for (const [name, t] of [["k", tk], ["v", tv]] as const) {
    if (t.dtype !== tq.dtype) {
      throw invalidArgument(op, `${name}: expected dtype ${tq.dtype} (same as q), got ${t.dtype}`);
    }
    expectSameDevice(op, name, t, tq, "q");
  }
  const sizes = expectShape(op, "q", tq, sequencePattern(layout, "H", "K"));
  expectShape(op, "k", tk, sequencePattern(layout, "H", "K"), sizes);
  expectShape(op, "v", tv, sequencePattern(layout, "H", "V"), sizes);
  for (const dim of ["K", "V"] as const) {
    if (sizes[dim] < 1) {
      throw invalidArgument(op, `${dim === "K" ? "q" : "v"}: the head dim ${dim} must be 1 or more`);
    }
  }
  const cos = o.cosWeight ?? undefined, sin = o.sinWeight ?? undefined;
  if ((cos === undefined) !== (sin === undefined)) {
    const missing = cos === undefined ? "cosWeight" : "sinWeight";
    throw invalidArgument(
      op,
      `${missing}: required with ${
        missing === "cosWeight" ? "sinWeight" : "cosWeight"
      } (cosformer takes both)`,
    );
  }
  for (const [name, w] of [["cosWeight", cos], ["sinWeight", sin]] as const) {
    if (w === undefined) continue;
    const t = expectTensor(op, name, w);
    expectDType(op, name, t, FLOATS);
    expectSameDevice(op, name, t, tq, "q");
    expectShape(op, name, t, ["T"], sizes);
  }
  warnIfLayoutLooksSwapped(op, layout, sizes.T, sizes.H);
  const phi = o.phi ?? "elu+1";
  if (o.weightsApplied) {
    if (cos !== undefined) {
      throw invalidArgument(
        op,
        "weightsApplied: the weights are already in q and k; leave cosWeight and sinWeight out (or weightsApplied)",
      );
    }
    if (sizes.K % 2 !== 0) {
      throw invalidArgument(
        op,
        `weightsApplied: q's feature dim holds [x cos, x sin], so it is even; got ${sizes.K}`,
      );
    }
    if (phi === "elu+1") {
      throw invalidArgument(
        op,
        'weightsApplied: phi "elu+1" does not commute with the weights; apply it before weighting and pass "identity"',
      );
    }
  }
  return {
    q: tq,
    k: tk,
    v: tv,
    layout,
    phi,
    isCausal: o.isCausal ?? false,
    eps: o.eps ?? 1e-6,
    cosWeight: cos,
    sinWeight: sin,
    featureDim: cos ? 2 * sizes.K : sizes.K,
    out: o.out ?? undefined,
  };
}

/** The buffer `out.<name>` when given: a live tensor shaped like `like`, in `dtype`, on its device. */
function buffer(op: string, out: unknown, name: string, like: Tensor, dtype: DType): Tensor | undefined {
  const b = (out as Record<string, unknown> | undefined)?.[name];
  if (b === undefined || b === null) return undefined;
  const t = expectTensor(op, `out.${name}`, b);
  if (t.dtype !== dtype) {
    throw invalidArgument(op, `out.${name}: expected dtype ${dtype} (the dtype of q), got ${t.dtype}`);
  }
  expectSameDevice(op, `out.${name}`, t, like, "q");
  if (t.shape.length !== like.ndim || t.shape.some((n, i) => n !== like.shape[i])) {
    throw invalidArgument(
      op,
      `out.${name}: expected shape [${like.shape.join(", ")}], got [${t.shape.join(", ")}]`,
    );
  }
  return t;
}

/** Checks `out` against `names` (each shaped like its tensor): unknown keys are refused. */
function buffers(
  op: string,
  out: unknown,
  like: Record<string, Tensor>,
  dtype: DType,
): (Tensor | undefined)[] {
  const spec: OptionSpec = Object.fromEntries(Object.keys(like).map((n) => [n, "any"]));
  checkOptions(op, out, spec, "out");
  return Object.entries(like).map(([n, t]) => buffer(op, out, n, t, dtype));
}

/** The caller's buffer, else a new tensor shaped like `like` in `dtype`. */
function target(into: Tensor | undefined, like: Tensor, dtype: DType): Tensor {
  return into ?? Tensor.empty(like.shape, { dtype, device: like.device });
}

/** The output (in the dtype of q), or an empty one for an empty call. */
function outputOf(op: string, c: CheckedCall, out: unknown): FeatureMapResultFields {
  const dtype = c.q.dtype;
  const [into] = buffers(op, out, { output: c.v }, dtype);
  const caller = callerBuffers(out);
  const output = target(into, c.v, dtype);
  try {
    if (c.q.numel > 0 && c.v.numel > 0) {
      using scope = new Temporaries();
      writeOutput(scope, c, output, op);
    }
  } catch (e) {
    if (!into) output.dispose();
    throw e;
  }
  return { output, caller };
}

interface FeatureMapResultFields {
  output: Tensor;
  caller: ReadonlySet<Tensor>;
}

function gradientsOf(op: string, c: CheckedCall, dO: unknown, out: unknown): FeatureMapGradients {
  const g = expectTensor(op, "dOutput", dO);
  expectSameDevice(op, "dOutput", g, c.q, "q");
  expectDType(op, "dOutput", g, FLOATS);
  if (g.shape.length !== c.v.ndim || g.shape.some((s, i) => s !== c.v.shape[i])) {
    throw invalidArgument(
      op,
      `dOutput: expected shape [${c.v.shape.join(", ")}] (the output's), got [${g.shape.join(", ")}]`,
    );
  }
  const dtype = c.q.dtype;
  const [dq, dk, dv] = buffers(op, out, { dq: c.q, dk: c.k, dv: c.v }, dtype);
  const caller = callerBuffers(out);
  const made: Tensor[] = [];
  const fresh = (given: Tensor | undefined, like: Tensor) => {
    if (given) return given;
    const t = target(undefined, like, dtype);
    made.push(t);
    return t;
  };
  try {
    const into = { dq: fresh(dq, c.q), dk: fresh(dk, c.k), dv: fresh(dv, c.v) };
    if (c.q.numel === 0 || c.v.numel === 0) {
      // No output depends on anything: every gradient is zero.
      for (const t of [into.dq, into.dk, into.dv]) t.fill(0);
    } else {
      using scope = new Temporaries();
      writeGradients(scope, c, g, into, op);
    }
    return disposable(into, caller);
  } catch (e) {
    for (const t of made) t.dispose();
    throw e;
  }
}

/**
 * Feature-map linear attention, forward: the output `[..., V]` in the layout and dtype of q, and a
 * `backward` for its gradients.
 *
 * @example
 * ```ts
 * import { featureMapLinearAttention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 16, 2, 8]);
 * using k = Tensor.randn([1, 16, 2, 8]);
 * using v = Tensor.randn([1, 16, 2, 8]);
 * using r = featureMapLinearAttention(q, k, v, { layout: "bshd", phi: "elu+1", isCausal: true });
 * console.log(r.output.shape); // [1, 16, 2, 8]
 * using dO = Tensor.randn([1, 16, 2, 8]);
 * using grads = r.backward(dO);
 * ```
 */
export function featureMapLinearAttention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: FeatureMapOptions,
): FeatureMapResult {
  const op = "featureMapLinearAttention";
  const c = checkCall(op, q, k, v, options);
  const { output, caller } = outputOf(op, c, c.out);
  const forwardCall: CheckedCall = { ...c, out: undefined };
  return {
    ...disposable({ output }, caller),
    backward(dOutput: Tensor, options?: FeatureMapResultBackwardOptions): FeatureMapGradients {
      const bop = "FeatureMapResult.backward";
      const o = checkOptions<FeatureMapResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      expectForwardTensorsLive(bop, { q, k, v, cosWeight: c.cosWeight, sinWeight: c.sinWeight });
      return gradientsOf(bop, forwardCall, dOutput, o.out);
    },
  };
}

/**
 * Gradients of {@link featureMapLinearAttention} for the loss `sum(dOutput * output)`: dq, dk, dv in
 * the layout and dtype of q. Takes the forward's inputs and options.
 *
 * @example
 * ```ts
 * import { featureMapLinearAttentionBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 2, 12, 8]);
 * using k = Tensor.randn([1, 2, 12, 8]);
 * using v = Tensor.randn([1, 2, 12, 4]);
 * using dO = Tensor.randn([1, 2, 12, 4]);
 * using g = featureMapLinearAttentionBackward(dO, q, k, v, { layout: "bhsd", phi: "relu" });
 * console.log(g.dv.shape); // [1, 2, 12, 4]
 * ```
 */
export function featureMapLinearAttentionBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: FeatureMapBackwardOptions,
): FeatureMapGradients {
  const op = "featureMapLinearAttentionBackward";
  const c = checkCall(op, q, k, v, options);
  return gradientsOf(op, c, dOutput, c.out);
}

/**
 * Whether a call runs on the fast path: a CUDA device, float16 or bfloat16, and head dims the
 * gated-linear kernels serve (the feature dim K, or 2K with cosformer weights, and V each a multiple
 * of 8 up to 256). Any other valid call runs on the general path with the same result; an invalid
 * call throws as the op would.
 *
 * @example
 * ```ts
 * import { featureMapLinearAttentionSupported, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 16]);
 * // float32 on the CPU: served by the general path.
 * console.log(featureMapLinearAttentionSupported(q, q, q, { layout: "bshd" })); // false
 * ```
 */
export function featureMapLinearAttentionSupported(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: FeatureMapOptions,
): boolean {
  const c = checkCall("featureMapLinearAttentionSupported", q, k, v, options);
  const fits = (d: number) => d % 8 === 0 && d <= FAST_MAX_DIM;
  const V = c.v.shape[3];
  return c.q.device !== "cpu" && FAST_DTYPES.includes(c.q.dtype) && fits(c.featureDim) && fits(V);
}
