// The sparse-attention family (NSA's compressed, selection and selected branches over packed sequences,
// DSA decode, the lightning indexer) against the float64 oracles of reference/sparse_attention.ts, written
// from the spec, on fresh random inputs (withSeed prints the seed of a failure). Outputs are poisoned
// (NaN, or -7 for int32 block lists) through `out`, and some calls go without it.
//
// Tolerance rule. The ops compute in float32 (double on the CPU) from the exact input values and round
// once to the output dtype, so the bound is that one rounding plus float32 arithmetic: elementwise
// |actual - oracle| <= atol + rtol |oracle|, and a relative RMS error (assertClose's relRms):
//   float32 outputs: rtol 2e-5, atol 1e-5, relRms 1e-5;
//   bfloat16 outputs: rtol 8e-3 (one rounding is <= 2^-8 = 3.9e-3 relative), atol max(1e-4, 1.6e-2 RMS),
//     relRms 5e-3;
//   float16 outputs: rtol 1.5e-3 (one rounding is <= 2^-11 = 4.9e-4 relative), atol max(2e-5, 2e-3 RMS),
//     relRms 1e-3;
//   (RMS: of the oracle's outputs. The absolute part covers the tensor-core block, which rounds P to 16 bits
//   before P V as FlashAttention does: errors of about 2^-9 of the output's scale on small elements);
//   lse (float32, any input dtype): |error| <= 2e-5 (1 + |lse|);
//   indexer logits (float32 sums of signed terms): |error| <= 2e-5 |oracle| + (D + H) 2^-23 A, with A
//     the same sum over absolute values (the float32 accumulation bound), and relRms 1e-5;
//   NSA block importance (sums of at most `group` probabilities): 1e-4 absolute.
// Measured on the CPU build over 65 seeds (max |error| / |oracle| over elements above 1e-3 of the
// largest, then the largest relRms): float32 outputs 8.8e-6 / 3.5e-8 (max |error| 1.6e-7, measured
// while the native code still held the scale in float32), bfloat16 3.9e-3 / 2.3e-3, float16 4.9e-4 /
// 2.3e-4, lse 3.1e-7 absolute, logits (bfloat16 and float8_e4m3 inputs) 6e-8 / 4.5e-8; no element used
// more than half of its elementwise bound. The float32 bounds leave room for float32 accumulation on the
// GPU. Where the oracle is exactly 0 (a query that sees nothing) the op must give exactly 0 (and lse 0 for
// the compressed branch); -inf logits exactly -inf.
//
// NSA selection is checked robustly (not against one exact list): each row holds min(S, b + 1) distinct
// blocks <= b then -1; the forced blocks (0, b - 1, b, importance `group`) come first in index order; the
// chosen set is a top-S of the oracle's importance within the tolerance, in nonincreasing order.
import assert from "node:assert/strict";
import {
  assertClose,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  type Device,
  FP8LightningIndexerFwdOp,
  nsaChunkOffsets,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  NSATopkVarlenOp,
  Tensor,
} from "../mod.ts";
import {
  dsaDecodeReference,
  type LightningIndexerInputs,
  lightningIndexerReference,
  nsaBlockImportance,
  nsaCompressionReference,
  nsaSelectionReference,
  nsaVisibleRows,
} from "../reference/sparse_attention.ts";
import { deviceTest, expectNoLeak, poison, refuses, withSeed } from "./helpers.ts";
import { generator } from "./oracle_checks.ts";

type FloatDType = "float32" | "bfloat16" | "float16";

const OUTPUT_TOL: Record<FloatDType, { rtol: number; atol: number; relRms: number }> = {
  float32: { rtol: 2e-5, atol: 1e-5, relRms: 1e-5 },
  bfloat16: { rtol: 8e-3, atol: 1e-4, relRms: 5e-3 },
  float16: { rtol: 1.5e-3, atol: 2e-5, relRms: 1e-3 },
};
const LSE_TOL = { rtol: 2e-5, atol: 2e-5 };
const IMPORTANCE_TOL = 1e-4;
const LOGITS_TOL = { rtol: 2e-5, relRms: 1e-5 };

const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
const ints = (t: Tensor) => Int32Array.from(t.toArray() as Int32Array);
const offsetsOf = (lengths: number[]) => lengths.reduce((o, l) => [...o, o[o.length - 1] + l], [0]);

/** Asserts the output's elementwise and relative RMS bounds of its dtype against the oracle. */
function expectOutput(name: string, actual: Tensor, oracle: ArrayLike<number>, dtype: FloatDType): void {
  const t = OUTPUT_TOL[dtype];
  // 16-bit: the tensor-core block rounds P to 16 bits before P V (as FlashAttention does), an error of
  // that size against the output's scale, so the absolute part follows the oracle's RMS.
  let sum = 0;
  for (let i = 0; i < oracle.length; i++) sum += oracle[i] * oracle[i];
  const rms = oracle.length > 0 ? Math.sqrt(sum / oracle.length) : 0;
  const atol = dtype === "float32" ? t.atol : Math.max(t.atol, P_ROUNDING[dtype] * rms);
  assertClose(actual, oracle, { ...t, atol, name });
}

/** 16-bit outputs: the absolute error allowed per unit of the oracle's RMS (see expectOutput). */
const P_ROUNDING = { bfloat16: 1.6e-2, float16: 2e-3 };

/** Asserts that every element of `values` in the listed rows (each `width` long) is exactly `want`. */
function expectRowsExactly(name: string, values: ArrayLike<number>, rows: number[], width: number, want = 0) {
  for (const r of rows) {
    for (let d = 0; d < width; d++) {
      const x = values[r * width + d];
      assert.ok(x === want, `${name}: row ${r} element ${d} is ${x}, not ${want}`);
    }
  }
}

/** A random permutation of 0 .. n - 1. */
function shuffled(rnd: () => number, n: number): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

// The refusals of bad index values (read back by the native code) are checked here for the refusal
// itself; whether their message names the argument as the caller passed it (blockIndices, blockCounts,
// cuSeqlenKs / cuSeqlenKe, chunkOffsets) is the separate test "value refusals name the argument".
const LIST_REFUSED = /blockIndices|block_indices/;
const COUNT_REFUSED = /blockCounts|block_counts/;
const RANGE_REFUSED = /cuSeqlenK[se]|ks, ke/;
const CHUNKS_REFUSED = /chunkOffsets|chunk_offsets/;

// ---- NSA, compressed branch ----

interface CmpCase {
  lengths: number[];
  heads: number;
  group: number;
  dimK: number;
  dimV: number;
  bs: number;
  bc?: number;
  dtype: FloatDType;
  /** Spare compressed rows after each sequence's (so the rows must be found through chunkOffsets). */
  spare?: number;
  /** Pass poisoned output buffers. */
  out: boolean;
}

