/**
 * Float64 oracle of the delta rule and the gated delta rule: the plain token-by-token recurrence,
 * and its reverse mode derived by hand (checked against finite differences). Token-major host arrays,
 * as FLA lays them out (the `"bshd"` layout):
 * q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g and beta `[B, T, H]`, states `[N, H, K, V]`.
 *
 * Per value head h (q/k head h / (H / HK)) and token t, with x^ = x / sqrt(sum(x^2) + 1e-6) when
 * l2norm is set:
 *   S' = exp(g_t) S          (1 instead of exp(g_t) when ungated)
 *   r  = v_t - S'^T k^_t
 *   u  = beta_t r
 *   S  = S' + k^_t u^T
 *   o_t = scale S^T q^_t
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

/** The inputs of one oracle run (float64 or float32 host arrays holding the exact input values). */
export interface DeltaReferenceInputs extends LinearReferenceProblem {
  /** `[B, T, H]` natural-log decays; absent for the ungated rule. */
  g?: ArrayLike<number>;
  /** `[B, T, H]`. */
  beta: ArrayLike<number>;
  /** Query scale. */
  scale: number;
  /** L2-normalise q and k. */
  l2norm?: boolean;
  /**
   * Rounds every state element after each token (e.g. `Math.fround` to give the state float32's
   * range, so a diverging recurrence overflows where an fp32 state would). Forward only.
   */
  roundState?: (x: number) => number;
  /** Also return the state before every `checkpointEvery`-th token of each sequence. */
  checkpointEvery?: number;
  /** Called after each (sequence, head) pair with the pairs done and their total (for long runs). */
  onProgress?: (done: number, total: number) => void;
}

/** What the forward oracle returns. */
export interface DeltaReferenceOutputs {
  /** `[B, T, H, V]`; rows past the last packed sequence are 0. */
  output: Float64Array;
  /** `[N, H, K, V]`. */
  finalState: Float64Array;
  /** `[B, T, H, V]`: u_t = beta_t (v_t - S'^T k^_t), the residual each token writes. */
  residual: Float64Array;
  /** `[N, H, C, K, V]` states before tokens 0, every, 2 every, ... and after the last (checkpointEvery only). */
  checkpoints?: Float64Array;
}

/** What the backward oracle returns. */
export interface DeltaReferenceGradients {
  /** `[B, T, HK, K]`. */
  dq: Float64Array;
  /** `[B, T, HK, K]`. */
  dk: Float64Array;
  /** `[B, T, H, V]`. */
  dv: Float64Array;
  /** `[B, T, H]`. */
  dbeta: Float64Array;
  /** `[B, T, H]` (zeros for the ungated rule). */
  dg: Float64Array;
  /** `[N, H, K, V]`. */
  dInitialState: Float64Array;
}

/**
 * The L2 norm's epsilon (inside the square root), as FLA and the kernels use it.
 *
 * @example
 * ```ts
 * import { L2NORM_EPS } from "@attnkit/attnkit/reference";
 * const norm = (x: number[]) => Math.sqrt(x.reduce((s, v) => s + v * v, 0) + L2NORM_EPS);
 * ```
 */
export const L2NORM_EPS = 1e-6;

const INPUTS = {
  ...PROBLEM_FIELDS,
  g: NUMBERS,
  beta: NUMBERS,
  l2norm: "boolean",
  roundState: "function",
  checkpointEvery: count(1),
  onProgress: "function",
} as const;
const REQUIRED = ["B", "T", "H", "HK", "K", "V", "q", "k", "v", "beta", "scale"];

// Refuses inputs whose fields are missing, mistyped or inconsistent; returns the sequence count.
function checkInputs(op: string, x: DeltaReferenceInputs): number {
  checkFields(op, "x", x, INPUTS, REQUIRED);
  const N = checkProblem(op, x);
  const { B, T, H } = x;
  expectLength(op, "x.beta", x.beta, B * T * H, `[${B}, ${T}, ${H}]`);
  if (x.g) expectLength(op, "x.g", x.g, B * T * H, `[${B}, ${T}, ${H}]`);
  return N;
}

