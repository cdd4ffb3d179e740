/**
 * The functional API of the delta rule and the gated delta rule, flash-linear-attention's functions
 * with an explicit `layout`: `"bshd"` (q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g and beta
 * `[B, T, H]`, FLA's order) or `"bhsd"` (q, k `[B, HK, T, K]`, v `[B, H, T, V]`, g and beta
 * `[B, H, T]`, PyTorch's). Outputs and gradients come back in the layout of the inputs, states
 * `[N, H, K, V]` float32 in both.
 *
 * Per value head the state S (`[K, V]`) follows, for each token t:
 * - gated only: `S <- exp(g_t) S` (g is a natural-log decay);
 * - `u_t = beta_t (v_t - S^T k_t)`, `S <- S + k_t u_t^T`;
 * - `o_t = S^T (scale q_t)`, with `scale` defaulting to `K ** -0.5`.
 *
 * Grouped heads: q and k may have HK heads where HK divides the H value heads; each block of H / HK
 * consecutive value heads shares one q/k head. Packed sequences: with `cuSeqlens` (`[N + 1]`,
 * starting at 0, nondecreasing, ending at or before T; host numbers or an int32/int64 tensor on the
 * device) the batch is 1 and holds N sequences, each with its own state; empty sequences pass their
 * state through. With `useQkL2norm`, q and k are replaced by `x / sqrt(sum(x^2) + 1e-6)` inside the
 * kernel.
 *
 * q, k, v share one dtype (float16, bfloat16 or float32; the state and all sums are float32);
 * g and beta may be any floating dtype (cast to float32 on the device). Gradients: dq, dk, dv in the
 * dtype of q; dg and dbeta float32 whatever the dtype of g and beta (the kernels sum them in float32).
 *
 * Backward: either `r.backward(dO)` on the forward's result (it reruns nothing and repeats no
 * option), or the `...Backward` functions, output gradient first, with the forward's options; a
 * backward whose options contradict the forward's on the same input tensors is refused.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import {
  type BackwardOutputs,
  deltaBackward,
  type DeltaBackwardBuffers,
  deltaForward,
  deltaForwardOnPool,
  type DeltaInputs,
  type DeltaSettings,
  type PoolStates,
} from "./delta_native.ts";
import { type LinearLayout, linearLayout } from "./layouts.ts";
import { expectForwardTensorsLive } from "../checks.ts";
import { callerBuffers, disposable, keepOffsets } from "./results.ts";
import type { DeltaSavedStates } from "./saved.ts";
import { recurrentOnPool, type RecurrentPoolOptions, splitPoolOptions } from "./pool_run.ts";

/** Options of {@link recurrentDeltaRule} and {@link recurrentGatedDeltaRule}. */
export interface DeltaRuleOptions {
  /**
   * Required: `"bshd"` (q `[B, T, HK, K]`, g and beta `[B, T, H]`) or `"bhsd"` (q `[B, HK, T, K]`, g and
   * beta `[B, H, T]`); outputs come back in the same layout.
   */
  layout: LinearLayout;
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** State before the first token, `[N, H, K, V]` float32 (default zeros). */
  initialState?: Tensor;
  /** Also return the state after the last token (default false). */
  outputFinalState?: boolean;
  /**
   * Offsets of packed sequences, `[N + 1]`: host numbers (`number[]`, `Int32Array`,
   * `BigInt64Array`) or an int32/int64 tensor on the device of q; q must then have batch size 1.
   */
  cuSeqlens?: CuSeqlens;
  /** L2-normalise q and k inside the kernel (default false). */
  useQkL2norm?: boolean;
  /**
   * Buffers to write the results into instead of new tensors (exact shape, dtype and device), e.g.
   * reused memory; `out.finalState` implies `outputFinalState`. They stay the caller's: disposing
   * the result leaves them alone.
   */
  out?: { output?: Tensor; finalState?: Tensor };
}