function checkCompression(device: Device, c: CmpCase, seed: number): void {
  const { heads: H, group: G, dimK: K, dimV: V, bs, dtype } = c;
  const bc = c.bc ?? bs, Hkv = H / G;
  const offsets = offsetsOf(c.lengths), T = offsets[offsets.length - 1];
  // nsaChunkOffsets: ceil(len / bc) rows per sequence (at least the rows its last token sees); with `spare`,
  // exactly the rows the last token sees plus the spare ones.
  const rowsOf = (len: number) => (len === 0 ? 0 : nsaVisibleRows(len - 1, bs, bc)) + (c.spare ?? 0);
  const chunks = c.spare === undefined ? undefined : offsetsOf(c.lengths.map(rowsOf));
  using chunkTensor = chunks === undefined ? nsaChunkOffsets(offsets, bs, { stride: bc, device }) : undefined;
  const chunkOffsets = chunks ?? Array.from(ints(chunkTensor!));
  if (chunks === undefined) {
    assert.deepEqual(chunkOffsets, offsetsOf(c.lengths.map((l) => Math.ceil(l / bc))), "nsaChunkOffsets");
  }
  const C = chunkOffsets[chunkOffsets.length - 1];
  using q = Tensor.randn([T, H, K], { dtype, device, seed });
  using kCmp = Tensor.randn([C, Hkv, K], { dtype, device, seed: seed + 1 });
  using vCmp = Tensor.randn([C, Hkv, V], { dtype, device, seed: seed + 2 });
  using tokens = nsaTokenIndices(offsets, { device });
  const op = new NSACmpFwdVarlenOp({
    seqNum: c.lengths.length,
    cSeqLen: T,
    heads: H,
    dimK: K,
    dimV: V,
    chunkNum: C,
    group: G,
    bs,
    bc: c.bc,
  });
  using outBuf = c.out ? poison(Tensor.empty([T, H, V], { dtype, device })) : undefined;
  using lseBuf = c.out ? poison(Tensor.empty([T, H], { device })) : undefined;
  using r = op.forward(
    q,
    kCmp,
    vCmp,
    offsets,
    chunkTensor ?? chunkOffsets,
    tokens,
    c.out ? { output: outBuf, lse: lseBuf } : undefined,
  );
  if (c.out) assert.ok(r.output === outBuf && r.lse === lseBuf, "the out buffers are returned");
  assert.equal(r.output.dtype, dtype);
  assert.deepEqual(r.output.shape, [T, H, V]);
  assert.equal(r.lse.dtype, "float32");
  assert.deepEqual(r.lse.shape, [T, H]);
  const oracle = nsaCompressionReference({
    q: host(q),
    kCmp: host(kCmp),
    vCmp: host(vCmp),
    offsets,
    chunkOffsets,
    heads: H,
    headsKv: Hkv,
    dimK: K,
    dimV: V,
    blockSize: bs,
    stride: bc,
    scale: K ** -0.5,
  });
  const what = JSON.stringify(c);
  expectOutput(`output ${what}`, r.output, oracle.output, dtype);
  assertClose(r.lse, oracle.lse, { ...LSE_TOL, name: `lse ${what}` });
  // Tokens that see no compressed row: output exactly 0, lse exactly 0.
  const blind: number[] = [];
  c.lengths.forEach((len, n) => {
    for (let i = 0; i < len; i++) {
      if (nsaVisibleRows(i, bs, bc) === 0) {
        for (let h = 0; h < H; h++) blind.push((offsets[n] + i) * H + h);
      }
    }
  });
  expectRowsExactly(`output (no visible row) ${what}`, host(r.output), blind, V);
  expectRowsExactly(`lse (no visible row) ${what}`, host(r.lse), blind, 1);
}

deviceTest(
  "NSA compressed branch matches the float64 oracle (packed, empty and short sequences, bc < bs, GQA)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases: CmpCase[] = [
          // An empty sequence, one shorter than a block, T = 113 not a multiple of bs; group 2.
          {
            lengths: [37, 0, 5, 71],
            heads: 4,
            group: 2,
            dimK: 32,
            dimV: 16,
            bs: 16,
            dtype: "float32",
            out: true,
          },
          // Overlapping rows (bc < bs), group = heads, spare rows between sequences.
          {
            lengths: [50, 3, 33, 16],
            heads: 8,
            group: 8,
            dimK: 64,
            dimV: 32,
            bs: 16,
            bc: 8,
            dtype: "bfloat16",
            spare: 1,
            out: true,
          },
          // MHA (group 1), dimV > dimK, bc < bs, no out buffers.
          {
            lengths: [1, 19, 8, 7, 0],
            heads: 2,
            group: 1,
            dimK: 16,
            dimV: 48,
            bs: 8,
            bc: 4,
            dtype: "float16",
            out: false,
          },
          // Every sequence shorter than a block: nothing visible anywhere (output 0, lse 0).
          { lengths: [4, 7, 0], heads: 4, group: 4, dimK: 16, dimV: 16, bs: 8, dtype: "bfloat16", out: true },
          // The tiled block's shapes (16-bit, K = V of 64 / 128): a whole group of 16 heads, and bc < bs.
          {
            lengths: [70, 0, 9, 130],
            heads: 16,
            group: 16,
            dimK: 64,
            dimV: 64,
            bs: 16,
            dtype: "bfloat16",
            out: true,
          },
          {
            lengths: [45, 77],
            heads: 4,
            group: 2,
            dimK: 128,
            dimV: 128,
            bs: 8,
            bc: 4,
            dtype: "float16",
            out: false,
          },
          // No compressed rows at all (chunkNum 0).
          {
            lengths: [3, 6],
            heads: 2,
            group: 2,
            dimK: 16,
            dimV: 16,
            bs: 8,
            bc: 4,
            dtype: "float32",
            spare: 0,
            out: true,
          },
        ];
        for (const [i, c] of cases.entries()) checkCompression(device, c, seed + 10 * i);
      })),
);

// ---- NSA, block selection ----

interface TopkCase {
  lengths: number[];
  heads: number;
  group: number;
  dim: number;
  bs: number;
  selected: number;
  dtype: FloatDType;
  out: boolean;
}

