/**
 * Float64 oracle of softmax attention (MHA / GQA, causal, windows, softcap, varlen), forward and
 * backward, written plainly: an explicit per-key mask, one query row at a time (memory stays
 * O(Skv + T * H * D), never Sq x Skv).
 *
 * The same code also gives the "same-precision" reference of FlashAttention's test rule: run with a
 * {@link Precision} that rounds where a 16-bit kernel rounds (scores and softmax in fp32, P and dS
 * rounded to the input dtype before their products, results rounded to the dtype). Dot products are
 * formed in float64 and rounded once to fp32: fp32 summation error (~1e-7 relative) is far below the
 * dtype roundings that set the reference's error.
 *
 * @module
 */
import { roundE4m3 } from "./rounding.ts";
import { invalidArgument } from "../ffi/errors.ts";
import { checkArgument, describeValue } from "../ops/args.ts";
import { checkFields, count, expectLength, expectNumbers, FINITE, NUMBERS, OFFSETS } from "./checks.ts";

/**
 * One problem in packed form: sequence n owns query tokens [qStart[n], qStart[n+1]) and keys likewise.
 * A dense `[B, S, H, D]` batch is the packed form with offsets `0, S, 2S, ..., BS`.
 */
export interface AttentionProblem {
  /** Queries [Tq, heads, dim]. */
  q: ArrayLike<number>;
  /** Keys [Tkv, headsKv, dim]. */
  k: ArrayLike<number>;
  /** Values [Tkv, headsKv, dim]. */
  v: ArrayLike<number>;
  /** N + 1 offsets into the query tokens. */
  qStart: readonly number[];
  /** N + 1 offsets into the key tokens. */
  kvStart: readonly number[];
  /** Query heads. */
  heads: number;
  /** Key/value heads (divides `heads`; query head h reads KV head floor(h / (heads / headsKv))). */
  headsKv: number;
  /** Head dimension. */
  dim: number;
  /** Scale of q k^T (usually dim^-0.5). */
  smScale: number;
  /** Softcap: scores become `softcap * tanh(score / softcap)`; 0 for none. */
  softcap: number;
  /** Causal mask, aligned bottom-right (the last query sees the last key). */
  causal: boolean;
  /** -1 for unlimited. */
  windowLeft: number;
  /** -1 for unlimited. */
  windowRight: number;
  /** Called after each (sequence, head) pair with the pairs done and their total (for long runs). */
  onProgress?: (done: number, total: number) => void;
}

/** Where a computation rounds. The oracle rounds nowhere. */
export interface Precision {
  /** A name for messages. */
  name: string;
  /** An fp32 intermediate: scores, softmax terms, row sums, dP, dS. */
  acc(x: number): number;
  /** A matrix-product operand the kernel holds in the input dtype: P before P V and P^T dO, dS before dS K. */
  operand(x: number): number;
  /** A result stored in the input dtype. */
  result(x: number): number;
}

const identity = (x: number) => x;

/**
 * Exact float64: the oracle.
 *
 * @example
 * ```ts
 * import { FLOAT64 } from "@attnkit/attnkit/reference";
 * console.log(FLOAT64.result(1 / 3)); // unrounded
 * ```
 */
export const FLOAT64: Precision = { name: "float64", acc: identity, operand: identity, result: identity };

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * Rounds to bfloat16 (through float32, to nearest even; the values rounded here are fp32 already).
 *
 * @example
 * ```ts
 * import { roundBf16 } from "@attnkit/attnkit/reference";
 * console.log(roundBf16(1 / 3)); // 0.333984375
 * ```
 */
export function roundBf16(x: number): number {
  if (typeof x !== "number") {
    throw invalidArgument("roundBf16", `x: expected a number, got ${describeValue(x)}`);
  }
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return NaN;
  u32[0] = ((u + 0x7fff + ((u >>> 16) & 1)) & 0xffff0000) >>> 0;
  return f32[0];
}

