// Decode over a KV cache (contiguous and paged, MHA and GQA) against the float64 oracle: plain attention
// over the keys each sequence holds, gathered here from the cache through its lengths and block table.
// Tolerance rule (FlashAttention's, tests/attention_cases.ts): the max abs error at most twice the
// same-precision reference's, plus the rounding allowance and 1e-5. Cases: empty caches, one key, lengths
// on and off page boundaries, pages in shuffled physical order with unused table entries of -1, query
// blocks longer than the cache under causal, odd head counts, head dims 64 / 128 / 256, softcap and scale;
// paged equals contiguous bit for bit on the same keys; every bad length, page, shape and option refused.
import {
  type Device,
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  MultiHeadAttentionDecodePagedWithKVCacheFwdOp,
  MultiHeadAttentionDecodeWithKVCacheFwdOp,
  Tensor,
  withTuning,
} from "../mod.ts";
import { attentionReference, FLOAT64, samePrecision } from "../reference/mod.ts";
import { expectFlashRule } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";
import { generator } from "./oracle_checks.ts";
import assert from "node:assert/strict";
import { Status } from "../ffi/errors.ts";
import { native } from "../ffi/library.ts";

interface DecodeCase {
  /** The GQA ops (q `[B, H, D]`, seqlenQ 1, smScale, softcap) or the MHA ones. */
  gqa: boolean;
  heads: number;
  headsKv: number;
  dim: number;
  /** Query tokens per sequence (GQA ops: 1). */
  seqlenQ: number;
  lengths: number[];
  /** Paged: rows per page; contiguous when undefined. */
  pageSize?: number;
  causal?: boolean;
  softcap?: number;
  smScale?: number;
  dtype: "bfloat16" | "float16";
}

/** A random page order: sequence b's pages are `table[b]`, every page used once, -1 past the last. */
function pageTable(
  rnd: () => number,
  lengths: number[],
  pageSize: number,
): { table: number[][]; pages: number } {
  const need = lengths.map((l) => Math.ceil(l / pageSize));
  const pages = need.reduce((a, b) => a + b, 0) + 2; // two spare pages nobody names
  const order = Array.from({ length: pages }, (_, i) => i);
  for (let i = pages - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const width = Math.max(1, ...need) + 1;
  let next = 0;
  const table = need.map((n) => Array.from({ length: width }, (_, p) => (p < n ? order[next++] : -1)));
  return { table, pages };
}

/** Runs one case through its op on `device` and holds it to the oracle. */
function checkDecode(device: Device, c: DecodeCase, seed: number): void {
  const rnd = generator(seed);
  const B = c.lengths.length, { heads: H, headsKv: Hkv, dim: D, seqlenQ: Sq } = c;
  const gqa = c.gqa;
  const paged = c.pageSize !== undefined;
  const { table, pages } = paged ? pageTable(rnd, c.lengths, c.pageSize!) : { table: [], pages: 0 };
  const Skv = paged ? pages * c.pageSize! : Math.max(1, ...c.lengths) + 3;
  const kvShape = paged ? [Skv, Hkv, D] : [B, Skv, Hkv, D];
  using q = Tensor.randn(gqa ? [B, H, D] : [B, Sq, H, D], { dtype: c.dtype, device, seed });
  using k = Tensor.randn(kvShape, { dtype: c.dtype, device, seed: seed + 1 });
  using v = Tensor.randn(kvShape, { dtype: c.dtype, device, seed: seed + 2 });
  using lengths = Tensor.from(c.lengths, { dtype: "int32", device });
  using blocks = paged ? Tensor.from(table, { dtype: "int32", device }) : undefined;
  const sizes = { batch: B, heads: H, seqlenKv: Skv, dim: D };
  let out: Tensor;
  if (gqa) {
    const o = { ...sizes, headsKv: Hkv, smScale: c.smScale, softcap: c.softcap };
    out = paged
      ? new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...o, pageSize: c.pageSize! }).forward(
        q,
        k,
        v,
        lengths,
        blocks!,
      )
      : new GroupedQueryAttentionDecodeWithKVCacheFwdOp(o).forward(q, k, v, lengths);
  } else {
    const o = { ...sizes, seqlenQ: Sq, isCausal: c.causal };
    out = paged
      ? new MultiHeadAttentionDecodePagedWithKVCacheFwdOp({ ...o, pageSize: c.pageSize! }).forward(
        q,
        k,
        v,
        lengths,
        blocks!,
      )
      : new MultiHeadAttentionDecodeWithKVCacheFwdOp(o).forward(q, k, v, lengths);
  }
  using output = out;
  assert.deepEqual(output.shape, q.shape);
  // The oracle's keys: each sequence's rows, gathered from the host copy of the cache.
  const [kHost, vHost] = [k, v].map((t) => t.toArray() as Float32Array);
  const row = Hkv * D, kvStart = [0];
  const kRows: number[] = [], vRows: number[] = [];
  c.lengths.forEach((len, b) => {
    for (let j = 0; j < len; j++) {
      const r = paged ? table[b][Math.floor(j / c.pageSize!)] * c.pageSize! + (j % c.pageSize!) : b * Skv + j;
      for (let x = 0; x < row; x++) {
        kRows.push(kHost[r * row + x]);
        vRows.push(vHost[r * row + x]);
      }
    }
    kvStart.push(kvStart[b] + len);
  });
  const problem = {
    q: q.toArray() as Float32Array,
    k: kRows,
    v: vRows,
    qStart: Array.from({ length: B + 1 }, (_, b) => b * Sq),
    kvStart,
    heads: H,
    headsKv: Hkv,
    dim: D,
    smScale: c.smScale ?? D ** -0.5,
    softcap: c.softcap ?? 0,
    causal: c.causal ?? false,
    windowLeft: -1,
    windowRight: -1,
  };
  const oracle = attentionReference(problem, FLOAT64).output;
  const reference = attentionReference(problem, samePrecision(c.dtype)).output;
  expectFlashRule(
    `output ${JSON.stringify(c)}`,
    output.toArray() as Float32Array,
    oracle,
    reference,
    "forward",
    c.dtype,
  );
}