/** Runs the compressed branch's oracle for the lse, then the selection op; checks each list robustly. */
function checkTopk(device: Device, c: TopkCase, seed: number): void {
  const { heads: H, group: G, dim: K, bs, selected: S, dtype } = c;
  const Hkv = H / G, offsets = offsetsOf(c.lengths), T = offsets[offsets.length - 1];
  using chunkTensor = nsaChunkOffsets(offsets, bs, { device });
  const chunkOffsets = Array.from(ints(chunkTensor)), C = chunkOffsets[chunkOffsets.length - 1];
  using q = Tensor.randn([T, H, K], { dtype, device, seed });
  using kCmp = Tensor.randn([C, Hkv, K], { dtype, device, seed: seed + 1 });
  using tokens = nsaTokenIndices(offsets, { device });
  const qHost = host(q), kHost = host(kCmp);
  const sizes = { offsets, chunkOffsets, heads: H, headsKv: Hkv, blockSize: bs, scale: K ** -0.5 };
  const cmp = nsaCompressionReference({ ...sizes, q: qHost, kCmp: kHost, vCmp: kHost, dimK: K, dimV: K });
  using lseIn = Tensor.from(Float32Array.from(cmp.lse), { shape: [T, H], device });
  const op = new NSATopkVarlenOp({
    seqNum: c.lengths.length,
    cSeqLen: T,
    heads: H,
    dim: K,
    chunkNum: C,
    group: G,
    selectedBlockNum: S,
    bc: bs,
    bs,
  });
  using outBuf = c.out ? Tensor.full([T, Hkv, S], -7, { dtype: "int32", device }) : undefined;
  using got = op.forward(q, kCmp, lseIn, offsets, chunkTensor, tokens, outBuf);
  if (c.out) assert.ok(got === outBuf);
  assert.equal(got.dtype, "int32");
  assert.deepEqual(got.shape, [T, Hkv, S]);
  const list = ints(got);
  // The oracle reads the lse the op was given (float32).
  const importance = nsaBlockImportance({ ...sizes, q: qHost, kCmp: kHost, lse: host(lseIn), dim: K });
  const what = JSON.stringify(c);
  c.lengths.forEach((len, n) => {
    for (let i = 0; i < len; i++) {
      const t = offsets[n] + i, b = Math.floor(i / bs);
      for (let hk = 0; hk < Hkv; hk++) {
        const row = Array.from(list.subarray((t * Hkv + hk) * S, (t * Hkv + hk + 1) * S));
        const imp = importance[t * Hkv + hk],
          at = `${what} token ${t} (position ${i}) kv head ${hk}: [${row}]`;
        const m = Math.min(S, b + 1), chosen = row.slice(0, m);
        assert.ok(chosen.every((x) => x >= 0 && x <= b), `blocks outside 0..${b}: ${at}`);
        assert.equal(new Set(chosen).size, m, `repeated block: ${at}`);
        assert.ok(row.slice(m).every((x) => x === -1), `expected -1 after ${m} blocks: ${at}`);
        // Forced blocks (importance exactly G) first, in index order, when every other block is clearly below.
        const forced = [...new Set([0, b - 1, b])].filter((x) => x >= 0).sort((x, y) => x - y);
        const others = Array.from(imp).filter((_, x) => !forced.includes(x));
        if (others.every((v) => v < G - IMPORTANCE_TOL)) {
          const f = Math.min(m, forced.length);
          assert.deepEqual(chosen.slice(0, f), forced.slice(0, f), `forced blocks ${forced} first: ${at}`);
        }
        // A top-m set within the tolerance, in nonincreasing importance.
        const kth = Array.from(imp).sort((x, y) => y - x)[m - 1];
        for (const x of chosen) {
          assert.ok(
            imp[x] >= kth - IMPORTANCE_TOL,
            `block ${x} (${imp[x]}) is not in the top ${m} (${kth}): ${at}`,
          );
        }
        for (let j = 0; j + 1 < m; j++) {
          assert.ok(
            imp[chosen[j]] >= imp[chosen[j + 1]] - IMPORTANCE_TOL,
            `order: block ${chosen[j]} (${imp[chosen[j]]}) before ${chosen[j + 1]} (${
              imp[chosen[j + 1]]
            }): ${at}`,
          );
        }
      }
    }
  });
}

deviceTest(
  "NSA block selection picks a top-S of the oracle's importance (forced blocks, S past the blocks, short sequences)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases: TopkCase[] = [
          // Several sequences, one shorter than a block, one empty.
          {
            lengths: [100, 10, 0, 64],
            heads: 4,
            group: 2,
            dim: 32,
            bs: 16,
            selected: 4,
            dtype: "bfloat16",
            out: true,
          },
          // S = 16 past every query's 9 candidates at most; group = heads.
          {
            lengths: [70, 33],
            heads: 8,
            group: 8,
            dim: 64,
            bs: 8,
            selected: 16,
            dtype: "float32",
            out: true,
          },
          // S = 2 below the 3 forced blocks; MHA; no out buffer.
          {
            lengths: [5, 40, 17],
            heads: 3,
            group: 1,
            dim: 16,
            bs: 4,
            selected: 2,
            dtype: "float16",
            out: false,
          },
          // S = 1: block 0 always.
          { lengths: [3, 29], heads: 2, group: 2, dim: 16, bs: 4, selected: 1, dtype: "bfloat16", out: true },
        ];
        for (const [i, c] of cases.entries()) checkTopk(device, c, seed + 10 * i);
      })),
);

// ---- NSA, selected branch ----

interface SelCase {
  lengths: number[];
  heads: number;
  groups: number;
  dim: number;
  dimV: number;
  blockSize: number;
  selected: number;
  causal: boolean;
  dtype: FloatDType;
  /** "topk": lists from NSATopkVarlenOp; "random": distinct valid blocks with -1 anywhere. */
  lists: "topk" | "random";
  /** "tensor": random counts in [0, S]; a number; undefined: all S. */
  counts: "tensor" | number | undefined;
  out: boolean;
}

interface SelSetup {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  tokens: Tensor;
  offsets: number[];
  T: number;
  Hkv: number;
  [Symbol.dispose](): void;
}

function selectionInputs(device: Device, c: SelCase, seed: number): SelSetup {
  const offsets = offsetsOf(c.lengths), T = offsets[offsets.length - 1], Hkv = c.heads / c.groups;
  const q = Tensor.randn([T, c.heads, c.dim], { dtype: c.dtype, device, seed });
  const k = Tensor.randn([T, Hkv, c.dim], { dtype: c.dtype, device, seed: seed + 1 });
  const v = Tensor.randn([T, Hkv, c.dimV], { dtype: c.dtype, device, seed: seed + 2 });
  const tokens = nsaTokenIndices(offsets, { device });
  return {
    q,
    k,
    v,
    tokens,
    offsets,
    T,
    Hkv,
    [Symbol.dispose]() {
      for (const t of [q, k, v, tokens]) t.dispose();
    },
  };
}

/** Random lists: each (token, kv head) names distinct blocks of its sequence, -1 at random places. */
function randomLists(rnd: () => number, c: SelCase, offsets: number[], Hkv: number): Int32Array {
  const S = c.selected, T = offsets[offsets.length - 1];
  const list = new Int32Array(T * Hkv * S).fill(-1);
  c.lengths.forEach((len, n) => {
    const blocks = Math.ceil(len / c.blockSize);
    for (let t = offsets[n]; t < offsets[n + 1]; t++) {
      for (let hk = 0; hk < Hkv; hk++) {
        const picks = shuffled(rnd, blocks).slice(0, Math.floor(rnd() * (Math.min(S, blocks) + 1)));
        const slots = shuffled(rnd, S);
        picks.forEach((b, j) => list[(t * Hkv + hk) * S + slots[j]] = b);
      }
    }
  });
  return list;
}

function selectionOracle(c: SelCase, s: SelSetup, list: ArrayLike<number>, counts?: ArrayLike<number>) {
  return nsaSelectionReference({
    q: host(s.q),
    k: host(s.k),
    v: host(s.v),
    blockIndices: list,
    blockCounts: counts,
    offsets: s.offsets,
    heads: c.heads,
    headsKv: s.Hkv,
    dim: c.dim,
    dimV: c.dimV,
    blockSize: c.blockSize,
    selected: c.selected,
    scale: c.dim ** -0.5,
    causal: c.causal,
  });
}

