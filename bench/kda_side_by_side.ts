/**
 * Benchmark of KDA's training path on the GPU: `gateTransform` / `boundGate` and `causalConv1d`
 * (forward and backward) against the copy ceiling of their bytes, and `chunkKda` against FLA's
 * `chunk_kda` times on this H200 recorded in ANCHORS.md (B4_T2048_H16_D128: 0.614 ms forward, 2.620 ms
 * forward + backward). bf16 inputs, fp32 gates; CUDA events, median of 20 calls after 3 warm-up calls,
 * the L2 flushed before each. Writes `<results>/<date>_kda.{json,md}` with records `{op, shape, dtype,
 * mode, ms, ref, ref_ms, speedup, tflops, gbps, path}`. With `--fla <json>` (written by bench/fla_kda_aux.py on
 * the same machine) the references are FLA's live times on the same inputs: `fused_kda_gate`,
 * `causal_conv1d` and, when timed, `chunk_kda`.
 *
 * Bytes counted once each: gateTransform forward reads raw (2 B) and writes the fp32 gate (4 B) per
 * element; its backward reads dGate (4 B) and raw (2 B) and writes draw (2 B). causalConv1d forward reads
 * x and writes y (2 B each); its backward reads dy and x and writes dx (2 B each).
 *
 * @example
 * ```sh
 * deno run -A bench/kda_side_by_side.ts --results $OUT
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import { boundGate, causalConv1d, chunkKda, explain, lastPlan, Tensor } from "../mod.ts";
import {
  type BenchRecord,
  COPY_CEILING_GBPS,
  cudaGpu,
  errorNote,
  FlushedTimer,
  saveRecords,
} from "./records.ts";

/** One result row. */
export interface KdaRecord extends BenchRecord {
  mode: "fwd" | "fwdbwd" | "bwd";
}

const { values: args } = scriptArgs({
  options: {
    results: { type: "string", default: "bench/results" },
    ops: { type: "string", default: "gate,conv,kda" },
    iterations: { type: "string", default: "20" },
    fla: { type: "string" },
  },
});
const OPS = new Set(args.ops!.split(","));
// FLA's times on the same inputs (bench/fla_kda_aux.py), when that run is available.
const fla: Record<string, number> = args.fla ? JSON.parse(Deno.readTextFileSync(args.fla)) : {};
const CEILING_REF = `copy ceiling (speedup = fraction of ${COPY_CEILING_GBPS} GB/s)`;
function refOf(key: string, name: string): { ref: string; ref_ms: number | null } {
  return fla[key] !== undefined ? { ref: name, ref_ms: fla[key] } : { ref: CEILING_REF, ref_ms: null };
}
const ITER = numberOption("--iterations", args.iterations);
const gpu = cudaGpu("kda_side_by_side");
const records: KdaRecord[] = [];
using timer = new FlushedTimer(ITER);
const save = () => saveRecords(args.results!, "kda", "KDA's training path", gpu, records);
const time = (fn: () => void) => timer.time(fn);

function push(rec: KdaRecord): void {
  records.push(rec);
  console.log(JSON.stringify(rec));
  save();
}

function measure(
  base: Omit<KdaRecord, "ms" | "speedup" | "tflops" | "gbps" | "path">,
  fn: () => void,
  bytes: number,
  flops = 0,
): void {
  const rec: KdaRecord = { ...base, ms: null, speedup: null, tflops: null, gbps: null, path: "?" };
  try {
    fn();
    rec.path = lastPlan()?.path ?? "-";
    if (rec.path === "general") {
      rec.note = "the general path (the CPU backend on host copies): not timed";
      return push(rec);
    }
    rec.ms = time(fn);
    if (bytes > 0) rec.gbps = bytes / (rec.ms * 1e-3) / 1e9;
    if (flops > 0) rec.tflops = flops / (rec.ms * 1e-3) / 1e12;
    if (rec.ref_ms !== null) rec.speedup = rec.ref_ms / rec.ms;
    else if (rec.gbps !== null) rec.speedup = rec.gbps / COPY_CEILING_GBPS;
    if (rec.gbps !== null) {
      rec.note = `${(100 * rec.gbps / COPY_CEILING_GBPS).toFixed(0)}% of the copy ceiling`;
    }
  } catch (e) {
    rec.note = errorNote(e);
  }
  push(rec);
}

const [B, T, H, D] = [4, 2048, 16, 128];
const shape = `B${B}_T${T}_H${H}_D${D}`;
const n = B * T * H * D;

