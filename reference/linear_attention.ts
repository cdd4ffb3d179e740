/**
 * Float64 oracle of the gated linear-attention family: GLA (a decay per key channel), simple GLA (a
 * scalar decay per token and/or a constant per head), retention (a fixed decay per head) and plain
 * linear attention (no decay, optional normaliser). One plain token-by-token recurrence serves all of
 * them, with its reverse mode derived by hand (checked against finite differences). Token-major host
 * arrays (the `"bshd"` layout): q, k `[B, T, HK, K]`, v `[B, T, H, V]`, gk `[B, T, H, K]`, g
 * `[B, T, H]`, gGamma `[H]`, states `[N, H, K, V]`.
 *
 * Per value head h (q/k head h / (H / HK)) and token t, all decays in natural log:
 *   a   = exp(gk_t + g_t + gGamma)     (per key channel; each term is 0 when absent)
 *   S   = diag(a) S + k_t v_t^T
 *   o_t = scale S^T q_t
 * and with `normalize`, o_t / (scale q_t . sum_{s <= t} k_s + 1e-10), the key sum running over the
 * tokens of this call's sequence (the initial state carries no key sum).
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkFields, count, expectLength, NUMBERS } from "./checks.ts";
import {
  checkOutputGradients,
  checkProblem,
  type LinearReferenceProblem,
  PROBLEM_FIELDS,
  rowAt as row,
  sequences,
  stateAt,
  walkStates,
} from "./sequences.ts";
import { readOut, readOutBackward } from "./state_step.ts";

/** The inputs of one oracle run (float64 or float32 host arrays holding the exact input values). */
export interface GatedLinearReferenceInputs extends LinearReferenceProblem {
  /** `[B, T, H, K]` natural-log decay per key channel (GLA's gate). */
  gk?: ArrayLike<number>;
  /** `[B, T, H]` natural-log decay per token (simple GLA's gate). */
  g?: ArrayLike<number>;
  /** `[H]` natural-log decay per head, the same for every token (simple GLA's `g_gamma`, retention). */
  gGamma?: ArrayLike<number>;
  /** Query scale; `K ** -0.5` when absent. */
  scale?: number;
  /** Divide each output by `scale q_t . (sum of the sequence's keys up to t) + 1e-10`. */
  normalize?: boolean;
  /** Also return the state before every `checkpointEvery`-th token of each sequence. */
  checkpointEvery?: number;
}

/** What the forward oracle returns. */
export interface GatedLinearReferenceOutputs {
  /** `[B, T, H, V]`; rows past the last packed sequence are 0. */
  output: Float64Array;
  /** `[N, H, K, V]`. */
  finalState: Float64Array;
  /** `[N, H, C, K, V]` states before tokens 0, every, 2 every, ... and after the last (checkpointEvery only). */
  checkpoints?: Float64Array;
}

/** What the backward oracle returns (the gradient of an absent gate is all zeros). */
export interface GatedLinearReferenceGradients {
  /** `[B, T, HK, K]`. */
  dq: Float64Array;
  /** `[B, T, HK, K]`. */
  dk: Float64Array;
  /** `[B, T, H, V]`. */
  dv: Float64Array;
  /** `[B, T, H, K]`. */
  dgk: Float64Array;
  /** `[B, T, H]`. */
  dg: Float64Array;
  /** `[H]`. */
  dgGamma: Float64Array;
  /** `[N, H, K, V]`. */
  dInitialState: Float64Array;
}

/**
 * The epsilon added to the normaliser of linear attention with `normalize` (outside the product).
 *
 * @example
 * ```ts
 * import { NORMALIZE_EPS } from "@attnkit/attnkit/reference";
 * const normalised = (o: number, z: number) => o / (z + NORMALIZE_EPS);
 * console.log(normalised(1, 2)); // 0.5 (to 10 digits)
 * ```
 */
export const NORMALIZE_EPS = 1e-10;

/**
 * Retention's decay per head, in natural log: `log(1 - 2^(-5 - h))` for heads h = 0 .. H-1 (pass it
 * as `gGamma`).
 *
 * @example
 * ```ts
 * import { gatedLinearReference, retentionLogDecay } from "@attnkit/attnkit/reference";
 * const gGamma = retentionLogDecay(2); // [log(31/32), log(63/64)]
 * const r = gatedLinearReference({
 *   B: 1, T: 2, H: 2, HK: 2, K: 1, V: 1, scale: 1, gGamma,
 *   q: [1, 1, 1, 1], k: [1, 1, 1, 1], v: [1, 1, 1, 1],
 * });
 * console.log(r.output[2]); // head 0 after two tokens: 31/32 + 1
 * ```
 */