function selectionOp(c: SelCase, T: number, checkIndices?: boolean): NSAFwdVarlenOp {
  return new NSAFwdVarlenOp({
    batch: c.lengths.length,
    heads: c.heads,
    cSeqLen: T,
    dim: c.dim,
    isCausal: c.causal,
    blockSize: c.blockSize,
    groups: c.groups,
    selectedBlocks: c.selected,
    checkIndices,
  });
}

function checkSelection(device: Device, c: SelCase, seed: number): void {
  const rnd = generator(seed);
  using s = selectionInputs(device, c, seed);
  const { T, Hkv, offsets } = s, S = c.selected;
  let list: Int32Array;
  if (c.lists === "topk") {
    const sizes = { seqNum: c.lengths.length, cSeqLen: T, heads: c.heads, group: c.groups, bs: c.blockSize };
    using chunks = nsaChunkOffsets(offsets, c.blockSize, { device });
    const C = ints(chunks)[c.lengths.length];
    using kCmp = Tensor.randn([C, Hkv, c.dim], { dtype: c.dtype, device, seed: seed + 3 });
    using cmp = new NSACmpFwdVarlenOp({ ...sizes, dimK: c.dim, dimV: c.dim, chunkNum: C }).forward(
      s.q,
      kCmp,
      kCmp,
      offsets,
      chunks,
      s.tokens,
    );
    using picked = new NSATopkVarlenOp({ ...sizes, dim: c.dim, chunkNum: C, selectedBlockNum: S }).forward(
      s.q,
      kCmp,
      cmp.lse,
      offsets,
      chunks,
      s.tokens,
    );
    list = ints(picked);
  } else {
    list = randomLists(rnd, c, offsets, Hkv);
  }
  // The first token's first kv head lists padding only: it must see nothing.
  if (T > 0) list.fill(-1, 0, S);
  using blocks = Tensor.from(list, { shape: [T, Hkv, S], device });
  const countHost = c.counts === "tensor"
    ? Int32Array.from({ length: T * Hkv }, () => Math.floor(rnd() * (S + 1)))
    : typeof c.counts === "number"
    ? new Int32Array(T * Hkv).fill(c.counts)
    : undefined;
  using countTensor = c.counts === "tensor"
    ? Tensor.from(countHost!, { shape: [T, Hkv], device })
    : undefined;
  const op = selectionOp(c, T);
  using outBuf = c.out ? poison(Tensor.empty([T, c.heads, c.dimV], { dtype: c.dtype, device })) : undefined;
  const counts = c.counts === "tensor" ? countTensor : c.counts;
  using got = op.forward(s.q, s.k, s.v, blocks, counts, offsets, s.tokens, outBuf);
  if (c.out) assert.ok(got === outBuf);
  assert.equal(got.dtype, c.dtype);
  assert.deepEqual(got.shape, [T, c.heads, c.dimV]);
  const oracle = selectionOracle(c, s, list, countHost);
  const what = JSON.stringify(c);
  expectOutput(`output ${what}`, got, oracle.output, c.dtype);
  const blind: number[] = [];
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < c.heads; h++) {
      if (oracle.keys[t * Hkv + Math.floor(h / c.groups)] === 0) blind.push(t * c.heads + h);
    }
  }
  assert.ok(blind.length > 0, "some query sees no key");
  expectRowsExactly(`output (no key visible) ${what}`, host(got), blind, c.dimV);
}

deviceTest(
  "NSA selected branch matches the float64 oracle (topk and random lists, counts as tensor / number / all, causal or not)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const base = { heads: 4, dim: 32, dimV: 16, out: true };
        const cases: SelCase[] = [
          {
            ...base,
            lengths: [90, 7, 0, 40],
            groups: 2,
            blockSize: 16,
            selected: 3,
            causal: true,
            dtype: "bfloat16",
            lists: "topk",
            counts: "tensor",
          },
          {
            ...base,
            lengths: [33, 64, 1, 20],
            groups: 1,
            blockSize: 8,
            selected: 4,
            causal: false,
            dtype: "float32",
            lists: "random",
            counts: 2,
          },
          {
            ...base,
            lengths: [48, 17],
            groups: 4,
            dim: 64,
            dimV: 64,
            blockSize: 16,
            selected: 2,
            causal: true,
            dtype: "float16",
            lists: "random",
            counts: undefined,
            out: false,
          },
          {
            ...base,
            lengths: [25, 70],
            heads: 8,
            groups: 2,
            blockSize: 8,
            selected: 5,
            causal: true,
            dtype: "float32",
            lists: "random",
            counts: "tensor",
          },
          {
            ...base,
            lengths: [41],
            groups: 4,
            blockSize: 4,
            selected: 6,
            causal: false,
            dtype: "bfloat16",
            lists: "topk",
            counts: undefined,
          }, // The tiled block's shapes: 16 heads a group over K = V = 128, and 64 with random lists.
          {
            ...base,
            lengths: [100, 3, 61],
            heads: 16,
            groups: 16,
            dim: 128,
            dimV: 128,
            blockSize: 16,
            selected: 4,
            causal: true,
            dtype: "bfloat16",
            lists: "topk",
            counts: "tensor",
          },
          {
            ...base,
            lengths: [57, 33],
            heads: 6,
            groups: 3,
            dim: 64,
            dimV: 64,
            blockSize: 8,
            selected: 5,
            causal: false,
            dtype: "bfloat16",
            lists: "random",
            counts: 3,
          },
        ];
        for (const [i, c] of cases.entries()) checkSelection(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "NSA selected branch: bad block lists and counts are refused, unchecked ones skipped (a repeat counts once)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const c: SelCase = {
          lengths: [20, 13],
          heads: 2,
          groups: 2,
          dim: 16,
          dimV: 16,
          blockSize: 4,
          selected: 3,
          causal: false,
          dtype: "float32",
          lists: "random",
          counts: undefined,
          out: false,
        };
        using s = selectionInputs(device, c, seed);
        const { T } = s, S = c.selected;
        // Every token lists block 0 then block 1, then -1.
        const valid = Int32Array.from({ length: T * S }, (_, x) => (x % S < 2 ? x % S : -1));
        const withEntry = (t: number, e: number, b: number) => {
          const l = valid.slice();
          l[t * S + e] = b;
          return l;
        };
        const tensorOf = (l: Int32Array) => Tensor.from(l, { shape: [T, 1, S], device });
        const op = selectionOp(c, T);
        const run = (l: Int32Array, counts?: Tensor | number, o: NSAFwdVarlenOp = op) => {
          using b = tensorOf(l);
          return o.forward(s.q, s.k, s.v, b, counts, s.offsets, s.tokens);
        };
        // Sequence 1 (13 tokens, 4 blocks: 0..3) starts at token 20.
        refuses(() => run(withEntry(25, 2, 4)), LIST_REFUSED); // past the sequence's blocks
        refuses(() => run(withEntry(3, 2, 5)), LIST_REFUSED); // past sequence 0's 5 blocks
        refuses(() => run(withEntry(3, 2, -2)), LIST_REFUSED);
        refuses(() => run(withEntry(7, 2, 1)), LIST_REFUSED); // block 1 twice
        refuses(() => run(valid, S + 1), /blockCounts/);
        refuses(() => run(valid, -1), /blockCounts/);
        {
          const high = new Int32Array(T).fill(2);
          high[5] = S + 1;
          using counts = Tensor.from(high, { shape: [T, 1], device });
          refuses(() => run(valid, counts), COUNT_REFUSED);
          high[5] = -1;
          using negative = Tensor.from(high, { shape: [T, 1], device });
          refuses(() => run(valid, negative), COUNT_REFUSED);
        }
        // Unchecked: a repeated block counts once (equals the deduplicated call and the oracle), an entry
        // out of range is skipped, a count is clamped to [0, S].
        const loose = selectionOp(c, T, false);
        const dup = valid.slice(), dedup = valid.slice();
        for (let t = 0; t < T; t += 2) dup[t * S + 2] = t % 4 === 0 ? 0 : 1; // block 0 or 1 again
        {
          using got = run(dup, undefined, loose);
          using want = run(dedup, undefined, loose);
          assertClose(got, want, {
            ...OUTPUT_TOL.float32,
            name: "a repeated block vs the deduplicated list",
          });
          expectOutput("a repeated block", got, selectionOracle(c, s, dedup).output, "float32");
        }
        {
          const bad = valid.slice();
          bad[3 * S + 2] = 5;
          bad[25 * S + 2] = 4;
          bad[26 * S + 1] = -9;
          bad[27 * S + 2] = 1000;
          const counts = Int32Array.from(
            { length: T },
            (_, t) => (t % 3 === 0 ? S + 4 : t % 3 === 1 ? -3 : 2),
          );
          using countTensor = Tensor.from(counts, { shape: [T, 1], device });
          using got = run(bad, countTensor, loose);
          expectOutput(
            "unchecked entries and counts",
            got,
            selectionOracle(c, s, bad, counts).output,
            "float32",
          );
        }
      })),
);

