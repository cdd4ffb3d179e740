/**
 * Simple GLA and retention, flash-linear-attention's `chunk_simple_gla` and `chunk_retention` with an
 * explicit layout. Per value head the state S (`[K, V]`, float32) follows, for each token t:
 * `S <- exp(g_t + gGamma) S + k_t v_t^T` and `o_t = S^T (scale q_t)`, with natural-log decays g per
 * token and head (`[B, T, H]` in `"bshd"`, `[B, H, T]` in `"bhsd"`) and gGamma per head (`[H]`),
 * each optional (absent = 0). Retention is simple GLA with the fixed `gGamma = log(1 - 2^(-5 - h))`
 * for head h. Gates may be any floating dtype (cast to float32 on the device); their gradients are
 * float32.
 *
 * @module
 */
import { Tensor } from "../tensor.ts";
import {
  BACKWARD_OPTIONS,
  FORWARD_OPTIONS,
  type GlaBackwardOptions,
  type GlaGradients,
  type GlaOptions,
  type GlaResult,
  parseOptions,
  runBackward,
  runForward,
} from "./gla_functional.ts";
import type { GlaSettings } from "./gla_native.ts";

/** Options of {@link chunkSimpleGla}. */
export interface SimpleGlaOptions extends GlaOptions {
  /** Natural-log decay per token and value head, `[B, T, H]` (bshd) or `[B, H, T]` (bhsd). */
  g?: Tensor;
  /** Natural-log decay per value head, `[H]`, the same for every token. */
  gGamma?: Tensor;
}

/** Options of {@link chunkSimpleGlaBackward}. */
export interface SimpleGlaBackwardOptions extends GlaBackwardOptions {
  /** The forward's `g`. */
  g?: Tensor;
  /** The forward's `gGamma`. */
  gGamma?: Tensor;
}

const GATES = { g: "any", gGamma: "any" } as const;

/**
 * Simple GLA, chunked: a scalar decay per token (`g`) and/or per head (`gGamma`). Its backward
 * returns `dg` (shaped like g) with `g` and `dgGamma` (`[H]`) with `gGamma`, float32.
 *
 * @example
 * ```ts
 * import { chunkSimpleGla, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 100, 4, 64], { dtype: "bfloat16" });
 * using k = Tensor.randn([1, 100, 4, 64], { dtype: "bfloat16", std: 0.125 });
 * using v = Tensor.randn([1, 100, 4, 64], { dtype: "bfloat16" });
 * using g = Tensor.rand([1, 100, 4], { low: -0.1, high: 0 });
 * using r = chunkSimpleGla(q, k, v, { layout: "bshd", g, outputFinalState: true });
 * using dO = Tensor.randn([1, 100, 4, 64], { dtype: "bfloat16" });
 * using grads = r.backward(dO);
 * console.log(grads.dg?.shape); // [1, 100, 4]
 * ```
 */
export function chunkSimpleGla(q: Tensor, k: Tensor, v: Tensor, options: SimpleGlaOptions): GlaResult {
  const op = "chunkSimpleGla";
  const { o, s } = parseOptions<SimpleGlaOptions>(op, options, { ...FORWARD_OPTIONS, ...GATES }, false);
  const g = o.g ?? undefined, gGamma = o.gGamma ?? undefined;
  return runForward({
    op,
    inputs: { q, k, v, g, gGamma },
    s,
    outputFinalState: o.outputFinalState ?? false,
    out: o.out,
    callerTensors: { q, k, v, g, gGamma },
  });
}

