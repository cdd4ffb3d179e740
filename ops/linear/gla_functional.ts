/**
 * What the functions of the gated linear family share: their options, results and gradients, the
 * parsing of options, and the result whose `backward` reruns nothing and repeats no option. Each
 * family (GLA, simple GLA, retention, linear attention) supplies its inputs and, where it computes
 * something outside the kernel (linear attention's normaliser), its own forward and backward.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectForwardTensorsLive } from "../checks.ts";
import type { CuSeqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import {
  glaBackward,
  type GlaBackwardBuffers,
  type GlaBackwardExtras,
  type GlaBackwardOutputs,
  glaForward,
  type GlaForwardOutputs,
  type GlaForwardWants,
  type GlaInputs,
  type GlaSettings,
} from "./gla_native.ts";
import { type LinearLayout, linearLayout } from "./layouts.ts";
import { callerBuffers, disposable, keepOffsets } from "./results.ts";
import { checkAgainstForwards, type DeltaCallOptions, rememberForward } from "./consistency.ts";

/**
 * What a backward must share with its forward, in the delta rule's terms (`consistency.ts`): the
 * inputs are identified by q, k, v and the gate, the options by layout, scale, chunked or not, and
 * whether an initial state and offsets were given.
 */
function identity(inputs: GlaInputs, s: GlaSettings) {
  const tensors = { q: inputs.q, k: inputs.k, v: inputs.v, g: inputs.gk ?? inputs.g, beta: inputs.v };
  const K = inputs.q?.shape?.[3] ?? 1;
  const options: DeltaCallOptions = {
    layout: s.layout,
    useQkL2norm: false,
    scale: typeof s.scale === "number" ? s.scale : K ** -0.5, // checked where the call runs
    chunkSize: s.recurrent ? undefined : 64,
    initialState: s.initialState !== undefined,
    cuSeqlens: s.cuSeqlens !== undefined,
  };
  return { tensors, options };
}

/** Options every forward function of the gated linear family takes. */
export interface GlaOptions {
  /**
   * Required: `"bshd"` (q `[B, T, HK, K]`, v `[B, T, H, V]`, per-token gates `[B, T, H(, K)]`) or
   * `"bhsd"` (q `[B, HK, T, K]`, v `[B, H, T, V]`, gates `[B, H, T(, K)]`); outputs come back in
   * the same layout.
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
  /**
   * Buffers to write the results into instead of new tensors (exact shape, dtype and device);
   * `out.finalState` implies `outputFinalState`. They stay the caller's: disposing the result
   * leaves them alone.
   */
  out?: { output?: Tensor; finalState?: Tensor };
}

/** Options of the `...Backward` functions: the forward's options, and what only a backward takes. */
export interface GlaBackwardOptions extends Omit<GlaOptions, "out" | "outputFinalState"> {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /**
   * Buffers to write the gradients into instead of new tensors (exact shape, dtype and device; the
   * gate gradients float32). They stay the caller's: disposing the gradients leaves them alone.
   */
  out?: GlaBackwardBuffers;
}

/** Options of a forward result's own {@link GlaResult.backward}. */
export interface GlaResultBackwardOptions {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /** Buffers for the gradients, as in {@link GlaBackwardOptions.out}. */
  out?: GlaBackwardBuffers;
}

/** What the backward functions return; `using` disposes every tensor the library allocated. */
export interface GlaGradients extends Disposable {
  /** Shaped like q, dtype of q (summed over each group of value heads). */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** GLA only: shaped like gk, float32. */
  dgk?: Tensor;
  /** Simple GLA with `g`: shaped like g, float32. */
  dg?: Tensor;
  /** Simple GLA with `gGamma`: `[H]` float32. */
  dgGamma?: Tensor;
  /** `[N, H, K, V]` float32, when `initialState` was given. */
  dInitialState?: Tensor;
}

/** What the forward functions return; `using` disposes the tensors the library allocated. */
export interface GlaResult extends Disposable {
  /** Shaped like v, dtype of q. With `cuSeqlens`, rows past the last sequence are unspecified. */
  output: Tensor;
  /** `[N, H, K, V]` float32 when `outputFinalState` was set, else undefined. */
  finalState?: Tensor;
  /**
   * Gradients of this forward from the output's gradient (shaped like `output`, dtype of q), with
   * the forward's inputs and options: autograd's `backward`. The result refers to the inputs (it
   * does not copy them): one disposed since the forward is refused, naming it.
   */
  backward(dOutput: Tensor, options?: GlaResultBackwardOptions): GlaGradients;
}

/** How a family computes: the kernel's forward and backward, or its own around them. */
export interface GlaEngine {
  /** The forward (into `out` where given). */
  forward(
    op: string,
    inputs: GlaInputs,
    s: GlaSettings,
    wants: GlaForwardWants,
    out?: { output?: Tensor; finalState?: Tensor },
  ): GlaForwardOutputs;
  /** The backward. */
  backward(
    op: string,
    inputs: GlaInputs,
    s: GlaSettings,
    dOutput: Tensor,
    extras: GlaBackwardExtras,
  ): GlaBackwardOutputs;
}