// ---- DSA decode ----

interface DsaCase {
  batch: number;
  seqLen: number;
  seqLenKv: number;
  heads: number;
  headsKv: number;
  dim: number;
  dimTail: number;
  topk: number;
  strideKv: number;
  qStart: number;
  causal: boolean;
  dtype: FloatDType;
}

function dsaOp(c: DsaCase, checkIndices?: boolean) {
  return new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
    batch: c.batch,
    heads: c.heads,
    seqLen: c.seqLen,
    seqLenKv: c.seqLenKv,
    dim: c.dim,
    dimTail: c.dimTail,
    topk: c.topk,
    strideKv: c.strideKv,
    headsKv: c.headsKv,
    qStartIndexS: c.qStart,
    isCausal: c.causal,
    checkIndices,
  });
}

function dsaOracle(c: DsaCase, q: Tensor, kv: Tensor, indices: ArrayLike<number>): Float64Array {
  return dsaDecodeReference({
    ...c,
    q: host(q),
    kv: host(kv),
    indices,
    smScale: (c.dim + c.dimTail) ** -0.5,
  });
}

/** Random lists of distinct rows (some past the causal limit), padded with -1 at random places. */
function dsaLists(rnd: () => number, c: DsaCase): Int32Array {
  const { batch: B, seqLen: Sq, headsKv: Hkv, topk, seqLenKv: Skv } = c;
  const list = new Int32Array(B * Sq * Hkv * topk).fill(-1);
  for (let r = 0; r < B * Sq * Hkv; r++) {
    const rows = shuffled(rnd, Skv).slice(0, Math.floor(rnd() * (Math.min(topk, Skv) + 1)));
    const slots = shuffled(rnd, topk);
    rows.forEach((j, x) => list[r * topk + slots[x]] = j);
  }
  return list;
}

function checkDsa(device: Device, c: DsaCase, seed: number): void {
  const rnd = generator(seed);
  const { batch: B, seqLen: Sq, heads: H, headsKv: Hkv, dim: D, topk, dtype } = c, W = c.dim + c.dimTail;
  using q = Tensor.randn([B, Sq, H, W], { dtype, device, seed });
  using kv = Tensor.randn([B, c.seqLenKv, Hkv, W], { dtype, device, seed: seed + 1 });
  const list = dsaLists(rnd, c);
  // The first list is all padding.
  list.fill(-1, 0, topk);
  const op = dsaOp(c);
  using indices = Tensor.from(list, { shape: [B, Sq, Hkv, topk], device });
  using outBuf = poison(Tensor.empty([B, Sq, H, D], { dtype, device }));
  using got = op.forward(q, kv, indices, outBuf);
  assert.ok(got === outBuf);
  const oracle = dsaOracle(c, q, kv, list);
  const what = JSON.stringify(c);
  expectOutput(`output ${what}`, got, oracle, dtype);
  // Queries that see no row: exactly 0.
  const blind: number[] = [];
  for (let r = 0; r < B * Sq * Hkv; r++) {
    const s = Math.floor(r / Hkv) % Sq;
    const sees = Array.from(list.subarray(r * topk, (r + 1) * topk)).some((j) =>
      j >= 0 && j < c.seqLenKv && (!c.causal || j * c.strideKv + c.strideKv - 1 <= c.qStart + s)
    );
    if (!sees) { for (let g = 0; g < H / Hkv; g++) blind.push(r * (H / Hkv) + g); }
  }
  assert.ok(blind.length > 0);
  expectRowsExactly(`output (nothing visible) ${what}`, host(got), blind, D);
  // Padding with seqLenKv or 2^30 instead of -1 gives the same output (bit for bit); no out buffer.
  const first = host(got);
  for (const pad of [c.seqLenKv, 2 ** 30]) {
    using padded = Tensor.from(list.map((j) => (j === -1 ? pad : j)), { shape: [B, Sq, Hkv, topk], device });
    using again = op.forward(q, kv, padded);
    assert.deepEqual(host(again), first, `padding with ${pad} instead of -1: ${what}`);
  }
}

