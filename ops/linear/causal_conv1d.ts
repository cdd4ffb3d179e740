/**
 * Causal depthwise convolution: the short convolution that Mamba, GDN and KDA blocks run over their
 * q, k, v projections, with silu fused in the epilogue. Each channel has its own W taps; for token p
 * of a sequence, with e its inputs extended on the left by its history (`e[m] = history[m]` for
 * m < W - 1, `e[W - 1 + p] = x[p]`):
 *
 *   z[p, c] = sum_{i < W} weight[c, i] * e[p + i, c],   output = z or silu(z)
 *
 * so `weight[c, W - 1]` multiplies the current token and `weight[c, 0]` the oldest (PyTorch's
 * `conv1d` over a left-padded input, flash-linear-attention's and causal-conv1d's order).
 *
 * x `[B, T, C]` (token-major, float16 / bfloat16 / float32) and weight `[C, W]` (float32 or x's
 * dtype, 1 <= W <= 8). Each batch row is a sequence, or with `cuSeqlens` (B = 1) the packed
 * sequences of the one row: repeated offsets are empty sequences, and the last offset may be below
 * T (fixed capacity). Histories are `[N, W - 1, C]` in x's dtype, oldest first. Sums run in float32
 * and each result is rounded once; the backward recomputes the activation.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import {
  expectDType,
  expectForwardTensorsLive,
  expectSameDevice,
  expectShape,
  expectTensor,
} from "../checks.ts";
import type { DType } from "../dtype.ts";
import { type CuSeqlens, type Int32Seqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { callerBuffers, disposable, keepOffsets } from "./results.ts";

/** The activation fused into the convolution: `"silu"` (`"swish"` is the same function). */
export type CausalConv1dActivation = "silu" | "swish";

/** Options of {@link causalConv1d}. */
export interface CausalConv1dOptions {
  /** Applied to the convolution (and recomputed by the backward); none when absent. */
  activation?: CausalConv1dActivation;
  /**
   * Offsets of packed sequences, `[N + 1]` (x must have batch size 1): host numbers or an int32 /
   * int64 tensor on x's device. Repeated offsets are empty sequences; the last offset may be below
   * T, and the output rows past it are then left as they are (unspecified in a new tensor).
   */
  cuSeqlens?: CuSeqlens;
  /** History before each sequence, `[N, W - 1, C]` in x's dtype, oldest first (default zeros). */
  initialState?: Tensor;
  /** Also return each sequence's final history (default false). */
  returnFinalState?: boolean;
  /**
   * Buffers to write the results into instead of new tensors (exact shape, x's dtype and device);
   * `out.finalState` implies `returnFinalState`. They stay the caller's: disposing the result leaves
   * them alone.
   */
  out?: { output?: Tensor; finalState?: Tensor };
}

/** Buffers for the gradients; they stay the caller's. */
export interface CausalConv1dGradientBuffers {
  /** For dx: x's shape, dtype and device. */
  dx?: Tensor;
  /** For dweight: `[C, W]`, float32 or weight's dtype. */
  dweight?: Tensor;
  /** For dInitialState: `[N, W - 1, C]`, x's dtype (only with `initialState`). */
  dInitialState?: Tensor;
}

/** Options of {@link causalConv1dBackward}: the forward's, and what only a backward takes. */
export interface CausalConv1dBackwardOptions {
  /** As in the forward. */
  activation?: CausalConv1dActivation;
  /** As in the forward. */
  cuSeqlens?: CuSeqlens;
  /** As in the forward; its gradient is returned as `dInitialState`. */
  initialState?: Tensor;
  /** Gradient of the final history, `[N, W - 1, C]` in x's dtype (default zero). */
  dFinalState?: Tensor;
  /** Buffers to write the gradients into instead of new tensors. */
  out?: CausalConv1dGradientBuffers;
}

/** Options of a forward result's own {@link CausalConv1dResult.backward}. */
export interface CausalConv1dResultBackwardOptions {
  /** Gradient of the final history (only when the forward returned one; default zero). */
  dFinalState?: Tensor;
  /** Buffers to write the gradients into instead of new tensors. */
  out?: CausalConv1dGradientBuffers;
}

/** The gradients; `using` disposes the tensors the library allocated. */
export interface CausalConv1dGradients extends Disposable {
  /** x's shape and dtype; rows past the last offset (packed input) are zero. */
  dx: Tensor;
  /** `[C, W]` in weight's dtype (or the `out.dweight` buffer's), summed in float32 in a fixed order. */
  dweight: Tensor;
  /** `[N, W - 1, C]` in x's dtype, when `initialState` was given. */
  dInitialState?: Tensor;
}

