/**
 * Benchmark of the sparse-attention ops at the sparse issue's shapes, bf16 unless FP8, on CUDA:
 *
 * - NSA, the three branches together (`NSACmpFwdVarlenOp`, `NSATopkVarlenOp`, `NSAFwdVarlenOp`) at
 *   T = 32768, 64 query heads in groups of 16, D = 128, block 64, 16 selected blocks, one sequence; against
 *   FLA's `parallel_nsa` forward with `--fla <json>` (bench/fla_nsa.py on the same machine; FLA pools the
 *   compressed keys itself, here they are inputs). FLOPs: compressed `4 T H D avg(nc)` + selection scores
 *   `2 T H D avg(nc)` + selected `4 T H D S bs`, avg(nc) = T / (2 bs). Then each branch alone, the block
 *   kernels pinned in turn (compressed and selected branches: the tensor-core and CUDA-core blocks; block
 *   selection: tensor cores and per item).
 * - DSA decode at batch 64, one query each, 128 heads over one latent head, topk 2048 of 8192 cache rows,
 *   512 + 64 dims: GB/s of the selected rows (each read once) against the 4252 GB/s copy ceiling, and
 *   TFLOP/s of `2 B H topk (576 + 512)`; then each kernel pinned (mma.sync block, Hopper wgmma kernel).
 * - The lightning indexer, FP8, 8192 queries x 65536 keys, 64 heads, D 128, full key ranges: TFLOP/s of
 *   `2 Sq Sk H D` against the H200's dense FP8 peak (1979).
 * - The paged prefill with append against the contiguous packed prefill on the same tokens.
 *
 * Times: CUDA events, median of `--iterations` calls after 3 warm-up calls, the L2 flushed before each.
 * `--scale s` divides T, batch and the query count by s (the general kernels are slow at full size).
 *
 * @example
 * ```sh
 * deno run -A bench/sparse_side_by_side.ts --results $OUT --fla /tmp/fla_nsa.json --scale 8
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  compare,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  FP8LightningIndexerFwdOp,
  GroupedQueryAttentionPrefillFwdOp,
  GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp,
  lastPlan,
  nsaChunkOffsets,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  NSATopkVarlenOp,
  Tensor,
} from "../mod.ts";
import {
  type BenchRecord,
  ceilingRecord,
  cudaGpu,
  errorNote,
  FlushedTimer,
  newRecord,
  saveRecords,
  setTime,
} from "./records.ts";

const FP8_PEAK_TFLOPS = 1979;

const { values: args } = scriptArgs({
  options: {
    results: { type: "string", default: "bench/results" },
    ops: { type: "string", default: "nsa,dsa,indexer,paged" },
    fla: { type: "string", default: "" },
    scale: { type: "string", default: "1" },
    iterations: { type: "string", default: "10" },
  },
});
const OPS = new Set(args.ops!.split(","));
const SCALE = Number(args.scale);
const gpu = cudaGpu("sparse_side_by_side");
const fla: Record<string, number> = args.fla ? JSON.parse(Deno.readTextFileSync(args.fla)) : {};
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));
const save = () => saveRecords(args.results!, "sparse", "Sparse attention and paged prefill", gpu, records);
const device = "cuda";

function run(rec: BenchRecord, fn: () => void, work: { flops?: number; bytes?: number }): void {
  try {
    fn();
    rec.path = lastPlan()?.path ?? "general";
    setTime(rec, timer.time(fn), work);
  } catch (e) {
    rec.note = errorNote(e);
  }
  records.push(rec);
  console.log(JSON.stringify(rec));
  save();
}

if (OPS.has("nsa")) {
  const T = 32768 / SCALE, H = 64, G = 16, Hkv = H / G, D = 128, bs = 64, S = 16;
  const offsets = [0, T];
  using tokens = nsaTokenIndices(offsets, { device }), chunks = nsaChunkOffsets(offsets, bs, { device });
  const C = Math.ceil(T / bs);
  using q = Tensor.randn([T, H, D], { dtype: "bfloat16", device, seed: 1 });
  using k = Tensor.randn([T, Hkv, D], { dtype: "bfloat16", device, seed: 2 });
  using v = Tensor.randn([T, Hkv, D], { dtype: "bfloat16", device, seed: 3 });
  using kCmp = Tensor.randn([C, Hkv, D], { dtype: "bfloat16", device, seed: 4 });
  using vCmp = Tensor.randn([C, Hkv, D], { dtype: "bfloat16", device, seed: 5 });
  const sizes = { seqNum: 1, cSeqLen: T, heads: H, group: G, chunkNum: C, bs };
  const cmpOp = (variant?: string) =>
    new NSACmpFwdVarlenOp({
      ...sizes,
      dimK: D,
      dimV: D,
      checkIndices: false,
      kernelMap: variant ? { "sparse.nsa.compression": variant } : undefined,
    });
  const cmp = cmpOp();
  const topkOp = (variant?: string) =>
    new NSATopkVarlenOp({
      ...sizes,
      dim: D,
      selectedBlockNum: S,
      checkIndices: false,
      kernelMap: variant ? { "sparse.nsa.topk": variant } : undefined,
    });
  const topk = topkOp();
  const selectedOp = (variant?: string) =>
    new NSAFwdVarlenOp({
      batch: 1,
      heads: H,
      cSeqLen: T,
      dim: D,
      blockSize: bs,
      groups: G,
      selectedBlocks: S,
      checkIndices: false,
      kernelMap: variant ? { "sparse.nsa.selection": variant } : undefined,
    });
  const selected = selectedOp();
  const avgNc = T / (2 * bs);
  const cmpFlops = 4 * T * H * D * avgNc,
    topkFlops = 2 * T * H * D * avgNc,
    selFlops = 4 * T * H * D * S * bs;
  const shape = `T${T}_H${H}_G${G}_D${D}_bs${bs}_S${S}`;
  const ref = fla[shape] ?? null;
  run(newRecord("NSA (three branches)", shape, "bfloat16", "fwd", "fla.parallel_nsa", ref), () => {
    using c = cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens);
    using blocks = topk.forward(q, kCmp, c.lse, offsets, chunks, tokens);
    using _o = selected.forward(q, k, v, blocks, undefined, offsets, tokens);
  }, { flops: cmpFlops + topkFlops + selFlops });
  // Each branch alone with each of its kernels pinned, for where the time goes.
  using c = cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens);
  using blocks = topk.forward(q, kCmp, c.lse, offsets, chunks, tokens);
  for (const variant of ["mma", "tiled"]) {
    const op = cmpOp(variant);
    run(newRecord("NSACmpFwdVarlenOp", shape, "bfloat16", `fwd, ${variant} pinned`, "-", null), () => {
      using _c = op.forward(q, kCmp, vCmp, offsets, chunks, tokens);
    }, { flops: cmpFlops });
  }
  for (const variant of ["item", "mma"]) {
    const op = topkOp(variant);
    run(newRecord("NSATopkVarlenOp", shape, "bfloat16", `fwd, ${variant} pinned`, "-", null), () => {
      using _b = op.forward(q, kCmp, c.lse, offsets, chunks, tokens);
    }, { flops: topkFlops });
  }
  for (const variant of ["mma", "tiled"]) {
    const op = selectedOp(variant);
    run(newRecord("NSAFwdVarlenOp", shape, "bfloat16", `fwd, ${variant} pinned`, "-", null), () => {
      using _o = op.forward(q, k, v, blocks, undefined, offsets, tokens);
    }, { flops: selFlops });
  }
}

if (OPS.has("dsa")) {
  const B = 64 / SCALE, H = 128, Skv = 8192, dim = 512, tail = 64, topk = 2048;
  const dsaOp = (kernelMap?: Record<string, string>) =>
    new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
      batch: B,
      heads: H,
      seqLen: 1,
      seqLenKv: Skv,
      dim,
      dimTail: tail,
      topk,
      qStartIndexS: Skv - 1,
      checkIndices: false,
      kernelMap,
    });
  const op = dsaOp();
  using q = Tensor.randn([B, 1, H, dim + tail], { dtype: "bfloat16", device, seed: 1 });
  using kv = Tensor.randn([B, Skv, 1, dim + tail], { dtype: "bfloat16", device, seed: 2 });
  const list = Int32Array.from({ length: B * topk }, (_, i) => ((i % topk) * 4 + Math.floor(i / topk)) % Skv);
  using indices = Tensor.from(list, { shape: [B, 1, 1, topk], device });
  const bytes = B * topk * (dim + tail) * 2;
  const rec = ceilingRecord(
    "DeepSeekSparseAttentionDecodeWithKVCacheFwdOp",
    `B${B}_H${H}_Skv${Skv}_topk${topk}_D${dim}+${tail}`,
    "bfloat16",
    "decode",
    bytes,
  );
  const work = { bytes, flops: 2 * B * H * topk * (dim + tail + dim) };
  run(rec, () => {
    using _o = op.forward(q, kv, indices);
  }, work);
  // Each kernel pinned, with its largest difference from the planner's output.
  using planned = op.forward(q, kv, indices);
  for (const variant of ["mma", "wgmma"]) {
    const pinned = dsaOp({ "sparse.dsa.decode": variant });
    const pinnedRec = { ...rec, mode: `decode, ${variant} pinned` };
    run(pinnedRec, () => {
      using _o = pinned.forward(q, kv, indices);
    }, work);
    if (pinnedRec.ms === null) continue; // the run's error is in the record
    using out = pinned.forward(q, kv, indices);
    console.log(`dsa ${variant} pinned: max |difference| from the planner's ${compare(out, planned).maxAbs}`);
  }
}

if (OPS.has("indexer")) {
  const Sq = 8192 / SCALE, Sk = 65536, H = 64, D = 128;
  const op = new FP8LightningIndexerFwdOp({ checkIndices: false });
  const fp8 = (shape: number[], seed: number) => {
    using x = Tensor.randn(shape, { device, seed });
    return x.cast("float8_e4m3");
  };
  using q = fp8([Sq, H, D], 1), k = fp8([Sk, D], 2);
  using w = Tensor.rand([Sq, H], { device, seed: 3 });
  using scale = Tensor.rand([Sk], { device, seed: 4, low: 0.5, high: 1 });
  using ks = Tensor.zeros([Sq], { dtype: "int32", device });
  using ke = Tensor.full([Sq], Sk, { dtype: "int32", device });
  const flops = 2 * Sq * Sk * H * D;
  const rec = newRecord(
    "FP8LightningIndexerFwdOp",
    `Sq${Sq}_Sk${Sk}_H${H}_D${D}`,
    "float8_e4m3",
    "fwd",
    `FP8 peak ${FP8_PEAK_TFLOPS} TFLOP/s`,
    flops / (FP8_PEAK_TFLOPS * 1e12) * 1e3,
  );
  run(rec, () => {
    using _l = op.forward(q, k, w, ks, ke, scale);
  }, { flops });
}

if (OPS.has("paged")) {
  // 16 requests, each 4096 cached keys plus a 512-token chunk, 32 / 8 heads, D 128, pages of 64.
  const B = 16 / Math.min(SCALE, 16), H = 32, Hkv = 8, D = 128, P = 64, cached = 4096, chunk = 512;
  const maxPages = (cached + chunk) / P, T = B * chunk;
  const op = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
    batch: B,
    heads: H,
    headsKv: Hkv,
    maxPagesPerReq: maxPages,
    pageSize: P,
    dim: D,
  });
  using q = Tensor.randn([T, H, D], { dtype: "bfloat16", device, seed: 1 });
  using kNew = Tensor.randn([T, Hkv, D], { dtype: "bfloat16", device, seed: 2 });
  using vNew = Tensor.randn([T, Hkv, D], { dtype: "bfloat16", device, seed: 3 });
  using kPages = Tensor.randn([B * maxPages * P, Hkv, D], { dtype: "bfloat16", device, seed: 4 });
  using vPages = Tensor.randn([B * maxPages * P, Hkv, D], { dtype: "bfloat16", device, seed: 5 });
  using lengths = Tensor.full([B], cached, { dtype: "int32", device });
  using table = Tensor.from(Int32Array.from({ length: B * maxPages }, (_, i) => i), {
    shape: [B, maxPages],
    device,
  });
  const cuQ = Array.from({ length: B + 1 }, (_, b) => b * chunk);
  const cuK = Array.from({ length: B + 1 }, (_, b) => b * (cached + chunk));
  using kAll = Tensor.randn([B * (cached + chunk), Hkv, D], { dtype: "bfloat16", device, seed: 6 });
  using scale = Tensor.ones([B, Hkv], { device });
  const dense = new GroupedQueryAttentionPrefillFwdOp({
    batch: B,
    heads: H,
    headsKv: Hkv,
    dim: D,
    maxSeqlenQ: chunk,
    maxSeqlenKv: cached + chunk,
    dtype: "bfloat16",
    isCausal: true,
  });
  const denseMs = timer.time(() => {
    using _o = dense.forward(q, kAll, kAll, cuQ, cuK, scale, scale, scale);
  });
  // Causal, bottom-right: each query sees the cache and its chunk's keys up to itself.
  const flops = 4 * B * H * D * chunk * (cached + (chunk + 1) / 2);
  run(
    newRecord(
      "GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp",
      `B${B}_cached${cached}_chunk${chunk}_H${H}_KV${Hkv}_D${D}_page${P}`,
      "bfloat16",
      "fwd",
      "GroupedQueryAttentionPrefillFwdOp (contiguous, same tokens)",
      denseMs,
    ),
    () => {
      using lens = lengths.clone();
      using _o = op.forward(q, kNew, vNew, kPages, vPages, null, null, cuQ, lens, table, chunk);
    },
    { flops },
  );
}
