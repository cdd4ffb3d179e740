// DeepSeek sparse attention decode and the lightning indexer against the float64 oracles of
// reference/sparse_attention.ts.
// (tolerance rule: tests/sparse_fixtures.ts)
import assert from "node:assert/strict";
import {
  assertClose,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  type Device,
  FP8LightningIndexerFwdOp,
  lastPlan,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  Tensor,
  withTuning,
} from "../mod.ts";
import {
  dsaDecodeReference,
  type LightningIndexerInputs,
  lightningIndexerReference,
} from "../reference/sparse_attention.ts";
import { deviceTest, expectNoLeak, isHopper, poison, refuses, withSeed } from "./helpers.ts";
import { generator } from "./oracle_checks.ts";
import {
  expectOutput,
  expectRowsExactly,
  type FloatDType,
  host,
  LOGITS_TOL,
  RANGE_REFUSED,
  shuffled,
} from "./sparse_fixtures.ts";

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

const DSA_BASE = { dim: 512, dimTail: 64, strideKv: 1 };
/** DeepSeek's 512 + 64 columns on the tensor-core block: partial head groups, two tiles, splits, two cache heads. */
const LATENT_CASES: DsaCase[] = [
  // 20 heads: a group of 16 and one of 4; 96 entries: a full tile of 64 and a partial one.
  {
    ...DSA_BASE,
    batch: 2,
    seqLen: 2,
    seqLenKv: 150,
    heads: 20,
    headsKv: 1,
    topk: 96,
    qStart: 100,
    causal: true,
    dtype: "bfloat16",
  },
  // A long list for few blocks: split in four runs of 256 slots, merged by their log-sum-exps.
  {
    ...DSA_BASE,
    batch: 2,
    seqLen: 1,
    seqLenKv: 1100,
    heads: 16,
    headsKv: 1,
    topk: 1024,
    qStart: 1099,
    causal: true,
    dtype: "bfloat16",
  },
  // Two cache heads of 16 query heads each, not causal, float16.
  {
    ...DSA_BASE,
    batch: 1,
    seqLen: 1,
    seqLenKv: 70,
    heads: 32,
    headsKv: 2,
    topk: 64,
    qStart: 0,
    causal: false,
    dtype: "float16",
  },
];

deviceTest(
  "DSA decode at DeepSeek's 512 + 64 runs the tensor-core block (partial head groups, two tiles, two cache heads)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases = LATENT_CASES;
        for (const [i, c] of cases.entries()) {
          checkDsa(device, c, seed + 10 * i);
          if (device !== "cpu") {
            assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [
              `sparse.dsa.decode.mma<${c.dtype}, D576>`,
            ]);
            if (c.topk === 1024) assert.equal(lastPlan()?.details.splits, 4);
          }
        }
      })),
);

deviceTest(
  "DSA decode on Hopper's wgmma kernel (64-head groups, splits): the planner's choice there, and pinned; the CPU refuses the pin",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        // 128 heads (two blocks of 64) over the block's first case (a full tile and a partial one, causal),
        // under the planner; two cache heads of 64 query heads each over its long list (split in runs),
        // float16, not causal, pinned.
        const cases: DsaCase[] = [
          { ...LATENT_CASES[0], heads: 128 },
          { ...LATENT_CASES[1], heads: 128, headsKv: 2, causal: false, dtype: "float16" },
        ];
        const pin = { "sparse.dsa.decode": "wgmma" };
        if (device === "cpu") {
          refuses(() => withTuning(pin, () => checkDsa(device, cases[1], seed)), /needs a Hopper GPU/);
          return;
        }
        const hopper = isHopper(device);
        checkDsa(device, cases[0], seed);
        assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [
          `sparse.dsa.decode.${hopper ? "wgmma" : "mma"}<${cases[0].dtype}, D576>`,
        ]);
        if (!hopper) return;
        withTuning(pin, () => checkDsa(device, cases[1], seed + 10));
        assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [
          `sparse.dsa.decode.wgmma<${cases[1].dtype}, D576>`,
        ]);
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
  /** Key scales drawn from [-1, 2) instead of [0.25, 2): negative scales flip the ReLU's side. */
  negativeScale?: boolean;
  /** Causal ranges (query i sees keys [0, Sk - Sq + i + 1)), the first 8 queries' ranges empty. */
  causal?: boolean;
}

