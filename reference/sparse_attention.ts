/**
 * Float64 oracles of the sparse-attention family, written from the specification (the JSDoc of
 * `ops/sparse/` and the comments of `csrc/include/attnkit_sparse.h`), one plain loop nest per op:
 *
 * - {@link nsaCompressionReference}: NSA's compressed branch (output and log-sum-exp);
 * - {@link nsaBlockImportance} / {@link nsaTopkReference}: NSA's block selection;
 * - {@link nsaSelectionReference}: NSA's selected branch;
 * - {@link dsaDecodeReference}: DeepSeek sparse attention decode over a latent cache;
 * - {@link lightningIndexerReference}: the lightning indexer's logits.
 *
 * Inputs are host arrays holding the exact input values (a tensor's `toArray()` widens 16-bit and fp8
 * values exactly), token-major; results are Float64Array (or Int32Array for block lists), never
 * rounded. Packed sequences: `offsets` `[N + 1]` (sequence n owns tokens `offsets[n] .. offsets[n+1]`),
 * and the compressed rows of sequence n start at row `chunkOffsets[n]`. Query head h reads key head
 * `floor(h / (heads / headsKv))`.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkNumbers, expectLength, expectNumbers } from "./checks.ts";

function size(op: string, name: string, value: number, min = 1): number {
  if (!Number.isSafeInteger(value) || value < min) {
    throw invalidArgument(op, `${name}: expected an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}

function groupOf(op: string, heads: number, headsKv: number): number {
  size(op, "heads", heads);
  size(op, "headsKv", headsKv);
  if (heads % headsKv !== 0) {
    throw invalidArgument(op, `headsKv: expected a divisor of heads=${heads}, got ${headsKv}`);
  }
  return heads / headsKv;
}

function offsetsOf(op: string, name: string, value: ArrayLike<number>): number[] {
  const o = Array.from(checkNumbers(op, name, value));
  if (o.length < 2 || o[0] !== 0 || o.some((x, i) => !Number.isSafeInteger(x) || (i > 0 && x < o[i - 1]))) {
    throw invalidArgument(op, `${name}: expected at least 2 nondecreasing integers from 0`);
  }
  return o;
}

// The token offsets and the first compressed row of each sequence (as many), and the token count.
function compressedOffsets(op: string, p: { offsets: ArrayLike<number>; chunkOffsets: ArrayLike<number> }) {
  const o = offsetsOf(op, "offsets", p.offsets), chunks = offsetsOf(op, "chunkOffsets", p.chunkOffsets);
  if (chunks.length !== o.length) {
    throw invalidArgument(op, "chunkOffsets: expected as many entries as offsets");
  }
  return { o, chunks, T: o[o.length - 1] };
}

function dot(a: ArrayLike<number>, aAt: number, b: ArrayLike<number>, bAt: number, n: number): number {
  let s = 0;
  for (let d = 0; d < n; d++) s += a[aAt + d] * b[bAt + d];
  return s;
}

/**
 * Softmax of `scores` weighting the rows `rows[j]` (offsets into `values`, each `width` long) with
 * multiplicity one per entry, accumulated into `out` at `outAt`. Returns the log-sum-exp (-Infinity
 * and nothing added when `scores` is empty).
 */
function softmaxInto(
  scores: readonly number[],
  rows: readonly number[],
  values: ArrayLike<number>,
  width: number,
  out: Float64Array,
  outAt: number,
): number {
  if (scores.length === 0) return -Infinity;
  const max = Math.max(...scores);
  let total = 0;
  const w = scores.map((s) => {
    const e = Math.exp(s - max);
    total += e;
    return e;
  });
  for (let j = 0; j < rows.length; j++) {
    const p = w[j] / total;
    for (let d = 0; d < width; d++) out[outAt + d] += p * values[rows[j] + d];
  }
  return max + Math.log(total);
}

/**
 * The compressed rows visible to the token at `position` of its sequence: row c covers positions
 * `[c stride, c stride + blockSize)` and is visible once its block has ended, so
 * `nc = position + 1 < blockSize ? 0 : floor((position + 1 - blockSize) / stride) + 1`.
 *
 * @example
 * ```ts
 * import { nsaVisibleRows } from "./sparse_attention.ts";
 * console.log(nsaVisibleRows(14, 16, 16), nsaVisibleRows(15, 16, 16), nsaVisibleRows(40, 16, 8)); // 0 1 4
 * ```
 */