deviceTest(
  "DSA decode matches the float64 oracle (padding forms, strides, causal offsets, cache heads)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases: DsaCase[] = [
          // topk above the visible rows (and above seqLenKv); one cache head.
          {
            batch: 2,
            seqLen: 3,
            seqLenKv: 40,
            heads: 4,
            headsKv: 1,
            dim: 32,
            dimTail: 16,
            topk: 48,
            strideKv: 1,
            qStart: 20,
            causal: true,
            dtype: "bfloat16",
          },
          // strideKv 4 from position 2: query 0 sees nothing; two cache heads.
          {
            batch: 1,
            seqLen: 4,
            seqLenKv: 20,
            heads: 8,
            headsKv: 2,
            dim: 64,
            dimTail: 8,
            topk: 16,
            strideKv: 4,
            qStart: 2,
            causal: true,
            dtype: "float32",
          },
          // Not causal, MHA-like (heads = headsKv = 2), no tail.
          {
            batch: 2,
            seqLen: 2,
            seqLenKv: 24,
            heads: 2,
            headsKv: 2,
            dim: 32,
            dimTail: 0,
            topk: 8,
            strideKv: 1,
            qStart: 0,
            causal: false,
            dtype: "float16",
          },
          // strideKv 4 far into the sequence.
          {
            batch: 1,
            seqLen: 2,
            seqLenKv: 30,
            heads: 4,
            headsKv: 1,
            dim: 16,
            dimTail: 16,
            topk: 12,
            strideKv: 4,
            qStart: 60,
            causal: true,
            dtype: "bfloat16",
          },
        ];
        for (const [i, c] of cases.entries()) checkDsa(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "DSA decode refuses a row listed twice; unchecked, each listing counts",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const c: DsaCase = {
          batch: 1,
          seqLen: 2,
          seqLenKv: 16,
          heads: 4,
          headsKv: 2,
          dim: 16,
          dimTail: 8,
          topk: 6,
          strideKv: 1,
          qStart: 14,
          causal: true,
          dtype: "float32",
        };
        const W = c.dim + c.dimTail, shape = [1, 2, 2, 6];
        using q = Tensor.randn([1, 2, 4, W], { device, seed });
        using kv = Tensor.randn([1, 16, 2, W], { device, seed: seed + 1 });
        const list = Int32Array.from([
          3,
          7,
          3,
          -1,
          12,
          3,
          0,
          1,
          2,
          -1,
          -1,
          2,
          5,
          5,
          5,
          9,
          16,
          -1,
          4,
          8,
          15,
          6,
          10,
          11,
        ]);
        using indices = Tensor.from(list, { shape, device });
        refuses(() => dsaOp(c).forward(q, kv, indices), /indices/);
        using got = dsaOp(c, false).forward(q, kv, indices);
        expectOutput("each listing counts", got, dsaOracle(c, q, kv, list), "float32");
        // Padding listed twice (or more) is not a repeat.
        const padded = Int32Array.from([
          3,
          7,
          -1,
          -1,
          12,
          16,
          0,
          1,
          2,
          -1,
          -1,
          16,
          5,
          16,
          16,
          9,
          -1,
          -1,
          4,
          8,
          15,
          6,
          10,
          11,
        ]);
        using paddedTensor = Tensor.from(padded, { shape, device });
        using ok = dsaOp(c).forward(q, kv, paddedTensor);
        expectOutput("repeated padding", ok, dsaOracle(c, q, kv, padded), "float32");
      })),
);

// ---- The lightning indexer ----

interface IndexerCase {
  dtype: "bfloat16" | "float8_e4m3";
  kScale: boolean;
  clean: boolean;
  Sq: number;
  H: number;
  D: number;
  Sk: number;
  out: boolean;
}

/**
 * Holds the logits to the oracle: relRms, and elementwise |error| <= rtol |oracle| + (D + H) 2^-23 A, A
 * being the oracle over absolute values (the bound of a float32 accumulation of the same terms).
 */
function expectLogits(name: string, got: Tensor, inputs: LightningIndexerInputs): void {
  const oracle = lightningIndexerReference(inputs);
  assertClose(got, oracle, { relRms: LOGITS_TOL.relRms, name });
  const abs = (a: ArrayLike<number>) => Float64Array.from(a, Math.abs);
  const bound = lightningIndexerReference({
    ...inputs,
    q: abs(inputs.q),
    k: abs(inputs.k),
    weights: abs(inputs.weights),
    kScale: inputs.kScale && abs(inputs.kScale),
  });
  const values = host(got), slack = (inputs.dim + inputs.heads) * 2 ** -23;
  for (let x = 0; x < values.length; x++) {
    if (!Number.isFinite(oracle[x])) continue;
    const err = Math.abs(values[x] - oracle[x]),
      allowed = LOGITS_TOL.rtol * Math.abs(oracle[x]) + slack * bound[x];
    assert.ok(
      err <= allowed,
      `${name}: logits[${x}] = ${values[x]}, oracle ${oracle[x]} (|error| ${err} > ${allowed})`,
    );
  }
}

/** Ranges: empty ones (ks = ke), full ones, ones ending at Sk, random ones. */
function ranges(rnd: () => number, Sq: number, Sk: number): { ks: Int32Array; ke: Int32Array } {
  const ks = new Int32Array(Sq), ke = new Int32Array(Sq);
  for (let i = 0; i < Sq; i++) {
    const a = Math.floor(rnd() * (Sk + 1)), b = Math.floor(rnd() * (Sk + 1));
    [ks[i], ke[i]] = [Math.min(a, b), Math.max(a, b)];
    if (i % 4 === 0) ke[i] = ks[i]; // empty
    if (i % 4 === 1) [ks[i], ke[i]] = [0, Sk];
    if (i % 4 === 2) ke[i] = Sk;
  }
  ks[Sq - 1] = ke[Sq - 1] = Sk; // empty at the end
  return { ks, ke };
}

function checkIndexer(device: Device, c: IndexerCase, seed: number): void {
  const rnd = generator(seed);
  const { Sq, H, D, Sk } = c;
  using qWide = Tensor.randn([Sq, H, D], { device, seed });
  using kWide = Tensor.randn([Sk, D], { device, seed: seed + 1 });
  using q = qWide.cast(c.dtype);
  using k = kWide.cast(c.dtype);
  using w = Tensor.randn([Sq, H], { device, seed: seed + 2 });
  using kScale = c.kScale ? Tensor.rand([Sk], { device, seed: seed + 3, low: 0.25, high: 2 }) : undefined;
  const { ks, ke } = ranges(rnd, Sq, Sk);
  using ksT = Tensor.from(ks, { device });
  using keT = Tensor.from(ke, { device });
  const op = new FP8LightningIndexerFwdOp({ cleanLogits: c.clean });
  using outBuf = c.out ? poison(Tensor.empty([Sq, Sk], { device })) : undefined;
  using got = op.forward(q, k, w, ksT, keT, kScale, outBuf);
  if (c.out) assert.ok(got === outBuf);
  assert.equal(got.dtype, "float32");
  assert.deepEqual(got.shape, [Sq, Sk]);
  const what = JSON.stringify(c);
  expectLogits(`logits ${what}`, got, {
    q: host(q),
    k: host(k),
    weights: host(w),
    ks,
    ke,
    kScale: kScale ? host(kScale) : undefined,
    seqLenQ: Sq,
    seqLenK: Sk,
    heads: H,
    dim: D,
    cleanLogits: c.clean,
  });
  // Outside each range exactly -inf or 0.
  const values = host(got), outside = c.clean ? -Infinity : 0;
  for (let i = 0; i < Sq; i++) {
    for (let j = 0; j < Sk; j++) {
      if (j < ks[i] || j >= ke[i]) {
        assert.ok(
          values[i * Sk + j] === outside,
          `logits[${i}, ${j}] = ${values[i * Sk + j]} outside: ${what}`,
        );
      }
    }
  }
}

