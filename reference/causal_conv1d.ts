/**
 * Float64 oracle of the causal depthwise (short) convolution and its reverse mode, derived by hand
 * (checked against finite differences). Token-major host arrays: x `[B, T, C]`, weight `[C, W]`,
 * histories `[N, W - 1, C]` oldest first.
 *
 * For token p of a sequence (p = 0 its first token) and channel c, with the sequence's inputs
 * extended on the left by its history (`e[m] = history[m]` for m < W - 1, `e[W - 1 + p] = x[p]`):
 *
 *   z[p, c] = sum_{i < W} weight[c, i] * e[p + i, c]      (weight[c, W - 1] meets the current token)
 *   y[p, c] = z[p, c], or silu(z[p, c]) = z / (1 + exp(-z))
 *
 * The final history of a sequence of L tokens is `e[L .. L + W - 2]`: its last W - 1 inputs, the
 * initial history filling in before a sequence shorter than W - 1.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkFields, count, expectLength, expectNumbers, NUMBERS, OFFSETS } from "./checks.ts";

/** The activations of the causal convolution (`"swish"` is another name of `"silu"`). */
export type CausalConv1dReferenceActivation = "silu" | "swish";

/** The inputs of one oracle run (host arrays holding the exact input values). */
export interface CausalConv1dReferenceInputs {
  /** Batch rows (1 with cuSeqlens). */
  B: number;
  /** Tokens per batch row. */
  T: number;
  /** Channels. */
  C: number;
  /** Kernel width (taps per channel), 1 or more. */
  W: number;
  /** `[B, T, C]`. */
  x: ArrayLike<number>;
  /** `[C, W]`; weight[c, W - 1] multiplies the current token, weight[c, 0] the oldest. */
  weight: ArrayLike<number>;
  /** The activation applied to the convolution; none when absent. */
  activation?: CausalConv1dReferenceActivation;
  /** Packed sequence offsets `[N + 1]` (B must be 1); the last may be below T. */
  cuSeqlens?: readonly number[];
  /** `[N, W - 1, C]` history before each sequence, oldest first; zeros when absent. */
  initialState?: ArrayLike<number>;
}

/** What the forward oracle returns. */
export interface CausalConv1dReferenceOutputs {
  /** `[B, T, C]`; rows past the last offset (packed input) are 0. */
  output: Float64Array;
  /** `[N, W - 1, C]`: each sequence's last W - 1 inputs (history included), oldest first. */
  finalState: Float64Array;
}

/** What the backward oracle returns. */
export interface CausalConv1dReferenceGradients {
  /** `[B, T, C]`; rows past the last offset are 0. */
  dx: Float64Array;
  /** `[C, W]`. */
  dweight: Float64Array;
  /** `[N, W - 1, C]`: the gradient of the initial history (defined whether or not one was given). */
  dInitialState: Float64Array;
}

const INPUTS = {
  B: count(0),
  T: count(0),
  C: count(0),
  W: count(1),
  x: NUMBERS,
  weight: NUMBERS,
  activation: ["silu", "swish"],
  cuSeqlens: OFFSETS,
  initialState: NUMBERS,
} as const;
const REQUIRED = ["B", "T", "C", "W", "x", "weight"];

/** One sequence: its batch row, first token and length. */
interface Span {
  row: number;
  begin: number;
  length: number;
}

// Checks the problem and returns its sequences.
function spansOf(op: string, p: CausalConv1dReferenceInputs): Span[] {
  checkFields(op, "p", p, INPUTS, REQUIRED);
  const { B, T, C, W } = p;
  expectLength(op, "p.x", p.x, B * T * C, `[${B}, ${T}, ${C}]`);
  expectLength(op, "p.weight", p.weight, C * W, `[${C}, ${W}]`);
  let spans: Span[] = Array.from({ length: B }, (_, b) => ({ row: b, begin: 0, length: T }));
  if (p.cuSeqlens) {
    const cu = p.cuSeqlens;
    if (B !== 1) throw invalidArgument(op, `p.B: packed sequences (cuSeqlens) take B = 1, got ${B}`);
    if (cu[cu.length - 1] > T) {
      throw invalidArgument(op, `p.cuSeqlens: ends at ${cu[cu.length - 1]}, past T = ${T}`);
    }
    spans = Array.from(
      { length: cu.length - 1 },
      (_, n) => ({ row: 0, begin: cu[n], length: cu[n + 1] - cu[n] }),
    );
  }
  if (p.initialState) {
    const N = spans.length;
    expectLength(op, "p.initialState", p.initialState, N * (W - 1) * C, `[${N}, ${W - 1}, ${C}]`);
  }
  return spans;
}

const sigmoid = (z: number) => 1 / (1 + Math.exp(-z));

// Channel c of sequence n extended by its history: e[m] for m in [0, W - 1 + L).
function extended(p: CausalConv1dReferenceInputs, n: number, s: Span, c: number): Float64Array {
  const { T, C, W } = p;
  const e = new Float64Array(W - 1 + s.length);
  for (let m = 0; m < W - 1; m++) e[m] = p.initialState ? p.initialState[(n * (W - 1) + m) * C + c] : 0;
  for (let t = 0; t < s.length; t++) e[W - 1 + t] = p.x[(s.row * T + s.begin + t) * C + c];
  return e;
}