if (OPS.has("gate")) {
  using raw = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 1 });
  using aLog = Tensor.zeros([H], { device: "cuda" });
  using dtBias = Tensor.zeros([H, D], { device: "cuda" });
  using dGate = Tensor.randn([B, T, H, D], { device: "cuda", seed: 2 });
  const gateRef = "fla.ops.kda.gate.fused_kda_gate";
  measure({ op: "boundGate", shape, dtype: "bfloat16", mode: "fwd", ...refOf("gate_fwd", gateRef) }, () => {
    using _ = boundGate(raw, aLog, dtBias);
  }, n * 6);
  using r = boundGate(raw, aLog, dtBias);
  measure({ op: "boundGate", shape, dtype: "bfloat16", mode: "bwd", ...refOf("gate_bwd", gateRef) }, () => {
    using _ = r.backward(dGate);
  }, n * 8);
}

if (OPS.has("conv")) {
  const C = H * D;
  using x = Tensor.randn([B, T, C], { dtype: "bfloat16", device: "cuda", seed: 3 });
  using w = Tensor.randn([C, 4], { device: "cuda", seed: 4, std: 0.5 });
  using dy = Tensor.randn([B, T, C], { dtype: "bfloat16", device: "cuda", seed: 5 });
  const convRef = "fla.modules.conv.causal_conv1d";
  const cs = `B${B}_T${T}_C${C}_W4`;
  measure({
    op: "causalConv1d(silu)",
    shape: cs,
    dtype: "bfloat16",
    mode: "fwd",
    ...refOf("conv_fwd", convRef),
  }, () => {
    using _ = causalConv1d(x, w, { activation: "silu" });
  }, B * T * C * 4);
  using r = causalConv1d(x, w, { activation: "silu" });
  measure({
    op: "causalConv1d(silu)",
    shape: cs,
    dtype: "bfloat16",
    mode: "bwd",
    ...refOf("conv_bwd", convRef),
  }, () => {
    using _ = r.backward(dy);
  }, B * T * C * 6);
}

// FLA's chunk_kda on this H200: ANCHORS.md at B4_T2048_H16_D128, else the live run (--fla) when it timed
// the shape (keys kda_fwd / kda_fwdbwd, or kda_fwd_<shape>).
function kdaShape(B: number, T: number, H: number, D: number): void {
  const shape = `B${B}_T${T}_H${H}_D${D}`;
  const anchor = shape === "B4_T2048_H16_D128";
  const refFwd = fla[`kda_fwd_${shape}`] ?? (anchor ? fla.kda_fwd ?? 0.614 : null);
  const refBwd = fla[`kda_fwdbwd_${shape}`] ?? (anchor ? fla.kda_fwdbwd ?? 2.62 : null);
  const ref = refFwd === null ? "fla.chunk_kda (not timed at this shape)" : "fla.chunk_kda";
  using q = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 6 });
  using k = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 7, std: D ** -0.5 });
  using v = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 8 });
  using raw = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 9 });
  using aLog = Tensor.zeros([H], { device: "cuda" });
  using dtBias = Tensor.zeros([H, D], { device: "cuda" });
  using gate = boundGate(raw, aLog, dtBias);
  using beta = Tensor.rand([B, T, H], { device: "cuda", seed: 10 });
  using dO = Tensor.randn([B, T, H, D], { dtype: "bfloat16", device: "cuda", seed: 11 });
  // The delta rule's count with a per-channel decay: B T H (6 K V + 6 C K + 4 C V), C = 64.
  const flops = B * T * H * (6 * D * D + 6 * 64 * D + 4 * 64 * D);
  const opts = { layout: "bshd" as const };
  measure(
    {
      op: "chunkKda",
      shape,
      dtype: "bfloat16",
      mode: "fwd",
      ref,
      ref_ms: refFwd,
    },
    () => {
      using _ = chunkKda(q, k, v, gate.gate, beta, opts);
    },
    0,
    flops,
  );
  // A backward on the general path (the CPU on host copies) is recorded, not run: minutes at this size.
  if (explain({ op: "linear.kda.bwd", device: "cuda" }).path === "general") {
    push({
      op: "chunkKda",
      shape,
      dtype: "bfloat16",
      mode: "fwdbwd",
      ms: null,
      ref,
      ref_ms: refBwd,
      speedup: null,
      tflops: null,
      gbps: null,
      path: "general",
      note: "the backward takes the general path (the CPU backend on host copies): not timed",
    });
  } else {measure(
      {
        op: "chunkKda",
        shape,
        dtype: "bfloat16",
        mode: "fwdbwd",
        ref: refBwd === null ? "fla.chunk_kda (not timed at this shape)" : "fla.chunk_kda (ANCHORS.md)",
        ref_ms: refBwd,
      },
      () => {
        using r = chunkKda(q, k, v, gate.gate, beta, opts);
        using _ = r.backward(dO);
      },
      0,
      3 * flops,
    );}
}

if (OPS.has("kda")) {
  for (const [b, t, h] of [[4, 2048, 16], [1, 8192, 96], [2, 16384, 16]]) kdaShape(b, t, h, 128);
}
