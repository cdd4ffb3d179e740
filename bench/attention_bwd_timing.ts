/**
 * Times the CUDA attention backward, alone and as forward + backward, on the shapes of ANCHORS.md
 * (bf16), for each backward path: every Hopper kernel (`ATTNKIT_ATTN_BWD_PATH=sm90` with
 * `ATTNKIT_ATTN_BWD_KERNEL=v1` / `v1r` / `v2` / `v2p` / `v2l`; the v2 family serves head dim 64
 * only, so it is skipped elsewhere), the
 * general path (`=general`) and the general path in the deterministic order. Prints ms, TFLOP/s
 * (FlashAttention's convention: forward `4 B Hq Sq Skv D`, halved when causal; backward 2.5x that;
 * forward + backward 3.5x) and the ratio to PyTorch SDPA's figures on the H200 (FlashAttention-2 and
 * cuDNN, from ANCHORS.md). Before timing, each path's gradients (NaN-poisoned buffers) are checked for
 * NaN and compared with the first path's (the general path by default): a path that disagrees is
 * reported, not timed silently. `--small` only checks, on small odd shapes; `--check` only checks, on
 * the timing shapes (one launch per path, for a profiler).
 *
 * Each timed call follows a 256 MB write that evicts the L2, as `triton.testing.do_bench` does.
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_bwd_timing.ts --json $OUT/attention_bwd.json
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_bwd_timing.ts --paths sm90-v1,sm90-v2 --only D64
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { attention, attentionBackward, compare, cudaAvailable, deviceInfo, Tensor, timeIt } from "../mod.ts";

/** A benchmark shape with PyTorch SDPA's TFLOP/s on the H200 ([forward, backward], ANCHORS.md). */
export interface BwdShape {
  /** Name as the side-by-side records spell it. */
  name: string;
  batch: number;
  seq: number;
  heads: number;
  headsKv: number;
  dim: number;
  causal: boolean;
  flash2: [number, number];
  cudnn: [number, number];
}

/** The softmax-attention shapes of ANCHORS.md. */
export const SHAPES: BwdShape[] = [
  {
    name: "B4_S4096_H32_KV32_D128_causal",
    batch: 4,
    seq: 4096,
    heads: 32,
    headsKv: 32,
    dim: 128,
    causal: true,
    flash2: [313, 268],
    cudnn: [574, 461],
  },
  {
    name: "B4_S4096_H32_KV32_D128",
    batch: 4,
    seq: 4096,
    heads: 32,
    headsKv: 32,
    dim: 128,
    causal: false,
    flash2: [346, 294],
    cudnn: [598, 520],
  },
  {
    name: "B4_S4096_H32_KV8_D128_causal",
    batch: 4,
    seq: 4096,
    heads: 32,
    headsKv: 8,
    dim: 128,
    causal: true,
    flash2: [317, 258],
    cudnn: [553, 450],
  },
  {
    name: "B8_S2048_H16_KV16_D64_causal",
    batch: 8,
    seq: 2048,
    heads: 16,
    headsKv: 16,
    dim: 64,
    causal: true,
    flash2: [242, 192],
    cudnn: [371, 316],
  },
];

/**
 * Small odd shapes (tile edges, GQA, both dtypes) for a quick cross-check of the paths, e.g. under
 * compute-sanitizer (`--small`: checked, not timed; no SDPA figures).
 */
export const SMALL_SHAPES: BwdShape[] = [
  { name: "B2_S300_H4_KV2_D128_causal", batch: 2, seq: 300, heads: 4, headsKv: 2, dim: 128, causal: true },
  { name: "B1_S257_H2_KV2_D64", batch: 1, seq: 257, heads: 2, headsKv: 2, dim: 64, causal: false },
  { name: "B1_S130_H8_KV1_D64_causal", batch: 1, seq: 130, heads: 8, headsKv: 1, dim: 64, causal: true },
  { name: "B2_S1000_H4_KV2_D64_causal", batch: 2, seq: 1000, heads: 4, headsKv: 2, dim: 64, causal: true },
].map((s) => ({ ...s, flash2: [1, 1] as [number, number], cudnn: [1, 1] as [number, number] }));

/**
 * A backward path as selected through `ATTNKIT_ATTN_BWD_PATH` and `ATTNKIT_ATTN_BWD_KERNEL` (`sm90`:
 * the default Hopper kernel), plus the deterministic order.
 */