/** What {@link causalConv1d} returns; `using` disposes the tensors the library allocated. */
export interface CausalConv1dResult extends Disposable {
  /** x's shape and dtype. */
  output: Tensor;
  /** `[N, W - 1, C]` in x's dtype: each sequence's last W - 1 inputs, when asked. */
  finalState?: Tensor;
  /**
   * Gradients of this forward from the output's gradient (x's shape and dtype), with the forward's
   * inputs and options. It reads the inputs (it does not copy them): one disposed since the forward
   * is refused, naming it.
   */
  backward(dOutput: Tensor, options?: CausalConv1dResultBackwardOptions): CausalConv1dGradients;
}

/** The widest kernel served. */
const MAX_WIDTH = 8;
const X_DTYPES: readonly DType[] = ["float16", "bfloat16", "float32"];
/** The activation names the convolutions take (internal: the paged forms share them). */
export const ACTIVATIONS: readonly CausalConv1dActivation[] = ["silu", "swish"];
const FORWARD_OPTIONS: OptionSpec = {
  activation: ACTIVATIONS,
  cuSeqlens: "any",
  initialState: "any",
  returnFinalState: "boolean",
  out: "object",
};
const BACKWARD_OPTIONS: OptionSpec = {
  activation: ACTIVATIONS,
  cuSeqlens: "any",
  initialState: "any",
  dFinalState: "any",
  out: "object",
};
const RESULT_BACKWARD: OptionSpec = { dFinalState: "any", out: "object" };

/** What a call reads, checked. */
interface Call {
  x: Tensor;
  weight: Tensor;
  /** `AK_CONV_NONE` (0) or `AK_CONV_SILU` (1). */
  activation: number;
  cuSeqlens?: CuSeqlens;
  initialState?: Tensor;
}

/** A checked call with its offsets on x's device (dispose to release what was uploaded). */
interface Prepared extends Disposable {
  call: Call;
  /** Sequences. */
  N: number;
  /** The history's shape `[N, W - 1, C]`. */
  history: number[];
  offsets?: Int32Seqlens;
}

function prepare(
  op: string,
  x: unknown,
  weight: unknown,
  o: { activation?: CausalConv1dActivation; cuSeqlens?: CuSeqlens; initialState?: Tensor },
): Prepared {
  const tx = expectTensor(op, "x", x);
  expectDType(op, "x", tx, X_DTYPES);
  const sizes = expectShape(op, "x", tx, ["B", "T", "C"]);
  const tw = expectTensor(op, "weight", weight);
  expectSameDevice(op, "weight", tw, tx, "x");
  if (tw.dtype !== "float32" && tw.dtype !== tx.dtype) {
    const allowed = tx.dtype === "float32" ? "float32" : `float32 or ${tx.dtype} (x's)`;
    throw invalidArgument(op, `weight: expected dtype ${allowed}, got ${tw.dtype}`);
  }
  const { W } = expectShape(op, "weight", tw, ["C", "W"], sizes);
  if (W < 1 || W > MAX_WIDTH) {
    throw invalidArgument(op, `weight: the width W (its second dim) must be in 1..${MAX_WIDTH}, got ${W}`);
  }
  const cuSeqlens = o.cuSeqlens ?? undefined;
  let N = sizes.B;
  let offsets: Int32Seqlens | undefined;
  if (cuSeqlens !== undefined) {
    if (sizes.B !== 1) {
      throw invalidArgument(op, `x: packed input (cuSeqlens given) needs batch size 1, got ${sizes.B}`);
    }
    offsets = int32Seqlens(op, "cuSeqlens", cuSeqlens, tx.device);
    N = offsets.tensor.shape[0] - 1;
    if (N < 1) {
      offsets[Symbol.dispose]();
      throw invalidArgument(op, "cuSeqlens: expected at least 2 offsets ([N + 1] for N >= 1 sequences)");
    }
  }
  const history = [N, W - 1, sizes.C];
  const initialState = o.initialState ?? undefined;
  try {
    if (initialState !== undefined) expectHistory(op, "initialState", initialState, tx, history);
  } catch (e) {
    offsets?.[Symbol.dispose]();
    throw e;
  }
  return {
    call: { x: tx, weight: tw, activation: o.activation ? 1 : 0, cuSeqlens, initialState },
    N,
    history,
    offsets,
    [Symbol.dispose]() {
      offsets?.[Symbol.dispose]();
    },
  };
}

