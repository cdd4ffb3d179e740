// The paged prefill with append (GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp) against the float64
// oracle, under FlashAttention's rule (tests/attention_cases.ts: the error at most twice a plain
// same-precision reference's, + the rounding allowance + 1e-5). The oracle applies the op's contract exactly:
// RoPE in float64 rounded to q's dtype, each new key and value rounded to the cache's dtype (float8_e4m3:
// of k / scale, read back times the scale), then attention over each request's cached and new keys
// (bottom-right causal). The pages are checked too: the written rows hold the rounded new rows (relative
// RMS at most 2e-3 for 16-bit caches, 1e-2 for float8: a float32-computed RoPE can round a near-tie the
// other way), every other row keeps its bits. Cases: fresh and continued requests, a chunk across page
// boundaries, shuffled physical pages, an empty chunk, GQA, RoPE (neox / interleaved, partial rotaryDim),
// float8 caches, no causal mask, softcap; two chunks in a row equal one chunk of both; refusals.
import assert from "node:assert/strict";
import {
  type Device,
  type DType,
  GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp,
  Tensor,
} from "../mod.ts";
import { attentionReference, FLOAT64, roundBf16, roundF16, samePrecision } from "../reference/mod.ts";
import { roundE4m3 } from "../reference/rounding.ts";
import { expectFlashRule } from "./attention_cases.ts";
import { assertClose } from "../mod.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

interface PagedCase {
  dtype: "bfloat16" | "float16";
  cache?: DType;
  heads: number;
  headsKv: number;
  dim: number;
  pageSize: number;
  maxPages: number;
  /** Keys held before the chunk, and the chunk's length, per request. */
  cached: number[];
  chunk: number[];
  causal?: boolean;
  softcap?: number;
  rope?: { rotaryDim?: number; layout?: "neox" | "interleaved"; base?: number };
}

const offsetsOf = (lengths: number[]) => lengths.reduce((a, l) => [...a, a[a.length - 1] + l], [0]);
const rounder = (dtype: DType): (x: number) => number =>
  dtype === "bfloat16" ? roundBf16 : dtype === "float16" ? roundF16 : roundE4m3;

/** RoPE in float64 of row x (`dim` values) at `pos`: the first rotaryDim dims turn in pairs. */
function rope64(x: Float64Array, pos: number, rotaryDim: number, layout: string, base: number): Float64Array {
  const out = x.slice(), half = rotaryDim / 2;
  for (let i = 0; i < half; i++) {
    const [a, b] = layout === "neox" ? [i, i + half] : [2 * i, 2 * i + 1];
    const angle = pos * base ** (-2 * i / rotaryDim), c = Math.cos(angle), s = Math.sin(angle);
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[b] * c + x[a] * s;
  }
  return out;
}

/** A shuffled page assignment: request b's logical page p is table[b * maxPages + p], all distinct. */
function shuffledTable(B: number, maxPages: number, seed: number): Int32Array {
  const n = B * maxPages, perm = Int32Array.from({ length: n }, (_, i) => i);
  let s = seed >>> 0 || 1;
  for (let i = n - 1; i > 0; i--) {
    s = (s * 1664525 + 1013904223) >>> 0;
    const j = s % (i + 1);
    [perm[i], perm[j]] = [perm[j], perm[i]];
  }
  return perm;
}