export function retentionLogDecay(H: number): Float64Array {
  if (!Number.isSafeInteger(H) || H < 0) {
    throw invalidArgument("retentionLogDecay", `H: expected an integer from 0, got ${H}`);
  }
  return Float64Array.from({ length: H }, (_, h) => Math.log1p(-(2 ** (-5 - h))));
}

const INPUTS = {
  ...PROBLEM_FIELDS,
  gk: NUMBERS,
  g: NUMBERS,
  gGamma: NUMBERS,
  normalize: "boolean",
  checkpointEvery: count(1),
} as const;
const REQUIRED = ["B", "T", "H", "HK", "K", "V", "q", "k", "v"];

// Refuses inputs whose fields are missing, mistyped or inconsistent; returns the sequence count.
function checkInputs(op: string, x: GatedLinearReferenceInputs): number {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const N = checkProblem(op, x);
  const { B, T, H, K } = x;
  if (x.gk) expectLength(op, "x.gk", x.gk, B * T * H * K, `[${B}, ${T}, ${H}, ${K}]`);
  if (x.g) expectLength(op, "x.g", x.g, B * T * H, `[${B}, ${T}, ${H}]`);
  if (x.gGamma) expectLength(op, "x.gGamma", x.gGamma, H, `[${H}]`);
  return N;
}

function scaleOf(x: GatedLinearReferenceInputs): number {
  return x.scale ?? x.K ** -0.5;
}

// The decay factors exp(gk + g + gGamma) of token t (batch row b) and value head h, per key channel.
function decay(x: GatedLinearReferenceInputs, b: number, t: number, h: number): Float64Array {
  const { T, H, K } = x;
  const common = (x.g ? x.g[(b * T + t) * H + h] : 0) + (x.gGamma ? x.gGamma[h] : 0);
  const a = new Float64Array(K);
  const base = ((b * T + t) * H + h) * K;
  for (let i = 0; i < K; i++) a[i] = Math.exp(common + (x.gk ? x.gk[base + i] : 0));
  return a;
}

/**
 * The forward recurrence in float64: output, final state (and checkpoints when asked).
 *
 * @example
 * ```ts
 * import { gatedLinearReference } from "@attnkit/attnkit/reference";
 * // GLA, one head, K = 2, V = 1, two tokens: the second token's decay halves channel 0.
 * const r = gatedLinearReference({
 *   B: 1, T: 2, H: 1, HK: 1, K: 2, V: 1, scale: 1,
 *   q: [1, 1, 1, 1], k: [1, 0, 0, 1], v: [2, 3], gk: [0, 0, Math.log(0.5), 0],
 * });
 * console.log(Array.from(r.finalState)); // [1, 3]
 * ```
 */
export function gatedLinearReference(x: GatedLinearReferenceInputs): GatedLinearReferenceOutputs {
  checkInputs("gatedLinearReference", x);
  const { B, T, H, HK, K, V } = x;
  const scale = scaleOf(x);
  const output = new Float64Array(B * T * H * V);
  const { finalState, checkpoints } = walkStates(x, ({ row: b }, h, hk) => {
    const keySum = new Float64Array(K);
    return (S, t) => {
      const qkBase = ((b * T + t) * HK + hk) * K, vBase = ((b * T + t) * H + h) * V;
      const a = decay(x, b, t, h);
      for (let i = 0; i < K; i++) {
        const ki = x.k[qkBase + i];
        for (let c = 0; c < V; c++) S[i * V + c] = a[i] * S[i * V + c] + ki * x.v[vBase + c];
      }
      let divisor = 1;
      if (x.normalize) {
        let z = 0;
        for (let i = 0; i < K; i++) z += x.q[qkBase + i] * (keySum[i] += x.k[qkBase + i]);
        divisor = scale * z + NORMALIZE_EPS;
      }
      output.set(readOut(S, row(x.q, qkBase, K), scale).map((o) => o / divisor), vBase);
    };
  });
  return { output, finalState, checkpoints };
}

/**
 * Reverse mode of {@link gatedLinearReference} for the loss `sum(dOutput * output) + sum(dFinalState *
 * finalState)`: the gradient of every input, the gates and the initial state included.
 *
 * @example
 * ```ts
 * import { gatedLinearReferenceBackward } from "@attnkit/attnkit/reference";
 * // One token, K = V = 1, initial state s: o = q (exp(g) s + k v), so do/dg = q exp(g) s.
 * const grads = gatedLinearReferenceBackward(
 *   { B: 1, T: 1, H: 1, HK: 1, K: 1, V: 1, scale: 1, q: [2], k: [3], v: [5], g: [0], initialState: [4] },
 *   [1],
 * );
 * console.log(grads.dg[0], grads.dInitialState[0]); // 8 2
 * ```
 */