/** A history `[N, W - 1, C]` in x's dtype on x's device. */
function expectHistory(op: string, name: string, t: unknown, x: Tensor, shape: number[]): Tensor {
  const h = expectTensor(op, name, t);
  if (h.dtype !== x.dtype) {
    throw invalidArgument(op, `${name}: expected dtype ${x.dtype} (x's), got ${h.dtype}`);
  }
  expectSameDevice(op, name, h, x, "x");
  expectShape(op, name, h, shape);
  return h;
}

/** The caller's buffer `out.<name>` (checked), or a new tensor. */
function target(
  op: string,
  out: Record<string, unknown> | undefined,
  name: string,
  shape: readonly number[],
  dtypes: readonly DType[],
  x: Tensor,
  inputs: readonly (Tensor | undefined)[],
): { t: Tensor; made: boolean } {
  const given = out?.[name];
  if (given === undefined || given === null) {
    return { t: Tensor.empty(shape, { dtype: dtypes[0], device: x.device }), made: true };
  }
  const t = expectTensor(op, `out.${name}`, given);
  if (!dtypes.includes(t.dtype)) {
    throw invalidArgument(op, `out.${name}: expected dtype ${dtypes.join(" or ")}, got ${t.dtype}`);
  }
  expectSameDevice(op, `out.${name}`, t, x, "x");
  expectShape(op, `out.${name}`, t, shape);
  if (inputs.includes(t)) throw invalidArgument(op, `out.${name}: must not be one of the inputs`);
  return { t, made: false };
}

const descriptorOf = (t: Tensor | undefined, op: string) => t?.descriptor(op) ?? null;

function forward(
  op: string,
  p: Prepared,
  returnFinalState: boolean,
  out: { output?: Tensor; finalState?: Tensor } | undefined,
): { output: Tensor; finalState?: Tensor } {
  const { x, weight, initialState } = p.call;
  const buffers = checkOptions<Record<string, unknown>>(op, out, { output: "any", finalState: "any" }, "out");
  const inputs = [x, weight, initialState];
  const made: Tensor[] = [];
  try {
    const output = target(op, buffers, "output", x.shape, [x.dtype], x, inputs);
    if (output.made) made.push(output.t);
    let finalState: Tensor | undefined;
    if (returnFinalState || buffers.finalState != null) {
      const f = target(op, buffers, "finalState", p.history, [x.dtype], x, [...inputs, output.t]);
      if (f.made) made.push(f.t);
      finalState = f.t;
    }
    unwrap(
      native().ak_causal_conv1d_fwd(
        x.descriptor(op),
        weight.descriptor(op),
        descriptorOf(initialState, op),
        descriptorOf(p.offsets?.tensor, op),
        p.call.activation,
        output.t.descriptor(op),
        descriptorOf(finalState, op),
      ),
      op,
    );
    return { output: output.t, finalState };
  } catch (e) {
    for (const t of made) t.dispose();
    throw e;
  }
}

function backward(
  op: string,
  p: Prepared,
  dOutput: unknown,
  dFinalState: unknown,
  out: CausalConv1dGradientBuffers | undefined,
): CausalConv1dGradients {
  const { x, weight, initialState } = p.call;
  const g = expectTensor(op, "dOutput", dOutput);
  if (g.dtype !== x.dtype) {
    throw invalidArgument(op, `dOutput: expected dtype ${x.dtype} (x's), got ${g.dtype}`);
  }
  expectSameDevice(op, "dOutput", g, x, "x");
  expectShape(op, "dOutput", g, x.shape);
  const dFinal = dFinalState === undefined || dFinalState === null
    ? undefined
    : expectHistory(op, "dFinalState", dFinalState, x, p.history);
  const buffers = checkOptions<Record<string, unknown>>(
    op,
    out,
    { dx: "any", dweight: "any", dInitialState: "any" },
    "out",
  );
  if (buffers.dInitialState != null && initialState === undefined) {
    throw invalidArgument(op, "out.dInitialState: no initialState was given, so there is no gradient for it");
  }
  const inputs = [x, weight, initialState, g, dFinal];
  const made: Tensor[] = [];
  const keep = (r: { t: Tensor; made: boolean }) => {
    if (r.made) made.push(r.t);
    return r.t;
  };
  try {
    const dx = keep(target(op, buffers, "dx", x.shape, [x.dtype], x, inputs));
    const dweightDTypes: DType[] = weight.dtype === "float32" ? ["float32"] : [weight.dtype, "float32"];
    const dweight = keep(target(op, buffers, "dweight", weight.shape, dweightDTypes, x, [...inputs, dx]));
    const dInitialState = initialState === undefined
      ? undefined
      : keep(target(op, buffers, "dInitialState", p.history, [x.dtype], x, [...inputs, dx, dweight]));
    unwrap(
      native().ak_causal_conv1d_bwd(
        x.descriptor(op),
        weight.descriptor(op),
        descriptorOf(initialState, op),
        descriptorOf(p.offsets?.tensor, op),
        g.descriptor(op),
        descriptorOf(dFinal, op),
        p.call.activation,
        dx.descriptor(op),
        dweight.descriptor(op),
        descriptorOf(dInitialState, op),
      ),
      op,
    );
    return disposable({ dx, dweight, dInitialState }, callerBuffers(out));
  } catch (e) {
    for (const t of made) t.dispose();
    throw e;
  }
}