/** Options of {@link chunkDeltaRule} and {@link chunkGatedDeltaRule}. */
export interface ChunkDeltaRuleOptions extends DeltaRuleOptions {
  /** Tokens per chunk: 32, 64 (default) or 128. Any T works; the last chunk may be short. */
  chunkSize?: number;
  /**
   * Keep what the backward would recompute (the state before every chunk; see
   * {@link DeltaSavedStates}) and return it as `saved`, for the backward (default false). Training
   * loops that run the backward right after the forward save a sequential pass with it, for
   * `H * chunks * (K V + 64 V + 64 * 64 + 64 K)` elements of memory.
   */
  saveForBackward?: boolean;
}

/** Options of the `...Backward` functions: the forward's options, and what only a backward takes. */
export interface DeltaRuleBackwardOptions
  extends Omit<ChunkDeltaRuleOptions, "out" | "outputFinalState" | "saveForBackward"> {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /**
   * The `saved` of the forward with the same inputs and options (`saveForBackward`): read, not
   * disposed. Without it the backward recomputes the per-chunk states.
   */
  saved?: DeltaSavedStates;
  /**
   * Buffers to write the gradients into instead of new tensors (exact shape, dtype and device; dg
   * and dbeta float32). They stay the caller's: disposing the gradients leaves them alone.
   */
  out?: DeltaBackwardBuffers;
}

/** Options of a forward result's own {@link DeltaRuleResult.backward}. */
export interface DeltaRuleResultBackwardOptions {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /** Buffers for the gradients, as in {@link DeltaRuleBackwardOptions.out}. */
  out?: DeltaBackwardBuffers;
}

/** What the backward functions return; `using` disposes every tensor the library allocated. */
export interface DeltaRuleGradients extends Disposable {
  /** `[B, T, HK, K]` (bshd) or `[B, HK, T, K]` (bhsd), dtype of q (summed over each group of value heads). */
  dq: Tensor;
  /** Shaped like q, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like beta, float32. */
  dbeta: Tensor;
  /** Shaped like g, float32; gated rule only. */
  dg?: Tensor;
  /** `[N, H, K, V]` float32, when `initialState` was given. */
  dInitialState?: Tensor;
}

/**
 * What the forward functions return; `using` disposes the tensors the library allocated and the
 * saved states.
 */
export interface DeltaRuleResult extends Disposable {
  /** Shaped like v, dtype of q. With `cuSeqlens`, rows past the last sequence are unspecified. */
  output: Tensor;
  /** `[N, H, K, V]` float32 when `outputFinalState` was set, else undefined. */
  finalState?: Tensor;
  /** With `saveForBackward`: the handle for the backward (see {@link DeltaSavedStates}). */
  saved?: DeltaSavedStates;
  /**
   * Gradients of this forward from the output's gradient (shaped like `output`, dtype of q), with
   * the forward's inputs and options and its saved states: autograd's `backward`. The result refers
   * to the inputs (it does not copy them): one disposed since the forward is refused, naming it.
   */
  backward(dOutput: Tensor, options?: DeltaRuleResultBackwardOptions): DeltaRuleGradients;
}

type Kind = { gated: boolean; recurrent: boolean };

// The options each function takes; the tensors, chunk size and layout are checked where they are used.
const COMMON: OptionSpec = {
  layout: "any",
  scale: "any",
  initialState: "any",
  cuSeqlens: "any",
  useQkL2norm: "boolean",
  chunkSize: "any", // the recurrent functions refuse it with a message of their own
  out: "object",
};
const FORWARD: OptionSpec = { ...COMMON, outputFinalState: "boolean", saveForBackward: "boolean" };
const BACKWARD: OptionSpec = { ...COMMON, dFinalState: "any", saved: "any" };
const RESULT_BACKWARD: OptionSpec = { dFinalState: "any", out: "object" };

