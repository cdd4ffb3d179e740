/**
 * The functional API of the delta rule and the gated delta rule, in FLA's token-major layout:
 * q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g and beta `[B, T, H]`, states `[N, H, K, V]` float32.
 *
 * Per value head the state S (`[K, V]`) follows, for each token t:
 * - gated only: `S <- exp(g_t) S` (g is a natural-log decay);
 * - `u_t = beta_t (v_t - S^T k_t)`, `S <- S + k_t u_t^T`;
 * - `o_t = S^T (scale q_t)`, with `scale` defaulting to `K ** -0.5`.
 *
 * Grouped heads: q and k may have HK heads where HK divides the H value heads; each block of H / HK
 * consecutive value heads shares one q/k head. Packed sequences: with `cuSeqlens` (`[N + 1]`,
 * starting at 0, nondecreasing, ending at or before T) the batch is 1 and holds N sequences, each
 * with its own state; empty sequences pass their state through. With `useQkL2norm`, q and k are
 * replaced by `x / sqrt(sum(x^2) + 1e-6)` inside the kernel.
 *
 * q, k, v share one dtype (float16, bfloat16 or float32; the state and all sums are float32);
 * g and beta may be any floating dtype (cast to float32 on the device).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import type { Tensor } from "../tensor.ts";
import {
  type BackwardOutputs,
  deltaBackward,
  type DeltaBackwardBuffers,
  deltaForward,
  type DeltaSettings,
} from "./delta_native.ts";
import type { DeltaSavedStates } from "./saved.ts";

/** Options of {@link recurrentDeltaRule} and {@link recurrentGatedDeltaRule}. */
export interface DeltaRuleOptions {
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** State before the first token, `[N, H, K, V]` float32 (default zeros). */
  initialState?: Tensor;
  /** Also return the state after the last token (default false). */
  outputFinalState?: boolean;
  /** Offsets of packed sequences, int32 or int64 `[N + 1]`; q must then have batch size 1. */
  cuSeqlens?: Tensor;
  /** L2-normalise q and k inside the kernel (default false). */
  useQkL2norm?: boolean;
  /**
   * Buffers to write the results into instead of new tensors (exact shape, dtype and device), e.g.
   * reused memory; `out.finalState` implies `outputFinalState`.
   */
  out?: { output?: Tensor; finalState?: Tensor };
}

/** Options of {@link chunkDeltaRule} and {@link chunkGatedDeltaRule}. */
export interface ChunkDeltaRuleOptions extends DeltaRuleOptions {
  /** Tokens per chunk: 32, 64 (default) or 128. Any T works; the last chunk may be short. */
  chunkSize?: number;
  /**
   * Keep what the backward would recompute (the state before every chunk; see
   * {@link DeltaSavedStates}) and return it as `saved`, for the backward's `saved` option (default
   * false). Training loops that run the backward right after the forward save a sequential pass with
   * it, for `H * chunks * (K V + 64 V + 64 * 64 + 64 K)` elements of memory.
   */
  saveForBackward?: boolean;
}

/** Options of the backward functions. */
export interface DeltaRuleBackwardOptions
  extends Omit<ChunkDeltaRuleOptions, "out" | "outputFinalState" | "saveForBackward"> {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /**
   * The `saved` of the forward with the same inputs and options (`saveForBackward`): read, not
   * disposed. Without it the backward recomputes the per-chunk states.
   */
  saved?: DeltaSavedStates;
  /** Buffers to write the gradients into instead of new tensors (exact shape, dtype and device). */
  out?: DeltaBackwardBuffers;
}

/** What the forward functions return; `using` disposes the tensors and the saved states. */
export interface DeltaRuleResult extends Disposable {
  /** `[B, T, H, V]`, dtype of q. With `cuSeqlens`, rows past the last sequence are unspecified. */
  output: Tensor;
  /** `[N, H, K, V]` float32 when `outputFinalState` was set, else undefined. */
  finalState?: Tensor;
  /** With `saveForBackward`, where the backend stores them (CUDA, K = V = 128, 16-bit inputs). */
  saved?: DeltaSavedStates;
}

/** What the backward functions return; `using` disposes every tensor. */
export interface DeltaRuleGradients extends Disposable {
  /** `[B, T, HK, K]`, dtype of q (summed over each group of value heads). */
  dq: Tensor;
  /** `[B, T, HK, K]`, dtype of q. */
  dk: Tensor;
  /** `[B, T, H, V]`, dtype of q. */
  dv: Tensor;
  /** `[B, T, H]`, dtype of beta. */
  dbeta: Tensor;
  /** `[B, T, H]`, dtype of g; gated rule only. */
  dg?: Tensor;
  /** `[N, H, K, V]` float32, when `initialState` was given. */
  dInitialState?: Tensor;
}

type Kind = { gated: boolean; recurrent: boolean };

