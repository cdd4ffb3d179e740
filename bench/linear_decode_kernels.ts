/**
 * Benchmark of the Gated DeltaNet decode step's two kernels (`linear.decode.tile`, state tiles in shared
 * memory; `linear.decode.simt`, the state in registers) beside the planner's choice, over head dims and
 * state dtypes: [B, H, K, V] states of K = V = 64, 128 and 256 in float32, and K = V = 128 in bfloat16, at a
 * serving batch and at a small one. Each row counts the state read and written once (2 B H K V times the
 * state's element size) against the 4252 GB/s copy ceiling, and prints the largest difference of each
 * pinned kernel's output and new state from the planner's. Times: CUDA events, median of `--iterations`
 * calls after 3 warm-up calls, the L2 flushed before each.
 *
 * @example
 * ```sh
 * deno run -A bench/linear_decode_kernels.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { compare, type DType, GatedDeltaNetDecodeFwdOp, Tensor } from "../mod.ts";
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
const gpu = cudaGpu("linear_decode_kernels");
const device = "cuda";
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));

interface Shape {
  B: number;
  H: number;
  D: number;
  state: DType;
}
const SHAPES: Shape[] = [
  { B: 256, H: 32, D: 128, state: "float32" },
  { B: 256, H: 32, D: 128, state: "bfloat16" },
  { B: 256, H: 32, D: 64, state: "float32" },
  { B: 64, H: 32, D: 256, state: "float32" },
  { B: 8, H: 32, D: 128, state: "float32" },
];

const records: BenchRecord[] = [];
for (const { B, H, D, state: stateDtype } of SHAPES) {
  const bytes = 2 * B * H * D * D * (stateDtype === "float32" ? 4 : 2);
  using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 1 });
  using k = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 2 });
  using v = Tensor.randn([B, H, D], { dtype: "bfloat16", device, seed: 3 });
  using g = Tensor.rand([B, H], { device, seed: 4, low: -0.3, high: 0 });
  using beta = Tensor.rand([B, H], { device, seed: 5 });
  using state = Tensor.randn([B, H, D, D], { dtype: stateDtype, device, seed: 6, std: 0.1 });
  let planned: { output: Tensor; newState: Tensor } | undefined;
  for (const pin of [undefined, "tile", "simt"]) {
    const rec = ceilingRecord(
      "GatedDeltaNetDecodeFwdOp",
      `B${B}_H${H}_K${D}_V${D}_${stateDtype}_state`,
      "bfloat16",
      pin ? `decode, ${pin} pinned` : "decode",
      bytes,
    );
    try {
      const op = new GatedDeltaNetDecodeFwdOp({
        useQkL2norm: true,
        kernelMap: pin ? { "linear.decode": pin } : undefined,
      });
      const out = op.forward(q, k, v, g, beta, state);
      rec.path = plannedKernels();
      setTime(rec, timer.time(() => void op.forward(q, k, v, g, beta, state, out)), { bytes });
      if (!planned) {
        planned = out;
      } else {
        const o = compare(out.output, planned.output).maxAbs,
          s = compare(out.newState, planned.newState).maxAbs;
        console.log(
          `${rec.shape} ${pin} pinned: max |difference| from the planner's output ${o}, state ${s}`,
        );
        out.output.dispose();
        out.newState.dispose();
      }
    } catch (e) {
      rec.note = errorNote(e);
    }
    records.push(rec);
    console.log(JSON.stringify(rec));
  }
  planned?.output.dispose();
  planned?.newState.dispose();
}
saveRecords(args.results!, "linear_decode_kernels", "Gated DeltaNet decode kernels", gpu, records);