const CASES: DecodeCase[] = [
  // GQA, contiguous: an empty cache, one key, a full one; softcap; a custom scale.
  {
    gqa: true,
    heads: 8,
    headsKv: 2,
    dim: 64,
    seqlenQ: 1,
    lengths: [37, 1, 0, 64],
    softcap: 20,
    dtype: "bfloat16",
  },
  {
    gqa: true,
    heads: 6,
    headsKv: 3,
    dim: 128,
    seqlenQ: 1,
    lengths: [5, 90],
    smScale: 0.05,
    dtype: "float16",
  },
  // GQA, paged: lengths on and off the page boundaries, shuffled pages.
  {
    gqa: true,
    heads: 8,
    headsKv: 1,
    dim: 128,
    seqlenQ: 1,
    lengths: [64, 65, 1, 0, 130],
    pageSize: 64,
    dtype: "bfloat16",
  },
  {
    gqa: true,
    heads: 4,
    headsKv: 2,
    dim: 256,
    seqlenQ: 1,
    lengths: [16, 17, 48],
    pageSize: 16,
    softcap: 5,
    dtype: "float16",
  },
  // MHA: several query tokens, causal with fewer keys than queries, odd heads.
  {
    gqa: false,
    heads: 3,
    headsKv: 3,
    dim: 64,
    seqlenQ: 4,
    lengths: [3, 50, 0],
    causal: true,
    dtype: "bfloat16",
  },
  { gqa: false, heads: 2, headsKv: 2, dim: 128, seqlenQ: 2, lengths: [40, 7], dtype: "float16" },
  {
    gqa: false,
    heads: 5,
    headsKv: 5,
    dim: 64,
    seqlenQ: 3,
    lengths: [33, 2, 96],
    pageSize: 32,
    causal: true,
    dtype: "bfloat16",
  },
  { gqa: true, heads: 1, headsKv: 1, dim: 64, seqlenQ: 1, lengths: [1, 0], pageSize: 8, dtype: "float16" },
  // Long enough caches that the split-key kernel splits them (and combines the parts).
  {
    gqa: true,
    heads: 8,
    headsKv: 2,
    dim: 128,
    seqlenQ: 1,
    lengths: [2000, 700, 0],
    pageSize: 64,
    softcap: 30,
    dtype: "bfloat16",
  },
  {
    gqa: false,
    heads: 2,
    headsKv: 2,
    dim: 64,
    seqlenQ: 3,
    lengths: [1100, 513],
    causal: true,
    dtype: "float16",
  },
  { gqa: true, heads: 16, headsKv: 1, dim: 256, seqlenQ: 1, lengths: [600, 31], dtype: "bfloat16" },
  // Calls the kernel does not serve (a head dim of 32; 32 query rows of D 256 per KV head): gather + forward.
  { gqa: true, heads: 4, headsKv: 2, dim: 32, seqlenQ: 1, lengths: [20, 9], pageSize: 8, dtype: "bfloat16" },
  { gqa: true, heads: 32, headsKv: 1, dim: 256, seqlenQ: 1, lengths: [300], dtype: "float16" },
];

deviceTest(
  "kv-cache decode (contiguous and paged, MHA and GQA) matches the float64 oracle",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, c] of CASES.entries()) checkDecode(device, c, seed + 10 * i);
      })),
);