/**
 * Holds the logits to the oracle: relRms, and elementwise |error| <= rtol |oracle| + (D + H) 2^-23 A, A
 * being the oracle over absolute values (the bound of a float32 accumulation of the same terms). float8 on
 * the GPU's tensor cores (`fp8Accumulator`): their sums keep about 14 bits (DeepSeek-V3 technical report,
 * section 3.3.2, measured on H800), so each of the D / 32 k-steps may add 2^-13 A and relRms is 1e-3.
 */
function expectLogits(
  name: string,
  got: Tensor,
  inputs: LightningIndexerInputs,
  fp8Accumulator = false,
): void {
  const oracle = lightningIndexerReference(inputs);
  assertClose(got, oracle, { relRms: fp8Accumulator ? 1e-3 : LOGITS_TOL.relRms, name });
  const abs = (a: ArrayLike<number>) => Float64Array.from(a, Math.abs);
  const bound = lightningIndexerReference({
    ...inputs,
    q: abs(inputs.q),
    k: abs(inputs.k),
    weights: abs(inputs.weights),
    kScale: inputs.kScale && abs(inputs.kScale),
  });
  const values = host(got);
  const slack = (inputs.dim + inputs.heads) * 2 ** -23 + (fp8Accumulator ? (inputs.dim / 32) * 2 ** -13 : 0);
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

/** Query i sees keys [0, Sk - Sq + i + 1) (DeepSeek's prefill), except the first 8, whose ranges are empty. */
function causalRanges(Sq: number, Sk: number): { ks: Int32Array; ke: Int32Array } {
  const ks = new Int32Array(Sq), ke = new Int32Array(Sq);
  for (let i = 8; i < Sq; i++) ke[i] = Math.max(0, Sk - Sq + i + 1);
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
  using kScale = c.kScale
    ? Tensor.rand([Sk], { device, seed: seed + 3, low: c.negativeScale ? -1 : 0.25, high: 2 })
    : undefined;
  const { ks, ke } = c.causal ? causalRanges(Sq, Sk) : ranges(rnd, Sq, Sk);
  using ksT = Tensor.from(ks, { device });
  using keT = Tensor.from(ke, { device });
  const op = new FP8LightningIndexerFwdOp({ cleanLogits: c.clean });
  using outBuf = c.out ? poison(Tensor.empty([Sq, Sk], { device })) : undefined;
  using got = op.forward(q, k, w, ksT, keT, kScale, outBuf);
  if (c.out) assert.ok(got === outBuf);
  assert.equal(got.dtype, "float32");
  assert.deepEqual(got.shape, [Sq, Sk]);
  const what = JSON.stringify(c);
  const block = H === 64 && D === 128;
  if (device !== "cpu") {
    const kernel = !block ? "item" : c.dtype === "float8_e4m3" ? "wgmma" : "mma";
    assert.deepEqual(lastPlan()?.kernels.map((x) => x.name), [
      block ? `sparse.indexer.${kernel}<${c.dtype}, D128>` : `sparse.indexer.item<${c.dtype}>`,
    ]);
  }
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
  }, block && device !== "cpu" && c.dtype === "float8_e4m3");
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
          // DeepSeek's 64 heads of 128 dims: the tensor-core block (an odd query count: a pair with one
          // query; keys past one tile and one chunk of 512, the last tile partial).
          { Sq: 5, H: 64, D: 128, Sk: 600, dtype: "float8_e4m3", kScale: true, clean: true, out: true },
          { Sq: 4, H: 64, D: 128, Sk: 130, dtype: "bfloat16", kScale: false, clean: false, out: false },
          // float8 on Hopper's wgmma kernel: two groups of 8 queries (the second with 5, so one warpgroup
          // holds a single query), 16 key tiles (the last partial), the blocks' shares crossing groups;
          // negative key scales; then causal ranges with a first group that needs no key at all.
          {
            Sq: 13,
            H: 64,
            D: 128,
            Sk: 1000,
            dtype: "float8_e4m3",
            kScale: true,
            negativeScale: true,
            clean: true,
            out: true,
          },
          {
            Sq: 20,
            H: 64,
            D: 128,
            Sk: 300,
            dtype: "float8_e4m3",
            kScale: true,
            clean: false,
            out: false,
            causal: true,
          },
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
