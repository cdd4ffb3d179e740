// NSA's compressed, selection and selected branches against the float64 oracles of reference/sparse_attention.ts.
// (tolerance rule: tests/sparse_fixtures.ts)
import assert from "node:assert/strict";
import {
  assertClose,
  type Device,
  explain,
  lastPlan,
  nsaChunkOffsets,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  NSATopkVarlenOp,
  type PlanQuery,
  Tensor,
  withTuning,
} from "../mod.ts";
import {
  nsaCompressionReference,
  nsaSelectionReference,
  nsaVisibleRows,
} from "../reference/sparse_attention.ts";
import { deviceTest, expectNoLeak, poison, refuses, withSeed } from "./helpers.ts";
import { generator } from "./oracle_checks.ts";
import {
  checkTopk,
  COUNT_REFUSED,
  expectOutput,
  expectRowsExactly,
  type FloatDType,
  host,
  ints,
  LIST_REFUSED,
  LSE_TOL,
  offsetsOf,
  OUTPUT_TOL,
  shuffled,
  type TopkCase,
} from "./sparse_fixtures.ts";

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

deviceTest(
  "NSA block selection on tensor cores and per item, each pinned, picks a top-S of the oracle's importance",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        // Groups of 16, 8 and 5 query heads; head dims 64, 128, 256; S 16 (more than most queries' blocks
        // early on, fewer later), 32 and 3; sequences over several 32-block steps, one of a single token.
        const cases: TopkCase[] = [
          {
            lengths: [1200, 1, 333],
            heads: 16,
            group: 16,
            dim: 64,
            bs: 16,
            selected: 16,
            dtype: "bfloat16",
            out: true,
          },
          {
            lengths: [700, 90],
            heads: 16,
            group: 8,
            dim: 128,
            bs: 8,
            selected: 32,
            dtype: "float16",
            out: false,
          },
          { lengths: [260], heads: 10, group: 5, dim: 256, bs: 4, selected: 3, dtype: "bfloat16", out: true },
        ];
        for (const [i, c] of cases.entries()) {
          for (const variant of ["mma", "item"]) {
            checkTopk(device, c, seed + 10 * i, { "sparse.nsa.topk": variant });
            if (device !== "cpu") {
              assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [
                variant === "mma"
                  ? `sparse.nsa.topk.mma<${c.dtype}, D${c.dim}>`
                  : `sparse.nsa.topk.item<${c.dtype}>`,
              ]);
            }
          }
        }
        // The planner takes the tensor-core block where it serves (16-bit, group <= 16, S <= 32) and the
        // per-item kernel elsewhere; a pin to the block where it does not serve is refused, naming why.
        const plan = (q: Omit<PlanQuery, "op" | "gpu">) =>
          explain({ op: "sparse.nsa.topk", gpu: "h200", ...q });
        const pinned = (q: Omit<PlanQuery, "op" | "gpu">) =>
          withTuning({ "sparse.nsa.topk": "mma" }, () => plan(q));
        assert.equal(plan({ d: 128, hq: 64, hkv: 4, selected: 16 }).path, "mma");
        assert.deepEqual(pinned({ d: 128, hq: 64, hkv: 4, selected: 16 }).kernels.map((k) => k.name), [
          "sparse.nsa.topk.mma<bfloat16, D128>",
        ]);
        for (const q of [{ hq: 64, hkv: 2 }, { selected: 64 }, { d: 96 }, { dtype: "float32" as const }]) {
          assert.equal(plan(q).path, "item", JSON.stringify(q));
          assert.throws(() => pinned(q), /sparse\.nsa\.topk=mma cannot serve this call/, JSON.stringify(q));
        }
        assert.throws(() => pinned({ hq: 64, hkv: 2 }), /32 query heads per KV head/);
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