/**
 * Rounds to float16, to nearest even.
 *
 * @example
 * ```ts
 * import { roundF16 } from "@attnkit/attnkit/reference";
 * console.log(roundF16(1 / 3)); // 0.333251953125
 * ```
 */
export function roundF16(x: number): number {
  if (typeof x !== "number") {
    throw invalidArgument("roundF16", `x: expected a number, got ${describeValue(x)}`);
  }
  return Math.f16round(x);
}

/**
 * The same-precision reference of a 16-bit dtype: where a 16-bit kernel computed the plain way would
 * round. FlashAttention's test rule bounds a kernel's error by a multiple of this reference's error
 * (see `ATTENTION_TOLERANCE`).
 *
 * @example
 * ```ts
 * import { attentionReference, samePrecision } from "@attnkit/attnkit/reference";
 * const p = {
 *   q: [1, 0], k: [1, 0, 0, 1], v: [1, 2, 3, 4], qStart: [0, 1], kvStart: [0, 2],
 *   heads: 1, headsKv: 1, dim: 2, smScale: 1, softcap: 0, causal: false, windowLeft: -1, windowRight: -1,
 * };
 * const plain = attentionReference(p, samePrecision("bfloat16")).output;
 * ```
 */
export function samePrecision(dtype: "float16" | "bfloat16"): Precision {
  checkArgument("samePrecision", "dtype", dtype, ["float16", "bfloat16"]);
  const round = dtype === "bfloat16" ? roundBf16 : roundF16;
  return { name: `${dtype} plain`, acc: Math.fround, operand: round, result: round };
}

/**
 * The same-precision reference of the float8_e4m3 forward's tensor-core path: fp32 intermediates, each
 * probability times 256 rounded to e4m3 (and divided back) before P V, the output rounded to `dtype`.
 *
 * @example
 * ```ts
 * import { float8Precision } from "@attnkit/attnkit/reference";
 * console.log(float8Precision("bfloat16").operand(0.3)); // 0.3125 (76.8 rounds to 80)
 * ```
 */
export function float8Precision(dtype: "float16" | "bfloat16"): Precision {
  checkArgument("float8Precision", "dtype", dtype, ["float16", "bfloat16"]);
  const round = dtype === "bfloat16" ? roundBf16 : roundF16;
  return {
    name: `float8_e4m3 P, ${dtype} out`,
    acc: Math.fround,
    operand: (x) => roundE4m3(256 * x) / 256,
    result: round,
  };
}

/**
 * The mask rule, stated directly: is key j visible to query row i of a (sq, skv) sequence?
 *
 * @example
 * ```ts
 * import { admits } from "@attnkit/attnkit/reference";
 * const p = {
 *   q: [], k: [], v: [], qStart: [0, 4], kvStart: [0, 4],
 *   heads: 1, headsKv: 1, dim: 1, smScale: 1, softcap: 0, causal: true, windowLeft: -1, windowRight: -1,
 * };
 * console.log(admits(p, 1, 2, 4, 4)); // false: a later key
 * ```
 */
export function admits(p: AttentionProblem, i: number, j: number, sq: number, skv: number): boolean {
  checkFields("admits", "p", p, PROBLEM, ["causal", "windowLeft", "windowRight"]);
  for (const [name, v] of [["i", i], ["j", j], ["sq", sq], ["skv", skv]] as const) {
    checkArgument("admits", name, v, count(0));
  }
  return admitted(p, i, j, sq, skv);
}

const PROBLEM = {
  q: NUMBERS,
  k: NUMBERS,
  v: NUMBERS,
  qStart: OFFSETS,
  kvStart: OFFSETS,
  heads: count(1),
  headsKv: count(1),
  dim: count(1),
  smScale: FINITE,
  softcap: (
    v: unknown,
  ) => (typeof v === "number" && v >= 0 && Number.isFinite(v) ? undefined : "a number >= 0"),
  causal: "boolean",
  windowLeft: count(-1),
  windowRight: count(-1),
  onProgress: "function",
} as const;
const REQUIRED = Object.keys(PROBLEM).filter((k) => k !== "onProgress");

