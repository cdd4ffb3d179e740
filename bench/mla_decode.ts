/**
 * Benchmark of MLA decode (`MultiHeadLatentAttentionDecodeWithKVCacheFwdOp`, bf16, DeepSeek-V3's latent 512
 * + rotary 64 over one latent head) at the serving issue's shape, batch 128 x 8192 cache rows, with 16 query
 * heads (a tensor-parallel shard: memory-bound) and 128 (the whole model: compute-bound on these bytes), the
 * planner's kernel (on Hopper the wgmma kernel at 128 heads) and at 128 heads also the mma.sync block pinned.
 * GB/s counts the cache bytes read once (`B Skv 576 x 2`) against the 4252 GB/s copy ceiling; TFLOP/s counts
 * `2 B H Skv (576 + 512)`. FlashMLA reports about 3000 GB/s and 580-660 TFLOP/s on H800 (ANCHORS.md). Times:
 * CUDA events, median of `--iterations` calls after 3 warm-up calls, the L2 flushed before each.
 *
 * @example
 * ```sh
 * deno run -A bench/mla_decode.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { compare, MultiHeadLatentAttentionDecodeWithKVCacheFwdOp, Tensor, withTuning } from "../mod.ts";
import {
  BENCH_OPTIONS,
  type BenchRecord,
  ceilingRecord,
  cudaGpu,
  errorNote,
  FlushedTimer,
  plannedKernels,
  saveRecords,
  setTime,
} from "./records.ts";

const { values: args } = scriptArgs({ options: BENCH_OPTIONS });
const gpu = cudaGpu("mla_decode");
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));
const B = 128, Skv = 8192, D = 512, P = 64, device = "cuda";

// The planner's kernel at each head count; at 128 heads also the mma.sync block pinned, with its largest
// difference from the planner's output.
const RUNS: [number, string | undefined][] = [[16, undefined], [128, undefined], [128, "mma"]];
let planned: Tensor | undefined;
for (const [H, pin] of RUNS) {
  const bytes = B * Skv * (D + P) * 2, flops = 2 * B * H * Skv * (D + P + D);
  const rec = ceilingRecord(
    "MultiHeadLatentAttentionDecodeWithKVCacheFwdOp",
    `B${B}_H${H}_Skv${Skv}_D${D}+${P}`,
    "bfloat16",
    pin ? `decode, ${pin} pinned` : "decode",
    bytes,
  );
  try {
    const op = new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
      batch: B,
      heads: H,
      headsKv: 1,
      seqlenKv: Skv,
      dim: D,
      peDim: P,
    });
    using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 1 });
    using qPe = Tensor.randn([B, H, P], { dtype: "bfloat16", device, seed: 2 });
    using k = Tensor.randn([B, Skv, 1, D], { dtype: "bfloat16", device, seed: 3 });
    using kPe = Tensor.randn([B, Skv, 1, P], { dtype: "bfloat16", device, seed: 4 });
    const pinned = <R>(fn: () => R): R => pin ? withTuning({ "sparse.dsa.decode": pin }, fn) : fn();
    const run = () =>
      pinned(() => {
        using _o = op.forward(q, qPe, k, kPe);
      });
    run();
    rec.path = plannedKernels();
    setTime(rec, timer.time(run), { bytes, flops });
    const out = pinned(() => op.forward(q, qPe, k, kPe));
    if (!pin) {
      planned?.dispose();
      planned = out;
    } else {
      console.log(
        `H${H} ${pin} pinned: max |difference| from the planner's ${compare(out, planned!).maxAbs}`,
      );
      out.dispose();
    }
  } catch (e) {
    rec.note = errorNote(e);
  }
  records.push(rec);
  console.log(JSON.stringify(rec));
  saveRecords(args.results!, "mla_decode", "MLA decode", gpu, records);
}
planned?.dispose();