function settings(
  op: string,
  kind: Kind,
  options: unknown,
  spec: OptionSpec,
): DeltaSettings & { outputFinalState: boolean } {
  const o = checkOptions<ChunkDeltaRuleOptions>(op, options, spec);
  const layout = linearLayout(op, o.layout);
  if (kind.recurrent && "saveForBackward" in o && o.saveForBackward !== undefined) {
    throw invalidArgument(op, "saveForBackward: the recurrent form saves nothing; use the chunk* function");
  }
  if (kind.recurrent && "chunkSize" in o && o.chunkSize !== undefined) {
    throw invalidArgument(op, "chunkSize: the recurrent form has no chunks; use the chunk* function");
  }
  return {
    layout,
    gated: kind.gated,
    recurrent: kind.recurrent,
    scale: o.scale ?? undefined,
    chunkSize: o.chunkSize ?? 64,
    l2norm: o.useQkL2norm ?? false,
    initialState: o.initialState ?? undefined,
    cuSeqlens: o.cuSeqlens ?? undefined,
    outputFinalState: o.outputFinalState ?? false,
  };
}

function gradients(r: BackwardOutputs, out: unknown): DeltaRuleGradients {
  return disposable(r, callerBuffers(out));
}

function forward(op: string, kind: Kind, inputs: DeltaInputs, options: unknown): DeltaRuleResult {
  const s = settings(op, kind, options, FORWARD);
  const o = options as ChunkDeltaRuleOptions;
  const r = deltaForward(
    op,
    inputs,
    s,
    { finalState: s.outputFinalState, saved: o.saveForBackward ?? false },
    o.out,
  );
  // The backward reruns with these: the caller's tensors (referenced) and a copy of host offsets.
  const held = { ...inputs };
  const heldSettings = { ...s, cuSeqlens: keepOffsets(s.cuSeqlens) };
  let disposed = false;
  const result = disposable(
    { output: r.output, finalState: r.finalState },
    callerBuffers(o.out),
    () => {
      disposed = true;
      r.saved?.dispose();
    },
  );
  return Object.assign(result, {
    saved: r.saved,
    backward(dOutput: Tensor, options?: DeltaRuleResultBackwardOptions): DeltaRuleGradients {
      const bop = `${op}.backward`;
      const b = checkOptions<DeltaRuleResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      if (disposed) throw invalidArgument(bop, "the result was disposed (and the states it saved with it)");
      expectForwardTensorsLive(bop, { ...held, initialState: s.initialState, cuSeqlens: s.cuSeqlens });
      const grads = deltaBackward(bop, held, heldSettings, dOutput, {
        dFinalState: b.dFinalState ?? undefined,
        out: b.out,
        saved: r.saved,
      });
      return gradients(grads, b.out);
    },
  });
}

function backward(
  op: string,
  kind: Kind,
  dOutput: Tensor,
  inputs: DeltaInputs,
  options: unknown,
): DeltaRuleGradients {
  const s = settings(op, kind, options, BACKWARD);
  const o = options as DeltaRuleBackwardOptions;
  const r = deltaBackward(op, inputs, s, dOutput, {
    dFinalState: o.dFinalState ?? undefined,
    out: o.out,
    saved: o.saved ?? undefined,
  });
  return gradients(r, o.out);
}

/**
 * Gated DeltaNet's chunked forward advancing a state pool in place (`pagedChunkGdn` without a replay
 * state): `options` are the training op's (`"bshd"`). Returns the output.
 */
export function chunkGatedDeltaRuleOnPool(
  op: string,
  inputs: DeltaInputs,
  pool: PoolStates,
  options: Pick<ChunkDeltaRuleOptions, "cuSeqlens" | "scale" | "useQkL2norm">,
): Tensor {
  return deltaForwardOnPool(op, inputs, settings(op, GATED, { layout: "bshd", ...options }, FORWARD), pool);
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
 * using r = chunkDeltaRule(q, k, v, beta, { layout: "bshd", useQkL2norm: true, outputFinalState: true });
 * console.log(r.output.shape, r.finalState?.shape); // [1, 100, 2, 64] [1, 2, 64, 64]
 * using dO = Tensor.randn([1, 100, 2, 64]);
 * using grads = r.backward(dO); // the forward's inputs and options
 * ```
 */
export function chunkDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: ChunkDeltaRuleOptions,
): DeltaRuleResult {
  return forward("chunkDeltaRule", DELTA, { q, k, v, beta }, options);
}

/**
 * The delta rule, token by token (the same result as {@link chunkDeltaRule} up to rounding).
 *
 * @example
 * ```ts
 * import { recurrentDeltaRule, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 4, 16, 32]); // "bhsd": [batch, heads, seq, dim]
 * using k = Tensor.randn([2, 4, 16, 32]);
 * using v = Tensor.randn([2, 4, 16, 32]);
 * using beta = Tensor.rand([2, 4, 16]);
 * using r = recurrentDeltaRule(q, k, v, beta, { layout: "bhsd", useQkL2norm: true });
 * console.log(r.output.shape); // [2, 4, 16, 32]
 * ```
 */
export function recurrentDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions,
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
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", useQkL2norm: true });
 * using dO = Tensor.randn([1, 128, 4, 64], { dtype: "bfloat16" });
 * using grads = r.backward(dO);
 * console.log(grads.dg?.dtype); // "float32"
 * ```
 */