deviceTest(
  "lightning indexer matches the float64 oracle (bfloat16 / float8_e4m3, key scales, clean logits, empty ranges)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const size = { Sq: 12, H: 8, D: 32, Sk: 50 };
        const cases: IndexerCase[] = [
          { ...size, dtype: "bfloat16", kScale: true, clean: true, out: true },
          { ...size, dtype: "float8_e4m3", kScale: false, clean: false, out: true },
          { ...size, dtype: "float8_e4m3", kScale: true, clean: true, out: false },
          { Sq: 7, H: 16, D: 64, Sk: 33, dtype: "bfloat16", kScale: false, clean: false, out: false },
        ];
        for (const [i, c] of cases.entries()) checkIndexer(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "lightning indexer refuses a key range outside [0, Sk]; unchecked, bounds are clamped",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        using q = Tensor.randn([3, 2, 16], { dtype: "bfloat16", device, seed });
        using k = Tensor.randn([10, 16], { dtype: "bfloat16", device, seed: seed + 1 });
        using w = Tensor.randn([3, 2], { device, seed: seed + 2 });
        const bounds = (a: number[]) => Tensor.from(new Int32Array(a), { device });
        const op = new FP8LightningIndexerFwdOp();
        {
          using ks = bounds([0, 2, 4]);
          using ke = bounds([10, 11, 4]);
          refuses(() => op.forward(q, k, w, ks, ke), RANGE_REFUSED);
        }
        {
          using ks = bounds([0, 5, 4]);
          using ke = bounds([10, 3, 4]);
          refuses(() => op.forward(q, k, w, ks, ke), RANGE_REFUSED);
        }
        {
          using ks = bounds([0, -1, 4]);
          using ke = bounds([10, 3, 4]);
          refuses(() => op.forward(q, k, w, ks, ke), RANGE_REFUSED);
        }
        const ksHost = [-3, 4, 12], keHost = [20, 9, 15];
        using ks = bounds(ksHost);
        using ke = bounds(keHost);
        using got = new FP8LightningIndexerFwdOp({ checkIndices: false }).forward(q, k, w, ks, ke);
        expectLogits("clamped bounds", got, {
          q: host(q),
          k: host(k),
          weights: host(w),
          ks: ksHost,
          ke: keHost,
          seqLenQ: 3,
          seqLenK: 10,
          heads: 2,
          dim: 16,
          cleanLogits: true,
        });
      })),
);

deviceTest(
  "value refusals name the argument as the caller passed it (blockIndices, blockCounts, cuSeqlenKs / Ke, chunkOffsets)",
  (device) =>
    expectNoLeak(device, () => {
      const offsets = [0, 8, 13], T = 13, S = 2;
      using tokens = nsaTokenIndices(offsets, { device });
      using q = Tensor.randn([T, 2, 16], { device, seed: 1 });
      using k = Tensor.randn([T, 1, 16], { device, seed: 2 });
      const op = new NSAFwdVarlenOp({
        batch: 2,
        heads: 2,
        cSeqLen: T,
        dim: 16,
        blockSize: 4,
        groups: 2,
        selectedBlocks: S,
      });
      const list = new Int32Array(T * S).fill(-1);
      list[2 * S] = 2; // sequence 0 has blocks 0 and 1
      using outOfRange = Tensor.from(list, { shape: [T, 1, S], device });
      list[2 * S] = 1, list[2 * S + 1] = 1;
      using twice = Tensor.from(list, { shape: [T, 1, S], device });
      using counts = Tensor.from(new Int32Array(T).fill(S + 1), { shape: [T, 1], device });
      using valid = Tensor.full([T, 1, S], -1, { dtype: "int32", device });
      // Every refusal is checked, then every message that misses its argument's name is reported at once.
      const misnamed: string[] = [];
      const named = (fn: () => unknown, pattern: RegExp) => {
        refuses(fn, /./);
        try {
          fn();
        } catch (e) {
          if (!pattern.test((e as Error).message)) misnamed.push(`${pattern}: ${(e as Error).message}`);
        }
      };
      named(() => op.forward(q, k, k, outOfRange, undefined, offsets, tokens), /blockIndices/);
      named(() => op.forward(q, k, k, twice, undefined, offsets, tokens), /blockIndices/);
      named(() => op.forward(q, k, k, valid, counts, offsets, tokens), /blockCounts/);
      using iq = Tensor.randn([2, 2, 16], { dtype: "bfloat16", device, seed: 3 });
      using ik = Tensor.randn([10, 16], { dtype: "bfloat16", device, seed: 4 });
      using iw = Tensor.ones([2, 2], { device });
      using ks = Tensor.from(new Int32Array([0, -1]), { device });
      using ksOk = Tensor.from(new Int32Array([0, 0]), { device });
      using ke = Tensor.from(new Int32Array([10, 11]), { device });
      using keOk = Tensor.from(new Int32Array([10, 5]), { device });
      const indexer = new FP8LightningIndexerFwdOp();
      named(() => indexer.forward(iq, ik, iw, ks, keOk), /cuSeqlenKs/);
      named(() => indexer.forward(iq, ik, iw, ksOk, ke), /cuSeqlenKe/);
      using kCmp = Tensor.randn([2, 1, 16], { device, seed: 5 });
      const cmp = new NSACmpFwdVarlenOp({
        seqNum: 2,
        cSeqLen: T,
        heads: 2,
        dimK: 16,
        dimV: 16,
        chunkNum: 2,
        group: 2,
        bs: 4,
      });
      named(() => cmp.forward(q, kCmp, kCmp, offsets, [0, 1, 2], tokens), /chunkOffsets/); // sequence 0 needs 2
      named(() => cmp.forward(q, kCmp, kCmp, offsets, [0, 2, 3], tokens), /chunkOffsets/); // past kCmp's 2 rows
      assert.deepEqual(misnamed, [], `refusals that do not name the argument:\n${misnamed.join("\n")}`);
    }),
);

// ---- Bad input ----

