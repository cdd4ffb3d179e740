/**
 * Sweep of the decode blocks for the planner's rule: at each shape (batch x cache length, query rows per KV
 * head 1 / 4 / 8 / 16 over 8 KV heads, head dims 64 / 128 / 256, bfloat16, contiguous cache), the planner's
 * choice and then every block pinned through the tuning table (`attention.decode`: tiled, warp, mma, pipe).
 * Each row's ref is the planner's choice at that shape, so `speedup` above 1 marks a block that beats it.
 * GB/s counts K and V read once. Times: CUDA events, median of `--iterations` calls after 3 warm-up calls,
 * the L2 flushed before each.
 *
 * @example
 * ```sh
 * deno run -A bench/decode_blocks.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { GroupedQueryAttentionDecodeWithKVCacheFwdOp, lastPlan, setTuning, Tensor } from "../mod.ts";
import { BENCH_OPTIONS, type BenchRecord, cudaGpu, FlushedTimer, saveRecords } from "./records.ts";

const { values: args } = scriptArgs({
  options: {
    ...BENCH_OPTIONS,
    /** Head dims to sweep, comma-separated. */
    dims: { type: "string", default: "64,128,256" },
  },
});
const gpu = cudaGpu("decode_blocks");
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));
const Hkv = 8, device = "cuda";
const BLOCKS = ["tiled", "warp", "mma", "pipe"];

for (const D of args.dims!.split(",").map(Number)) {
  for (const [B, Skv] of [[1, 65536], [64, 4096], [256, 2048]]) {
    const bytes = 2 * B * Skv * Hkv * D * 2;
    using k = Tensor.randn([B, Skv, Hkv, D], { dtype: "bfloat16", device, seed: 2 });
    using v = Tensor.randn([B, Skv, Hkv, D], { dtype: "bfloat16", device, seed: 3 });
    using lengths = Tensor.full([B], Skv, { dtype: "int32", device });
    for (const R of [1, 4, 8, 16]) {
      const H = R * Hkv, shape = `B${B}_Skv${Skv}_H${H}_KV${Hkv}_D${D}`;
      using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 1 });
      const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({
        batch: B,
        heads: H,
        headsKv: Hkv,
        seqlenKv: Skv,
        dim: D,
      });
      let plannerMs: number | null = null, plannerPath = "?";
      for (const block of ["planner", ...BLOCKS]) {
        setTuning(block === "planner" ? {} : { "attention.decode": block });
        const rec: BenchRecord = {
          op: "GroupedQueryAttentionDecodeWithKVCacheFwdOp",
          shape,
          dtype: "bfloat16",
          mode: block === "planner" ? "decode, planner" : `decode, ${block} pinned`,
          ms: null,
          ref: `planner (${plannerPath})`,
          ref_ms: plannerMs,
          speedup: null,
          tflops: null,
          gbps: null,
          path: "?",
        };
        try {
          {
            using _o = op.forward(q, k, v, lengths);
          }
          const plan = lastPlan();
          rec.path = plan ? `${plan.path} ${JSON.stringify(plan.details)}` : "?";
          rec.ms = timer.time(() => {
            using _o = op.forward(q, k, v, lengths);
          });
          rec.gbps = bytes / (rec.ms * 1e-3) / 1e9;
          if (block === "planner") {
            plannerMs = rec.ms, plannerPath = plan?.path ?? "?";
            rec.ref = "-";
          } else if (plannerMs !== null) rec.speedup = plannerMs / rec.ms;
        } catch (e) {
          rec.note = `refused: ${(e as Error).message.slice(0, 120)}`;
        }
        records.push(rec);
        console.log(JSON.stringify(rec));
      }
      setTuning({});
    }
  }
}
saveRecords(args.results!, "decode_blocks", "Decode blocks, each pinned, against the planner", gpu, records);