function checkPaged(device: Device, c: PagedCase, seed: number): void {
  const B = c.cached.length, { heads: H, headsKv: Hkv, dim: D, pageSize: P, maxPages } = c;
  const cacheDtype = c.cache ?? c.dtype, fp8 = cacheDtype === "float8_e4m3";
  const cuQ = offsetsOf(c.chunk), T = cuQ[B], rows = B * maxPages * P;
  using q = Tensor.randn([T, H, D], { dtype: c.dtype, device, seed });
  using kNew = Tensor.randn([T, Hkv, D], { dtype: c.dtype, device, seed: seed + 1 });
  using vNew = Tensor.randn([T, Hkv, D], { dtype: c.dtype, device, seed: seed + 2 });
  using kPages = Tensor.randn([rows, Hkv, D], { dtype: cacheDtype, device, seed: seed + 3 });
  using vPages = Tensor.randn([rows, Hkv, D], { dtype: cacheDtype, device, seed: seed + 4 });
  using kScale = Tensor.rand([B, Hkv], { device, seed: seed + 5, low: 0.25, high: 2 });
  using vScale = Tensor.rand([B, Hkv], { device, seed: seed + 6, low: 0.25, high: 2 });
  const tableHost = shuffledTable(B, maxPages, seed);
  using table = Tensor.from(tableHost, { shape: [B, maxPages], device });
  using cached = Tensor.from(Int32Array.from(c.cached), { device });
  const host = (t: Tensor) => Float64Array.from(t.toArray() as Float32Array);
  const [qH, kH, vH, kPagesBefore, vPagesBefore] = [q, kNew, vNew, kPages, vPages].map(host);
  const [ksH, vsH] = [kScale, vScale].map(host);
  const op = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
    batch: B,
    heads: H,
    headsKv: Hkv,
    maxPagesPerReq: maxPages,
    pageSize: P,
    dim: D,
    isCausal: c.causal ?? true,
    cacheDtype: c.cache,
    softcap: c.softcap,
    fuseRope: c.rope !== undefined,
    rotaryDim: c.rope?.rotaryDim,
    ropeLayout: c.rope?.layout,
    ropeBase: c.rope?.base,
  });
  using out = expectOutput(
    op.forward(
      q,
      kNew,
      vNew,
      kPages,
      vPages,
      fp8 ? kScale : null,
      fp8 ? vScale : null,
      cuQ,
      cached,
      table,
      Math.max(0, ...c.chunk),
    ),
    [T, H, D],
    c.dtype,
  );

  // The op's contract in float64: rotated rows rounded to q's dtype, new rows rounded to the cache's.
  const roundQ = rounder(c.dtype), roundCache = rounder(cacheDtype);
  const turn = (x: Float64Array, heads: number) => {
    const outRows = new Float64Array(x.length);
    for (let b = 0; b < B; b++) {
      for (let t = cuQ[b]; t < cuQ[b + 1]; t++) {
        for (let h = 0; h < heads; h++) {
          const at = (t * heads + h) * D;
          let row = x.slice(at, at + D);
          if (c.rope) {
            row = rope64(
              row,
              c.cached[b] + t - cuQ[b],
              c.rope.rotaryDim ?? D,
              c.rope.layout ?? "neox",
              c.rope.base ?? 1e4,
            )
              .map(roundQ);
          }
          outRows.set(row, at);
        }
      }
    }
    return outRows;
  };
  const qR = turn(qH, H), kR = turn(kH, Hkv);
  const kOffsets = offsetsOf(c.cached.map((n, b) => n + c.chunk[b]));
  const physical = (b: number, pos: number) => tableHost[b * maxPages + Math.floor(pos / P)] * P + (pos % P);
  // Expected pages after the call, and the dequantised keys / values of each request in order.
  const expectPages = (before: Float64Array, fresh: Float64Array, scale: Float64Array) => {
    const after = before.slice();
    for (let b = 0; b < B; b++) {
      for (let t = cuQ[b]; t < cuQ[b + 1]; t++) {
        const r = physical(b, c.cached[b] + t - cuQ[b]);
        for (let h = 0; h < Hkv; h++) {
          for (let d = 0; d < D; d++) {
            const x = fresh[(t * Hkv + h) * D + d];
            after[(r * Hkv + h) * D + d] = fp8
              ? roundE4m3(Math.fround(x / scale[b * Hkv + h]))
              : roundCache(x);
          }
        }
      }
    }
    return after;
  };
  // A float8 cache is read dequantised: the float32 product with the scale, rounded once to q's dtype (what
  // the op's gather does; the same-precision reference reads those values, the oracle the exact products).
  // A 16-bit cache of the other dtype is cast to q's the same way (float16 to bfloat16 drops 3 bits).
  const gathered = (pages: Float64Array, scale: Float64Array, round = (x: number) => x) => {
    const keys = new Float64Array(kOffsets[B] * Hkv * D);
    for (let b = 0; b < B; b++) {
      for (let j = 0; j < kOffsets[b + 1] - kOffsets[b]; j++) {
        const r = physical(b, j);
        for (let h = 0; h < Hkv; h++) {
          for (let d = 0; d < D; d++) {
            const x = pages[(r * Hkv + h) * D + d];
            keys[((kOffsets[b] + j) * Hkv + h) * D + d] = fp8 ? round(x * scale[b * Hkv + h]) : round(x);
          }
        }
      }
    }
    return keys;
  };
  const kAfter = expectPages(kPagesBefore, kR, ksH), vAfter = expectPages(vPagesBefore, vH, vsH);
  for (
    const [name, got, want, before] of [["kPages", kPages, kAfter, kPagesBefore], [
      "vPages",
      vPages,
      vAfter,
      vPagesBefore,
    ]] as const
  ) {
    const now = host(got);
    const written = new Set<number>();
    for (let b = 0; b < B; b++) {
      for (let j = c.cached[b]; j < c.cached[b] + c.chunk[b]; j++) written.add(physical(b, j));
    }
    const rowsOf = (x: Float64Array, keep: boolean) =>
      Array.from({ length: rows }, (_, r) => r).filter((r) => written.has(r) === keep).flatMap((r) =>
        Array.from(x.subarray(r * Hkv * D, (r + 1) * Hkv * D))
      );
    assert.deepEqual(rowsOf(now, false), rowsOf(before, false), `${name}: rows the call does not write`);
    if (written.size > 0) {
      assertClose(rowsOf(now, true), rowsOf(want, true), {
        relRms: fp8 ? 1e-2 : 2e-3,
        name: `${name} written rows`,
      });
    }
  }
  const problem = {
    q: qR,
    k: gathered(kAfter, ksH),
    v: gathered(vAfter, vsH),
    qStart: cuQ,
    kvStart: kOffsets,
    heads: H,
    headsKv: Hkv,
    dim: D,
    smScale: D ** -0.5,
    softcap: c.softcap ?? 0,
    causal: c.causal ?? true,
    windowLeft: -1,
    windowRight: (c.causal ?? true) ? 0 : -1,
  };
  const oracle = attentionReference(problem, FLOAT64).output;
  const dequantised = (x: number) => roundQ(Math.fround(x));
  const reference = attentionReference({
    ...problem,
    k: gathered(kAfter, ksH, dequantised),
    v: gathered(vAfter, vsH, dequantised),
  }, samePrecision(c.dtype)).output;
  expectFlashRule(
    `output ${JSON.stringify(c)}`,
    out.toArray() as Float32Array,
    oracle,
    reference,
    "forward",
    c.dtype,
  );
}