// Each decode block pinned in turn, on the cases it serves (rows per KV head: tiled R D <= 4096, warp R <= 8,
// mma and pipe R <= 16; head dims 64, 128, 256): the planner's rule runs only one of them per shape.
deviceTest(
  "each split-key decode block (tiled, warp, mma, pipe), pinned, matches the float64 oracle",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const serves = {
          tiled: (r: number, d: number) => r * d <= 4096,
          warp: (r: number) => r <= 8,
          mma: (r: number) => r <= 16,
          pipe: (r: number) => r <= 16,
        };
        for (const [block, ok] of Object.entries(serves)) {
          for (const [i, c] of CASES.entries()) {
            const rows = (c.heads / c.headsKv) * c.seqlenQ;
            if (![64, 128, 256].includes(c.dim) || !ok(rows, c.dim)) continue;
            withTuning({ "attention.decode": block }, () => checkDecode(device, c, seed + 10 * i));
          }
        }
      })),
);

deviceTest(
  "paged decode equals contiguous decode on the same keys, bit for bit",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const [B, H, Hkv, D, Skv, pageSize] = [3, 8, 2, 64, 96, 32];
        const lengths = [96, 33, 0];
        using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed });
        using k = Tensor.randn([B, Skv, Hkv, D], { dtype: "bfloat16", device, seed: seed + 1 });
        using v = Tensor.randn([B, Skv, Hkv, D], { dtype: "bfloat16", device, seed: seed + 2 });
        using len = Tensor.from(lengths, { dtype: "int32", device });
        // The same rows as pages: sequence b's page p is physical page (b * 3 + p), reversed in memory.
        const pagesPer = Skv / pageSize, pages = B * pagesPer;
        using kFlat = k.reshape([B * Skv, Hkv, D]), vFlat = v.reshape([B * Skv, Hkv, D]);
        const order = Array.from({ length: pages }, (_, i) => pages - 1 - i);
        const rows = order.flatMap((page) => Array.from({ length: pageSize }, (_, j) => page * pageSize + j));
        using kPaged = kFlat.indexSelect(0, rows), vPaged = vFlat.indexSelect(0, rows);
        const table = Array.from(
          { length: B },
          (_, b) => Array.from({ length: pagesPer }, (_, p) => pages - 1 - (b * pagesPer + p)),
        );
        using blocks = Tensor.from(table, { dtype: "int32", device });
        const sizes = { batch: B, heads: H, headsKv: Hkv, dim: D, softcap: 10 };
        using dense = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, seqlenKv: Skv }).forward(
          q,
          k,
          v,
          len,
        );
        using paged = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
          ...sizes,
          seqlenKv: pages * pageSize,
          pageSize,
        })
          .forward(q, kPaged, vPaged, len, blocks);
        assert.deepEqual(paged.toArray(), dense.toArray());
      })),
);

deviceTest(
  "kv-cache decode refuses bad lengths, pages, shapes and options, naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      const sizes = { batch: 2, heads: 4, headsKv: 2, seqlenKv: 64, dim: 64 };
      const op = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, pageSize: 16 });
      using q = Tensor.randn([2, 4, 64], { dtype: "bfloat16", device });
      using kv = Tensor.randn([64, 2, 64], { dtype: "bfloat16", device });
      using lengths = Tensor.from([20, 16], { dtype: "int32", device });
      using table = Tensor.from([[1, 3], [0, -1]], { dtype: "int32", device });
      const int32 = (x: number[] | number[][]) => Tensor.from(x, { dtype: "int32", device });
      using past = int32([[1, 4], [0, -1]]), negative = int32([[1, -1], [0, -1]]), narrow = int32([[1], [0]]);
      using long = int32([20, 33]), float = Tensor.from([20, 16], { device });
      refuses(
        () => op.forward(q, kv, kv, lengths, past),
        /blockTable: entry \[0, 1\] is 4, expected a page in 0 \.\. 3/,
      );
      refuses(() => op.forward(q, kv, kv, lengths, negative), /blockTable: entry \[0, 1\] is -1/);
      refuses(() => op.forward(q, kv, kv, lengths, narrow), /realSeqlenKv: entry 0 is 20, expected 0 to 16/);
      refuses(() => op.forward(q, kv, kv, long, table), /realSeqlenKv: entry 1 is 33, expected 0 to 32/);
      refuses(() => op.forward(q, kv, kv, float, table), /realSeqlenKv: expected dtype int32/);
      refuses(() => op.forward(q, kv, kv, undefined as unknown as Tensor, table), /realSeqlenKv/);
      refuses(() => op.forward(q, kv, kv, lengths, undefined as unknown as Tensor), /blockTable/);
      using q4 = Tensor.randn([2, 1, 4, 64], { dtype: "bfloat16", device });
      refuses(() => op.forward(q4, kv, kv, lengths, table), /q: expected shape \[2, 4, 64\]/);
      using kvWrong = Tensor.randn([2, 64, 2, 64], { dtype: "bfloat16", device });
      refuses(() => op.forward(q, kvWrong, kvWrong, lengths, table), /k: expected shape \[64, 2, 64\]/);
      using q32 = Tensor.randn([2, 4, 64], { device });
      refuses(
        () => op.forward(q32, kv, kv, lengths, table),
        /q: expected dtype float16 | bfloat16, got float32/,
      );
      using kvHalf = Tensor.randn([64, 2, 64], { dtype: "float16", device });
      refuses(() => op.forward(q, kvHalf, kv, lengths, table), /k: expected bfloat16 like q/);
      refuses(
        () => new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, pageSize: 24 }),
        /seqlenKv: 64 cache rows are not a whole number of pages of 24/,
      );
      refuses(
        () => new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, heads: 3 }),
        /heads: 3 query heads are not a multiple of headsKv/,
      );
      refuses(() => new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, smScale: -1 }), /smScale/);
      refuses(
        () => new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, scale: 0.1 } as never),
        /scale/,
      );
      refuses(
        () =>
          new MultiHeadAttentionDecodeWithKVCacheFwdOp({
            batch: 1,
            heads: 2,
            seqlenQ: 0,
            seqlenKv: 8,
            dim: 64,
          }),
        /seqlenQ: expected an integer >= 1/,
      );
      refuses(
        () =>
          new MultiHeadAttentionDecodeWithKVCacheFwdOp(
            { batch: 1, heads: 2, seqlenQ: 1, seqlenKv: 8, dim: 64, isCausal: "yes" } as never,
          ),
        /isCausal/,
      );
    }),
);

