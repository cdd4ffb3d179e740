/**
 * Benchmark of the gated linear family and feature-map linear attention on flash-linear-attention's
 * (FLA) benchmark shapes (ANCHORS.md), bf16, against FLA's times on this H200 recorded in ANCHORS.md
 * (`ref` ends in "(ANCHORS.md)"): FLA autotunes 30-80 s per op on its first call, so its live times do
 * not fit one GPU call beside ours. Inputs as FLA's benchmarks draw them: bf16 `randn` q, k, v, gates
 * `logsigmoid(randn)` in float32 (GLA's clamped at -5). Times: CUDA events, median of 20 calls after 3
 * warm-up calls, the L2 flushed before each call. Each row records the path the planner took.
 *
 * FLOPs of the chunked forward per token and value head (chunk C = 64, each product counted in full):
 * scores 2CK, inter-chunk output 2KV, intra-chunk output 2CV, state update 2KV, i.e.
 * B T H (4 K V + 2 C K + 2 C V); forward + backward counts 3x the forward. Bytes: q, k, v, o once
 * (2 bytes) and GLA's float32 gate. Decode: GB/s of the fp32 state read and written once.
 *
 * @example
 * ```sh
 * deno run -A bench/gla_side_by_side.ts --results $OUT --ops gla,simple,retention,linear,feature,decode
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  chunkGla,
  chunkLinearAttn,
  chunkRetention,
  chunkSimpleGla,
  explain,
  featureMapLinearAttention,
  GLADecodeFwdOp,
  lastPlan,
  Tensor,
} from "../mod.ts";
import { type BenchRecord, cudaGpu, errorNote, FlushedTimer, saveRecords } from "./records.ts";

/** One result row. */
export interface GlaRecord extends BenchRecord {
  mode: "fwd" | "fwdbwd" | "decode";
}

const SHAPES: [number, number, number, number][] = [
  [1, 8192, 96, 128],
  [2, 16384, 16, 128],
  [4, 2048, 16, 128],
  [4, 4096, 64, 128],
  [8, 2048, 32, 256],
  [8, 1024, 8, 64],
];
const C = 64;

/**
 * FLA on this H200: ANCHORS.md (2026-11-29), and where marked "(FLA 0.5.2 run)" FLA's own times from
 * bench/fla_gla.py on 2026-12-04 (bench/results/fla/2026-12-04_*.json). ANCHORS.md's chunk_linear_attn
 * is its default call, normalize=True; the plain linear attention is compared with normalize=False.
 */
const ANCHOR: Record<string, Record<string, { fwd?: number; fwdbwd?: number; name: string }>> = {
  gla: {
    B4_T2048_H16_D128: { fwd: 0.821, fwdbwd: 2.179, name: "fla.chunk_gla" },
    B1_T8192_H96_D128: { fwd: 2.047, fwdbwd: 8.835, name: "fla.chunk_gla (FLA 0.5.2 run)" },
    B2_T16384_H16_D128: { fwd: 1.563, fwdbwd: 6.505, name: "fla.chunk_gla (FLA 0.5.2 run)" },
    B4_T4096_H64_D128: { fwd: 2.684, fwdbwd: 11.653, name: "fla.chunk_gla (FLA 0.5.2 run)" },
  },
  simple: { B4_T4096_H64_D128: { fwd: 0.848, name: "fla.chunk_simple_gla" } },
  retention: { B4_T4096_H64_D128: { fwd: 1.186, fwdbwd: 3.833, name: "fla.chunk_retention" } },
  linear: {
    B4_T4096_H64_D128: {
      fwd: 0.732,
      fwdbwd: 3.375,
      name: "fla.chunk_linear_attn(normalize=False) (FLA 0.5.2 run)",
    },
  },
  linear_normalized: {
    B4_T4096_H64_D128: { fwd: 1.739, fwdbwd: 6.439, name: "fla.chunk_linear_attn(normalize=True)" },
  },
  feature: {
    B4_T4096_H64_D128: { fwd: 1.739, fwdbwd: 6.439, name: "fla.chunk_linear_attn (feature map outside)" },
  },
};

function shapeName(b: number, t: number, h: number, d: number): string {
  return `B${b}_T${t}_H${h}_D${d}`;
}

function forwardFlops(b: number, t: number, h: number, k: number, v: number): number {
  return b * t * h * (4 * k * v + 2 * C * k + 2 * C * v);
}

const { values: args } = scriptArgs({
  options: {
    results: { type: "string", default: "bench/results" },
    ops: { type: "string", default: "gla,simple,retention,linear,feature,decode" },
    only: { type: "string", default: "" },
    iterations: { type: "string", default: "20" },
  },
});
const OPS = new Set(args.ops!.split(","));
const ITER = numberOption("--iterations", args.iterations);
const gpu = cudaGpu("gla_side_by_side");
const records: GlaRecord[] = [];
using timer = new FlushedTimer(ITER);
const save = () =>
  saveRecords(args.results!, "gla", "Gated linear family and feature-map linear attention", gpu, records);
const time = (fn: () => void) => timer.time(fn);

function gate(shape: number[], clamp: boolean): Tensor {
  using x = Tensor.randn(shape, { dtype: "float32", device: "cuda" });
  using s = x.sigmoid();
  if (!clamp) return s.log();
  using l = s.log();
  return l.maximum(-5);
}

type Runner = (dO: Tensor) => { output: Tensor; backward: (dO: Tensor) => Disposable } & Disposable;