function expectOutput(t: Tensor, shape: number[], dtype: DType): Tensor {
  assert.deepEqual(t.shape, shape);
  assert.equal(t.dtype, dtype);
  return t;
}

const CASES: PagedCase[] = [
  // A fresh request and one that continues across a page boundary.
  {
    dtype: "bfloat16",
    heads: 4,
    headsKv: 2,
    dim: 64,
    pageSize: 16,
    maxPages: 4,
    cached: [0, 20],
    chunk: [8, 30],
  },
  // RoPE (neox, partial), GQA 3:1, an empty chunk, one token.
  {
    dtype: "float16",
    heads: 3,
    headsKv: 1,
    dim: 32,
    pageSize: 8,
    maxPages: 5,
    cached: [5, 0, 13],
    chunk: [0, 1, 17],
    rope: { rotaryDim: 16 },
  },
  // A float8 cache with scales, interleaved RoPE, softcap.
  {
    dtype: "bfloat16",
    cache: "float8_e4m3",
    heads: 8,
    headsKv: 2,
    dim: 64,
    pageSize: 16,
    maxPages: 3,
    cached: [16, 3],
    chunk: [12, 20],
    rope: { layout: "interleaved", base: 500000 },
    softcap: 20,
  },
  // No causal mask; a 16-bit cache of another dtype than q.
  {
    dtype: "bfloat16",
    cache: "float16",
    heads: 2,
    headsKv: 2,
    dim: 16,
    pageSize: 4,
    maxPages: 6,
    cached: [7, 2],
    chunk: [5, 9],
    causal: false,
  },
];

deviceTest(
  "paged prefill: append, then attention over cache and chunk, matches the float64 oracle",
  async (device) => {
    for (const c of CASES) await withSeed((seed) => checkPaged(device, c, seed));
  },
);

deviceTest("paged prefill: two chunks in a row equal one chunk of both", async (device) => {
  await withSeed((seed) => {
    const [H, Hkv, D, P, maxPages] = [4, 2, 32, 8, 4];
    const op = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
      batch: 1,
      heads: H,
      headsKv: Hkv,
      maxPagesPerReq: maxPages,
      pageSize: P,
      dim: D,
      fuseRope: true,
    });
    using q = Tensor.randn([27, H, D], { dtype: "bfloat16", device, seed });
    using k = Tensor.randn([27, Hkv, D], { dtype: "bfloat16", device, seed: seed + 1 });
    using v = Tensor.randn([27, Hkv, D], { dtype: "bfloat16", device, seed: seed + 2 });
    using table = Tensor.from(new Int32Array([3, 0, 2, 1]), { shape: [1, maxPages], device });
    const pages = () => Tensor.zeros([maxPages * P, Hkv, D], { dtype: "bfloat16", device });
    using kOne = pages(), vOne = pages(), kTwo = pages(), vTwo = pages();
    using zero = Tensor.from(new Int32Array([0]), { device });
    using eleven = Tensor.from(new Int32Array([11]), { device });
    using whole = op.forward(q, k, v, kOne, vOne, null, null, [0, 27], zero, table, 27);
    const part = (t: Tensor, a: number, b: number) => t.slice(0, a, b);
    using q1 = part(q, 0, 11), k1 = part(k, 0, 11), v1 = part(v, 0, 11);
    using q2 = part(q, 11, 27), k2 = part(k, 11, 27), v2 = part(v, 11, 27);
    using first = op.forward(q1, k1, v1, kTwo, vTwo, null, null, [0, 11], zero, table, 27);
    using second = op.forward(q2, k2, v2, kTwo, vTwo, null, null, [0, 16], eleven, table, 27);
    using wholeTail = part(whole, 11, 27), wholeHead = part(whole, 0, 11);
    assert.deepEqual(first.toArray(), wholeHead.toArray(), "the first chunk");
    assertClose(second, wholeTail, { relRms: 1e-6, name: "the second chunk" });
    assert.deepEqual(kTwo.toArray(), kOne.toArray(), "the pages");
    assert.deepEqual(vTwo.toArray(), vOne.toArray(), "the value pages");
  });
});