// Refuses a problem whose fields are missing, mistyped or inconsistent; returns the token counts.
function checkProblem(op: string, p: AttentionProblem): { Tq: number; Tkv: number } {
  checkFields(op, "p", p, PROBLEM, REQUIRED);
  if (p.heads % p.headsKv !== 0) {
    throw invalidArgument(op, `p.headsKv: ${p.headsKv} does not divide the ${p.heads} query heads`);
  }
  if (p.qStart.length !== p.kvStart.length) {
    throw invalidArgument(
      op,
      `p.kvStart: ${p.kvStart.length} offsets for the ${p.qStart.length - 1} sequences of qStart`,
    );
  }
  const Tq = p.qStart[p.qStart.length - 1], Tkv = p.kvStart[p.kvStart.length - 1];
  expectLength(op, "p.q", p.q, Tq * p.heads * p.dim, `[${Tq}, ${p.heads}, ${p.dim}]`);
  expectLength(op, "p.k", p.k, Tkv * p.headsKv * p.dim, `[${Tkv}, ${p.headsKv}, ${p.dim}]`);
  expectLength(op, "p.v", p.v, Tkv * p.headsKv * p.dim, `[${Tkv}, ${p.headsKv}, ${p.dim}]`);
  return { Tq, Tkv };
}

function checkPrecision(op: string, prec: Precision): void {
  const fn = "function";
  checkFields(op, "prec", prec, { name: "string", acc: fn, operand: fn, result: fn }, [
    "name",
    "acc",
    "operand",
    "result",
  ]);
}

// admits without the checks, for the loops.
function admitted(p: AttentionProblem, i: number, j: number, sq: number, skv: number): boolean {
  const pos = i + skv - sq; // bottom-right alignment
  if (p.causal && j > pos) return false;
  if (p.windowLeft >= 0 && j < pos - p.windowLeft) return false;
  if (p.windowRight >= 0 && j > pos + p.windowRight) return false;
  return true;
}

function dot(a: ArrayLike<number>, ai: number, b: ArrayLike<number>, bi: number, n: number): number {
  let s = 0;
  for (let d = 0; d < n; d++) s += a[ai + d] * b[bi + d];
  return s;
}

/** Forward results in packed form. */
export interface ForwardResult {
  /** [Tq, heads, dim]. */
  output: Float64Array;
  /** [heads, Tq], natural log; -inf for a row that admits no key. */
  lse: Float64Array;
}

/** Backward results in packed form. */
export interface BackwardResult {
  /** [Tq, heads, dim]. */
  dq: Float64Array;
  /** [Tkv, headsKv, dim]. */
  dk: Float64Array;
  /** [Tkv, headsKv, dim]. */
  dv: Float64Array;
}

// One query row's softmax: the admitted keys, their (softcapped) scores, probabilities and LSE.
interface RowSoftmax {
  keys: number[];
  scores: number[]; // after the softcap
  probs: number[];
  lse: number;
}