// z[t] = sum_i w[i] e[t + i] for the L tokens of a sequence.
function convolve(e: Float64Array, w: Float64Array, length: number): Float64Array {
  const z = new Float64Array(length);
  for (let t = 0; t < length; t++) {
    for (let i = 0; i < w.length; i++) z[t] += w[i] * e[t + i];
  }
  return z;
}

const taps = (p: CausalConv1dReferenceInputs, c: number) =>
  Float64Array.from({ length: p.W }, (_, i) => p.weight[c * p.W + i]);

/**
 * The forward pass in float64: the output and each sequence's final history.
 *
 * @example
 * ```ts
 * import { causalConv1dReference } from "@attnkit/attnkit/reference";
 * // Width 2, weights [0.5, 1]: y[t] = 0.5 x[t - 1] + x[t], with x[-1] = 0.
 * const { output, finalState } = causalConv1dReference({
 *   B: 1, T: 3, C: 1, W: 2, x: [1, 2, 3], weight: [0.5, 1],
 * });
 * console.log([...output], [...finalState]); // [ 1, 2.5, 4 ] [ 3 ]
 * ```
 */
export function causalConv1dReference(p: CausalConv1dReferenceInputs): CausalConv1dReferenceOutputs {
  const spans = spansOf("causalConv1dReference", p);
  const { B, T, C, W } = p;
  const output = new Float64Array(B * T * C);
  const finalState = new Float64Array(spans.length * (W - 1) * C);
  spans.forEach((s, n) => {
    for (let c = 0; c < C; c++) {
      const e = extended(p, n, s, c);
      const z = convolve(e, taps(p, c), s.length);
      for (let t = 0; t < s.length; t++) {
        output[(s.row * T + s.begin + t) * C + c] = p.activation ? z[t] * sigmoid(z[t]) : z[t];
      }
      for (let k = 0; k < W - 1; k++) finalState[(n * (W - 1) + k) * C + c] = e[s.length + k];
    }
  });
  return { output, finalState };
}

/**
 * Reverse mode of {@link causalConv1dReference} for the loss `sum(dOutput * output) + sum(dFinalState
 * * finalState)`: the gradients of x, the weight and the initial history.
 *
 * With g = dOutput * silu'(z) (or dOutput without an activation), `de[t + i] += weight[i] * g[t]`,
 * `dweight[i] += g[t] * e[t + i]`, and the final history's gradient lands on the inputs it copied.
 *
 * @example
 * ```ts
 * import { causalConv1dReferenceBackward } from "@attnkit/attnkit/reference";
 * const { dx, dweight } = causalConv1dReferenceBackward(
 *   { B: 1, T: 3, C: 1, W: 2, x: [1, 2, 3], weight: [0.5, 1] },
 *   [1, 1, 1],
 * );
 * console.log([...dx], [...dweight]); // [ 1.5, 1.5, 1 ] [ 3, 6 ]
 * ```
 */
export function causalConv1dReferenceBackward(
  p: CausalConv1dReferenceInputs,
  dOutput: ArrayLike<number>,
  dFinalState?: ArrayLike<number>,
): CausalConv1dReferenceGradients {
  const op = "causalConv1dReferenceBackward";
  const spans = spansOf(op, p);
  const { B, T, C, W } = p;
  const N = spans.length;
  expectNumbers(op, "dOutput", dOutput, B * T * C, `[${B}, ${T}, ${C}]`);
  if (dFinalState !== undefined) {
    expectNumbers(op, "dFinalState", dFinalState, N * (W - 1) * C, `[${N}, ${W - 1}, ${C}]`);
  }
  const dx = new Float64Array(B * T * C);
  const dweight = new Float64Array(C * W);
  const dInitialState = new Float64Array(N * (W - 1) * C);
  spans.forEach((s, n) => {
    for (let c = 0; c < C; c++) {
      const e = extended(p, n, s, c), w = taps(p, c);
      const z = convolve(e, w, s.length);
      const de = new Float64Array(e.length);
      for (let t = 0; t < s.length; t++) {
        const dy = dOutput[(s.row * T + s.begin + t) * C + c];
        const sg = sigmoid(z[t]);
        const g = p.activation ? dy * sg * (1 + z[t] * (1 - sg)) : dy;
        for (let i = 0; i < W; i++) {
          de[t + i] += w[i] * g;
          dweight[c * W + i] += g * e[t + i];
        }
      }
      if (dFinalState) {
        for (let k = 0; k < W - 1; k++) de[s.length + k] += dFinalState[(n * (W - 1) + k) * C + c];
      }
      for (let m = 0; m < W - 1; m++) dInitialState[(n * (W - 1) + m) * C + c] = de[m];
      for (let t = 0; t < s.length; t++) dx[(s.row * T + s.begin + t) * C + c] = de[W - 1 + t];
    }
  });
  return { dx, dweight, dInitialState };
}