export function nsaVisibleRows(position: number, blockSize: number, stride: number): number {
  return position + 1 < blockSize ? 0 : Math.floor((position + 1 - blockSize) / stride) + 1;
}

/** Inputs of {@link nsaCompressionReference}. */
export interface NsaCompressionInputs {
  /** Queries `[T, heads, dimK]`. */
  q: ArrayLike<number>;
  /** Compressed keys `[C, headsKv, dimK]`. */
  kCmp: ArrayLike<number>;
  /** Compressed values `[C, headsKv, dimV]`. */
  vCmp: ArrayLike<number>;
  /** `[N + 1]` token offsets. */
  offsets: ArrayLike<number>;
  /** `[N + 1]`: the first compressed row of each sequence. */
  chunkOffsets: ArrayLike<number>;
  /** Query heads. */
  heads: number;
  /** Key heads (divides heads). */
  headsKv: number;
  /** Head dim of q and kCmp. */
  dimK: number;
  /** Head dim of vCmp and the output. */
  dimV: number;
  /** Compression block size (bs). */
  blockSize: number;
  /** Compression stride (bc; default blockSize). */
  stride?: number;
  /** Score scale. */
  scale: number;
}

/** What {@link nsaCompressionReference} returns. */
export interface NsaCompressionOutputs {
  /** `[T, heads, dimV]`; 0 where a token sees no compressed row. */
  output: Float64Array;
  /** `[T, heads]` log-sum-exp of the scaled scores; 0 where a token sees no compressed row. */
  lse: Float64Array;
}

/**
 * NSA's compressed branch: the query at position i of sequence n, head h, attends the compressed rows
 * `chunkOffsets[n] + c`, `c < nsaVisibleRows(i, blockSize, stride)`, of key head h / group: softmax of
 * `scale q . kCmp` weighting vCmp. Output and lse are 0 where no row is visible.
 *
 * @example
 * ```ts
 * import { nsaCompressionReference } from "./sparse_attention.ts";
 * const r = nsaCompressionReference({
 *   q: [1, 1, 1], kCmp: [0], vCmp: [5], offsets: [0, 3], chunkOffsets: [0, 1],
 *   heads: 1, headsKv: 1, dimK: 1, dimV: 1, blockSize: 2, scale: 1,
 * });
 * console.log(r.output); // [0, 5, 5]
 * ```
 */
export function nsaCompressionReference(p: NsaCompressionInputs): NsaCompressionOutputs {
  const op = "nsaCompressionReference";
  const G = groupOf(op, p.heads, p.headsKv);
  const H = p.heads, Hkv = p.headsKv;
  const K = size(op, "dimK", p.dimK), V = size(op, "dimV", p.dimV);
  const bs = size(op, "blockSize", p.blockSize), bc = size(op, "stride", p.stride ?? bs);
  const { o, chunks, T } = compressedOffsets(op, p);
  expectNumbers(op, "q", p.q, T * H * K, "[T, heads, dimK]");
  let rows = 0;
  for (let n = 0; n + 1 < o.length; n++) {
    const len = o[n + 1] - o[n];
    if (len > 0) rows = Math.max(rows, chunks[n] + nsaVisibleRows(len - 1, bs, bc));
  }
  expectNumbers(op, "kCmp", p.kCmp, rows * Hkv * K, "the visible compressed rows");
  expectNumbers(op, "vCmp", p.vCmp, rows * Hkv * V, "the visible compressed rows");
  const output = new Float64Array(T * H * V), lse = new Float64Array(T * H);
  for (let n = 0; n + 1 < o.length; n++) {
    for (let t = o[n]; t < o[n + 1]; t++) {
      const nc = nsaVisibleRows(t - o[n], bs, bc);
      if (nc === 0) continue;
      for (let h = 0; h < H; h++) {
        const hk = Math.floor(h / G);
        const scores: number[] = [], valueRows: number[] = [];
        for (let c = 0; c < nc; c++) {
          const row = chunks[n] + c;
          scores.push(p.scale * dot(p.q, (t * H + h) * K, p.kCmp, (row * Hkv + hk) * K, K));
          valueRows.push((row * Hkv + hk) * V);
        }
        lse[t * H + h] = softmaxInto(scores, valueRows, p.vCmp, V, output, (t * H + h) * V);
      }
    }
  }
  return { output, lse };
}

