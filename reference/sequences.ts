/**
 * What the chunked linear-attention oracles (the delta rules, the gated linear-attention family) share:
 * the token-major problem fields, their checks, and the walk over a batch's sequences (batch rows, or
 * packed sequences given by offsets).
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { count, expectLength, FINITE, NUMBERS, OFFSETS } from "./checks.ts";

/** The fields every linear-attention oracle takes (host arrays holding the exact input values). */
export interface LinearReferenceProblem {
  /** Batch (1 with cuSeqlens). */
  B: number;
  /** Tokens per batch row. */
  T: number;
  /** Value heads. */
  H: number;
  /** Query/key heads (divides H); each serves H / HK value heads. */
  HK: number;
  /** Key head dimension. */
  K: number;
  /** Value head dimension. */
  V: number;
  /** `[B, T, HK, K]`. */
  q: ArrayLike<number>;
  /** `[B, T, HK, K]`. */
  k: ArrayLike<number>;
  /** `[B, T, H, V]`. */
  v: ArrayLike<number>;
  /** `[N, H, K, V]`; zeros when absent. */
  initialState?: ArrayLike<number>;
  /** Packed sequence offsets `[N + 1]` (B must be 1). */
  cuSeqlens?: readonly number[];
}

/** The field checks of {@link LinearReferenceProblem} (and the query scale), for `checkFields`. */
export const PROBLEM_FIELDS = {
  B: count(0),
  T: count(0),
  H: count(1),
  HK: count(1),
  K: count(1),
  V: count(1),
  q: NUMBERS,
  k: NUMBERS,
  v: NUMBERS,
  scale: FINITE,
  initialState: NUMBERS,
  cuSeqlens: OFFSETS,
} as const;

/**
 * Refuses a problem whose sizes disagree (heads, offsets, q / k / v and initial state lengths), after
 * `checkFields` checked each field alone; returns the sequence count N.
 */
export function checkProblem(op: string, x: LinearReferenceProblem): number {
  const { B, T, H, HK, K, V } = x;
  if (H % HK !== 0) throw invalidArgument(op, `x.HK: ${HK} does not divide the ${H} value heads`);
  let N = B;
  if (x.cuSeqlens) {
    const cu = x.cuSeqlens;
    if (B !== 1) throw invalidArgument(op, `x.B: packed sequences (cuSeqlens) take B = 1, got ${B}`);
    if (cu[cu.length - 1] > T) {
      throw invalidArgument(op, `x.cuSeqlens: ends at ${cu[cu.length - 1]}, past T = ${T}`);
    }
    N = cu.length - 1;
  }
  expectLength(op, "x.q", x.q, B * T * HK * K, `[${B}, ${T}, ${HK}, ${K}]`);
  expectLength(op, "x.k", x.k, B * T * HK * K, `[${B}, ${T}, ${HK}, ${K}]`);
  expectLength(op, "x.v", x.v, B * T * H * V, `[${B}, ${T}, ${H}, ${V}]`);
  if (x.initialState) {
    expectLength(op, "x.initialState", x.initialState, N * H * K * V, `[${N}, ${H}, ${K}, ${V}]`);
  }
  return N;
}

/** One sequence: its batch row and token range. */
export interface Sequence {
  row: number;
  begin: number;
  end: number;
}

/** The sequences of a problem: each batch row, or each packed sequence of row 0. */
export function sequences(x: LinearReferenceProblem): Sequence[] {
  if (!x.cuSeqlens) return Array.from({ length: x.B }, (_, b) => ({ row: b, begin: 0, end: x.T }));
  const cu = x.cuSeqlens;
  return Array.from({ length: cu.length - 1 }, (_, n) => ({ row: 0, begin: cu[n], end: cu[n + 1] }));
}