deviceTest("paged prefill: refusals name what is wrong, and nothing is written", async (device) => {
  const sizes = { batch: 2, heads: 2, headsKv: 1, maxPagesPerReq: 2, pageSize: 4, dim: 16 };
  const op = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp(sizes);
  using q = Tensor.randn([6, 2, 16], { dtype: "bfloat16", device, seed: 1 });
  using kv = Tensor.randn([6, 1, 16], { dtype: "bfloat16", device, seed: 2 });
  using pages = Tensor.zeros([16, 1, 16], { dtype: "bfloat16", device });
  using cached = Tensor.from(new Int32Array([0, 2]), { device });
  const table = (entries: number[]) => Tensor.from(new Int32Array(entries), { shape: [2, 2], device });
  using good = table([0, 1, 2, 3]);
  const run = (o: { t?: Tensor; c?: Tensor; cu?: number[]; max?: number; pages?: Tensor } = {}) =>
    op.forward(
      q,
      kv,
      kv,
      o.pages ?? pages,
      o.pages ?? pages,
      null,
      null,
      o.cu ?? [0, 3, 6],
      o.c ?? cached,
      o.t ?? good,
      o.max ?? 4,
    );
  await expectNoLeak(device, () => {
    using pastCache = table([0, 1, 2, 9]);
    refuses(() => run({ t: pastCache }), /blockTable: entry \[1, 1\] is 9/);
    using shared = table([0, 1, 0, 3]);
    refuses(
      () => run({ t: shared }),
      /blockTable: page 0 is written by this call and named by entries \[0, 0\] and \[1, 0\]/,
    );
    using full = Tensor.from(new Int32Array([0, 6]), { device });
    refuses(() => run({ c: full }), /cacheSeqlens: request 1 holds 6 keys and appends 3/);
    refuses(() => run({ max: 2 }), /cuSeqlensQ: request 0 has 3 tokens, expected 0 to maxSeqlenQ=2/);
    using f16Pages = Tensor.zeros([16, 1, 16], { dtype: "float16", device });
    refuses(() => run({ pages: f16Pages }), /kPages: expected bfloat16 \(the cache dtype\), got float16/);
    using oddPages = Tensor.zeros([10, 1, 16], { dtype: "bfloat16", device });
    refuses(() => run({ pages: oddPages }), /kPages: 10 rows are not whole pages of 4/);
    refuses(() => run({ cu: [0, 3, 5] }), /cuSeqlensQ: expected offsets from 0 to the 6 rows of q/);
    const fp8 = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
      ...sizes,
      cacheDtype: "float8_e4m3",
    });
    using fp8Pages = Tensor.zeros([16, 1, 16], { dtype: "float8_e4m3", device });
    refuses(
      () => fp8.forward(q, kv, kv, fp8Pages, fp8Pages, null, null, [0, 3, 6], cached, good, 4),
      /kScale: a float8_e4m3 cache needs float32 \[batch, headsKv\] scales/,
    );
    const roped = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
      ...sizes,
      fuseRope: true,
      maxPosition: 4,
    });
    refuses(
      () => roped.forward(q, kv, kv, pages, pages, null, null, [0, 3, 6], cached, good, 4),
      /maxPosition: request 1 reaches position 4, past maxPosition=4/,
    );
  });
  assert.ok((pages.toArray() as Float32Array).every((x) => x === 0), "a refused call wrote no page");
  // A prefix page both requests only read is fine (prefix caching).
  using four = Tensor.from(new Int32Array([4, 4]), { device });
  using prefix = table([0, 1, 0, 2]);
  using o = op.forward(q, kv, kv, pages, pages, null, null, [0, 3, 6], four, prefix, 4);
  assert.deepEqual(o.shape, [6, 2, 16]);
  refuses(
    () => new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({ ...sizes, rotaryDim: 8 }),
    /rotaryDim: only meaningful with fuseRope: true/,
  );
  refuses(
    () => new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({ ...sizes, fuseRope: true, rotaryDim: 7 }),
    /rotaryDim: expected an even number up to dim=16, got 7/,
  );
  refuses(
    () => new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({ ...sizes, cacheDtype: "float32" }),
    /cacheDtype: expected one of float16, bfloat16, float8_e4m3, got float32/,
  );
});
