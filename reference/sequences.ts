/**
 * What the chunked linear-attention oracles (the delta rules, the gated linear-attention family) share:
 * the token-major problem fields, their checks, and the walk over a batch's sequences (batch rows, or
 * packed sequences given by offsets).
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { count, expectLength, expectNumbers, FINITE, NUMBERS, OFFSETS } from "./checks.ts";

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

/** `n` elements of `src` from `base`, as a new float64 array. */
export function rowAt(src: ArrayLike<number>, base: number, n: number): Float64Array {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = src[base + i];
  return out;
}

/** The `[K, V]` state `index` (sequence n, head h: n * H + h) of `states` `[N, H, K, V]`; zeros when absent. */
export function stateAt(states: ArrayLike<number> | undefined, index: number, KV: number): Float64Array {
  return states ? rowAt(states, index * KV, KV) : new Float64Array(KV);
}

/**
 * Refuses a backward's output gradients whose lengths disagree with the problem: dOutput `[B, T, H, V]`
 * (`note` follows its shape in the message) and dFinalState `[N, H, K, V]` when given.
 */
export function checkOutputGradients(
  op: string,
  x: LinearReferenceProblem,
  sequenceCount: number,
  dOutput: ArrayLike<number>,
  dFinalState: ArrayLike<number> | undefined | null,
  note = "",
): void {
  const { B, T, H, K, V } = x;
  expectNumbers(op, "dOutput", dOutput, B * T * H * V, `[${B}, ${T}, ${H}, ${V}]${note}`);
  if (dFinalState !== undefined && dFinalState !== null) {
    const what = `[${sequenceCount}, ${H}, ${K}, ${V}]`;
    expectNumbers(op, "dFinalState", dFinalState, sequenceCount * H * K * V, what);
  }
}

/**
 * The states a forward oracle keeps when asked (`every` tokens, or none): `[N, H, C, K, V]`, the state
 * before tokens 0, every, 2 every, ... of each sequence and the one after its last token; unused slots NaN.
 */
export class StateCheckpoints {
  /** The kept states, or undefined when none were asked for. */
  readonly states: Float64Array | undefined;
  readonly #every: number | undefined;
  readonly #perSeq: number;
  readonly #H: number;
  readonly #KV: number;

  /** Room for the checkpoints of `seqs` with H heads of KV state elements each. */
  constructor(every: number | undefined, seqs: Sequence[], H: number, KV: number) {
    this.#every = every;
    this.#perSeq = every ? Math.max(...seqs.map((s) => Math.ceil((s.end - s.begin) / every))) + 1 : 0;
    this.#H = H;
    this.#KV = KV;
    this.states = every ? new Float64Array(seqs.length * H * this.#perSeq * KV).fill(NaN) : undefined;
  }

  /** Keeps S as the state before token i of sequence n, head h, when i is a checkpoint. */
  before(n: number, h: number, i: number, S: Float64Array): void {
    const every = this.#every;
    if (every && i % every === 0) this.#keep(n, h, i / every, S);
  }

  /** Keeps S as the state after the last of the sequence's len tokens. */
  after(n: number, h: number, len: number, S: Float64Array): void {
    const every = this.#every;
    if (every) this.#keep(n, h, Math.ceil(len / every), S);
  }

  #keep(n: number, h: number, slot: number, S: Float64Array): void {
    this.states?.set(S, ((n * this.#H + h) * this.#perSeq + slot) * this.#KV);
  }
}

/**
 * The forward walk of a recurrent oracle: for each sequence and value head h (q/k head hk), `head` gives
 * the step of one token t, which updates the state S in place. S starts as the initial state (zeros when
 * absent) and is kept before every `checkpointEvery`-th token when asked; `onProgress` hears of each
 * (sequence, head) pair done. Returns the final states `[N, H, K, V]` and the checkpoints.
 */
export function walkStates(
  x: LinearReferenceProblem & { checkpointEvery?: number },
  head: (seq: Sequence, h: number, hk: number) => (S: Float64Array, t: number) => void,
  onProgress?: (done: number, total: number) => void,
): { finalState: Float64Array; checkpoints: Float64Array | undefined } {
  const { H, HK, K, V } = x;
  const seqs = sequences(x);
  const N = seqs.length, G = H / HK, KV = K * V;
  const finalState = new Float64Array(N * H * KV);
  const checkpoints = new StateCheckpoints(x.checkpointEvery, seqs, H, KV);
  for (let n = 0; n < N; n++) {
    const { begin, end } = seqs[n];
    for (let h = 0; h < H; h++) {
      const step = head(seqs[n], h, Math.floor(h / G));
      const S = stateAt(x.initialState, n * H + h, KV);
      for (let t = begin; t < end; t++) {
        checkpoints.before(n, h, t - begin, S);
        step(S, t);
      }
      checkpoints.after(n, h, end - begin, S);
      finalState.set(S, (n * H + h) * KV);
      onProgress?.(n * H + h + 1, N * H);
    }
  }
  return { finalState, checkpoints: checkpoints.states };
}