/** The kernel's own forward and backward. */
export const KERNEL: GlaEngine = { forward: glaForward, backward: glaBackward };

/** The options all forward functions take (each family adds its own). */
export const FORWARD_OPTIONS: OptionSpec = {
  layout: "any",
  scale: "any",
  initialState: "any",
  cuSeqlens: "any",
  outputFinalState: "boolean",
  out: "object",
};
/** The options all backward functions take (each family adds its own). */
export const BACKWARD_OPTIONS: OptionSpec = {
  layout: "any",
  scale: "any",
  initialState: "any",
  cuSeqlens: "any",
  dFinalState: "any",
  out: "object",
};
const RESULT_BACKWARD: OptionSpec = { dFinalState: "any", out: "object" };

/** Checks options against `spec` and returns them with the call's settings. */
export function parseOptions<T extends object>(
  op: string,
  options: unknown,
  spec: OptionSpec,
  recurrent: boolean,
): { o: T & Partial<GlaOptions> & Partial<GlaBackwardOptions>; s: GlaSettings } {
  const o = checkOptions<T & Partial<GlaOptions> & Partial<GlaBackwardOptions>>(op, options, spec);
  const layout = linearLayout(op, o.layout);
  return {
    o,
    s: {
      layout,
      scale: o.scale ?? undefined,
      recurrent,
      initialState: o.initialState ?? undefined,
      cuSeqlens: o.cuSeqlens ?? undefined,
    },
  };
}

/** Adds disposal to a backward's outputs (the caller's buffers in `out` stay theirs). */
export function gradients(r: GlaBackwardOutputs, out: unknown): GlaGradients {
  return disposable(r, callerBuffers(out));
}

/** What a family's forward function hands to {@link runForward}. */
export interface ForwardCall {
  /** The op name (for errors). */
  op: string;
  /** The tensors (gates already resolved). */
  inputs: GlaInputs;
  /** The settings. */
  s: GlaSettings;
  /** Return the final state. */
  outputFinalState: boolean;
  /** The caller's result buffers. */
  out?: { output?: Tensor; finalState?: Tensor };
  /** How to compute (default: the kernel). */
  engine?: GlaEngine;
  /** Extras every backward of this result passes (e.g. no dgGamma for retention). */
  backwardExtras?: Partial<GlaBackwardExtras>;
  /** Tensors the call made that the result keeps for its backward and frees with it. */
  held?: Tensor[];
  /** The inputs the caller passed (checked live before the backward). */
  callerTensors: Record<string, Tensor | undefined>;
}

/** Runs a forward and returns its result with its own `backward`. */
export function runForward(c: ForwardCall): GlaResult {
  const engine = c.engine ?? KERNEL;
  let r: GlaForwardOutputs;
  try {
    r = engine.forward(c.op, c.inputs, c.s, { finalState: c.outputFinalState }, c.out);
  } catch (e) {
    for (const t of c.held ?? []) t.dispose();
    throw e;
  }
  const seen = identity(c.inputs, c.s);
  rememberForward(seen.tensors, seen.options);
  // The backward reruns with these: the caller's tensors (referenced) and a copy of host offsets.
  const inputs = { ...c.inputs };
  const s = { ...c.s, cuSeqlens: keepOffsets(c.s.cuSeqlens) };
  let disposed = false;
  const result = disposable(
    { output: r.output, finalState: r.finalState },
    callerBuffers(c.out),
    () => {
      disposed = true;
      for (const t of c.held ?? []) t.dispose();
    },
  );
  return Object.assign(result, {
    backward(dOutput: Tensor, options?: GlaResultBackwardOptions): GlaGradients {
      const bop = `${c.op}.backward`;
      const b = checkOptions<GlaResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      if (disposed) throw invalidArgument(bop, "the result was disposed");
      expectForwardTensorsLive(bop, {
        ...c.callerTensors,
        initialState: c.s.initialState,
        cuSeqlens: c.s.cuSeqlens,
      });
      const grads = engine.backward(bop, inputs, s, dOutput, {
        ...c.backwardExtras,
        dFinalState: b.dFinalState ?? undefined,
        out: b.out,
      });
      return gradients(grads, b.out);
    },
  });
}

/** Runs a backward function's call and returns disposable gradients. */
export function runBackward(
  op: string,
  inputs: GlaInputs,
  s: GlaSettings,
  dOutput: Tensor,
  o: Partial<GlaBackwardOptions>,
  engine: GlaEngine = KERNEL,
  extras: Partial<GlaBackwardExtras> = {},
): GlaGradients {
  // A backward whose options contradict every forward seen on these inputs is refused, naming one.
  const seen = identity(inputs, s);
  checkAgainstForwards(op, seen.tensors, seen.options);
  const r = engine.backward(op, inputs, s, dOutput, {
    ...extras,
    dFinalState: o.dFinalState ?? undefined,
    out: o.out,
  });
  return gradients(r, o.out);
}
