/**
 * Tuned against untuned on the GPU: for each op and shape, the op class built without `tune` (the
 * planner's choice) and with `tune: true` (its first call tunes into a fresh cache, timed by the wall
 * clock; later calls read the winner), both timed with the L2 flushed, in the same process. The shapes
 * are off the benchmark lists on purpose (attention B2_S3000_H24_KV8_D128 causal, Gated DeltaNet
 * B3_T5000_H24_D128), where no rule was fitted.
 *
 * @example
 * ```sh
 * deno run -A bench/tune_side_by_side.ts --results bench/results
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  compare,
  deviceInfo,
  GatedDeltaNetBTHDFwdOp,
  GatedDeltaNetBwdOp,
  GroupedQueryAttentionBwdOp,
  GroupedQueryAttentionFwdOp,
  lastChoice,
  setTuneCachePath,
  Tensor,
  timeIt,
} from "../mod.ts";
import { attentionForwardFlops, linearForwardFlops, modeFactor } from "../cli/flops.ts";
import { type BenchRecord, FlushedTimer, saveRecords } from "./records.ts";

const args = scriptArgs({
  args: Deno.args,
  options: {
    results: { type: "string" },
    iterations: { type: "string", default: "20" },
    device: { type: "string", default: "cuda" },
    scale: { type: "string", default: "1" },
  },
}).values;
// `--device cpu --scale 50` is a quick run of the script itself on a machine without a GPU.
const device = args.device as "cuda" | "cpu";
const scale = Number(args.scale);
const gpu = device === "cuda" ? deviceInfo(device).name : "CPU backend";
setTuneCachePath(`${Deno.makeTempDirSync()}/tune.json`);
const iterations = numberOption("--iterations", args.iterations);
const timer = device === "cuda" ? new FlushedTimer(iterations) : undefined;
const time = (fn: () => void) =>
  timer ? timer.time(fn) : timeIt(fn, { device, warmup: 1, iterations }).medianMs;
const records: BenchRecord[] = [];

/** One op under both choices: the untuned call, then the tuned op's first (tuning) call and its time. */
function side<R extends Disposable>(
  op: string,
  shape: string,
  mode: "fwd" | "bwd",
  flops: number,
  untuned: () => R,
  tuned: () => R,
  agree: (a: R, b: R) => number,
): void {
  using plain = untuned();
  const started = performance.now();
  using first = tuned();
  const tuneSeconds = (performance.now() - started) / 1000;
  const choice = lastChoice()!;
  const winner = Object.entries(choice.spec).map(([k, v]) => `${k}=${v}`).join(",") || "planner";
  const relRms = agree(plain, first);
  const refMs = time(() => untuned()[Symbol.dispose]());
  const ms = time(() => tuned()[Symbol.dispose]());
  const row: BenchRecord = {
    op,
    shape,
    dtype: "bfloat16",
    mode,
    ms,
    ref: "attnkit planner, untuned",
    ref_ms: refMs,
    speedup: refMs / ms,
    tflops: flops / ms / 1e9,
    gbps: null,
    path: winner,
    note: `tuning ${tuneSeconds.toFixed(2)} s (${choice.source}); relRms vs untuned ${
      relRms.toExponential(1)
    }`,
  };
  records.push(row);
  console.log(JSON.stringify(row));
}

{
  const [B, S, H, HKV, D] = [2, Math.ceil(3000 / scale), 24, 8, 128];
  const shape = `B${B}_S${S}_H${H}_KV${HKV}_D${D}_causal`;
  const sizes = {
    layout: "bshd" as const,
    batch: B,
    heads: H,
    headsKv: HKV,
    seqLen: S,
    dim: D,
    isCausal: true,
  };
  using q = Tensor.randn([B, S, H, D], { dtype: "bfloat16", device, seed: 1 });
  using k = Tensor.randn([B, S, HKV, D], { dtype: "bfloat16", device, seed: 2 });
  using v = Tensor.randn([B, S, HKV, D], { dtype: "bfloat16", device, seed: 3 });
  using dO = Tensor.randn([B, S, H, D], { dtype: "bfloat16", device, seed: 4 });
  const flops = attentionForwardFlops(B, H, S, S, D, true);
  const plainFwd = new GroupedQueryAttentionFwdOp(sizes);
  const tunedFwd = new GroupedQueryAttentionFwdOp({ ...sizes, tune: true });
  side(
    "GroupedQueryAttentionFwdOp",
    shape,
    "fwd",
    flops,
    () => plainFwd.forward(q, k, v),
    () => tunedFwd.forward(q, k, v),
    (a, b) => compare(a.output, b.output).relRms,
  );
  using fwd = plainFwd.forward(q, k, v);
  const plainBwd = new GroupedQueryAttentionBwdOp(sizes);
  const tunedBwd = new GroupedQueryAttentionBwdOp({ ...sizes, tune: true });
  side(
    "GroupedQueryAttentionBwdOp",
    shape,
    "bwd",
    flops * modeFactor("attention", "bwd"),
    () => plainBwd.backward(dO, q, k, v, fwd.output, fwd.lse),
    () => tunedBwd.backward(dO, q, k, v, fwd.output, fwd.lse),
    (a, b) => compare(a.dk, b.dk).relRms,
  );
}

{
  const [B, T, H, D] = [3, Math.ceil(5000 / scale), 24, 128];
  const shape = `B${B}_T${T}_H${H}_D${D}`;
  using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 5 });
  using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 6 });
  using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 7 });
  using g = Tensor.rand([B, T, H], { low: -0.2, high: -0.01, device, seed: 8 });
  using beta = Tensor.rand([B, T, H], { low: 0.05, high: 0.95, device, seed: 9 });
  using dO = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device, seed: 10 });
  const flops = linearForwardFlops(B, T, H, D, D);
  const plainFwd = new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true });
  const tunedFwd = new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true, tune: true });
  side(
    "GatedDeltaNetBTHDFwdOp",
    shape,
    "fwd",
    flops,
    () => plainFwd.forward(q, k, v, g, beta),
    () => tunedFwd.forward(q, k, v, g, beta),
    (a, b) => compare(a.output, b.output).relRms,
  );
  using fwd = plainFwd.forward(q, k, v, g, beta);
  const plainBwd = new GatedDeltaNetBwdOp({ layout: "bshd", useQkL2norm: true });
  const tunedBwd = new GatedDeltaNetBwdOp({ layout: "bshd", useQkL2norm: true, tune: true });
  side(
    "GatedDeltaNetBwdOp",
    shape,
    "bwd",
    flops * modeFactor("linear", "bwd"),
    () => plainBwd.backward(dO, q, k, v, g, beta, fwd.chunkStates),
    () => tunedBwd.backward(dO, q, k, v, g, beta, fwd.chunkStates),
    (a, b) => compare(a.dq, b.dq).relRms,
  );
}

timer?.[Symbol.dispose]();
if (args.results) saveRecords(args.results, "tune", "Tuned against untuned (tune: true)", gpu, records);