/** Inputs of {@link nsaBlockImportance} and {@link nsaTopkReference}. */
export interface NsaTopkInputs {
  /** Queries `[T, heads, dim]`. */
  q: ArrayLike<number>;
  /** Compressed keys `[C, headsKv, dim]` (stride = blockSize: row c summarises block c). */
  kCmp: ArrayLike<number>;
  /** `[T, heads]` the compressed branch's log-sum-exp, as the op is given it. */
  lse: ArrayLike<number>;
  /** `[N + 1]` token offsets. */
  offsets: ArrayLike<number>;
  /** `[N + 1]`: the first compressed row of each sequence. */
  chunkOffsets: ArrayLike<number>;
  /** Query heads. */
  heads: number;
  /** Key heads (divides heads). */
  headsKv: number;
  /** Head dim. */
  dim: number;
  /** Block size of compression and selection. */
  blockSize: number;
  /** Score scale. */
  scale: number;
  /** Entries of each list, S ({@link nsaTopkReference} only). */
  selected?: number;
}

/**
 * The importance of every candidate block of every (token, key head): entry `t * headsKv + hk` holds
 * `b + 1` values for blocks `0 .. b`, `b = floor(i / blockSize)` with i the token's position. Blocks 0,
 * b - 1 and b are forced with importance G = heads / headsKv; any other block c scores
 * `sum over the group's heads g of exp(scale q_g . kCmp[chunkOffsets[n] + c] - lse[t, g])`.
 *
 * @example
 * ```ts
 * import { nsaBlockImportance } from "./sparse_attention.ts";
 * const imp = nsaBlockImportance({
 *   q: [1, 1, 1, 1], kCmp: [0, 0, 0], lse: [0, 0, 0, 0], offsets: [0, 4], chunkOffsets: [0, 4],
 *   heads: 1, headsKv: 1, dim: 1, blockSize: 1, scale: 1,
 * });
 * console.log(imp[3]); // [1, 1, 1, 1]: blocks 0, 2, 3 forced, block 1 scores exp(0 - 0)
 * ```
 */
export function nsaBlockImportance(p: NsaTopkInputs): Float64Array[] {
  const op = "nsaBlockImportance";
  const G = groupOf(op, p.heads, p.headsKv);
  const H = p.heads, Hkv = p.headsKv, K = size(op, "dim", p.dim), bs = size(op, "blockSize", p.blockSize);
  const { o, chunks, T } = compressedOffsets(op, p);
  expectNumbers(op, "q", p.q, T * H * K, "[T, heads, dim]");
  expectNumbers(op, "lse", p.lse, T * H, "[T, heads]");
  checkNumbers(op, "kCmp", p.kCmp);
  const out: Float64Array[] = new Array(T * Hkv);
  for (let n = 0; n + 1 < o.length; n++) {
    for (let t = o[n]; t < o[n + 1]; t++) {
      const b = Math.floor((t - o[n]) / bs);
      for (let hk = 0; hk < Hkv; hk++) {
        const imp = new Float64Array(b + 1);
        for (let c = 0; c <= b; c++) {
          if (c === 0 || c === b || c === b - 1) {
            imp[c] = G;
            continue;
          }
          const row = chunks[n] + c;
          expectLength(op, "kCmp", p.kCmp, (row + 1) * Hkv * K, "the scored compressed rows");
          let s = 0;
          for (let g = 0; g < G; g++) {
            const h = hk * G + g;
            s += Math.exp(
              p.scale * dot(p.q, (t * H + h) * K, p.kCmp, (row * Hkv + hk) * K, K) - p.lse[t * H + h],
            );
          }
          imp[c] = s;
        }
        out[t * Hkv + hk] = imp;
      }
    }
  }
  return out;
}

/** What {@link nsaTopkReference} returns. */
export interface NsaTopkOutputs {
  /** `[T, headsKv, S]`: the S most important blocks, decreasing, ties to the smaller index, then -1. */
  indices: Int32Array;
  /** {@link nsaBlockImportance}'s values. */
  importance: Float64Array[];
}

/**
 * NSA's block selection: for each (token, key head) the `selected` blocks of highest
 * {@link nsaBlockImportance}, in decreasing importance (a tie goes to the smaller block index), then
 * -1 when the token has fewer than `selected` candidates.
 *
 * @example
 * ```ts
 * import { nsaTopkReference } from "./sparse_attention.ts";
 * const r = nsaTopkReference({
 *   q: [1, 1, 1, 1, 1], kCmp: [0, 0, 0, 0, 0], lse: [0, 0, 0, 0, 0], offsets: [0, 5],
 *   chunkOffsets: [0, 5], heads: 1, headsKv: 1, dim: 1, blockSize: 1, scale: 1, selected: 6,
 * });
 * console.log(r.indices.slice(24)); // [0, 1, 2, 3, 4, -1]
 * ```
 */
