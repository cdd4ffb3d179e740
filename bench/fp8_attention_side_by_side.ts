/**
 * The float8_e4m3 dense forward against attnkit's own bfloat16 forward on the same values, in one process:
 * e4m3 q, k, v with per-(batch, KV head) scales of 1 (so the bfloat16 inputs, cast exactly from them, hold the
 * same numbers), `GroupedQueryAttentionDenseFwdOp` with float8 inputs and bfloat16 output vs the same op on the
 * bfloat16 tensors. Prints and records ms, TFLOP/s (4 B H S^2 D, halved when causal), the speedup, the planner's
 * path and the max difference between the two outputs (`<results>/<date>_fp8_attention.{json,md}`).
 *
 * @example
 * ```sh
 * deno run -A bench/fp8_attention_side_by_side.ts --results bench/results --iterations 30
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { attentionForwardFlops } from "../cli/flops.ts";
import {
  compare,
  cudaAvailable,
  deviceInfo,
  GroupedQueryAttentionDenseFwdOp,
  lastPlan,
  Tensor,
} from "../mod.ts";
import { type BenchRecord, FlushedTimer, saveRecords } from "./records.ts";

interface Shape {
  B: number;
  S: number;
  H: number;
  Hkv: number;
  D: number;
  causal: boolean;
}

const SHAPES: Shape[] = [
  { B: 4, S: 4096, H: 32, Hkv: 32, D: 128, causal: true },
  { B: 4, S: 4096, H: 32, Hkv: 32, D: 128, causal: false },
  { B: 4, S: 4096, H: 32, Hkv: 8, D: 128, causal: true },
  { B: 16, S: 1024, H: 16, Hkv: 16, D: 128, causal: true },
  { B: 1, S: 16384, H: 16, Hkv: 16, D: 128, causal: true },
];

const name = (s: Shape) => `B${s.B}_S${s.S}_H${s.H}${s.Hkv !== s.H ? `_KV${s.Hkv}` : ""}_D${s.D}`;

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    options: {
      results: { type: "string", default: "bench/results" },
      iterations: { type: "string", default: "30" },
      only: { type: "string" },
    },
  });
  if (!cudaAvailable()) {
    console.error("fp8_attention_side_by_side: no CUDA device");
    Deno.exit(1);
  }
  const gpu = deviceInfo("cuda").name;
  using timer = new FlushedTimer(numberOption("--iterations", values.iterations));
  const records: BenchRecord[] = [];
  for (const s of SHAPES) {
    const shape = `${name(s)}${s.causal ? "_causal" : ""}`;
    if (values.only && !shape.includes(values.only)) continue;
    const device = "cuda";
    using q8 = Tensor.randn([s.B, s.S, s.H, s.D], { dtype: "float8_e4m3", device, seed: 1 });
    using k8 = Tensor.randn([s.B, s.S, s.Hkv, s.D], { dtype: "float8_e4m3", device, seed: 2 });
    using v8 = Tensor.randn([s.B, s.S, s.Hkv, s.D], { dtype: "float8_e4m3", device, seed: 3 });
    using ones = Tensor.ones([s.B, s.Hkv], { device });
    using q = q8.cast("bfloat16");
    using k = k8.cast("bfloat16");
    using v = v8.cast("bfloat16");
    const eight = new GroupedQueryAttentionDenseFwdOp({
      layout: "bshd",
      isCausal: s.causal,
      dtype: "bfloat16",
    });
    const wide = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", isCausal: s.causal });
    using o8 = Tensor.empty(q.shape, { dtype: "bfloat16", device }).fill(NaN);
    using o16 = Tensor.empty(q.shape, { dtype: "bfloat16", device }).fill(NaN);
    eight.forward(q8, k8, v8, ones, ones, ones, undefined, undefined, { output: o8 });
    const path = lastPlan()?.path ?? "?";
    wide.forward(q, k, v, { output: o16 });
    const diff = compare(o8, o16).maxAbs;
    const ms8 = timer.time(() =>
      void eight.forward(q8, k8, v8, ones, ones, ones, undefined, undefined, { output: o8 })
    );
    const ms16 = timer.time(() => void wide.forward(q, k, v, { output: o16 }));
    const flops = attentionForwardFlops(s.B, s.H, s.S, s.S, s.D, s.causal);
    records.push({
      op: "GroupedQueryAttentionDenseFwdOp",
      shape,
      dtype: "float8_e4m3",
      mode: "fwd",
      ms: ms8,
      ref: "attnkit bfloat16 forward",
      ref_ms: ms16,
      speedup: ms16 / ms8,
      tflops: flops / ms8 / 1e9,
      gbps: null,
      path,
      note: `max |fp8 - bf16| ${diff.toExponential(2)}; bf16 ${(flops / ms16 / 1e9).toFixed(0)} TFLOP/s`,
    });
    console.log(
      `${shape}: e4m3 ${ms8.toFixed(3)} ms (${(flops / ms8 / 1e9).toFixed(0)} TFLOP/s, ${path}), bf16 ` +
        `${ms16.toFixed(3)} ms (${(flops / ms16 / 1e9).toFixed(0)}), ${(ms16 / ms8).toFixed(2)}x, max diff ` +
        `${diff.toExponential(2)}`,
    );
  }
  saveRecords(values.results!, "fp8_attention", "float8_e4m3 dense forward vs bfloat16", gpu, records);
}
