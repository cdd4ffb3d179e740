/**
 * Benchmark of zero-drift decode: one-token `pagedChunkGdn` calls with a `ReplayState` (each call replays the
 * slot's cached tokens of the unfinished chunk through the chunked op) against the same calls without it; the
 * replayed calls eagerly with host checks, eagerly without them (`checkIndices: false`) and captured in a graph.
 * B sequences, H heads, K = V, bf16 tokens, fp32 pool; the replay state is taken through a whole chunk (counts 0..63), so the
 * median is over every suffix length. Writes `<results>/<date>_replay_decode.{json,md}`.
 *
 * @example
 * ```sh
 * deno run -A bench/replay_decode_side_by_side.ts --results $OUT
 * ```
 *
 * @module
 */
import { scriptArgs } from "../tools/script_args.ts";
import { captureGraph, pagedChunkGdn, ReplayState, Tensor, timeIt } from "../mod.ts";
import { type BenchRecord, cudaGpu, saveRecords } from "./records.ts";

const { values: args } = scriptArgs({ options: { results: { type: "string", default: "bench/results" } } });
const gpu = cudaGpu("replay_decode_side_by_side");
const [B, H, K, slots] = [64, 16, 128, 128];
const shape = `B${B}_H${H}_K${K}_V${K}`;
const device = "cuda";
using q = Tensor.randn([B, 1, H, K], { dtype: "bfloat16", device, seed: 1 });
using k = Tensor.randn([B, 1, H, K], { dtype: "bfloat16", device, seed: 2 });
using v = Tensor.randn([B, 1, H, K], { dtype: "bfloat16", device, seed: 3 });
using g = Tensor.rand([B, 1, H], { device, seed: 4, low: -0.3, high: 0 });
using beta = Tensor.rand([B, 1, H], { device, seed: 5 });
using pool = Tensor.zeros([slots, H, K, K], { device });
using idx = Tensor.from(Array.from({ length: B }, (_, i) => i + 1), { dtype: "int32", device });
using replay = ReplayState.zeros(slots, { heads: H, keyDim: K, gate: "head", device });

const call = (o: Record<string, unknown>) => () =>
  pagedChunkGdn(q, k, v, g, beta, pool, idx, { useQkL2norm: true, ...o }).dispose();
const plain = timeIt(call({}), { device, iterations: 20 }).medianMs;
// A whole chunk of suffix lengths (63 calls from count 0) per measurement.
const chunk = { device, warmup: 1, iterations: 63 };
const eagerChecked = timeIt(call({ replayState: replay }), chunk).medianMs;
const eagerTrusted = timeIt(call({ replayState: replay, checkIndices: false }), chunk).medianMs;
const captured = (() => {
  let y: Tensor | undefined;
  using graph = captureGraph(
    () => (y = pagedChunkGdn(q, k, v, g, beta, pool, idx, { useQkL2norm: true, replayState: replay })),
  );
  try {
    return timeIt(() => graph.replay(), chunk).medianMs;
  } finally {
    y?.dispose();
  }
})();
const records: BenchRecord[] = [
  ["eager, indices, offsets and counts checked on the host", eagerChecked],
  ["eager, checkIndices false (nothing read back)", eagerTrusted],
  ["captured graph, indices checked on the device", captured],
].map(([path, ms]) => ({
  op: "pagedChunkGdn (replayState, one token per row)",
  shape,
  dtype: "bfloat16",
  mode: "decode",
  ms: ms as number,
  ref: "pagedChunkGdn (one token per row, no replay state)",
  ref_ms: plain,
  speedup: plain / (ms as number),
  tflops: null,
  gbps: null,
  path: `replay plan on the device, two capacity-sized chunked runs: ${path}`,
  note: "median over a whole chunk of suffix lengths (0..63 cached tokens); CUDA events",
}));
for (const r of records) console.log(JSON.stringify(r));
saveRecords(args.results!, "replay_decode", "Zero-drift decode with a replay state", gpu, records);