function record(
  op: string,
  key: string,
  name: string,
  b: number,
  t: number,
  h: number,
  d: number,
  run: Runner,
  /** The path when the op records no plan of its own (lastPlan would name an earlier op's). */
  fixedPath?: string,
  modes: readonly ("fwd" | "fwdbwd")[] = ["fwd", "fwdbwd"],
) {
  const shape = shapeName(b, t, h, d);
  const anchor = ANCHOR[key]?.[shape];
  const flops = forwardFlops(b, t, h, d, d);
  using dO = Tensor.randn([b, t, h, d], { dtype: "bfloat16", device: "cuda" });
  let path = "?";
  for (const mode of modes) {
    const ref = anchor?.[mode] ?? null;
    const rec: GlaRecord = {
      op,
      shape,
      dtype: "bfloat16",
      mode,
      ms: null,
      ref: anchor?.name.endsWith(" run)") ? anchor.name : `${anchor?.name ?? name} (ANCHORS.md)`,
      ref_ms: ref,
      speedup: null,
      tflops: null,
      gbps: null,
      path,
    };
    try {
      if (mode === "fwd") {
        {
          using _r = run(dO);
        }
        path = fixedPath ?? lastPlan()?.path ?? "?";
        rec.path = path;
        rec.ms = time(() => {
          using _ = run(dO);
        });
      } else {
        const bwd = explain({ op: "linear.gla.bwd", device: "cuda", dtype: "bfloat16", k: d, v: d });
        if (bwd.path !== "chunked") {
          rec.note = `backward on the general path (${bwd.details.why}): not timed`;
          records.push(rec);
          save();
          continue;
        }
        rec.ms = time(() => {
          using res = run(dO);
          using _g = res.backward(dO);
        });
        rec.path = fixedPath ?? `${path}, bwd ${lastPlan()?.path ?? "?"}`;
      }
      rec.tflops = (mode === "fwd" ? flops : 3 * flops) / (rec.ms * 1e-3) / 1e12;
      if (ref !== null) rec.speedup = ref / rec.ms;
    } catch (e) {
      rec.note = errorNote(e);
    }
    records.push(rec);
    console.log(JSON.stringify(rec));
    save();
  }
}

for (const [b, t, h, d] of SHAPES) {
  const shape = shapeName(b, t, h, d);
  if (args.only && !args.only.split(",").some((s) => shape.includes(s))) continue;
  using q = Tensor.randn([b, t, h, d], { dtype: "bfloat16", device: "cuda" });
  using k = Tensor.randn([b, t, h, d], { dtype: "bfloat16", device: "cuda" });
  using v = Tensor.randn([b, t, h, d], { dtype: "bfloat16", device: "cuda" });
  const layout = "bshd" as const;
  if (OPS.has("gla")) {
    using gk = gate([b, t, h, d], true);
    record("chunkGla", "gla", "fla.chunk_gla", b, t, h, d, () => chunkGla(q, k, v, gk, { layout }));
  }
  const big = shape === "B4_T4096_H64_D128" || shape === "B8_T1024_H8_D64";
  if (OPS.has("simple") && big) {
    using g = gate([b, t, h], false);
    record(
      "chunkSimpleGla",
      "simple",
      "fla.chunk_simple_gla",
      b,
      t,
      h,
      d,
      () => chunkSimpleGla(q, k, v, { layout, g }),
    );
  }
  if (OPS.has("retention") && big) {
    record(
      "chunkRetention",
      "retention",
      "fla.chunk_retention",
      b,
      t,
      h,
      d,
      () => chunkRetention(q, k, v, { layout }),
    );
  }
  if (OPS.has("linear") && big) {
    record(
      "chunkLinearAttn",
      "linear",
      "fla.chunk_linear_attn",
      b,
      t,
      h,
      d,
      () => chunkLinearAttn(q, k, v, { layout }),
    );
    record(
      "chunkLinearAttn(normalize)",
      "linear_normalized",
      "fla.chunk_linear_attn(normalize=True)",
      b,
      t,
      h,
      d,
      () => chunkLinearAttn(q, k, v, { layout, normalize: true }),
    );
  }
  if (OPS.has("feature") && big) {
    for (const isCausal of [true, false]) {
      record(
        `featureMapLinearAttention(elu+1, ${isCausal ? "causal" : "bidirectional"})`,
        "feature",
        "fla.chunk_linear_attn",
        b,
        t,
        h,
        d,
        () => featureMapLinearAttention(q, k, v, { layout, phi: "elu+1", isCausal }),
        isCausal ? undefined : "fmap.bidirectional (fused forward and backward)",
      );
    }
  }
}

if (OPS.has("decode")) {
  const [B, H, D] = [256, 32, 128];
  using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device: "cuda" });
  using k = Tensor.randn([B, H, D], { dtype: "bfloat16", device: "cuda" });
  using v = Tensor.randn([B, H, D], { dtype: "bfloat16", device: "cuda" });
  using gk = gate([B, H, D], true);
  using state = Tensor.randn([B, H, D, D], { dtype: "float32", device: "cuda" });
  const op = new GLADecodeFwdOp({ inPlace: true });
  const rec: GlaRecord = {
    op: "GLADecodeFwdOp",
    shape: `B${B}_T1_H${H}_D${D}`,
    dtype: "bfloat16",
    mode: "decode",
    ms: null,
    ref: "copy ceiling of the state (H200.md)",
    ref_ms: null,
    speedup: null,
    tflops: null,
    gbps: null,
    path: "simt",
  };
  try {
    rec.ms = time(() => {
      const r = op.forward(q, k, v, gk, state);
      r.output.dispose();
      if (r.newState !== state) r.newState.dispose();
    });
    rec.gbps = (2 * B * H * D * D * 4) / (rec.ms * 1e-3) / 1e9;
  } catch (e) {
    rec.note = errorNote(e);
  }
  records.push(rec);
  console.log(JSON.stringify(rec));
  save();
}
