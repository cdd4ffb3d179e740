/**
 * Float64 oracle of KDA (Kimi delta attention): the gated delta rule with a decay per key channel,
 * as the plain token-by-token recurrence, and its reverse mode derived by hand (checked against
 * finite differences). Token-major host arrays (the `"bshd"` order): q, k `[B, T, HK, K]`,
 * v `[B, T, H, V]`, gate `[B, T, H, K]`, beta `[B, T, H]`, states `[N, H, K, V]`.
 *
 * Per value head h (q/k head h / (H / HK)) and token t, with a_t = exp(gate_t) (a vector over the
 * K key channels):
 *   S' = diag(a_t) S
 *   r  = v_t - S'^T k_t
 *   u  = beta_t r
 *   S  = S' + k_t u^T
 *   o_t = scale S^T q_t
 *
 * @module
 */
import { checkFields, count, expectLength, NUMBERS } from "./checks.ts";
import {
  checkOutputGradients,
  checkProblem,
  type LinearReferenceProblem,
  PROBLEM_FIELDS,
  rowAt,
  sequences,
  stateAt,
  walkStates,
} from "./sequences.ts";
import { deltaWrite, deltaWriteBackward, readOut, readOutBackward } from "./state_step.ts";

/** The inputs of one KDA oracle run (host arrays holding the exact input values). */
export interface KdaReferenceInputs extends LinearReferenceProblem {
  /** `[B, T, H, K]` natural-log decays per key channel (any values: the recurrence is exact). */
  gate: ArrayLike<number>;
  /** `[B, T, H]` write strengths. */
  beta: ArrayLike<number>;
  /** Query scale. */
  scale: number;
  /** Also return the state before every `checkpointEvery`-th token of each sequence. */
  checkpointEvery?: number;
}

/** What the forward oracle returns. */
export interface KdaReferenceOutputs {
  /** `[B, T, H, V]`; rows past the last packed sequence are 0. */
  output: Float64Array;
  /** `[N, H, K, V]`. */
  finalState: Float64Array;
  /** `[N, H, C, K, V]` states before tokens 0, every, 2 every, ... and after the last (checkpointEvery only). */
  checkpoints?: Float64Array;
}

/** What the backward oracle returns. */
export interface KdaReferenceGradients {
  /** `[B, T, HK, K]` (summed over each group of value heads). */
  dq: Float64Array;
  /** `[B, T, HK, K]`. */
  dk: Float64Array;
  /** `[B, T, H, V]`. */
  dv: Float64Array;
  /** `[B, T, H, K]`. */
  dgate: Float64Array;
  /** `[B, T, H]`. */
  dbeta: Float64Array;
  /** `[N, H, K, V]`. */
  dInitialState: Float64Array;
}

const INPUTS = { ...PROBLEM_FIELDS, gate: NUMBERS, beta: NUMBERS, checkpointEvery: count(1) } as const;
const REQUIRED = ["B", "T", "H", "HK", "K", "V", "q", "k", "v", "gate", "beta", "scale"];