function rowSoftmax(
  p: AttentionProblem,
  prec: Precision,
  n: number,
  h: number,
  i: number,
): RowSoftmax {
  const { dim: D, heads: H, headsKv: HKV } = p;
  const sq = p.qStart[n + 1] - p.qStart[n], skv = p.kvStart[n + 1] - p.kvStart[n];
  const r = Math.floor(h / (H / HKV));
  const qi = ((p.qStart[n] + i) * H + h) * D;
  const keys: number[] = [], scores: number[] = [];
  for (let j = 0; j < skv; j++) {
    if (!admitted(p, i, j, sq, skv)) continue;
    const raw = dot(p.q, qi, p.k, ((p.kvStart[n] + j) * HKV + r) * D, D);
    const z = prec.acc(p.smScale * raw);
    scores.push(p.softcap > 0 ? prec.acc(p.softcap * Math.tanh(z / p.softcap)) : z);
    keys.push(j);
  }
  if (keys.length === 0) return { keys, scores, probs: [], lse: -Infinity };
  let m = -Infinity;
  for (const s of scores) m = Math.max(m, s);
  let sum = 0;
  const e = scores.map((s) => prec.acc(Math.exp(s - m)));
  for (const x of e) sum += x;
  sum = prec.acc(sum);
  return { keys, scores, probs: e.map((x) => prec.acc(x / sum)), lse: prec.acc(m + Math.log(sum)) };
}

function forEachRow(p: AttentionProblem, fn: (n: number, h: number, i: number) => void): void {
  const N = p.qStart.length - 1;
  for (let n = 0; n < N; n++) {
    const sq = p.qStart[n + 1] - p.qStart[n];
    for (let h = 0; h < p.heads; h++) {
      for (let i = 0; i < sq; i++) fn(n, h, i);
      p.onProgress?.(n * p.heads + h + 1, N * p.heads);
    }
  }
}

/**
 * Attention forward at the given precision (FLOAT64, the default, is the oracle). Inputs are host
 * arrays holding the exact values the op read (a 16-bit tensor's `toArray()` widens exactly).
 *
 * @example
 * ```ts
 * import { attentionReference } from "@attnkit/attnkit/reference";
 * // One sequence of 2 tokens, one head of dim 2, causal.
 * const { output, lse } = attentionReference({
 *   q: [1, 0, 0, 1], k: [1, 0, 0, 1], v: [1, 2, 3, 4], qStart: [0, 2], kvStart: [0, 2],
 *   heads: 1, headsKv: 1, dim: 2, smScale: 1, softcap: 0, causal: true, windowLeft: -1, windowRight: -1,
 * });
 * console.log(output.slice(0, 2)); // the first token sees only itself: [1, 2]
 * ```
 */
export function attentionForward(p: AttentionProblem, prec: Precision = FLOAT64): ForwardResult {
  checkProblem("attentionReference", p);
  checkPrecision("attentionReference", prec);
  const { dim: D, heads: H, headsKv: HKV } = p;
  const Tq = p.qStart[p.qStart.length - 1];
  const output = new Float64Array(Tq * H * D);
  const lse = new Float64Array(H * Tq);
  const acc = new Float64Array(D);
  forEachRow(p, (n, h, i) => {
    const row = rowSoftmax(p, prec, n, h, i);
    const t = p.qStart[n] + i;
    lse[h * Tq + t] = row.lse;
    const r = Math.floor(h / (H / HKV));
    acc.fill(0);
    for (let x = 0; x < row.keys.length; x++) {
      const prob = prec.operand(row.probs[x]);
      const vj = ((p.kvStart[n] + row.keys[x]) * HKV + r) * D;
      for (let d = 0; d < D; d++) acc[d] += prob * p.v[vj + d];
    }
    const o = (t * H + h) * D;
    for (let d = 0; d < D; d++) output[o + d] = prec.result(prec.acc(acc[d])); // 0 when no key is admitted
  });
  return { output, lse };
}

/**
 * Attention backward at the given precision: the gradients of `sum(dOut * output)`. `output` is the
 * forward output the kernel would read for D_i = rowsum(dO * O) (the oracle uses the exact one; the
 * same-precision reference its own rounded one).
 *
 * @example
 * ```ts
 * import { attentionReference, attentionReferenceBackward } from "@attnkit/attnkit/reference";
 * const p = {
 *   q: [1, 0, 0, 1], k: [1, 0, 0, 1], v: [1, 2, 3, 4], qStart: [0, 2], kvStart: [0, 2],
 *   heads: 1, headsKv: 1, dim: 2, smScale: 1, softcap: 0, causal: false, windowLeft: -1, windowRight: -1,
 * };
 * const { output } = attentionReference(p);
 * const { dq, dk, dv } = attentionReferenceBackward(p, [1, 1, 1, 1], output);
 * ```
 */
