/**
 * The short causal convolution for serving, over a pool of histories `[numSlots, W - 1, C]` (each slot
 * the trailing W - 1 inputs of one sequence, oldest first: the layout {@link causalConv1d} takes as
 * `initialState` and returns as its final state). {@link pagedCausalConv1d} runs many tokens per sequence
 * (prefill, dense or packed), {@link causalConv1dDecode} one; both read each sequence's slot, convolve,
 * and write the slot's new history back in place. Inference only: there is no backward.
 *
 * `stateIndices[n]` names sequence n's slot; an index <= 0 is padding: zero output, no slot touched.
 * Positive indices must be unique and below `numSlots`. `hasInitialState[n] = false` starts from a zero
 * history without reading the slot (NaN there is fine) and overwrites it.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor, optionalTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { type CuSeqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { ACTIVATIONS, type CausalConv1dActivation } from "./causal_conv1d.ts";
import { perSequence } from "./pool_args.ts";

/** Options of {@link causalConv1dDecode}. */
export interface CausalConv1dDecodeOptions {
  /** `"silu"` (`"swish"` is the same function) fused on the output, or none (default). */
  activation?: CausalConv1dActivation;
  /** `[N]` int32: sequence n's slot (<= 0: padding). Default: sequence n uses slot n (slot 0 included). */
  stateIndices?: Tensor;
  /** `[N]` bool: false starts that sequence from a zero history. Default: every live slot resumes. */
  hasInitialState?: Tensor;
  /** The output buffer, x's shape and dtype on its device: written and returned as is. */
  out?: Tensor;
  /**
   * true (default): the indices are read to the host and an index past the pool or a live slot named
   * twice is refused before anything is written (on a CUDA device that read waits for the stream; inside
   * `captureGraph` the check runs on the device instead). false: no read, for a hot decode loop whose
   * indices are known good: an index past the pool is skipped on the device, a live slot named twice ends
   * unspecified. The CPU always checks.
   */
  checkIndices?: boolean;
  /**
   * `"fused"`: the fused CUDA kernel must serve the call, else an AttnkitError naming why (the CPU, W above
   * 8). `"reference"`: the exact general path (the CPU backend; for CUDA tensors on host copies, slow).
   * Default: the fused kernel where it serves, else the general path.
   */
  impl?: "fused" | "reference";
}

/** Options of {@link pagedCausalConv1d}. */
export interface PagedCausalConv1dOptions extends Omit<CausalConv1dDecodeOptions, "stateIndices"> {
  /** Packed sequences in a batch of one: `[N + 1]` offsets (the last may stay below T). */
  cuSeqlens?: CuSeqlens;
}

const FLOATS: readonly DType[] = ["float16", "bfloat16", "float32"];
const DECODE_SPEC: OptionSpec = {
  activation: ACTIVATIONS,
  stateIndices: "any",
  hasInitialState: "any",
  out: "any",
  checkIndices: "boolean",
  impl: ["fused", "reference"],
};
const PAGED_SPEC: OptionSpec = {
  activation: ACTIVATIONS,
  cuSeqlens: "any",
  hasInitialState: "any",
  out: "any",
  checkIndices: "boolean",
  impl: ["fused", "reference"],
};
const SILU = 1;
const TRUSTED_INDICES = 4;
const IMPL_FLAGS = { fused: 8, reference: 16 } as const;

interface ConvCall {
  x: Tensor;
  weight: Tensor;
  state: Tensor;
  indices?: Tensor;
  hasInitialState?: Tensor;
  cuSeqlens?: CuSeqlens;
  activation?: CausalConv1dActivation;
  out?: Tensor;
  checkIndices?: boolean;
  impl?: "fused" | "reference";
}

function run(op: string, c: ConvCall): Tensor {
  const x = expectTensor(op, "x", c.x);
  expectDType(op, "x", x, FLOATS);
  const sizes = expectShape(op, "x", x, x.ndim === 2 ? ["N", "C"] : ["B", "T", "C"]);
  const weight = expectTensor(op, "weight", c.weight);
  expectDType(op, "weight", weight, x.dtype === "float32" ? ["float32"] : ["float32", x.dtype]);
  expectSameDevice(op, "weight", weight, x, "x");
  expectShape(op, "weight", weight, ["C", "W"], sizes);
  if (sizes.W < 2) {
    throw invalidArgument(
      op,
      `weight: expected [C, W] with W >= 2 (a width-1 convolution has no history), got W=${sizes.W}`,
    );
  }
  const state = expectTensor(op, "stateCache", c.state);
  expectDType(op, "stateCache", state, [x.dtype]);
  expectSameDevice(op, "stateCache", state, x, "x");
  expectShape(op, "stateCache", state, [null, sizes.W - 1, "C"], sizes);
  if (c.indices) perSequence(op, "stateIndices", c.indices, "int32", x, "x");
  if (c.hasInitialState) perSequence(op, "options.hasInitialState", c.hasInitialState, "bool", x, "x");
  if (c.out) {
    expectDType(op, "options.out", c.out, [x.dtype]);
    expectSameDevice(op, "options.out", c.out, x, "x");
    expectShape(op, "options.out", c.out, x.ndim === 2 ? ["N", "C"] : ["B", "T", "C"], sizes);
  }
  using offsets = c.cuSeqlens === undefined
    ? undefined
    : int32Seqlens(op, "options.cuSeqlens", c.cuSeqlens, x.device);
  const output = c.out ?? Tensor.empty(x.shape, { dtype: x.dtype, device: x.device });
  try {
    unwrap(
      native().ak_paged_conv1d(
        x.descriptor(op),
        weight.descriptor(op),
        state.descriptor(op),
        c.indices?.descriptor(op) ?? null,
        c.hasInitialState?.descriptor(op) ?? null,
        offsets?.tensor.descriptor(op) ?? null,
        (c.activation ? SILU : 0) | (c.checkIndices === false ? TRUSTED_INDICES : 0) |
          (c.impl ? IMPL_FLAGS[c.impl] : 0),
        output.descriptor(op),
      ),
      op,
    );
  } catch (e) {
    if (!c.out) output.dispose();
    throw e;
  }
  return output;
}

