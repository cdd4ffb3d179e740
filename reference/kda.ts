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
  StateCheckpoints,
} from "./sequences.ts";

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

// One token: S <- diag(a) S, then the delta update; returns r = v - S'^T k and u = beta r.
function step(
  S: Float64Array,
  a: Float64Array,
  k: Float64Array,
  v: Float64Array,
  beta: number,
  K: number,
  V: number,
) {
  for (let i = 0; i < K; i++) for (let c = 0; c < V; c++) S[i * V + c] *= a[i];
  const r = new Float64Array(V), u = new Float64Array(V);
  for (let c = 0; c < V; c++) {
    let p = 0;
    for (let i = 0; i < K; i++) p += S[i * V + c] * k[i];
    r[c] = v[c] - p;
    u[c] = beta * r[c];
  }
  for (let i = 0; i < K; i++) for (let c = 0; c < V; c++) S[i * V + c] += k[i] * u[c];
  return { r, u };
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
  const seqs = sequences(x);
  const N = seqs.length, G = H / HK, KV = K * V;
  const output = new Float64Array(B * T * H * V);
  const finalState = new Float64Array(N * H * KV);
  const checkpoints = new StateCheckpoints(x.checkpointEvery, seqs, H, KV);
  for (let n = 0; n < N; n++) {
    const { row, begin, end } = seqs[n];
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / G);
      const S = stateAt(x.initialState, n * H + h, KV);
      for (let t = begin; t < end; t++) {
        checkpoints.before(n, h, t - begin, S);
        const q = rowOf(x.q, x, row, t, hk, HK, K), k = rowOf(x.k, x, row, t, hk, HK, K);
        const v = rowOf(x.v, x, row, t, h, H, V);
        step(S, decays(x, row, t, h), k, v, x.beta[(row * T + t) * H + h], K, V);
        const vBase = ((row * T + t) * H + h) * V;
        for (let c = 0; c < V; c++) {
          let o = 0;
          for (let i = 0; i < K; i++) o += S[i * V + c] * q[i];
          output[vBase + c] = x.scale * o;
        }
      }
      checkpoints.after(n, h, end - begin, S);
      finalState.set(S, (n * H + h) * KV);
    }
  }
  return { output, finalState, checkpoints: checkpoints.states };
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
      // Forward, keeping per token the state before it, r and u.
      const before: Float64Array[] = [], rs: Float64Array[] = [], us: Float64Array[] = [];
      const S = stateAt(x.initialState, n * H + h, KV);
      for (let t = begin; t < end; t++) {
        before.push(S.slice());
        const k = rowOf(x.k, x, row, t, hk, HK, K), v = rowOf(x.v, x, row, t, h, H, V);
        const { r, u } = step(S, decays(x, row, t, h), k, v, x.beta[(row * T + t) * H + h], K, V);
        rs.push(r), us.push(u);
      }
      // Reverse; S holds the state after the token being undone.
      const dS = stateAt(dFinalState, n * H + h, KV);
      for (let t = end - 1; t >= begin; t--) {
        const i = t - begin, Sp = before[i], r = rs[i], u = us[i];
        const q = rowOf(x.q, x, row, t, hk, HK, K), k = rowOf(x.k, x, row, t, hk, HK, K);
        const a = decays(x, row, t, h), beta = x.beta[(row * T + t) * H + h];
        const qkBase = ((row * T + t) * HK + hk) * K, vBase = ((row * T + t) * H + h) * V;
        const dO = (c: number) => dOutput[vBase + c];
        for (let j = 0; j < K; j++) {
          let acc = 0;
          for (let c = 0; c < V; c++) {
            acc += (a[j] * Sp[j * V + c] + k[j] * u[c]) * dO(c);
            dS[j * V + c] += x.scale * q[j] * dO(c);
          }
          dq[qkBase + j] += x.scale * acc;
        }
        const du = new Float64Array(V);
        for (let j = 0; j < K; j++) {
          let acc = 0;
          for (let c = 0; c < V; c++) {
            du[c] += dS[j * V + c] * k[j];
            acc += dS[j * V + c] * u[c];
          }
          dk[qkBase + j] += acc;
        }
        let db = 0;
        for (let c = 0; c < V; c++) {
          db += du[c] * r[c];
          dv[vBase + c] = beta * du[c];
        }
        dbeta[(row * T + t) * H + h] = db;
        // r = v - S'^T k: dS' = dS - k dv^T, dk -= S' dv; S' = diag(a) Sp.
        for (let j = 0; j < K; j++) {
          let acc = 0, da = 0;
          for (let c = 0; c < V; c++) {
            const dDecayed = dS[j * V + c] - k[j] * dv[vBase + c];
            acc += a[j] * Sp[j * V + c] * dv[vBase + c];
            da += dDecayed * Sp[j * V + c];
            dS[j * V + c] = a[j] * dDecayed;
          }
          dk[qkBase + j] -= acc;
          dgate[((row * T + t) * H + h) * K + j] = a[j] * da;
        }
      }
      dInitialState.set(dS, (n * H + h) * KV);
    }
  }
  return { dq, dk, dv, dgate, dbeta, dInitialState };
}