// q or k row (t, hk) of row b, normalised when asked; returns the vector and its norm.
function qkRow(
  x: DeltaReferenceInputs,
  src: ArrayLike<number>,
  b: number,
  t: number,
  hk: number,
): { vec: Float64Array; norm: number } {
  const { T, HK, K } = x;
  const base = ((b * T + t) * HK + hk) * K;
  const vec = new Float64Array(K);
  for (let i = 0; i < K; i++) vec[i] = src[base + i];
  if (!x.l2norm) return { vec, norm: 1 };
  let sum = 0;
  for (let i = 0; i < K; i++) sum += vec[i] * vec[i];
  const norm = Math.sqrt(sum + L2NORM_EPS);
  for (let i = 0; i < K; i++) vec[i] /= norm;
  return { vec, norm };
}

function scalar(
  a: ArrayLike<number> | undefined,
  x: DeltaReferenceInputs,
  b: number,
  t: number,
  h: number,
): number {
  return a ? a[(b * x.T + t) * x.H + h] : 0;
}

/**
 * The forward recurrence in float64: output, final state and residuals.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, compare, Tensor } from "@attnkit/attnkit";
 * import { deltaRuleReference } from "@attnkit/attnkit/reference";
 * const [B, T, H, D] = [1, 16, 2, 8];
 * using q = Tensor.randn([B, T, H, D], { seed: 1 });
 * using k = Tensor.randn([B, T, H, D], { seed: 2, std: D ** -0.5 });
 * using v = Tensor.randn([B, T, H, D], { seed: 3 });
 * using g = Tensor.rand([B, T, H], { seed: 4, low: -0.25, high: 0 });
 * using beta = Tensor.rand([B, T, H], { seed: 5 });
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd" });
 * const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
 * const oracle = deltaRuleReference({
 *   B, T, H, HK: H, K: D, V: D, scale: D ** -0.5,
 *   q: host(q), k: host(k), v: host(v), g: host(g), beta: host(beta),
 * });
 * console.log(compare(r.output, oracle.output).relRms); // about 1e-7 in float32
 * ```
 */
export function deltaRuleReference(x: DeltaReferenceInputs): DeltaReferenceOutputs {
  checkInputs("deltaRuleReference", x);
  const { B, T, H, K, V } = x;
  const KV = K * V;
  const output = new Float64Array(B * T * H * V);
  const residual = new Float64Array(B * T * H * V);
  const round = x.roundState;
  const { finalState, checkpoints } = walkStates(x, ({ row }, h, hk) => (S, t) => {
    const q = qkRow(x, x.q, row, t, hk).vec, k = qkRow(x, x.k, row, t, hk).vec;
    const a = x.g ? Math.exp(scalar(x.g, x, row, t, h)) : 1;
    const beta = scalar(x.beta, x, row, t, h);
    const vBase = ((row * T + t) * H + h) * V;
    for (let e = 0; e < KV; e++) S[e] *= a;
    residual.set(deltaWrite(S, k, rowAt(x.v, vBase, V), beta).u, vBase);
    if (round) { for (let e = 0; e < KV; e++) S[e] = round(S[e]); }
    output.set(readOut(S, q, x.scale), vBase);
  }, x.onProgress);
  return { output, finalState, residual, checkpoints };
}

/**
 * Reverse mode of {@link deltaRuleReference} for the loss `sum(dOutput * output) + sum(dFinalState *
 * finalState)`: the gradient of every input.
 *
 * @example
 * ```ts
 * import { deltaRuleReferenceBackward } from "@attnkit/attnkit/reference";
 * // One token, one head, K = V = 1: o = scale * q * beta * v * k.
 * const grads = deltaRuleReferenceBackward(
 *   { B: 1, T: 1, H: 1, HK: 1, K: 1, V: 1, q: [2], k: [3], v: [5], beta: [0.5], scale: 1 },
 *   [1],
 * );
 * console.log(grads.dq[0]); // beta * v * k = 7.5
 * ```
 */