// The options each function takes; the tensors and chunk size are checked where they are used.
const COMMON: OptionSpec = {
  scale: "any",
  initialState: "any",
  cuSeqlens: "any",
  useQkL2norm: "boolean",
  chunkSize: "any", // the recurrent functions refuse it with a message of their own
  out: "object",
};
const FORWARD: OptionSpec = { ...COMMON, outputFinalState: "boolean", saveForBackward: "boolean" };
const BACKWARD: OptionSpec = { ...COMMON, dFinalState: "any", saved: "any" };

function settings(
  op: string,
  kind: Kind,
  options: unknown,
  spec: OptionSpec,
): DeltaSettings & { outputFinalState: boolean } {
  const o = checkOptions<ChunkDeltaRuleOptions>(op, options, spec);
  if (kind.recurrent && "saveForBackward" in o && o.saveForBackward !== undefined) {
    throw invalidArgument(op, "saveForBackward: the recurrent form saves nothing; use the chunk* function");
  }
  if (kind.recurrent && "chunkSize" in o && o.chunkSize !== undefined) {
    throw invalidArgument(op, "chunkSize: the recurrent form has no chunks; use the chunk* function");
  }
  return {
    layout: "bthd",
    gated: kind.gated,
    recurrent: kind.recurrent,
    scale: o.scale,
    chunkSize: o.chunkSize ?? 64,
    l2norm: o.useQkL2norm ?? false,
    initialState: o.initialState ?? undefined,
    cuSeqlens: o.cuSeqlens ?? undefined,
    outputFinalState: (o as DeltaRuleOptions).outputFinalState ?? false,
  };
}

function forward(
  op: string,
  kind: Kind,
  inputs: { q: Tensor; k: Tensor; v: Tensor; g?: Tensor; beta: Tensor },
  options: unknown,
): DeltaRuleResult {
  const s = settings(op, kind, options, FORWARD);
  const out = (options as DeltaRuleOptions | undefined)?.out;
  const save = (options as ChunkDeltaRuleOptions | undefined)?.saveForBackward ?? false;
  const r = deltaForward(
    op,
    inputs,
    s,
    { finalState: s.outputFinalState, saved: save },
    out,
  );
  return {
    output: r.output,
    finalState: r.finalState,
    saved: r.saved,
    [Symbol.dispose]() {
      r.output.dispose();
      r.finalState?.dispose();
      r.saved?.dispose();
    },
  };
}

function backward(
  op: string,
  kind: Kind,
  inputs: { q: Tensor; k: Tensor; v: Tensor; g?: Tensor; beta: Tensor },
  dOutput: Tensor,
  options: unknown,
): DeltaRuleGradients {
  const s = settings(op, kind, options, BACKWARD);
  const o = (options ?? {}) as DeltaRuleBackwardOptions;
  const r: BackwardOutputs = deltaBackward(op, inputs, s, dOutput, o.dFinalState, true, o.out, o.saved);
  return {
    ...r,
    [Symbol.dispose]() {
      for (const t of [r.dq, r.dk, r.dv, r.dbeta, r.dg, r.dInitialState]) t?.dispose();
    },
  };
}

const DELTA: Kind = { gated: false, recurrent: false };
const DELTA_RECURRENT: Kind = { gated: false, recurrent: true };
const GATED: Kind = { gated: true, recurrent: false };
const GATED_RECURRENT: Kind = { gated: true, recurrent: true };

/**
 * The delta rule, chunked: `u_t = beta_t (v_t - S^T k_t)`, `S <- S + k_t u_t^T`,
 * `o_t = scale S^T q_t`, computed chunk by chunk (WY representation).
 *
 * @example
 * ```ts
 * import { chunkDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 100, 2, 64]);
 * using k = Tensor.randn([1, 100, 2, 64]);
 * using v = Tensor.randn([1, 100, 2, 64]);
 * using beta = Tensor.rand([1, 100, 2]);
 * using r = chunkDeltaRule(q, k, v, beta, { useQkL2norm: true, outputFinalState: true });
 * console.log(r.output.shape, r.finalState?.shape); // [1, 100, 2, 64] [1, 2, 64, 64]
 * ```
 */
export function chunkDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: ChunkDeltaRuleOptions = {},
): DeltaRuleResult {
  return forward("chunkDeltaRule", DELTA, { q, k, v, beta }, options);
}

/**
 * The delta rule, token by token (the same result as {@link chunkDeltaRule} up to rounding).
 *
 * @example
 * ```ts
 * import { recurrentDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 16, 4, 32]);
 * using k = Tensor.randn([2, 16, 4, 32]);
 * using v = Tensor.randn([2, 16, 4, 32]);
 * using beta = Tensor.rand([2, 16, 4]);
 * using r = recurrentDeltaRule(q, k, v, beta, { useQkL2norm: true });
 * ```
 */
export function recurrentDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions = {},
): DeltaRuleResult {
  return forward("recurrentDeltaRule", DELTA_RECURRENT, { q, k, v, beta }, options);
}