deviceTest(
  "the split-key decode kernel serves head dims 64, 128, 256 and refuses the rest as unsupported",
  (device) => {
    const call = (D: number, H: number) => {
      using q = Tensor.randn([1, 1, H, D], { dtype: "bfloat16", device, seed: 1 });
      using kv = Tensor.randn([1, 40, 1, D], { dtype: "bfloat16", device, seed: 2 });
      using lengths = Tensor.from([33], { dtype: "int32", device });
      using out = Tensor.empty([1, 1, H, D], { dtype: "bfloat16", device });
      const d = (t: Tensor) => t.descriptor();
      return native().ak_attention_decode(d(q), d(kv), d(kv), d(lengths), null, 0n, D ** -0.5, 0, 0, d(out));
    };
    for (const D of [64, 128, 256]) assert.equal(call(D, 4), Status.OK, `D ${D}`);
    for (const D of [32, 96]) assert.equal(call(D, 4), Status.UNSUPPORTED, `D ${D}`);
    assert.equal(call(256, 32), Status.UNSUPPORTED, "32 rows of D 256");
  },
);

deviceTest(
  "kv-cache decode with checkIndices false stays on the device: lengths clamped, pages past the cache masked",
  (device) =>
    expectNoLeak(device, () => {
      const sizes = { batch: 2, heads: 4, headsKv: 2, seqlenKv: 64, dim: 64, pageSize: 16 };
      const checked = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(sizes);
      const trusting = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
        ...sizes,
        checkIndices: false,
      });
      using q = Tensor.randn([2, 4, 64], { dtype: "bfloat16", device, seed: 5 });
      using k = Tensor.randn([64, 2, 64], { dtype: "bfloat16", device, seed: 6 });
      using v = Tensor.randn([64, 2, 64], { dtype: "bfloat16", device, seed: 7 });
      const int32 = (x: number[] | number[][]) => Tensor.from(x, { dtype: "int32", device });
      using lengths = int32([20, 16]), table = int32([[1, 3], [0, -1]]);
      // Valid indices: the same output, bit for bit.
      using a = checked.forward(q, k, v, lengths, table), b = trusting.forward(q, k, v, lengths, table);
      assert.deepEqual(b.toArray(), a.toArray());
      // Page 4 is past the cache: its keys are masked, as if the sequence ended at 16.
      using past = int32([[1, 4], [0, -1]]), sixteen = int32([16, 16]);
      using masked = trusting.forward(q, k, v, lengths, past),
        short = checked.forward(q, k, v, sixteen, table);
      assert.deepEqual(masked.toArray(), short.toArray());
      // A length past the table's 2 pages (32 keys) is read as 32; a negative one as 0 (zeros out).
      using full = int32([[1, 3], [0, 2]]), long = int32([33, -5]), clamped = int32([32, 0]);
      using over = trusting.forward(q, k, v, long, full), capped = checked.forward(q, k, v, clamped, full);
      assert.deepEqual(over.toArray(), capped.toArray());
      refuses(
        () => new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, checkIndices: "no" } as never),
        /options\.checkIndices: expected a boolean/,
      );
    }),
);
