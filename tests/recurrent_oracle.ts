/**
 * What the tests of the recurrent (linear-attention) float64 oracles share, on the host: the problem's
 * sizes, random q, k, v and initial state, and the whole hand-derived backward against central finite
 * differences of the forward.
 * @module
 */
import type { LinearReferenceProblem } from "../reference/sequences.ts";
import { expectFiniteDifferences, filled } from "./oracle_checks.ts";

/** The sizes of a recurrent oracle's problem (q and k [B, T, HK, K], v [B, T, H, V]) and its packing. */
export type RecurrentShape = Pick<LinearReferenceProblem, "B" | "T" | "H" | "HK" | "K" | "V" | "cuSeqlens">;

/** Random q in [low, 1), k in [0.6 low, 0.6) and v in [-1, 1), drawn from `rand` in that order. */
export function randomQkv(
  c: RecurrentShape,
  rand: () => number,
  low = -1,
): { q: Float64Array; k: Float64Array; v: Float64Array } {
  return {
    q: filled(c.B * c.T * c.HK * c.K, rand, low, 1),
    k: filled(c.B * c.T * c.HK * c.K, rand, low * 0.6, 0.6),
    v: filled(c.B * c.T * c.H * c.V, rand, -1, 1),
  };
}

/** A random initial state [N, H, K, V] in [-0.5, 0.5), N the sequences (packed or the batch). */
export function randomState(c: RecurrentShape, rand: () => number): Float64Array {
  const N = c.cuSeqlens ? c.cuSeqlens.length - 1 : c.B;
  return filled(N * c.H * c.K * c.V, rand, -0.5, 0.5);
}

/** A recurrent oracle: its forward and its hand-derived backward (gradients of output and final state). */
export interface RecurrentOracle<X, O, G> {
  forward(x: X): O;
  backward(x: X, dOutput: Float64Array, dFinalState?: Float64Array): G;
}

/**
 * Throws unless a recurrent oracle's backward equals the central finite differences (step 1e-5) of the
 * loss sum(output * dO) + sum(finalState * dHT), dO and dHT drawn from `rand`, for every
 * [input, gradient] pair of `fields`, within `check.tol` (see expectFiniteDifferences).
 */
export function expectOracleGradients<X extends RecurrentShape & { initialState: ArrayLike<number> }, G>(
  oracle: RecurrentOracle<NoInfer<X>, { output: Float64Array; finalState: Float64Array }, G>,
  x: X,
  rand: () => number,
  fields: readonly (readonly [keyof X & string, keyof G & string])[],
  check: { tol: number; what: (grad: string) => string },
): void {
  const dO = filled(x.B * x.T * x.H * x.V, rand, -1, 1);
  const dHT = filled(x.initialState.length, rand, -1, 1);
  const grads = oracle.backward(x, dO, dHT);
  const loss = () => {
    const r = oracle.forward(x);
    let sum = 0;
    r.output.forEach((o, i) => (sum += o * dO[i]));
    r.finalState.forEach((s, i) => (sum += s * dHT[i]));
    return sum;
  };
  for (const [input, grad] of fields) {
    expectFiniteDifferences(x[input] as Float64Array, grads[grad] as ArrayLike<number>, loss, {
      eps: 1e-5,
      tol: check.tol,
      what: check.what(grad),
      input,
    });
  }
}