export type BwdPath =
  | "sm90"
  | "sm90-v1"
  | "sm90-v1r"
  | "sm90-v2"
  | "sm90-v2p"
  | "sm90-v2l"
  | "general"
  | "deterministic";

/** Whether a path serves a head dim (the v2 family is built for 64 only; the others take every head dim). */
export function pathServes(path: BwdPath, dim: number): boolean {
  return !path.startsWith("sm90-v2") || dim === 64;
}

/** One timed row. */
export interface BwdRow {
  shape: string;
  path: BwdPath;
  mode: "bwd" | "fwdbwd";
  ms: number;
  tflops: number;
  /** Our TFLOP/s over SDPA FlashAttention-2's. */
  vsFlash2: number;
  /** Our TFLOP/s over SDPA cuDNN's. */
  vsCudnn: number;
  /** Largest |difference| of dq, dk, dv from the first path's, over that path's largest |value|. */
  relDiffToFirst: number | null;
}

/** FlashAttention's FLOP count of the forward. */
export function forwardFlops(s: BwdShape): number {
  return 4 * s.batch * s.heads * s.seq * s.seq * s.dim / (s.causal ? 2 : 1);
}

// TFLOP/s of SDPA's forward + backward from its separate forward and backward rates.
function referenceFwdBwdTflops(s: BwdShape, rates: [number, number]): number {
  const f = forwardFlops(s);
  const seconds = f / (rates[0] * 1e12) + 2.5 * f / (rates[1] * 1e12);
  return 3.5 * f / seconds / 1e12;
}

function setPath(path: BwdPath): void {
  const hopper = path.startsWith("sm90");
  Deno.env.set("ATTNKIT_ATTN_BWD_PATH", hopper ? "sm90" : "general");
  const kernel = path.startsWith("sm90-") ? path.slice(5) : "auto";
  Deno.env.set("ATTNKIT_ATTN_BWD_KERNEL", kernel);
}