export function nsaTopkReference(p: NsaTopkInputs): NsaTopkOutputs {
  const S = size("nsaTopkReference", "selected", p.selected ?? NaN);
  const importance = nsaBlockImportance(p);
  const indices = new Int32Array(importance.length * S).fill(-1);
  importance.forEach((imp, row) => {
    const order = Array.from(imp.keys()).sort((a, b) => imp[b] - imp[a] || a - b);
    for (let j = 0; j < Math.min(S, order.length); j++) indices[row * S + j] = order[j];
  });
  return { indices, importance };
}

/** Inputs of {@link nsaSelectionReference}. */
export interface NsaSelectionInputs {
  /** Queries `[T, heads, dim]`. */
  q: ArrayLike<number>;
  /** Keys `[T, headsKv, dim]`. */
  k: ArrayLike<number>;
  /** Values `[T, headsKv, dimV]`. */
  v: ArrayLike<number>;
  /** `[T, headsKv, selected]` block numbers; -1 pads. */
  blockIndices: ArrayLike<number>;
  /** `[T, headsKv]` entries of each list to read (clamped to [0, selected]); undefined: all. */
  blockCounts?: ArrayLike<number>;
  /** `[N + 1]` token offsets. */
  offsets: ArrayLike<number>;
  /** Query heads. */
  heads: number;
  /** Key heads (divides heads). */
  headsKv: number;
  /** Head dim of q and k. */
  dim: number;
  /** Head dim of v and the output. */
  dimV: number;
  /** Tokens per block. */
  blockSize: number;
  /** Entries per list, S. */
  selected: number;
  /** Score scale. */
  scale: number;
  /** Only keys at or before the query's own position. */
  causal: boolean;
}

/** What {@link nsaSelectionReference} returns. */
export interface NsaSelectionOutputs {
  /** `[T, heads, dimV]`; 0 where a query sees no key. */
  output: Float64Array;
  /** `[T, heads]` log-sum-exp of the scaled scores; -Infinity where a query sees no key. */
  lse: Float64Array;
  /** `[T, headsKv]` how many keys each (token, key head) attends. */
  keys: Int32Array;
}

/**
 * NSA's selected branch: the query at position i attends the union, over the first `blockCounts`
 * entries b of its list, of positions `[b blockSize, (b + 1) blockSize) ∩ [0, len)` of its own
 * sequence (only those `<= i` when causal), each position once (so a repeated block counts once, and
 * an entry naming no position, -1 padding or one out of range, adds nothing): softmax of `scale q . k`
 * weighting v.
 *
 * @example
 * ```ts
 * import { nsaSelectionReference } from "./sparse_attention.ts";
 * const r = nsaSelectionReference({
 *   q: [0, 0, 0, 0], k: [0, 0, 0, 0], v: [1, 2, 3, 4], blockIndices: [-1, -1, 0, -1, 0, 1, 1, 0],
 *   offsets: [0, 4], heads: 1, headsKv: 1, dim: 1, dimV: 1, blockSize: 2, selected: 2, scale: 1,
 *   causal: true,
 * });
 * console.log(r.output); // [0, 1.5, 2, 2.5]
 * ```
 */
