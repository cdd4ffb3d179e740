/**
 * Benchmark of the serving decode step: `recurrentKdaDecode` and `recurrentGdnDecode` on a pool of 1024
 * slots, a batch of 256 sequences, H = 32, K = V = 128, fp32 states, bf16 projections, against the copy
 * ceiling of the state bytes (each selected slot read and written once: 2 x 256 x 32 x 128 x 128 x 4 B =
 * 1.07 GB) and, with `--fla <json>` (bench/fla_decode.py on the same machine), FLA's fused recurrent
 * kernels with their in-kernel gate, sigmoid and norm. Each op twice: as called by default (the indices
 * read back and checked on the host, which waits for the stream) and with `checkIndices: false` (no host
 * read, the steady state of a serving loop). CUDA events, median of 20 calls after 3 warm-up calls, the
 * L2 flushed before each. Writes `<results>/<date>_paged_decode.{json,md}`.
 *
 * @example
 * ```sh
 * deno run -A bench/paged_decode_side_by_side.ts --results $OUT --fla /tmp/fla_decode.json
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { lastPlan, recurrentGdnDecode, recurrentKdaDecode, Tensor } from "../mod.ts";
import {
  BENCH_OPTIONS,
  type BenchRecord,
  COPY_CEILING_GBPS,
  cudaGpu,
  FlushedTimer,
  saveRecords,
} from "./records.ts";

const { values: args } = scriptArgs({
  options: {
    ...BENCH_OPTIONS,
    fla: { type: "string" },
  },
});
const gpu = cudaGpu("paged_decode_side_by_side");
const fla: Record<string, number> = args.fla ? JSON.parse(Deno.readTextFileSync(args.fla)) : {};
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));

const [slots, B, H, K, V] = [1024, 256, 32, 128, 128];
const shape = `slots${slots}_B${B}_H${H}_K${K}_V${V}`;
const bytes = 2 * B * H * V * K * 4;
const device = "cuda";
using qkv = Tensor.randn([B, H * (2 * K + V)], { dtype: "bfloat16", device, seed: 1 });
using rawBeta = Tensor.randn([1, B, H], { dtype: "bfloat16", device, seed: 2 });
using aLog = Tensor.zeros([H], { device });
using pool = Tensor.randn([slots, H, V, K], { device, seed: 3, std: 0.1 });
using indices = Tensor.from(Array.from({ length: B }, (_, b) => b + 1), { dtype: "int32", device });
using out = Tensor.empty([1, B, H, V], { dtype: "bfloat16", device });

function measure(
  op: string,
  ref: string,
  refMs: number | undefined,
  fn: () => void,
  variant = "",
): void {
  fn();
  const path = lastPlan()?.path ?? "?";
  const ms = timer.time(fn);
  const gbps = bytes / (ms * 1e-3) / 1e9;
  const rec: BenchRecord = {
    op,
    shape,
    dtype: "bfloat16",
    mode: "decode",
    ms,
    ref: refMs === undefined ? `copy ceiling (speedup = fraction of ${COPY_CEILING_GBPS} GB/s)` : ref,
    ref_ms: refMs ?? null,
    speedup: refMs === undefined ? gbps / COPY_CEILING_GBPS : refMs / ms,
    tflops: null,
    gbps,
    path,
    note: `${variant}${(100 * gbps / COPY_CEILING_GBPS).toFixed(0)}% of the copy ceiling`,
  };
  records.push(rec);
  console.log(JSON.stringify(rec));
}

{
  using rawGate = Tensor.randn([1, B, H, K], { dtype: "bfloat16", device, seed: 4 });
  using dtBias = Tensor.zeros([H, K], { device });
  measure(
    "recurrentKdaDecode",
    "fla fused_recurrent_kda_fwd (in-kernel gate, sigmoid, norm)",
    fla.kda_decode,
    () => {
      recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, indices, { out });
    },
    "indices checked on the host; ",
  );
  measure(
    "recurrentKdaDecode",
    "fla fused_recurrent_kda_fwd (in-kernel gate, sigmoid, norm)",
    fla.kda_decode,
    () => {
      recurrentKdaDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, indices, { out, checkIndices: false });
    },
    "checkIndices false; ",
  );
}
{
  using rawGate = Tensor.randn([1, B, H], { dtype: "bfloat16", device, seed: 5 });
  using dtBias = Tensor.zeros([H], { device });
  measure(
    "recurrentGdnDecode",
    "fla fused_recurrent_gated_delta_rule (+ gather / scatter)",
    fla.gdn_decode,
    () => {
      recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, indices, { out });
    },
    "indices checked on the host; ",
  );
  measure(
    "recurrentGdnDecode",
    "fla fused_recurrent_gated_delta_rule (+ gather / scatter)",
    fla.gdn_decode,
    () => {
      recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, indices, { out, checkIndices: false });
    },
    "checkIndices false; ",
  );
}
saveRecords(args.results!, "paged_decode", "Serving decode on a paged state pool", gpu, records);