// Largest |value| and NaN count of a tensor.
function magnitude(t: Tensor): { maxAbs: number; nanCount: number } {
  using zeros = Tensor.zeros(t.shape, { dtype: t.dtype, device: t.device });
  const c = compare(t, zeros);
  return { maxAbs: c.maxAbs, nanCount: c.nanCount };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      paths: { type: "string", default: "general,sm90-v1,sm90-v1r,sm90-v2,sm90-v2p,sm90-v2l,deterministic" },
      only: { type: "string" },
      iterations: { type: "string", default: "20" },
      json: { type: "string" },
      small: { type: "boolean", default: false },
      check: { type: "boolean", default: false },
    },
  });
  if (!cudaAvailable()) {
    console.error("attention_bwd_timing: no CUDA device");
    Deno.exit(1);
  }
  const paths = values.paths!.split(",").map((p) => p.trim()) as BwdPath[];
  const iterations = Number(values.iterations);
  const device = "cuda";
  const gpu = deviceInfo(device).name;
  using flush = Tensor.empty([64 << 20], { dtype: "float32", device });
  const before = () => void flush.fill(0);
  const rows: BwdRow[] = [];
  const problems: string[] = [];
  // Reported as found too, so a run cut short (a hanging kernel under `timeout`) still shows them.
  const problem = (line: string) => {
    problems.push(line);
    console.error(`PROBLEM ${line}`);
  };

  const small = values.small!;
  const checkOnly = small || values.check!; // one checked call per path, nothing timed (e.g. under ncu)
  for (const s of small ? SMALL_SHAPES : SHAPES) {
    if (values.only && !s.name.includes(values.only)) continue;
    const dtype = "bfloat16";
    using q = Tensor.randn([s.batch, s.seq, s.heads, s.dim], { dtype, device, seed: 11 });
    using k = Tensor.randn([s.batch, s.seq, s.headsKv, s.dim], { dtype, device, seed: 12 });
    using v = Tensor.randn([s.batch, s.seq, s.headsKv, s.dim], { dtype, device, seed: 13 });
    using dO = Tensor.randn(q.shape, { dtype, device, seed: 14 });
    using output = Tensor.empty(q.shape, { dtype, device });
    using lse = Tensor.empty([s.batch, s.heads, s.seq], { dtype: "float32", device });
    attention(q, k, v, { isCausal: s.causal, out: { output, lse } });
    const flops = forwardFlops(s);
    let first: { dq: Tensor; dk: Tensor; dv: Tensor; scale: number } | null = null;
    const kept: Tensor[] = [];
    try {
      for (const path of paths) {
        if (!pathServes(path, s.dim)) continue;
        setPath(path);
        const options = { isCausal: s.causal, deterministic: path === "deterministic" };
        const dq = Tensor.empty(q.shape, { dtype, device }).fill(NaN);
        const dk = Tensor.empty(k.shape, { dtype, device }).fill(NaN);
        const dv = Tensor.empty(k.shape, { dtype, device }).fill(NaN);
        kept.push(dq, dk, dv);
        const out = { dq, dk, dv };
        try {
          attentionBackward(q, k, v, output, dO, lse, { ...options, out });
        } catch (e) {
          problem(`${s.name} ${path}: ${e instanceof Error ? e.message.split("\n")[0] : e}`);
          continue;
        }
        let rel: number | null = null;
        if (first === null) {
          let scale = 0;
          for (const [name, t] of [["dq", dq], ["dk", dk], ["dv", dv]] as const) {
            const m = magnitude(t);
            if (m.nanCount > 0) problem(`${s.name} ${path}: ${name} has ${m.nanCount} NaN`);
            scale = Math.max(scale, m.maxAbs);
          }
          first = { dq, dk, dv, scale };
        } else {
          const diffs = [compare(dq, first.dq), compare(dk, first.dk), compare(dv, first.dv)];
          for (const c of diffs) {
            if (c.nanCount > 0) problem(`${s.name} ${path}: ${c.nanCount} NaN in its gradients`);
          }
          rel = Math.max(...diffs.map((c) => c.maxAbs)) / Math.max(first.scale, 1e-30);
          // bf16 gradients from two fp32 accumulation orders: a few units of 2^-8 at the top value.
          if (!(rel <= 3 * 2 ** -8)) problem(`${s.name} ${path}: differs from ${paths[0]} by ${rel}`);
        }
        if (checkOnly) continue;
        const bwd = timeIt(() => attentionBackward(q, k, v, output, dO, lse, { ...options, out }), {
          device,
          warmup: 3,
          iterations,
          before,
        }).medianMs;
        using o2 = Tensor.empty(q.shape, { dtype, device });
        using lse2 = Tensor.empty(lse.shape, { dtype: "float32", device });
        const fwdbwd = timeIt(() => {
          attention(q, k, v, { isCausal: s.causal, out: { output: o2, lse: lse2 } });
          attentionBackward(q, k, v, o2, dO, lse2, { ...options, out });
        }, { device, warmup: 3, iterations, before }).medianMs;
        for (const [mode, ms, factor] of [["bwd", bwd, 2.5], ["fwdbwd", fwdbwd, 3.5]] as const) {
          const tflops = factor * flops / ms / 1e9;
          const ref2 = mode === "bwd" ? s.flash2[1] : referenceFwdBwdTflops(s, s.flash2);
          const refC = mode === "bwd" ? s.cudnn[1] : referenceFwdBwdTflops(s, s.cudnn);
          rows.push({
            shape: s.name,
            path,
            mode,
            ms,
            tflops,
            vsFlash2: tflops / ref2,
            vsCudnn: tflops / refC,
            relDiffToFirst: rel,
          });
          // As it goes too, for the same reason as problem().
          console.error(`${s.name} ${path} ${mode}: ${ms.toFixed(3)} ms, ${tflops.toFixed(0)} TFLOP/s`);
        }
      }
    } finally {
      for (const t of kept) t.dispose();
      Deno.env.delete("ATTNKIT_ATTN_BWD_PATH");
      Deno.env.delete("ATTNKIT_ATTN_BWD_KERNEL");
    }
  }

  const lines = [
    `# Attention backward on ${gpu} (bf16; SDPA figures from ANCHORS.md)`,
    "",
    "| shape | path | mode | ms | TFLOP/s | x FA2 | x cuDNN | rel. diff to first path |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.shape} | ${r.path} | ${r.mode} | ${r.ms.toFixed(3)} | ${r.tflops.toFixed(0)} | ${
        r.vsFlash2.toFixed(2)
      } | ${r.vsCudnn.toFixed(2)} | ${r.relDiffToFirst === null ? "-" : r.relDiffToFirst.toExponential(2)} |`
    ),
    "",
    problems.length === 0 ? "no problems" : `PROBLEMS:\n${problems.map((p) => `- ${p}`).join("\n")}`,
  ];
  console.log(lines.join("\n"));
  if (values.json) {
    await Deno.writeTextFile(values.json, JSON.stringify({ gpu, rows, problems }, null, 2) + "\n");
  }
  if (problems.length > 0) Deno.exit(1);
}