/**
 * Causal depthwise convolution, forward: the output (x's shape and dtype), the final histories when
 * asked, and a `backward` for the gradients.
 *
 * @example
 * ```ts
 * import { causalConv1d, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([2, 16, 64]);
 * using weight = Tensor.randn([64, 4], { std: 0.5 });
 * using r = causalConv1d(x, weight, { activation: "silu", returnFinalState: true });
 * console.log(r.output.shape, r.finalState?.shape); // [ 2, 16, 64 ] [ 2, 3, 64 ]
 * using dOutput = Tensor.randn([2, 16, 64]);
 * using grads = r.backward(dOutput);
 * console.log(grads.dweight.shape); // [ 64, 4 ]
 * ```
 */
export function causalConv1d(x: Tensor, weight: Tensor, options?: CausalConv1dOptions): CausalConv1dResult {
  const op = "causalConv1d";
  const o = checkOptions<CausalConv1dOptions>(op, options, FORWARD_OPTIONS);
  using p = prepare(op, x, weight, o);
  const returnFinalState = o.returnFinalState ?? false;
  const r = forward(op, p, returnFinalState, o.out ?? undefined);
  const call: Call = { ...p.call, cuSeqlens: keepOffsets(p.call.cuSeqlens) };
  const hasFinal = r.finalState !== undefined;
  return {
    ...disposable(r, callerBuffers(o.out)),
    backward(dOutput: Tensor, options?: CausalConv1dResultBackwardOptions): CausalConv1dGradients {
      const bop = "CausalConv1dResult.backward";
      const b = checkOptions<CausalConv1dResultBackwardOptions>(bop, options, RESULT_BACKWARD);
      if (!hasFinal && b.dFinalState != null) {
        throw invalidArgument(bop, "dFinalState: the forward returned no final state (returnFinalState)");
      }
      expectForwardTensorsLive(bop, {
        x: call.x,
        weight: call.weight,
        initialState: call.initialState,
        cuSeqlens: call.cuSeqlens,
      });
      const activation: CausalConv1dActivation | undefined = call.activation ? "silu" : undefined;
      using q = prepare(bop, call.x, call.weight, { ...call, activation });
      return backward(bop, q, dOutput, b.dFinalState, b.out ?? undefined);
    },
  };
}

/**
 * Gradients of {@link causalConv1d} for the loss `sum(dOutput * output) + sum(dFinalState *
 * finalState)`: dx, dweight (weight's dtype, or float32 into a float32 `out.dweight`) and, with
 * `initialState`, dInitialState. Takes the forward's inputs and options.
 *
 * @example
 * ```ts
 * import { causalConv1dBackward, Tensor } from "@attnkit/attnkit";
 * // Two packed sequences of 5 and 7 tokens, the second one resuming from a history.
 * using x = Tensor.randn([1, 12, 8]);
 * using weight = Tensor.randn([8, 3]);
 * using h0 = Tensor.randn([2, 2, 8]);
 * using dOutput = Tensor.randn([1, 12, 8]);
 * using g = causalConv1dBackward(dOutput, x, weight, { cuSeqlens: [0, 5, 12], initialState: h0 });
 * console.log(g.dx.shape, g.dInitialState?.shape); // [ 1, 12, 8 ] [ 2, 2, 8 ]
 * ```
 */
export function causalConv1dBackward(
  dOutput: Tensor,
  x: Tensor,
  weight: Tensor,
  options?: CausalConv1dBackwardOptions,
): CausalConv1dGradients {
  const op = "causalConv1dBackward";
  const o = checkOptions<CausalConv1dBackwardOptions>(op, options, BACKWARD_OPTIONS);
  using p = prepare(op, x, weight, o);
  return backward(op, p, dOutput, o.dFinalState, o.out ?? undefined);
}