export function gatedLinearReferenceBackward(
  x: GatedLinearReferenceInputs,
  dOutput: ArrayLike<number>,
  dFinalState?: ArrayLike<number>,
): GatedLinearReferenceGradients {
  const op = "gatedLinearReferenceBackward";
  const sequenceCount = checkInputs(op, x);
  checkOutputGradients(op, x, sequenceCount, dOutput, dFinalState);
  const { B, T, H, HK, K, V } = x;
  const seqs = sequences(x);
  const N = seqs.length, G = H / HK, KV = K * V, scale = scaleOf(x);
  const dq = new Float64Array(B * T * HK * K), dk = new Float64Array(B * T * HK * K);
  const dv = new Float64Array(B * T * H * V);
  const dgk = new Float64Array(B * T * H * K), dg = new Float64Array(B * T * H);
  const dgGamma = new Float64Array(H);
  const dInitialState = new Float64Array(N * H * KV);
  for (let n = 0; n < N; n++) {
    const { row: b, begin, end } = seqs[n];
    const len = end - begin;
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / G);
      // Forward, keeping the state before each token, the decays, and the normaliser's pieces.
      const prev: Float64Array[] = [], decays: Float64Array[] = [];
      const keySums: Float64Array[] = [], divisors: number[] = [];
      const S = stateAt(x.initialState, n * H + h, KV);
      const keySum = new Float64Array(K);
      for (let j = 0; j < len; j++) {
        const t = begin + j;
        const qkBase = ((b * T + t) * HK + hk) * K, vBase = ((b * T + t) * H + h) * V;
        const a = decay(x, b, t, h);
        prev.push(S.slice()), decays.push(a);
        for (let i = 0; i < K; i++) {
          for (let c = 0; c < V; c++) S[i * V + c] = a[i] * S[i * V + c] + x.k[qkBase + i] * x.v[vBase + c];
        }
        let z = 0;
        for (let i = 0; i < K; i++) z += x.q[qkBase + i] * (keySum[i] += x.k[qkBase + i]);
        keySums.push(keySum.slice()), divisors.push(x.normalize ? scale * z + NORMALIZE_EPS : 1);
      }
      // Reverse.
      const dS = stateAt(dFinalState, n * H + h, KV);
      const dKeySum = new Float64Array(K); // gradient of the running key sum, summed over later tokens
      for (let j = len - 1; j >= 0; j--) {
        const t = begin + j;
        const qkBase = ((b * T + t) * HK + hk) * K, vBase = ((b * T + t) * H + h) * V;
        const Sp = prev[j], a = decays[j], divisor = divisors[j];
        const q = row(x.q, qkBase, K), k = row(x.k, qkBase, K), v = row(x.v, vBase, V);
        // The state after the token, and the unnormalised output u = scale S^T q.
        const St = new Float64Array(KV);
        for (let i = 0; i < K; i++) {
          for (let c = 0; c < V; c++) St[i * V + c] = a[i] * Sp[i * V + c] + k[i] * v[c];
        }
        // o = u / divisor, divisor = scale q . keySum + eps (or 1).
        const du = new Float64Array(V);
        let dDivisor = 0;
        for (let c = 0; c < V; c++) {
          const dO = dOutput[vBase + c];
          du[c] = dO / divisor;
          if (x.normalize) {
            let u = 0;
            for (let i = 0; i < K; i++) u += St[i * V + c] * q[i];
            dDivisor -= dO * scale * u / (divisor * divisor);
          }
        }
        if (x.normalize) {
          for (let i = 0; i < K; i++) {
            dq[qkBase + i] += scale * dDivisor * keySums[j][i];
            dKeySum[i] += scale * dDivisor * q[i];
          }
        }
        readOutBackward(dS, St, q, du, scale, dq.subarray(qkBase, qkBase + K));
        // S = diag(a) Sp + k v^T; keySum_t = keySum_{t-1} + k_t.
        for (let c = 0; c < V; c++) {
          let acc = 0;
          for (let i = 0; i < K; i++) acc += dS[i * V + c] * k[i];
          dv[vBase + c] = acc;
        }
        let dLogDecaySum = 0;
        const gBase = ((b * T + t) * H + h) * K;
        for (let i = 0; i < K; i++) {
          let dki = dKeySum[i], dLogDecay = 0;
          for (let c = 0; c < V; c++) {
            dki += dS[i * V + c] * v[c];
            dLogDecay += dS[i * V + c] * a[i] * Sp[i * V + c];
            dS[i * V + c] *= a[i];
          }
          dk[qkBase + i] += dki;
          if (x.gk) dgk[gBase + i] = dLogDecay;
          dLogDecaySum += dLogDecay;
        }
        if (x.g) dg[(b * T + t) * H + h] = dLogDecaySum;
        if (x.gGamma) dgGamma[h] += dLogDecaySum;
      }
      dInitialState.set(dS, (n * H + h) * KV);
    }
  }
  return { dq, dk, dv, dgk, dg, dgGamma, dInitialState };
}