export function nsaSelectionReference(p: NsaSelectionInputs): NsaSelectionOutputs {
  const op = "nsaSelectionReference";
  const G = groupOf(op, p.heads, p.headsKv);
  const H = p.heads, Hkv = p.headsKv, K = size(op, "dim", p.dim), V = size(op, "dimV", p.dimV);
  const bs = size(op, "blockSize", p.blockSize), S = size(op, "selected", p.selected);
  const o = offsetsOf(op, "offsets", p.offsets);
  const T = o[o.length - 1];
  expectNumbers(op, "q", p.q, T * H * K, "[T, heads, dim]");
  expectNumbers(op, "k", p.k, T * Hkv * K, "[T, headsKv, dim]");
  expectNumbers(op, "v", p.v, T * Hkv * V, "[T, headsKv, dimV]");
  expectNumbers(op, "blockIndices", p.blockIndices, T * Hkv * S, "[T, headsKv, S]");
  if (p.blockCounts !== undefined) {
    expectNumbers(op, "blockCounts", p.blockCounts, T * Hkv, "[T, headsKv]");
  }
  const output = new Float64Array(T * H * V), lse = new Float64Array(T * H).fill(-Infinity);
  const keys = new Int32Array(T * Hkv);
  for (let n = 0; n + 1 < o.length; n++) {
    const start = o[n], len = o[n + 1] - o[n];
    for (let t = start; t < o[n + 1]; t++) {
      const i = t - start, last = p.causal ? i : len - 1;
      for (let hk = 0; hk < Hkv; hk++) {
        const listAt = (t * Hkv + hk) * S;
        const count = p.blockCounts === undefined
          ? S
          : Math.min(S, Math.max(0, Math.trunc(p.blockCounts[t * Hkv + hk])));
        const seen = new Uint8Array(len);
        for (let e = 0; e < count; e++) {
          const b = p.blockIndices[listAt + e];
          if (!Number.isInteger(b) || b < 0) continue;
          for (let pos = b * bs; pos < (b + 1) * bs && pos <= last; pos++) seen[pos] = 1;
        }
        const positions: number[] = [];
        for (let pos = 0; pos < len; pos++) if (seen[pos]) positions.push(pos);
        keys[t * Hkv + hk] = positions.length;
        for (let g = 0; g < G; g++) {
          const h = hk * G + g;
          const scores = positions.map((pos) =>
            p.scale * dot(p.q, (t * H + h) * K, p.k, ((start + pos) * Hkv + hk) * K, K)
          );
          const rows = positions.map((pos) => ((start + pos) * Hkv + hk) * V);
          lse[t * H + h] = softmaxInto(scores, rows, p.v, V, output, (t * H + h) * V);
        }
      }
    }
  }
  return { output, lse, keys };
}

/** Inputs of {@link dsaDecodeReference}. */
export interface DsaDecodeInputs {
  /** Queries `[batch, seqLen, heads, dim + dimTail]`. */
  q: ArrayLike<number>;
  /** Latent cache `[batch, seqLenKv, headsKv, dim + dimTail]`: key = the whole row, value = its first dim. */
  kv: ArrayLike<number>;
  /** `[batch, seqLen, headsKv, topk]` cache rows; any entry outside [0, seqLenKv) pads. */
  indices: ArrayLike<number>;
  /** Sequences. */
  batch: number;
  /** Queries per sequence. */
  seqLen: number;
  /** Cache rows per sequence. */
  seqLenKv: number;
  /** Query heads. */
  heads: number;
  /** Cache heads (divides heads). */
  headsKv: number;
  /** Value (latent) dim. */
  dim: number;
  /** Scored-only tail dim. */
  dimTail: number;
  /** Entries per list. */
  topk: number;
  /** Position of query 0. */
  qStart: number;
  /** Tokens per cache row. */
  strideKv: number;
  /** Score scale. */
  smScale: number;
  /** Skip rows j with `j strideKv + strideKv - 1 > qStart + s`. */
  causal: boolean;
}

/**
 * DSA decode: query s of sequence b, head h, attends every listing of a row j, `0 <= j < seqLenKv`
 * (visible when causal as above), of its key head's list; a row listed twice carries twice the weight.
 * Softmax of `smScale q . kv_j` over the full width, weighting the first `dim` entries of kv_j.
 * Returns `[batch, seqLen, heads, dim]`, 0 for a query that sees no row.
 *
 * @example
 * ```ts
 * import { dsaDecodeReference } from "./sparse_attention.ts";
 * const out = dsaDecodeReference({
 *   q: [0], kv: [1, 3], indices: [0, 1, -1], batch: 1, seqLen: 1, seqLenKv: 2, heads: 1, headsKv: 1,
 *   dim: 1, dimTail: 0, topk: 3, qStart: 1, strideKv: 1, smScale: 1, causal: true,
 * });
 * console.log(out); // [2]
 * ```
 */