// Refuses inputs whose fields are missing, mistyped or inconsistent; returns the sequence count.
function checkInputs(op: string, x: KdaReferenceInputs): number {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const N = checkProblem(op, x);
  const { B, T, H, K } = x;
  expectLength(op, "x.gate", x.gate, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  expectLength(op, "x.beta", x.beta, B * T * H, `[${B}, ${T}, ${H}]`);
  return N;
}

// Row (t, head) of a token-major array with `heads` heads of width D, as a new array.
function rowOf(
  a: ArrayLike<number>,
  x: KdaReferenceInputs,
  b: number,
  t: number,
  head: number,
  heads: number,
  D: number,
) {
  return rowAt(a, ((b * x.T + t) * heads + head) * D, D);
}

// The decay factors exp(gate) of token t, value head h.
function decays(x: KdaReferenceInputs, b: number, t: number, h: number): Float64Array {
  return rowOf(x.gate, x, b, t, h, x.H, x.K).map(Math.exp);
}

// S' = diag(a) S, as a new array.
function decayed(S: Float64Array, a: Float64Array, V: number): Float64Array {
  return S.map((s, e) => a[Math.floor(e / V)] * s);
}

/**
 * The forward recurrence in float64: output and final state.
 *
 * @example
 * ```ts
 * import { kdaReference } from "@attnkit/attnkit/reference";
 * // One token, K = V = 1: S = beta v k (the zero state decays to zero), o = scale q S.
 * const r = kdaReference({
 *   B: 1, T: 1, H: 1, HK: 1, K: 1, V: 1, scale: 1,
 *   q: [2], k: [3], v: [5], gate: [-0.5], beta: [0.5],
 * });
 * console.log(r.output[0]); // 2 * 0.5 * 5 * 3 = 15
 * ```
 */
export function kdaReference(x: KdaReferenceInputs): KdaReferenceOutputs {
  checkInputs("kdaReference", x);
  const { B, T, H, HK, K, V } = x;
  const output = new Float64Array(B * T * H * V);
  const { finalState, checkpoints } = walkStates(x, ({ row }, h, hk) => (S, t) => {
    const q = rowOf(x.q, x, row, t, hk, HK, K), k = rowOf(x.k, x, row, t, hk, HK, K);
    const v = rowOf(x.v, x, row, t, h, H, V);
    S.set(decayed(S, decays(x, row, t, h), V));
    deltaWrite(S, k, v, x.beta[(row * T + t) * H + h]);
    output.set(readOut(S, q, x.scale), ((row * T + t) * H + h) * V);
  });
  return { output, finalState, checkpoints };
}

/**
 * Reverse mode of {@link kdaReference} for the loss `sum(dOutput * output) + sum(dFinalState *
 * finalState)`: the gradient of every input. Walking the tokens backwards with dS, the gradient of
 * the state after the token:
 *   dq = scale S dO;  dS += scale q dO^T;  dk += dS u;  du = dS^T k;  dbeta = du . r;
 *   dv = beta du;  dS' = dS - k dv^T;  dk -= S' dv;  dgate_i = a_i sum_c dS'_ic S_ic (S before);
 *   dS <- diag(a) dS' for the token before.
 *
 * @example
 * ```ts
 * import { kdaReferenceBackward } from "@attnkit/attnkit/reference";
 * const x = { B: 1, T: 1, H: 1, HK: 1, K: 1, V: 1, scale: 1, q: [2], k: [3], v: [5], gate: [0], beta: [0.5] };
 * const g = kdaReferenceBackward(x, [1]);
 * console.log(g.dq[0]); // beta * v * k = 7.5
 * ```
 */
export function kdaReferenceBackward(
  x: KdaReferenceInputs,
  dOutput: ArrayLike<number>,
  dFinalState?: ArrayLike<number>,
): KdaReferenceGradients {
  const op = "kdaReferenceBackward";
  const sequenceCount = checkInputs(op, x);
  checkOutputGradients(op, x, sequenceCount, dOutput, dFinalState);
  const { B, T, H, HK, K, V } = x;
  const seqs = sequences(x);
  const N = seqs.length, G = H / HK, KV = K * V;
  const dq = new Float64Array(B * T * HK * K), dk = new Float64Array(B * T * HK * K);
  const dv = new Float64Array(B * T * H * V), dgate = new Float64Array(B * T * H * K);
  const dbeta = new Float64Array(B * T * H), dInitialState = new Float64Array(N * H * KV);
  for (let n = 0; n < N; n++) {
    const { row, begin, end } = seqs[n];
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / G);
      // Forward, keeping per token the state before it.
      const before: Float64Array[] = [];
      const S = stateAt(x.initialState, n * H + h, KV);
      for (let t = begin; t < end; t++) {
        before.push(S.slice());
        const k = rowOf(x.k, x, row, t, hk, HK, K), v = rowOf(x.v, x, row, t, h, H, V);
        S.set(decayed(S, decays(x, row, t, h), V));
        deltaWrite(S, k, v, x.beta[(row * T + t) * H + h]);
      }
      // Reverse, each token replayed from the state before it.
      const dS = stateAt(dFinalState, n * H + h, KV);
      for (let t = end - 1; t >= begin; t--) {
        const Sp = before[t - begin], a = decays(x, row, t, h), beta = x.beta[(row * T + t) * H + h];
        const q = rowOf(x.q, x, row, t, hk, HK, K), k = rowOf(x.k, x, row, t, hk, HK, K);
        const v = rowOf(x.v, x, row, t, h, H, V);
        const qkBase = ((row * T + t) * HK + hk) * K, vBase = ((row * T + t) * H + h) * V;
        const Sd = decayed(Sp, a, V), St = Sd.slice();
        const written = deltaWrite(St, k, v, beta);
        readOutBackward(dS, St, q, rowAt(dOutput, vBase, V), x.scale, dq.subarray(qkBase, qkBase + K));
        const back = deltaWriteBackward(dS, Sd, k, written, beta, dk.subarray(qkBase, qkBase + K));
        dv.set(back.dv, vBase);
        dbeta[(row * T + t) * H + h] = back.dbeta;
        // S' = diag(a) Sp: dgate_i = a_i sum_c dS'_ic Sp_ic, and dS <- diag(a) dS'.
        for (let i = 0; i < K; i++) {
          let da = 0;
          for (let c = 0; c < V; c++) {
            da += dS[i * V + c] * Sp[i * V + c];
            dS[i * V + c] *= a[i];
          }
          dgate[((row * T + t) * H + h) * K + i] = a[i] * da;
        }
      }
      dInitialState.set(dS, (n * H + h) * KV);
    }
  }
  return { dq, dk, dv, dgate, dbeta, dInitialState };
}