export function chunkGatedDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: ChunkDeltaRuleOptions,
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
 * using r = recurrentGatedDeltaRule(q, k, v, g, beta, {
 *   layout: "bshd",
 *   useQkL2norm: true,
 *   outputFinalState: true,
 * });
 * // On a state pool [numSlots, H, V, K]: the sequence's slot 3 is its initial state and receives its
 * // final state in place (inference only).
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([3], { dtype: "int32" });
 * using p = recurrentGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", initialState: pool, stateIndices: slots });
 * console.log(p.output.shape); // [1, 8, 2, 16]
 * ```
 */
export function recurrentGatedDeltaRule(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions & RecurrentPoolOptions,
): DeltaRuleResult {
  return recurrentGated("recurrentGatedDeltaRule", q, k, v, g, beta, options);
}

/**
 * {@link recurrentGatedDeltaRule} under the seeds' name (`recurrent_gdn`): the same function, options
 * and state pool form (`stateIndices`, `hasInitialState`).
 *
 * @example
 * ```ts
 * import { recurrentGdn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 6, 2, 16]);
 * using k = Tensor.randn([2, 6, 2, 16]);
 * using v = Tensor.randn([2, 6, 2, 16]);
 * using g = Tensor.rand([2, 6, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([2, 6, 2]);
 * // Two sequences advancing slots 1 and 3 of a pool [numSlots, H, V, K]; slot 3 starts from zero.
 * using pool = Tensor.zeros([4, 2, 16, 16]);
 * using slots = Tensor.from([1, 3], { dtype: "int32" });
 * using resume = Tensor.from([1, 0], { dtype: "bool" });
 * using r = recurrentGdn(q, k, v, g, beta, {
 *   layout: "bshd",
 *   initialState: pool,
 *   stateIndices: slots,
 *   hasInitialState: resume,
 *   useQkL2norm: true,
 * });
 * console.log(r.output.shape); // [2, 6, 2, 16]
 * ```
 */
export function recurrentGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions & RecurrentPoolOptions,
): DeltaRuleResult {
  return recurrentGated("recurrentGdn", q, k, v, g, beta, options);
}

/**
 * {@link chunkGatedDeltaRule} under the seeds' name (`chunk_gdn`): the same function and options.
 *
 * @example
 * ```ts
 * import { chunkGdn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 100, 2, 64], { dtype: "bfloat16" });
 * using k = Tensor.randn([1, 100, 2, 64], { dtype: "bfloat16" });
 * using v = Tensor.randn([1, 100, 2, 64], { dtype: "bfloat16" });
 * using g = Tensor.rand([1, 100, 2], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 100, 2]);
 * using r = chunkGdn(q, k, v, g, beta, { layout: "bshd", useQkL2norm: true, outputFinalState: true });
 * console.log(r.finalState?.shape); // [1, 2, 64, 64]
 * ```
 */
export function chunkGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: ChunkDeltaRuleOptions,
): DeltaRuleResult {
  return forward("chunkGdn", GATED, { q, k, v, g, beta }, options);
}

function recurrentGated(
  op: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: DeltaRuleOptions & RecurrentPoolOptions,
): DeltaRuleResult {
  const { pool, rest } = splitPoolOptions(op, options);
  if (pool) {
    // The delta rule keeps states as [N, H, K, V]: the pool copies transpose on the way in and out.
    return recurrentOnPool(
      op,
      q,
      v,
      rest,
      pool,
      true,
      (o) => forward(op, GATED_RECURRENT, { q, k, v, g, beta }, o),
    );
  }
  return forward(op, GATED_RECURRENT, { q, k, v, g, beta }, rest);
}

/**
 * Gradients of {@link chunkDeltaRule} from `dOutput` (first, shaped like the output) and an optional
 * `dFinalState`, with the forward's inputs and options. With `cuSeqlens`, the gradients of tokens
 * past the last sequence are zero.
 *
 * @example
 * ```ts
 * import { chunkDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 40, 2, 32]);
 * using k = Tensor.randn([1, 40, 2, 32]);
 * using v = Tensor.randn([1, 40, 2, 32]);
 * using beta = Tensor.rand([1, 40, 2]);
 * using dO = Tensor.randn([1, 40, 2, 32]);
 * using grads = chunkDeltaRuleBackward(dO, q, k, v, beta, { layout: "bshd", useQkL2norm: true });
 * console.log(grads.dq.shape, grads.dbeta.shape); // [1, 40, 2, 32] [1, 40, 2]
 * ```
 */
export function chunkDeltaRuleBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: DeltaRuleBackwardOptions,
): DeltaRuleGradients {
  return backward("chunkDeltaRuleBackward", DELTA, dOutput, { q, k, v, beta }, options);
}

/**
 * Gradients of {@link recurrentDeltaRule}, output gradient first.
 *
 * @example
 * ```ts
 * import { recurrentDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 10, 1, 16]);
 * using k = Tensor.randn([1, 10, 1, 16]);
 * using v = Tensor.randn([1, 10, 1, 16]);
 * using beta = Tensor.rand([1, 10, 1]);
 * using dO = Tensor.randn([1, 10, 1, 16]);
 * using grads = recurrentDeltaRuleBackward(dO, q, k, v, beta, { layout: "bshd", useQkL2norm: true });
 * ```
 */
export function recurrentDeltaRuleBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  beta: Tensor,
  options: Omit<DeltaRuleBackwardOptions, "chunkSize">,
): DeltaRuleGradients {
  return backward("recurrentDeltaRuleBackward", DELTA_RECURRENT, dOutput, { q, k, v, beta }, options);
}

/**
 * Gradients of {@link chunkGatedDeltaRule}, output gradient first, including `dg` (float32).
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
 * using grads = chunkGatedDeltaRuleBackward(dO, q, k, v, g, beta, { layout: "bshd", useQkL2norm: true });
 * console.log(grads.dg?.shape); // [1, 40, 2]
 * ```
 */
export function chunkGatedDeltaRuleBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: DeltaRuleBackwardOptions,
): DeltaRuleGradients {
  return backward("chunkGatedDeltaRuleBackward", GATED, dOutput, { q, k, v, g, beta }, options);
}

/**
 * Gradients of {@link recurrentGatedDeltaRule}, output gradient first, including `dg` (float32).
 *
 * @example
 * ```ts
 * import { recurrentGatedDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 1, 10, 16]); // "bhsd"
 * using k = Tensor.randn([1, 1, 10, 16]);
 * using v = Tensor.randn([1, 1, 10, 16]);
 * using g = Tensor.rand([1, 1, 10], { low: -0.5, high: 0 });
 * using beta = Tensor.rand([1, 1, 10]);
 * using dO = Tensor.randn([1, 1, 10, 16]);
 * using grads = recurrentGatedDeltaRuleBackward(dO, q, k, v, g, beta, { layout: "bhsd", useQkL2norm: true });
 * ```
 */
export function recurrentGatedDeltaRuleBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: Omit<DeltaRuleBackwardOptions, "chunkSize">,
): DeltaRuleGradients {
  return backward("recurrentGatedDeltaRuleBackward", GATED_RECURRENT, dOutput, { q, k, v, g, beta }, options);
}
