/**
 * The delta-rule variants context parallelism runs, each as the two local calls the recipe needs: the
 * chunked forward over a packed span (from given entry states, returning exit states) and its backward
 * (from exit-state cotangents, returning entry-state cotangents). Gated DeltaNet's scalar gate and
 * KDA's per-channel gate both keep every token step affine in the `[K, V]` state, so the same
 * summaries, plans and exchange serve both.
 *
 * @module
 */
import type { OptionSpec } from "../../args.ts";
import type { Tensor } from "../../tensor.ts";
import { chunkGatedDeltaRule, chunkGatedDeltaRuleBackward } from "../delta_rule.ts";
import { chunkKda, chunkKdaBackward } from "../kda.ts";

/** One span's inputs, `bshd` with batch 1: q, k `[1, T, HK, K]`, v `[1, T, H, V]`, the gate and beta. */
export interface SpanInputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  /** Gated DeltaNet: g `[1, T, H]`; KDA: gate `[1, T, H, K]` (natural-log decays). */
  gate: Tensor;
  beta: Tensor;
}

/** The local calls' shared options: offsets, and the variant's own options. */
export interface LocalCall {
  /** Host offsets, or an int32 device tensor (read on the device only). */
  cuSeqlens: readonly number[] | Tensor;
  initialState?: Tensor;
  options: Record<string, unknown>;
}

/** The gradients a variant's backward returns, as the recipe hands them on. */
export type SpanGradients = Record<string, Tensor | undefined> & Disposable;

/** A delta-rule variant as context parallelism drives it. */
export interface SpanFamily {
  /** The recipe's name, for messages: `contextParallelGdn`. */
  readonly recipe: string;
  /** The prepare function's name: `chunkGdnPrepare`. */
  readonly prepare: string;
  /** The gate's name in messages and gradients (`g` / `gate`). */
  readonly gateName: string;
  /** The variant's own options (beyond the offsets and states). */
  readonly options: OptionSpec;
  /** The gradient names, the gate's included (`dg` / `dgate`). */
  readonly gradients: readonly string[];
  /** The chunked forward with exit states. */
  forward(
    x: SpanInputs,
    values: Tensor,
    call: LocalCall,
  ): { output: Tensor; finalState: Tensor } & Disposable;
  /** The chunked backward from exit-state cotangents; `dInitialState` set (an initial state is given). */
  backward(dOutput: Tensor, x: SpanInputs, call: LocalCall & { dFinalState: Tensor }): SpanGradients;
}

type Meta = Omit<SpanFamily, "forward" | "backward">;
// The chunked ops, typed loosely: their option objects are assembled here from checked parts.
type Call = (...args: never[]) => unknown;

/** A family from its chunked forward `(q, k, v, gate, beta, options)` and backward `(dO, ...same)`. */
function familyOf(meta: Meta, forward: Call, backward: Call): SpanFamily {
  const local = (call: LocalCall) => ({
    ...call.options,
    layout: "bshd",
    cuSeqlens: Array.isArray(call.cuSeqlens) ? [...call.cuSeqlens] : call.cuSeqlens,
    initialState: call.initialState,
  });
  const run = forward as (...args: unknown[]) => { output: Tensor; finalState?: Tensor } & Disposable;
  const grad = backward as (...args: unknown[]) => SpanGradients;
  return {
    ...meta,
    forward(x, values, call) {
      const r = run(x.q, x.k, values, x.gate, x.beta, { ...local(call), outputFinalState: true });
      return { output: r.output, finalState: r.finalState!, [Symbol.dispose]: () => r[Symbol.dispose]() };
    },
    backward(dOutput, x, call) {
      return grad(dOutput, x.q, x.k, x.v, x.gate, x.beta, { ...local(call), dFinalState: call.dFinalState });
    },
  };
}

/** Gated DeltaNet (`chunkGatedDeltaRule`): options `scale`, `useQkL2norm`. */
export const GDN_FAMILY: SpanFamily = familyOf(
  {
    recipe: "contextParallelGdn",
    prepare: "chunkGdnPrepare",
    gateName: "g",
    options: { scale: "number", useQkL2norm: "boolean" },
    gradients: ["dq", "dk", "dv", "dg", "dbeta"],
  },
  chunkGatedDeltaRule as Call,
  chunkGatedDeltaRuleBackward as Call,
);

/** KDA (`chunkKda`, states in the `"kv"` layout): options `scale`, `fastmath`. */
export const KDA_FAMILY: SpanFamily = familyOf(
  {
    recipe: "contextParallelKda",
    prepare: "chunkKdaPrepare",
    gateName: "gate",
    options: { scale: "number", fastmath: "boolean" },
    gradients: ["dq", "dk", "dv", "dgate", "dbeta"],
  },
  chunkKda as Call,
  chunkKdaBackward as Call,
);