deviceTest(
  "sparse ops refuse wrong dtypes, shapes and token indices, naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      const offsets = [0, 10, 16], T = 16;
      using tokens = nsaTokenIndices(offsets, { device });
      using wrongTokens = nsaTokenIndices([0, 9, 16], { device });
      using tokens64 = tokens.cast("int64");
      using q = Tensor.randn([T, 4, 16], { device, seed: 1 });
      using q64 = q.cast("float64");
      using qBf = q.cast("bfloat16");
      using kCmp = Tensor.randn([3, 2, 16], { device, seed: 2 });
      using vCmp = Tensor.randn([3, 2, 8], { device, seed: 3 });
      const chunks = [0, 2, 3];
      const cmpSizes = { seqNum: 2, cSeqLen: T, heads: 4, chunkNum: 3, group: 2, bs: 4, bc: 4 };
      const cmp = new NSACmpFwdVarlenOp({ ...cmpSizes, dimK: 16, dimV: 8 });
      refuses(() => cmp.forward(q64, kCmp, vCmp, offsets, chunks, tokens), /q: expected dtype/);
      refuses(() => cmp.forward(q, vCmp, vCmp, offsets, chunks, tokens), /kCmp: expected shape/);
      refuses(() => cmp.forward(q, kCmp, kCmp, offsets, chunks, tokens), /vCmp: expected shape/);
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, chunks, wrongTokens), /tokenIndices/);
      refuses(() => cmp.forward(q, kCmp, vCmp, [0, 16], chunks, tokens), /offsets/);
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 1, 2], tokens), CHUNKS_REFUSED); // sequence 0 needs 2 rows
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 2, 4], tokens), CHUNKS_REFUSED); // past kCmp's 3 rows
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 2, 1], tokens), CHUNKS_REFUSED);
      {
        using badOut = Tensor.empty([T, 4, 8], { dtype: "bfloat16", device });
        refuses(() => cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens, { output: badOut }), /out\.output/);
      }
      {
        // Unchecked, the token indices' values are not read (their shape still is).
        const loose = new NSACmpFwdVarlenOp({ ...cmpSizes, dimK: 16, dimV: 8, checkIndices: false });
        using r = loose.forward(q, kCmp, vCmp, offsets, chunks, wrongTokens);
        using r64 = cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens64);
        assertClose(r.output, r64.output, { maxAbs: 0 });
        refuses(() => loose.forward(q, kCmp, vCmp, offsets, chunks, kCmp), /tokenIndices/);
      }

      const topk = new NSATopkVarlenOp({ ...cmpSizes, dim: 16, selectedBlockNum: 2 });
      using lse = Tensor.zeros([T, 4], { device });
      using lse16 = lse.cast("float16");
      refuses(() => topk.forward(q, kCmp, lse16, offsets, chunks, tokens), /lseIn: expected dtype/);
      refuses(() => topk.forward(q64, kCmp, lse, offsets, chunks, tokens), /q: expected dtype/);
      refuses(
        () =>
          new NSATopkVarlenOp({ ...cmpSizes, dim: 16, selectedBlockNum: 2 }).forward(
            qBf,
            kCmp,
            lse,
            offsets,
            chunks,
            tokens,
          ),
        /kCmp: expected bfloat16/,
      );
      refuses(
        () => topk.forward(qBf, qBf, lse, offsets, chunks, tokens),
        /q: this op was first called with float32/,
      );
      refuses(() => topk.forward(q, kCmp, lse, offsets, chunks, wrongTokens), /tokenIndices/);
      {
        using badOut = Tensor.empty([T, 2, 3], { dtype: "int32", device });
        refuses(() => topk.forward(q, kCmp, lse, offsets, chunks, tokens, badOut), /out: expected shape/);
      }
      refuses(
        () => new NSATopkVarlenOp({ ...cmpSizes, bc: 2, dim: 16, selectedBlockNum: 2 }),
        /bc/,
      );

      const sel = new NSAFwdVarlenOp({
        batch: 2,
        heads: 4,
        cSeqLen: T,
        dim: 16,
        blockSize: 4,
        groups: 2,
        selectedBlocks: 2,
      });
      using k = Tensor.randn([T, 2, 16], { device, seed: 4 });
      using v = Tensor.randn([T, 2, 8], { device, seed: 5 });
      using blocks = Tensor.zeros([T, 2, 2], { dtype: "int32", device });
      using blocks64 = blocks.cast("int64");
      using counts = Tensor.ones([T, 2], { dtype: "int32", device });
      using counts64 = counts.cast("int64");
      using countsWide = Tensor.ones([T, 4], { dtype: "int32", device });
      refuses(
        () => sel.forward(q, k, v, blocks64, undefined, offsets, tokens),
        /blockIndices: expected dtype int32/,
      );
      refuses(
        () => sel.forward(q, k, v, blocks, counts64, offsets, tokens),
        /blockCounts: expected dtype int32/,
      );
      refuses(() => sel.forward(q, k, v, blocks, countsWide, offsets, tokens), /blockCounts: expected shape/);
      refuses(() => sel.forward(q64, k, v, blocks, undefined, offsets, tokens), /q: expected dtype/);
      refuses(() => sel.forward(q, q, v, blocks, undefined, offsets, tokens), /k: expected shape/);
      refuses(() => sel.forward(q, k, v, blocks, undefined, offsets, wrongTokens), /tokenIndices/);
      refuses(() => sel.forward(q, k, v, blocks, 1.5, offsets, tokens), /blockCounts/);

      const dsa = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
        batch: 1,
        heads: 2,
        seqLen: 1,
        seqLenKv: 8,
        dim: 16,
        dimTail: 8,
        topk: 4,
        qStartIndexS: 7,
      });
      using dq = Tensor.randn([1, 1, 2, 24], { device, seed: 6 });
      using dq64 = dq.cast("float64");
      using dkv = Tensor.randn([1, 8, 1, 24], { device, seed: 7 });
      using dkvBf = dkv.cast("bfloat16");
      using idx = Tensor.zeros([1, 1, 1, 4], { dtype: "int32", device });
      using idx64 = idx.cast("int64");
      using idxShort = Tensor.zeros([1, 1, 1, 3], { dtype: "int32", device });
      refuses(() => dsa.forward(dq64, dkv, idx), /q: expected dtype/);
      refuses(() => dsa.forward(dq, dkvBf, idx), /kv: expected float32 like q/);
      refuses(() => dsa.forward(dq, dkv, idx64), /indices: expected dtype int32/);
      refuses(() => dsa.forward(dq, dkv, idxShort), /indices: expected shape/);
      refuses(() => dsa.forward(dq, dq, idx), /kv: expected shape/);

      const indexer = new FP8LightningIndexerFwdOp();
      using iq = Tensor.randn([3, 2, 16], { dtype: "bfloat16", device, seed: 8 });
      using iq32 = iq.cast("float32");
      using ik = Tensor.randn([5, 16], { dtype: "bfloat16", device, seed: 9 });
      using ik8 = ik.cast("float8_e4m3");
      using ikShort = Tensor.randn([5, 8], { dtype: "bfloat16", device, seed: 9 });
      using iw = Tensor.ones([3, 2], { device });
      using iwBf = iw.cast("bfloat16");
      using iks = Tensor.zeros([3], { dtype: "int32", device });
      using iks64 = iks.cast("int64");
      using ike = Tensor.full([3], 5, { dtype: "int32", device });
      using iscale = Tensor.ones([4], { device });
      refuses(() => indexer.forward(iq32, ik, iw, iks, ike), /indexQ: expected dtype/);
      refuses(() => indexer.forward(iq, ik8, iw, iks, ike), /indexK/);
      refuses(() => indexer.forward(iq, ikShort, iw, iks, ike), /indexK: expected shape/);
      refuses(() => indexer.forward(iq, ik, iwBf, iks, ike), /weights: expected dtype/);
      refuses(() => indexer.forward(iq, ik, iw, iks64, ike), /cuSeqlenKs: expected dtype int32/);
      refuses(() => indexer.forward(iq, ik, iw, iks, ike, iscale), /indexKScale: expected shape/);
    }),
);
