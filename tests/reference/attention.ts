// Float64 oracle of softmax attention (MHA / GQA, causal, windows, softcap, varlen), forward and
// backward, written plainly for the tests: an explicit per-key mask, one query row at a time (memory
// stays O(Skv + T * H * D), never Sq x Skv).
//
// The same code also gives the "same-precision" reference of the FlashAttention test rule: run with
// a Precision that rounds where a 16-bit kernel rounds (scores and softmax in fp32, P and dS rounded
// to the input dtype before their products, results rounded to the dtype). Dot products are formed
// in float64 and rounded once to fp32: fp32 summation error (~1e-7 relative) is far below the dtype
// roundings that set the reference's error.

/** One problem in packed form: sequence n owns query tokens [qStart[n], qStart[n+1]) and keys likewise. */
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
  heads: number;
  headsKv: number;
  dim: number;
  smScale: number;
  /** 0 for none. */
  softcap: number;
  causal: boolean;
  /** -1 for unlimited. */
  windowLeft: number;
  /** -1 for unlimited. */
  windowRight: number;
}

/** Where a computation rounds. The oracle rounds nowhere. */
export interface Precision {
  name: string;
  /** An fp32 intermediate: scores, softmax terms, row sums, dP, dS. */
  acc(x: number): number;
  /** A matrix-product operand the kernel holds in the input dtype: P before P V and P^T dO, dS before dS K. */
  operand(x: number): number;
  /** A result stored in the input dtype. */
  result(x: number): number;
}

const identity = (x: number) => x;

/** Exact float64: the oracle. */
export const FLOAT64: Precision = { name: "float64", acc: identity, operand: identity, result: identity };

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Rounds to bfloat16 (through float32, to nearest even; the values rounded here are fp32 already). */
export function roundBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return NaN;
  u32[0] = ((u + 0x7fff + ((u >>> 16) & 1)) & 0xffff0000) >>> 0;
  return f32[0];
}

/** Rounds to float16, to nearest even. */
export function roundF16(x: number): number {
  return Math.f16round(x);
}

/** The same-precision reference of a 16-bit dtype. */
export function samePrecision(dtype: "float16" | "bfloat16"): Precision {
  const round = dtype === "bfloat16" ? roundBf16 : roundF16;
  return { name: `${dtype} plain`, acc: Math.fround, operand: round, result: round };
}

/** The mask rule, stated directly: is key j visible to query row i of a (sq, skv) sequence? */
export function admits(p: AttentionProblem, i: number, j: number, sq: number, skv: number): boolean {
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
    if (!admits(p, i, j, sq, skv)) continue;
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
    for (let h = 0; h < p.heads; h++) for (let i = 0; i < sq; i++) fn(n, h, i);
  }
}

/** Attention forward at the given precision (FLOAT64 is the oracle). */
export function attentionForward(p: AttentionProblem, prec: Precision = FLOAT64): ForwardResult {
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
 * Attention backward at the given precision. `output` is the forward output the kernel would read
 * for D_i = rowsum(dO * O) (the oracle uses the exact one; the same-precision reference its own
 * rounded one).
 */
export function attentionBackward(
  p: AttentionProblem,
  dOut: ArrayLike<number>,
  output: ArrayLike<number>,
  prec: Precision = FLOAT64,
): BackwardResult {
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

/** The scalar loss sum(dO * O) whose gradients attentionBackward returns (for finite differences). */
export function attentionLoss(p: AttentionProblem, dOut: ArrayLike<number>): number {
  const { output } = attentionForward(p, FLOAT64);
  return dot(output, 0, dOut, 0, output.length);
}