/**
 * The causal convolution of many tokens per sequence over a paged history pool (prefill): each
 * sequence's slot supplies the history before its first token and receives the history after its last.
 * x `[B, T, C]` holds B sequences, or N packed ones with `cuSeqlens` (B = 1; rows past the last offset are
 * left as they are). An empty sequence keeps its slot's history (or clears it when fresh).
 *
 * @param x `[B, T, C]` float16 | bfloat16 | float32, channels contiguous (any row strides).
 * @param weight `[C, W]` (W >= 2), float32 or x's dtype; `weight[c, W - 1]` multiplies the current token.
 * @param stateCache `[numSlots, W - 1, C]` in x's dtype, advanced in place (slots may be apart).
 * @param stateIndices `[N]` int32: sequence n's slot; <= 0 is padding (zero rows, no slot touched).
 * @returns The output, x's shape and dtype (`options.out` itself when given).
 *
 * @example
 * ```ts
 * import { pagedCausalConv1d, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([1, 10, 8]);
 * using weight = Tensor.randn([8, 4]);
 * using pool = Tensor.zeros([4, 3, 8]);
 * using slots = Tensor.from([3, 1], { dtype: "int32" });
 * using y = pagedCausalConv1d(x, weight, pool, slots, { cuSeqlens: [0, 6, 10], activation: "silu" });
 * console.log(y.shape); // [1, 10, 8]
 * ```
 */
export function pagedCausalConv1d(
  x: Tensor,
  weight: Tensor,
  stateCache: Tensor,
  stateIndices: Tensor,
  options: PagedCausalConv1dOptions = {},
): Tensor {
  const op = "pagedCausalConv1d";
  const o = checkOptions<PagedCausalConv1dOptions>(op, options, PAGED_SPEC);
  const t = expectTensor(op, "x", x);
  if (t.ndim !== 3) {
    throw invalidArgument(
      op,
      `x: expected [B, T, C], got [${t.shape.join(", ")}] (one token each: causalConv1dDecode)`,
    );
  }
  return run(op, {
    x: t,
    weight,
    state: stateCache,
    indices: expectTensor(op, "stateIndices", stateIndices),
    hasInitialState: optionalTensor(op, "options.hasInitialState", o.hasInitialState),
    cuSeqlens: o.cuSeqlens ?? undefined,
    activation: o.activation ?? undefined,
    out: optionalTensor(op, "options.out", o.out),
    checkIndices: o.checkIndices ?? undefined,
    impl: o.impl ?? undefined,
  });
}

/**
 * One token per sequence through the causal convolution over a paged history pool: each slot's history
 * and the new token form the window, the output is written and the history shifts by one in place.
 *
 * @param x `[N, C]` float16 | bfloat16 | float32, channels contiguous (any row stride).
 * @param weight `[C, W]` (W >= 2), float32 or x's dtype.
 * @param state `[numSlots, W - 1, C]` in x's dtype, advanced in place (slots may be apart).
 * @returns The output `[N, C]` in x's dtype (`options.out` itself when given).
 *
 * @example
 * ```ts
 * import { causalConv1dDecode, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([2, 8]);
 * using weight = Tensor.randn([8, 4]);
 * using pool = Tensor.zeros([2, 3, 8]);
 * using y = causalConv1dDecode(x, weight, pool, { activation: "silu" }); // sequences 0, 1 in slots 0, 1
 * console.log(y.shape); // [2, 8]
 * ```
 */
export function causalConv1dDecode(
  x: Tensor,
  weight: Tensor,
  state: Tensor,
  options: CausalConv1dDecodeOptions = {},
): Tensor {
  const op = "causalConv1dDecode";
  const o = checkOptions<CausalConv1dDecodeOptions>(op, options, DECODE_SPEC);
  const t = expectTensor(op, "x", x);
  if (t.ndim !== 2) {
    throw invalidArgument(op, `x: expected [N, C] (one token per sequence), got [${t.shape.join(", ")}]`);
  }
  return run(op, {
    x: t,
    weight,
    state,
    indices: optionalTensor(op, "options.stateIndices", o.stateIndices),
    hasInitialState: optionalTensor(op, "options.hasInitialState", o.hasInitialState),
    activation: o.activation ?? undefined,
    out: optionalTensor(op, "options.out", o.out),
    checkIndices: o.checkIndices ?? undefined,
    impl: o.impl ?? undefined,
  });
}