/**
 * Gradients of {@link chunkSimpleGla} from `dOutput` (first) and an optional `dFinalState`, with the
 * forward's inputs and options: `dg` with `g`, `dgGamma` (`[H]`, the sum over tokens and sequences)
 * with `gGamma`.
 *
 * @example
 * ```ts
 * import { chunkSimpleGlaBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 32]);
 * using k = Tensor.randn([1, 40, 2, 32]);
 * using v = Tensor.randn([1, 40, 2, 32]);
 * using gGamma = Tensor.from(new Float32Array([-0.05, -0.01]));
 * using dO = Tensor.randn([1, 40, 2, 32]);
 * using grads = chunkSimpleGlaBackward(dO, q, k, v, { layout: "bshd", gGamma });
 * console.log(grads.dgGamma?.shape); // [2]
 * ```
 */
export function chunkSimpleGlaBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: SimpleGlaBackwardOptions,
): GlaGradients {
  const op = "chunkSimpleGlaBackward";
  const { o, s } = parseOptions<SimpleGlaBackwardOptions>(
    op,
    options,
    { ...BACKWARD_OPTIONS, ...GATES },
    false,
  );
  return runBackward(op, { q, k, v, g: o.g ?? undefined, gGamma: o.gGamma ?? undefined }, s, dOutput, o);
}

/**
 * Retention's decay per head on the device of q: `log(1 - 2^(-5 - h))`, float32 `[H]`. Undefined
 * when q or v is not a tensor of the layout's rank (the call's checks then name it).
 */
function retentionDecay(q: unknown, v: unknown, s: GlaSettings): Tensor | undefined {
  if (!(q instanceof Tensor) || !(v instanceof Tensor) || q.disposed || v.ndim !== 4) return undefined;
  const H = v.shape[s.layout === "bshd" ? 2 : 1];
  const decays = Float32Array.from({ length: H }, (_, h) => Math.log1p(-(2 ** (-5 - h))));
  return Tensor.from(decays, { dtype: "float32", device: q.device });
}

/**
 * Retention (RetNet), chunked: simple GLA with the fixed decay `log(1 - 2^(-5 - h))` of head h.
 *
 * @example
 * ```ts
 * import { chunkRetention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 4, 80, 32]); // "bhsd"
 * using k = Tensor.randn([1, 4, 80, 32], { std: 0.2 });
 * using v = Tensor.randn([1, 4, 80, 32]);
 * using r = chunkRetention(q, k, v, { layout: "bhsd", outputFinalState: true });
 * console.log(r.finalState?.shape); // [1, 4, 32, 32]
 * ```
 */
export function chunkRetention(q: Tensor, k: Tensor, v: Tensor, options: GlaOptions): GlaResult {
  const op = "chunkRetention";
  const { o, s } = parseOptions<GlaOptions>(op, options, FORWARD_OPTIONS, false);
  const gGamma = retentionDecay(q, v, s);
  return runForward({
    op,
    inputs: { q, k, v, gGamma },
    s,
    outputFinalState: o.outputFinalState ?? false,
    out: o.out,
    backwardExtras: { wantDgGamma: false },
    held: gGamma ? [gGamma] : [],
    callerTensors: { q, k, v },
  });
}

/**
 * Gradients of {@link chunkRetention}, output gradient first (dq, dk, dv and dInitialState; the
 * decay is fixed, so it has no gradient).
 *
 * @example
 * ```ts
 * import { chunkRetentionBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 30, 2, 16]);
 * using k = Tensor.randn([1, 30, 2, 16]);
 * using v = Tensor.randn([1, 30, 2, 16]);
 * using dO = Tensor.randn([1, 30, 2, 16]);
 * using grads = chunkRetentionBackward(dO, q, k, v, { layout: "bshd" });
 * console.log(grads.dv.shape); // [1, 30, 2, 16]
 * ```
 */
export function chunkRetentionBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: GlaBackwardOptions,
): GlaGradients {
  const op = "chunkRetentionBackward";
  const { o, s } = parseOptions<GlaBackwardOptions>(op, options, BACKWARD_OPTIONS, false);
  using gGamma = retentionDecay(q, v, s);
  return runBackward(op, { q, k, v, gGamma }, s, dOutput, o, undefined, { wantDgGamma: false });
}