export function attentionBackward(
  p: AttentionProblem,
  dOut: ArrayLike<number>,
  output: ArrayLike<number>,
  prec: Precision = FLOAT64,
): BackwardResult {
  const op = "attentionReferenceBackward";
  const { Tq: rows } = checkProblem(op, p);
  checkPrecision(op, prec);
  const what = `[${rows}, ${p.heads}, ${p.dim}], like q`;
  expectNumbers(op, "dOut", dOut, rows * p.heads * p.dim, what);
  expectNumbers(op, "output", output, rows * p.heads * p.dim, what);
  const { dim: D, heads: H, headsKv: HKV } = p;
  const Tq = p.qStart[p.qStart.length - 1], Tkv = p.kvStart[p.kvStart.length - 1];
  const dq = new Float64Array(Tq * H * D);
  const dk = new Float64Array(Tkv * HKV * D);
  const dv = new Float64Array(Tkv * HKV * D);
  const dqRow = new Float64Array(D);
  forEachRow(p, (n, h, i) => {
    const row = rowSoftmax(p, prec, n, h, i);
    const r = Math.floor(h / (H / HKV));
    const t = p.qStart[n] + i, qi = (t * H + h) * D;
    const delta = prec.acc(dot(dOut, qi, output, qi, D)); // D_i = rowsum(dO * O)
    dqRow.fill(0);
    for (let x = 0; x < row.keys.length; x++) {
      const kj = ((p.kvStart[n] + row.keys[x]) * HKV + r) * D;
      const prob = row.probs[x];
      const dp = prec.acc(dot(dOut, qi, p.v, kj, D));
      let dz = prec.acc(prob * (dp - delta));
      if (p.softcap > 0) {
        const tanh = row.scores[x] / p.softcap;
        dz = prec.acc(dz * (1 - tanh * tanh));
      }
      const dzOp = prec.operand(dz), pOp = prec.operand(prob);
      for (let d = 0; d < D; d++) {
        dqRow[d] += dzOp * p.k[kj + d];
        dk[kj + d] += dzOp * p.q[qi + d];
        dv[kj + d] += pOp * dOut[qi + d];
      }
    }
    for (let d = 0; d < D; d++) dq[qi + d] = prec.result(prec.acc(p.smScale * dqRow[d]));
  });
  for (let x = 0; x < dk.length; x++) {
    dk[x] = prec.result(prec.acc(p.smScale * dk[x]));
    dv[x] = prec.result(prec.acc(dv[x]));
  }
  return { dq, dk, dv };
}

/**
 * The scalar loss sum(dO * O) whose gradients the backward oracle returns (for finite differences).
 *
 * @example
 * ```ts
 * import { attentionReferenceLoss } from "@attnkit/attnkit/reference";
 * const loss = attentionReferenceLoss({
 *   q: [1, 0], k: [1, 0], v: [2, 3], qStart: [0, 1], kvStart: [0, 1],
 *   heads: 1, headsKv: 1, dim: 2, smScale: 1, softcap: 0, causal: false, windowLeft: -1, windowRight: -1,
 * }, [1, 1]);
 * console.log(loss); // 5: one key, so the output is v
 * ```
 */
export function attentionLoss(p: AttentionProblem, dOut: ArrayLike<number>): number {
  const { Tq } = checkProblem("attentionReferenceLoss", p);
  const what = `[${Tq}, ${p.heads}, ${p.dim}], like q`;
  expectNumbers("attentionReferenceLoss", "dOut", dOut, Tq * p.heads * p.dim, what);
  const { output } = attentionForward(p, FLOAT64);
  return dot(output, 0, dOut, 0, output.length);
}
