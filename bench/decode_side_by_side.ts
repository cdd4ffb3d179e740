/**
 * Benchmark of decode over a KV cache (bf16, GQA 32 / 8 heads, D 128, one query token per sequence) at the
 * serving issue's shapes, contiguous and paged (pages of 64), each also with `checkIndices: false` (no read-back
 * of the lengths and the block table), against PyTorch SDPA on this H200 as ANCHORS.md
 * records it (cuDNN, the faster backend there: 1 x 65536 keys 0.080 ms, 64 x 4096 0.255 ms, 256 x 2048
 * 0.492 ms). GB/s counts the K and V bytes read once; the copy ceiling is 4252 GB/s. Each row records the
 * planner's path (`lastPlan()`: the decode block, the split). Times: CUDA events, median of 20 calls after 3
 * warm-up calls, the L2 flushed before each.
 *
 * @example
 * ```sh
 * deno run -A bench/decode_side_by_side.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  lastPlan,
  setTuning,
  Tensor,
} from "../mod.ts";
import { BENCH_OPTIONS, type BenchRecord, cudaGpu, errorNote, FlushedTimer, saveRecords } from "./records.ts";

const { values: args } = scriptArgs({
  options: {
    ...BENCH_OPTIONS,
    /** A tuning table to pin kernels (e.g. `{"attention.decode":"mma"}`), recorded with each row. */
    tuning: { type: "string" },
  },
});
if (args.tuning) setTuning(JSON.parse(args.tuning));
const gpu = cudaGpu("decode_side_by_side");
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));
const H = 32, Hkv = 8, D = 128, PAGE = 64, device = "cuda";
/** cuDNN SDPA on this H200 (ANCHORS.md, 2026-12-01), ms. */
const SDPA: Record<string, number> = { "B1_Skv65536": 0.080, "B64_Skv4096": 0.255, "B256_Skv2048": 0.492 };

for (const [B, Skv] of [[1, 65536], [64, 4096], [256, 2048]]) {
  const shape = `B${B}_Skv${Skv}`;
  const bytes = 2 * B * Skv * Hkv * D * 2;
  using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 1 });
  using lengths = Tensor.full([B], Skv, { dtype: "int32", device });
  for (const [paged, checkIndices] of [[false, true], [false, false], [true, true], [true, false]]) {
    const rec: BenchRecord = {
      op: paged
        ? "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp"
        : "GroupedQueryAttentionDecodeWithKVCacheFwdOp",
      shape: `${shape}_H${H}_KV${Hkv}_D${D}${paged ? `_page${PAGE}` : ""}`,
      dtype: "bfloat16",
      mode: `decode${checkIndices ? "" : ", checkIndices false"}${
        args.tuning ? `, tuning ${args.tuning}` : ""
      }`,
      ms: null,
      ref: "torch SDPA, cuDNN (ANCHORS.md)",
      ref_ms: SDPA[shape] ?? null,
      speedup: null,
      tflops: null,
      gbps: null,
      path: "?",
    };
    try {
      const kvShape = paged ? [B * Skv, Hkv, D] : [B, Skv, Hkv, D];
      using k = Tensor.randn(kvShape, { dtype: "bfloat16", device, seed: 2 });
      using v = Tensor.randn(kvShape, { dtype: "bfloat16", device, seed: 3 });
      const pages = Skv / PAGE;
      using table = Tensor.from(Int32Array.from({ length: B * pages }, (_, i) => i), {
        shape: [B, pages],
        device,
      });
      const sizes = {
        batch: B,
        heads: H,
        headsKv: Hkv,
        seqlenKv: paged ? B * Skv : Skv,
        dim: D,
        checkIndices,
      };
      const run = paged
        ? (() => {
          const op = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, pageSize: PAGE });
          return () => op.forward(q, k, v, lengths, table);
        })()
        : (() => {
          const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp(sizes);
          return () => op.forward(q, k, v, lengths);
        })();
      {
        using _o = run();
      }
      const plan = lastPlan();
      rec.path = plan ? `${plan.path} ${JSON.stringify(plan.details)}` : "?";
      rec.ms = timer.time(() => {
        using _o = run();
      });
      rec.gbps = bytes / (rec.ms * 1e-3) / 1e9;
      if (rec.ref_ms !== null) rec.speedup = rec.ref_ms / rec.ms;
    } catch (e) {
      rec.note = errorNote(e);
    }
    records.push(rec);
    console.log(JSON.stringify(rec));
    saveRecords(args.results!, "decode", "Decode over a KV cache", gpu, records);
  }
}