export function dsaDecodeReference(p: DsaDecodeInputs): Float64Array {
  const op = "dsaDecodeReference";
  const G = groupOf(op, p.heads, p.headsKv);
  const B = size(op, "batch", p.batch, 0), Sq = size(op, "seqLen", p.seqLen, 0);
  const Skv = size(op, "seqLenKv", p.seqLenKv, 0), H = p.heads, Hkv = p.headsKv;
  const D = size(op, "dim", p.dim),
    W = D + size(op, "dimTail", p.dimTail, 0),
    topk = size(op, "topk", p.topk);
  const stride = size(op, "strideKv", p.strideKv), qStart = size(op, "qStart", p.qStart, 0);
  expectNumbers(op, "q", p.q, B * Sq * H * W, "[batch, seqLen, heads, dim + dimTail]");
  expectNumbers(op, "kv", p.kv, B * Skv * Hkv * W, "[batch, seqLenKv, headsKv, width]");
  expectNumbers(op, "indices", p.indices, B * Sq * Hkv * topk, "[B, Sq, Hkv, topk]");
  const out = new Float64Array(B * Sq * H * D);
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < Sq; s++) {
      for (let hk = 0; hk < Hkv; hk++) {
        const rows: number[] = [];
        for (let e = 0; e < topk; e++) {
          const j = p.indices[((b * Sq + s) * Hkv + hk) * topk + e];
          if (!Number.isInteger(j) || j < 0 || j >= Skv) continue;
          if (p.causal && j * stride + stride - 1 > qStart + s) continue;
          rows.push(((b * Skv + j) * Hkv + hk) * W);
        }
        for (let g = 0; g < G; g++) {
          const h = hk * G + g, qAt = ((b * Sq + s) * H + h) * W;
          const scores = rows.map((r) => p.smScale * dot(p.q, qAt, p.kv, r, W));
          softmaxInto(scores, rows, p.kv, D, out, ((b * Sq + s) * H + h) * D);
        }
      }
    }
  }
  return out;
}

/** Inputs of {@link lightningIndexerReference}. */
export interface LightningIndexerInputs {
  /** `[Sq, heads, dim]`. */
  q: ArrayLike<number>;
  /** `[Sk, dim]`. */
  k: ArrayLike<number>;
  /** `[Sq, heads]`. */
  weights: ArrayLike<number>;
  /** `[Sq]` first key of each query's range. */
  ks: ArrayLike<number>;
  /** `[Sq]` one past the last key of each query's range. */
  ke: ArrayLike<number>;
  /** `[Sk]` dequantisation scale of each key (default ones). */
  kScale?: ArrayLike<number>;
  /** Queries. */
  seqLenQ: number;
  /** Keys. */
  seqLenK: number;
  /** Index heads. */
  heads: number;
  /** Index dim. */
  dim: number;
  /** -Infinity outside each range (else 0). */
  cleanLogits: boolean;
}

/**
 * The lightning indexer: `logits[i, j] = sum_h weights[i, h] max(0, kScale[j] q[i, h] . k[j])` for
 * `ks[i] <= j < ke[i]` (both bounds clamped to [0, Sk]), else -Infinity (cleanLogits) or 0.
 * Returns `[Sq, Sk]`.
 *
 * @example
 * ```ts
 * import { lightningIndexerReference } from "./sparse_attention.ts";
 * const logits = lightningIndexerReference({
 *   q: [1, -1], k: [2, 3], weights: [0.5, 1], ks: [1], ke: [2], seqLenQ: 1, seqLenK: 2, heads: 2,
 *   dim: 1, cleanLogits: true,
 * });
 * console.log(logits); // [-Infinity, 1.5]
 * ```
 */
export function lightningIndexerReference(p: LightningIndexerInputs): Float64Array {
  const op = "lightningIndexerReference";
  const Sq = size(op, "seqLenQ", p.seqLenQ, 0), Sk = size(op, "seqLenK", p.seqLenK, 0);
  const H = size(op, "heads", p.heads), D = size(op, "dim", p.dim);
  expectNumbers(op, "q", p.q, Sq * H * D, "[Sq, heads, dim]");
  expectNumbers(op, "k", p.k, Sk * D, "[Sk, dim]");
  expectNumbers(op, "weights", p.weights, Sq * H, "[Sq, heads]");
  expectNumbers(op, "ks", p.ks, Sq, "[Sq]");
  expectNumbers(op, "ke", p.ke, Sq, "[Sq]");
  if (p.kScale !== undefined) expectNumbers(op, "kScale", p.kScale, Sk, "[Sk]");
  const logits = new Float64Array(Sq * Sk).fill(p.cleanLogits ? -Infinity : 0);
  const clamp = (x: number) => Math.min(Sk, Math.max(0, x));
  for (let i = 0; i < Sq; i++) {
    const lo = clamp(p.ks[i]), hi = clamp(p.ke[i]);
    for (let j = lo; j < hi; j++) {
      const scale = p.kScale === undefined ? 1 : p.kScale[j];
      let s = 0;
      for (let h = 0; h < H; h++) {
        s += p.weights[i * H + h] * Math.max(0, scale * dot(p.q, (i * H + h) * D, p.k, j * D, D));
      }
      logits[i * Sk + j] = s;
    }
  }
  return logits;
}
