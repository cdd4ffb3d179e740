/**
 * Benchmark of chunked prefill on a paged state pool: `pagedChunkGdn` against `chunkGatedDeltaRule` on
 * the same packed tokens with the same initial states (the training op's cost; the paged op's state
 * kernels read and write the slots in place, so it adds only the padding rows' kernel). The target is
 * within 5%.
 * The paged op twice: as called by default (the indices read back once and checked on the host, which
 * waits for the stream) and with `checkIndices: false` (nothing read back).
 * bf16 inputs, fp32 pool of 2N slots (sequence n in slot 2n + 1), K = V = 128, in-kernel q/k L2 norm.
 * CUDA events, median of 20 calls after warm-up, the L2 flushed before each. Writes
 * `<results>/<date>_paged_chunk.{json,md}`.
 *
 * @example
 * ```sh
 * deno run -A bench/paged_chunk_side_by_side.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { linearForwardFlops } from "../cli/flops.ts";
import { chunkGatedDeltaRule, lastPlan, pagedChunkGdn, Tensor } from "../mod.ts";
import { BENCH_OPTIONS, type BenchRecord, cudaGpu, FlushedTimer, saveRecords } from "./records.ts";

const { values: args } = scriptArgs({ options: BENCH_OPTIONS });
const gpu = cudaGpu("paged_chunk_side_by_side");
const records: BenchRecord[] = [];
using timer = new FlushedTimer(numberOption("--iterations", args.iterations));
const device = "cuda";
const [K, V] = [128, 128];

for (const [N, T, H] of [[4, 2048, 16], [16, 512, 32], [2, 8192, 32], [64, 128, 16]]) {
  const total = N * T;
  const shape = `N${N}_T${T}_H${H}_D${K}`;
  const offsets = Int32Array.from({ length: N + 1 }, (_, n) => n * T);
  using cuSeqlens = Tensor.from(offsets, { dtype: "int32", device });
  using q = Tensor.randn([1, total, H, K], { dtype: "bfloat16", device, seed: 1 });
  using k = Tensor.randn([1, total, H, K], { dtype: "bfloat16", device, seed: 2 });
  using v = Tensor.randn([1, total, H, V], { dtype: "bfloat16", device, seed: 3 });
  // Log decays in (-0.1, 0), beta in (0.5, 1): a stable recurrence.
  const gHost = Float32Array.from({ length: total * H }, (_, i) => -0.1 * ((i * 0.618034) % 1));
  const bHost = Float32Array.from({ length: total * H }, (_, i) => 0.5 + 0.5 * ((i * 0.414214) % 1));
  using g = Tensor.from(gHost, { shape: [1, total, H], device });
  using beta = Tensor.from(bHost, { shape: [1, total, H], dtype: "bfloat16", device });
  using pool = Tensor.randn([2 * N + 1, H, V, K], { device, seed: 4, std: 0.05 });
  using indices = Tensor.from(Int32Array.from({ length: N }, (_, n) => 2 * n + 1), {
    dtype: "int32",
    device,
  });
  // The training op's initial states: the same slots, as [N, H, K, V].
  using initial = Tensor.randn([N, H, K, V], { device, seed: 5, std: 0.05 });
  const flops = linearForwardFlops(1, total, H, K, V);
  const ms: Record<string, number> = {};
  let path = "";
  const run = {
    checked: () => {
      pagedChunkGdn(q, k, v, g, beta, pool, indices, { cuSeqlens, useQkL2norm: true }).dispose();
    },
    unchecked: () => {
      pagedChunkGdn(q, k, v, g, beta, pool, indices, { cuSeqlens, useQkL2norm: true, checkIndices: false })
        .dispose();
    },
    training: () => {
      using _ = chunkGatedDeltaRule(q, k, v, g, beta, {
        layout: "bshd",
        cuSeqlens,
        initialState: initial,
        outputFinalState: true,
        useQkL2norm: true,
      });
      path = lastPlan()?.path ?? "?";
    },
  };
  for (const [name, fn] of Object.entries(run)) {
    fn();
    ms[name] = timer.time(fn);
  }
  for (const mode of ["checked", "unchecked"]) {
    const rec: BenchRecord = {
      op: "pagedChunkGdn",
      shape,
      dtype: "bfloat16",
      mode: "prefill",
      ms: ms[mode],
      ref: "chunkGatedDeltaRule (same tokens, same initial states)",
      ref_ms: ms.training,
      speedup: ms.training / ms[mode],
      tflops: flops / (ms[mode] * 1e-3) / 1e12,
      gbps: null,
      path: `${path}; ${mode === "checked" ? "indices checked on the host" : "checkIndices false"}`,
      note: `${(100 * (ms[mode] / ms.training - 1)).toFixed(1)}% over the training op`,
    };
    records.push(rec);
    console.log(JSON.stringify(rec));
  }
}
saveRecords(args.results!, "paged_chunk", "Chunked prefill on a paged state pool", gpu, records);
