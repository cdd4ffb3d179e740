/**
 * Benchmark of a GDN layer's captured decode step: `causalConv1dDecode` (W 4, C = 2 HK K + H V channels,
 * bf16 history pool) then `recurrentGdnDecode` (fp32 state pool of 1024 slots, a batch of 256, H 32, HK 16,
 * K = V = 128), captured once with `captureGraph` and replayed, against the same two calls made eagerly.
 *
 * Per mode, two figures:
 * - device ms: CUDA events around each call, back to back, the L2 flushed before each (what the GPU spends);
 * - latency ms: host wall time of one call followed by waiting for it (replay + synchronize for the graph,
 *   the calls + synchronize eagerly), median of `--iterations`: the launch overhead is latency - device.
 * Modes: the graph with the indices checked on the device (the default inside a capture), the graph with
 * `checkIndices: false`, the eager calls with their host checks, the eager calls with `checkIndices: false`.
 * Writes `<results>/<date>_graph_decode.{json,md}`; the ratio column is eager latency / graph latency.
 *
 * @example
 * ```sh
 * deno run -A bench/graph_decode_side_by_side.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { captureGraph, causalConv1dDecode, recurrentGdnDecode, synchronize, Tensor } from "../mod.ts";
import { type BenchRecord, cudaGpu, FlushedTimer, saveRecords } from "./records.ts";

const { values: args } = scriptArgs({
  options: {
    results: { type: "string", default: "bench/results" },
    iterations: { type: "string", default: "50" },
  },
});
const gpu = cudaGpu("graph_decode_side_by_side");
const iterations = numberOption("--iterations", args.iterations);
const records: BenchRecord[] = [];
using timer = new FlushedTimer(20);

const [slots, B, H, HK, K, V, W] = [1024, 256, 32, 16, 128, 128, 4];
const C = 2 * HK * K + H * V;
const shape = `slots${slots}_B${B}_H${H}_HK${HK}_K${K}_V${V}_W${W}`;
// State and history bytes, each selected slot read and written once, plus the step's rows.
const bytes = 2 * B * H * V * K * 4 + 2 * B * (W - 1) * C * 2 + 2 * B * C * 2 + B * H * V * 2;
const device = "cuda";
using x = Tensor.randn([B, C], { dtype: "bfloat16", device, seed: 1 });
using convW = Tensor.randn([C, W], { device, seed: 2, std: 0.5 });
using convPool = Tensor.randn([slots, W - 1, C], { dtype: "bfloat16", device, seed: 3 });
using rawGate = Tensor.randn([1, B, H], { dtype: "bfloat16", device, seed: 4 });
using rawBeta = Tensor.randn([1, B, H], { dtype: "bfloat16", device, seed: 5 });
using aLog = Tensor.zeros([H], { device });
using dtBias = Tensor.zeros([H], { device });
using pool = Tensor.randn([slots, H, V, K], { device, seed: 6, std: 0.1 });
using indices = Tensor.from(Array.from({ length: B }, (_, b) => 2 * b + 1), { dtype: "int32", device });
using qkv = Tensor.empty([B, C], { dtype: "bfloat16", device });
using out = Tensor.empty([1, B, H, V], { dtype: "bfloat16", device });

const step = (checkIndices: boolean) => () => {
  causalConv1dDecode(x, convW, convPool, {
    stateIndices: indices,
    activation: "silu",
    out: qkv,
    checkIndices,
  });
  recurrentGdnDecode(qkv, rawGate, rawBeta, aLog, dtBias, pool, indices, { out, checkIndices });
};

function latency(fn: () => void, wait: () => void): number {
  for (let i = 0; i < 3; i++) fn(), wait();
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    fn();
    wait();
    samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  return samples[samples.length >> 1];
}

const results: { mode: string; deviceMs: number; latencyMs: number }[] = [];
function measure(mode: string, fn: () => void, wait: () => void): void {
  const deviceMs = timer.time(fn);
  const latencyMs = latency(fn, wait);
  results.push({ mode, deviceMs, latencyMs });
  console.log(JSON.stringify({ mode, deviceMs, latencyMs }));
}

step(true)(); // the kernels load before any capture
for (const checked of [true, false]) {
  using graph = captureGraph(step(checked));
  measure(
    `graph replay (${
      checked ? "indices checked on the device" : "checkIndices false"
    }, ${graph.nodeCount} nodes)`,
    () => graph.replay(),
    () => graph.synchronize(),
  );
}
for (const checked of [true, false]) {
  measure(
    `eager calls (${checked ? "indices checked on the host" : "checkIndices false"})`,
    step(checked),
    () => synchronize(device),
  );
}
const eager = results.find((r) => r.mode.startsWith("eager calls (indices checked"))!;
for (const r of results) {
  const rec: BenchRecord = {
    op: "causalConv1dDecode + recurrentGdnDecode",
    shape,
    dtype: "bfloat16",
    mode: r.mode,
    ms: r.latencyMs,
    ref: "eager calls with host checks (latency)",
    ref_ms: eager.latencyMs,
    speedup: eager.latencyMs / r.latencyMs,
    tflops: null,
    gbps: bytes / (r.deviceMs * 1e-3) / 1e9,
    path: r.mode.startsWith("graph") ? "captured graph" : "eager",
    note:
      `latency ${(r.latencyMs * 1e3).toFixed(1)} us, device ${(r.deviceMs * 1e3).toFixed(1)} us, latency - ` +
      `device ${((r.latencyMs - r.deviceMs) * 1e3).toFixed(1)} us; GB/s from the device time`,
  };
  records.push(rec);
}
saveRecords(args.results!, "graph_decode", "A GDN layer's decode step, captured and eager", gpu, records);