/**
 * The gated delta rule, chunked: `S <- exp(g_t) S` before each delta update.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 128, 4, 64], { dtype: "bfloat16" });
 * using k = Tensor.randn([1, 128, 4, 64], { dtype: "bfloat16" });
 * using v = Tensor.randn([1, 128, 4, 64], { dtype: "bfloat16" });
 * using g = Tensor.rand([1, 128, 4], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 128, 4]);
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { useQkL2norm: true });
 * ```
 */
export function chunkGatedDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: ChunkDeltaRuleOptions = {},
): DeltaRuleResult {
  return forward("chunkGatedDeltaRule", GATED, { q, k, v, g, beta }, options);
}

/**
 * The gated delta rule, token by token.
 *
 * @example
 * ```ts
 * import { recurrentGatedDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 16]);
 * using k = Tensor.randn([1, 8, 2, 16]);
 * using v = Tensor.randn([1, 8, 2, 16]);
 * using g = Tensor.rand([1, 8, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 8, 2]);
 * using r = recurrentGatedDeltaRule(q, k, v, g, beta, { useQkL2norm: true, outputFinalState: true });
 * ```
 */
export function recurrentGatedDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions = {},
): DeltaRuleResult {
  return forward("recurrentGatedDeltaRule", GATED_RECURRENT, { q, k, v, g, beta }, options);
}

/**
 * Gradients of {@link chunkDeltaRule} (same inputs and options) from `dOutput` and an optional
 * `dFinalState`. With `cuSeqlens`, the gradients of tokens past the last sequence are zero.
 *
 * @example
 * ```ts
 * import { chunkDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 32]);
 * using k = Tensor.randn([1, 40, 2, 32]);
 * using v = Tensor.randn([1, 40, 2, 32]);
 * using beta = Tensor.rand([1, 40, 2]);
 * using dO = Tensor.randn([1, 40, 2, 32]);
 * using grads = chunkDeltaRuleBackward(q, k, v, beta, dO, { useQkL2norm: true });
 * console.log(grads.dq.shape, grads.dbeta.shape);
 * ```
 */
export function chunkDeltaRuleBackward(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  dOutput: Tensor,
  options: DeltaRuleBackwardOptions = {},
): DeltaRuleGradients {
  return backward("chunkDeltaRuleBackward", DELTA, { q, k, v, beta }, dOutput, options);
}

/**
 * Gradients of {@link recurrentDeltaRule}.
 *
 * @example
 * ```ts
 * import { recurrentDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 10, 1, 16]);
 * using k = Tensor.randn([1, 10, 1, 16]);
 * using v = Tensor.randn([1, 10, 1, 16]);
 * using beta = Tensor.rand([1, 10, 1]);
 * using dO = Tensor.randn([1, 10, 1, 16]);
 * using grads = recurrentDeltaRuleBackward(q, k, v, beta, dO, { useQkL2norm: true });
 * ```
 */
export function recurrentDeltaRuleBackward(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  dOutput: Tensor,
  options: Omit<DeltaRuleBackwardOptions, "chunkSize"> = {},
): DeltaRuleGradients {
  return backward("recurrentDeltaRuleBackward", DELTA_RECURRENT, { q, k, v, beta }, dOutput, options);
}

/**
 * Gradients of {@link chunkGatedDeltaRule}, including `dg`.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 32]);
 * using k = Tensor.randn([1, 40, 2, 32]);
 * using v = Tensor.randn([1, 40, 2, 32]);
 * using g = Tensor.rand([1, 40, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 40, 2]);
 * using dO = Tensor.randn([1, 40, 2, 32]);
 * using grads = chunkGatedDeltaRuleBackward(q, k, v, g, beta, dO, { useQkL2norm: true });
 * console.log(grads.dg?.shape); // [1, 40, 2]
 * ```
 */
export function chunkGatedDeltaRuleBackward(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  dOutput: Tensor,
  options: DeltaRuleBackwardOptions = {},
): DeltaRuleGradients {
  return backward("chunkGatedDeltaRuleBackward", GATED, { q, k, v, g, beta }, dOutput, options);
}

/**
 * Gradients of {@link recurrentGatedDeltaRule}, including `dg`.
 *
 * @example
 * ```ts
 * import { recurrentGatedDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 10, 1, 16]);
 * using k = Tensor.randn([1, 10, 1, 16]);
 * using v = Tensor.randn([1, 10, 1, 16]);
 * using g = Tensor.rand([1, 10, 1], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 10, 1]);
 * using dO = Tensor.randn([1, 10, 1, 16]);
 * using grads = recurrentGatedDeltaRuleBackward(q, k, v, g, beta, dO, { useQkL2norm: true });
 * ```
 */
export function recurrentGatedDeltaRuleBackward(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  dOutput: Tensor,
  options: Omit<DeltaRuleBackwardOptions, "chunkSize"> = {},
): DeltaRuleGradients {
  return backward("recurrentGatedDeltaRuleBackward", GATED_RECURRENT, { q, k, v, g, beta }, dOutput, options);
}