export function deltaRuleReferenceBackward(
  x: DeltaReferenceInputs,
  dOutput: ArrayLike<number>,
  dFinalState?: ArrayLike<number>,
): DeltaReferenceGradients {
  const op = "deltaRuleReferenceBackward";
  const sequenceCount = checkInputs(op, x);
  checkOutputGradients(op, x, sequenceCount, dOutput, dFinalState, ", like v");
  const { B, T, H, HK, K, V } = x;
  const seqs = sequences(x);
  const N = seqs.length, G = H / HK, KV = K * V;
  const dq = new Float64Array(B * T * HK * K), dk = new Float64Array(B * T * HK * K);
  const dv = new Float64Array(B * T * H * V);
  const dbeta = new Float64Array(B * T * H), dg = new Float64Array(B * T * H);
  const dInitialState = new Float64Array(N * H * KV);
  for (let n = 0; n < N; n++) {
    const { row, begin, end } = seqs[n];
    const len = end - begin;
    // Normalised q/k rows of this sequence, per q/k head, and their norms.
    const qs: Float64Array[][] = [], ks: Float64Array[][] = [], qn: number[][] = [], kn: number[][] = [];
    for (let hk = 0; hk < HK; hk++) {
      qs.push([]), ks.push([]), qn.push([]), kn.push([]);
      for (let t = begin; t < end; t++) {
        const qr = qkRow(x, x.q, row, t, hk), kr = qkRow(x, x.k, row, t, hk);
        qs[hk].push(qr.vec), ks[hk].push(kr.vec), qn[hk].push(qr.norm), kn[hk].push(kr.norm);
      }
    }
    // Gradients w.r.t. the normalised rows, summed over each group's value heads.
    const dqh = Array.from({ length: HK }, () => Array.from({ length: len }, () => new Float64Array(K)));
    const dkh = Array.from({ length: HK }, () => Array.from({ length: len }, () => new Float64Array(K)));
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / G);
      // Forward, keeping the state before each token.
      const prev: Float64Array[] = [];
      const S = stateAt(x.initialState, n * H + h, KV);
      for (let i = 0; i < len; i++) {
        const t = begin + i;
        prev.push(S.slice());
        const a = x.g ? Math.exp(scalar(x.g, x, row, t, h)) : 1;
        for (let e = 0; e < KV; e++) S[e] *= a;
        deltaWrite(S, ks[hk][i], rowAt(x.v, ((row * T + t) * H + h) * V, V), scalar(x.beta, x, row, t, h));
      }
      // Reverse, each token replayed from the state before it.
      const dS = stateAt(dFinalState, n * H + h, KV);
      for (let i = len - 1; i >= 0; i--) {
        const t = begin + i, q = qs[hk][i], k = ks[hk][i], Sp = prev[i];
        const a = x.g ? Math.exp(scalar(x.g, x, row, t, h)) : 1;
        const beta = scalar(x.beta, x, row, t, h);
        const vBase = ((row * T + t) * H + h) * V;
        const Sd = Sp.map((s) => a * s), St = Sd.slice();
        const written = deltaWrite(St, k, rowAt(x.v, vBase, V), beta);
        readOutBackward(dS, St, q, rowAt(dOutput, vBase, V), x.scale, dqh[hk][i]);
        const back = deltaWriteBackward(dS, Sd, k, written, beta, dkh[hk][i]);
        dv.set(back.dv, vBase);
        dbeta[(row * T + t) * H + h] = back.dbeta;
        // S' = a Sp: dg = a sum(dS' Sp), and dS <- a dS'.
        let da = 0;
        for (let e = 0; e < KV; e++) {
          da += dS[e] * Sp[e];
          dS[e] *= a;
        }
        if (x.g) dg[(row * T + t) * H + h] = a * da;
      }
      dInitialState.set(dS, (n * H + h) * KV);
      x.onProgress?.(n * H + h + 1, N * H);
    }
    // Through the L2 norm: d(x / n) = dx^ / n - x (x . dx^) / n^3.
    for (let hk = 0; hk < HK; hk++) {
      for (let i = 0; i < len; i++) {
        const base = ((row * T + begin + i) * HK + hk) * K;
        for (const [src, grad, norms, out] of [[x.q, dqh, qn, dq], [x.k, dkh, kn, dk]] as const) {
          const d = grad[hk][i];
          if (!x.l2norm) {
            for (let j = 0; j < K; j++) out[base + j] = d[j];
            continue;
          }
          const nrm = norms[hk][i];
          let dot = 0;
          for (let j = 0; j < K; j++) dot += src[base + j] * d[j];
          for (let j = 0; j < K; j++) out[base + j] = d[j] / nrm - src[base + j] * dot / (nrm * nrm * nrm);
        }
      }
    }
  }
  return { dq, dk, dv, dbeta, dg, dInitialState };
}
