/**
 * Times forward + backward of `chunkDeltaRule` and `chunkGatedDeltaRule` on CUDA over
 * flash-linear-attention's benchmark shapes (bf16, chunk 64) and prints ms, TFLOP/s, the fraction of
 * the H200 floor and the speedup over FLA's delta-rule forward + backward (../shared/ANCHORS.md; FLA's
 * gated backward does not run on Hopper, so the gated rule is compared with the same figures).
 *
 * - `--check` first runs every fast-path variant (see `--variants`) and the general path on small
 *   shapes and prints the relative RMS difference of every gradient against the general path, and
 *   whether the variant repeats bitwise; variants with context parallelism (CP) also against the
 *   default fast path (`vs default`), on extra cases long enough to have several chunks per segment.
 * - `--stages` times the gated backward of every variant stage by stage (ATTNKIT_LINEAR_BWD_STOP stops
 *   after a stage; a stage's time is the difference of two such runs) with each stage's GB/s against
 *   the bytes it must move (bench/NOTES_linear_bwd.md).
 * - `--variants a,b` picks the variants of those two modes (default: all of VARIANTS below);
 *   `--l2norm` times the stages with the L2 norm of q and k in the kernel.
 *
 * Inputs as FLA's benchmark: q, k = randn / sqrt(D) (unit norm on average; normalised outside the
 * kernel as FLA's script does), v = randn, g = logsigmoid(randn), beta = sigmoid(randn).
 *
 * FLOPs counted per token and value head (C = 64, K = V = D): forward 6D^2 + 10CD + C^2/3 (the
 * products of the chunked forward), backward 16D^2 + 28CD + 4.3C^2 (bench/NOTES_linear_bwd.md).
 *
 * @example
 * ```sh
 * deno run -A build.ts --out /tmp/ak/lib
 * ATTNKIT_LIB=/tmp/ak/lib/libattnkit.so deno run -A bench/linear_bwd_timing.ts --check --stages
 * ATTNKIT_LIB=/tmp/ak/lib/libattnkit.so deno run -A bench/linear_bwd_timing.ts --path general --shapes B8_T1024_H8_D64
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  chunkDeltaRule,
  chunkDeltaRuleBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  cudaAvailable,
  Tensor,
  timeIt,
} from "../mod.ts";

interface Shape {
  name: string;
  B: number;
  T: number;
  H: number;
  D: number;
  /** FLA's chunk_delta_rule forward + backward on the H200, ms (ANCHORS.md), when measured. */
  flaFwdBwdMs?: number;
  /** Timed only when named in --shapes. */
  extra?: boolean;
}

const SHAPES: Shape[] = [
  { name: "B1_T8192_H96_D128", B: 1, T: 8192, H: 96, D: 128, flaFwdBwdMs: 4.524 },
  { name: "B2_T16384_H16_D128", B: 2, T: 16384, H: 16, D: 128, flaFwdBwdMs: 3.018 },
  { name: "B4_T2048_H16_D128", B: 4, T: 2048, H: 16, D: 128 },
  { name: "B4_T4096_H64_D128", B: 4, T: 4096, H: 64, D: 128, flaFwdBwdMs: 5.563 },
  { name: "B8_T2048_H32_D256", B: 8, T: 2048, H: 32, D: 256 },
  { name: "B8_T1024_H8_D64", B: 8, T: 1024, H: 8, D: 64, flaFwdBwdMs: 2.209 },
  // Few long sequences: where context parallelism of the backward's sequential stages (CP) is modelled
  // to win (ATTNKIT_LINEAR_BWD_CP=auto picks 9 segments here).
  { name: "B1_T32768_H8_D128", B: 1, T: 32768, H: 8, D: 128, extra: true },
];

const PEAK_FLOPS = 699e12; // bf16 matrix product on the H200 (ANCHORS.md)
const PEAK_BYTES = 4.252e12; // device copy, bytes read + written
const C = 64;

/** Fast-path variants: ATTNKIT_LINEAR_BWD_* settings (csrc/linear/cuda_bwd_variants.h). */
const VARIANTS: Record<string, Record<string, string>> = {
  // The version measured first: SIMT inverse, 4-warp dstates, one grads block per item.
  "v0": { PREP: "simt", DSTATES: "v1", GRADS: "grid", L2NORM: "kernel" },
  // Then persistent grads blocks; the tensor-core inverse; the 8-warp double-buffered dstates (the
  // round-2 default, tc-d2).
  "v0-persist": { PREP: "simt", DSTATES: "v1", GRADS: "persistent", L2NORM: "kernel" },
  "tc": { PREP: "tc", DSTATES: "v1", GRADS: "persistent", L2NORM: "kernel" },
  "tc-d2": { GRADS: "persistent", L2NORM: "kernel" },
  // Round 3 (the default): grads fetches every tile of the next item as its buffer dies (a second K
  // buffer at D = 128); with the L2 norm, prep normalises q and k itself.
  "r3": {},
  "r3-l2kernel": { L2NORM: "kernel" },
  // Widths of the state slices on top of the default: dstates v2 (DVS) and states (VS).
  "r3-dvs128": { DVS: "128" },
  "r3-dvs64": { DVS: "64" },
  "r3-dvs32": { DVS: "32" },
  "r3-vs32": { VS: "32" },
  "r3-vs16": { VS: "16" },
  // With the L2 norm in the kernel and group 1: the reduce kernel instead of the fused norm backward.
  "r3-reduce": { REDUCE: "separate" },
  // Context parallelism of states and dstates (segments, cuda_bwd_segments.cuh): the cost model's
  // choice (often none), and 4 segments forced.
  "r3-cp-auto": { CP: "auto" },
  "r3-cp4": { CP: "4" },
};
const SWITCHES = ["PREP", "DSTATES", "DVS", "GRADS", "VS", "REDUCE", "L2NORM", "CP", "STOP"];

function setVariant(settings: Record<string, string>) {
  for (const key of SWITCHES) {
    const name = `ATTNKIT_LINEAR_BWD_${key}`;
    if (settings[key] !== undefined) Deno.env.set(name, settings[key]);
    else Deno.env.delete(name);
  }
}

// Bytes each fast-path stage must move per token and value head (bf16, C = 64; NOTES_linear_bwd.md).
// At D = 256 grads is two kernels with fp32 intermediates between them: Xq, Xk (written and read,
// 16 D bytes), dw (written and read, 4 D), dA1, tv (516 bytes).
function stageBytes(D: number): Record<string, number> {
  return {
    prep: 10 * D + 4 * C + 12,
    states: 8 * D + (D * D) / 32 + 4,
    dstates: 10 * D + 2 * C + (D * D) / 32 + 4,
    grads: 18 * D + (D * D) / 16 + 2 * C + 16 + (D > 128 ? 20 * D + 516 : 0),
  };
}

function forwardFlops(s: Shape): number {
  const { D } = s;
  return s.B * s.T * s.H * (6 * D * D + 10 * C * D + (C * C) / 3);
}
function backwardFlops(s: Shape): number {
  const { D } = s;
  return s.B * s.T * s.H * (16 * D * D + 28 * C * D + 4.3 * C * C);
}
// Fewest bytes of forward + backward: q, k, v read by both, o written, dO read, dq, dk, dv written.
function minBytes(s: Shape): number {
  return s.B * s.T * s.H * s.D * 2 * (3 + 1 + 3 + 1 + 3);
}

// Standard normals (Box-Muller over a small LCG), for the [B, T, H] gates.
function normals(n: number, seed: number): Float32Array {
  let state = seed >>> 0;
  const uniform = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(uniform())), a = 2 * Math.PI * uniform();
    out[i] = r * Math.cos(a);
    if (i + 1 < n) out[i + 1] = r * Math.sin(a);
  }
  return out;
}

interface Inputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  g: Tensor;
  beta: Tensor;
  dO: Tensor;
}

function makeInputs(B: number, T: number, H: number, D: number, seed: number, HK = H): Inputs {
  const device = "cuda";
  const dtype = "bfloat16";
  const n = B * T * H;
  const x = {
    q: Tensor.randn([B, T, HK, D], { dtype, device, seed, std: 1 / Math.sqrt(D) }),
    k: Tensor.randn([B, T, HK, D], { dtype, device, seed: seed + 1, std: 1 / Math.sqrt(D) }),
    v: Tensor.randn([B, T, H, D], { dtype, device, seed: seed + 2 }),
    g: Tensor.from(normals(n, seed + 3).map((z) => -Math.log1p(Math.exp(-z))), { shape: [B, T, H], device }),
    beta: Tensor.from(normals(n, seed + 4).map((z) => 1 / (1 + Math.exp(-z))), { shape: [B, T, H], device }),
    dO: Tensor.randn([B, T, H, D], { dtype, device, seed: seed + 5 }),
  };
  return {
    ...x,
    [Symbol.dispose]() {
      for (const t of Object.values(x)) t.dispose();
    },
  };
}

function setPath(path: string) {
  Deno.env.set("ATTNKIT_LINEAR_BWD_PATH", path);
}

function relRms(a: Tensor, b: Tensor): number {
  const x = a.toArray() as unknown as ArrayLike<number>;
  const y = b.toArray() as unknown as ArrayLike<number>;
  let num = 0, den = 0;
  for (let i = 0; i < x.length; i++) {
    const d = Number(x[i]) - Number(y[i]);
    num += d * d;
    den += Number(y[i]) * Number(y[i]);
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

function sameBits(a: Tensor | undefined, b: Tensor | undefined): boolean {
  if (!a || !b) return true;
  const x = a.toArray() as unknown as ArrayLike<number>, y = b.toArray() as unknown as ArrayLike<number>;
  for (let i = 0; i < x.length; i++) if (!Object.is(Number(x[i]), Number(y[i]))) return false;
  return true;
}

const GRADS = ["dq", "dk", "dv", "dbeta", "dg"] as const;

// Every variant and the general path on the same inputs: relative RMS of each variant against the
// general path, per gradient, and whether the variant repeats bitwise.
function check(variants: string[]) {
  console.log("fast variants vs general backward (relative RMS; bf16 intermediates, expect ~1e-3..1e-2):");
  const cases = [
    { B: 2, T: 300, H: 4, HK: 4, D: 64, gated: true, l2: false },
    { B: 1, T: 200, H: 2, HK: 2, D: 128, gated: false, l2: false },
    { B: 2, T: 129, H: 3, HK: 3, D: 128, gated: true, l2: false },
    { B: 1, T: 1000, H: 5, HK: 5, D: 128, gated: true, l2: false },
    { B: 2, T: 200, H: 3, HK: 3, D: 128, gated: true, l2: true },
    { B: 1, T: 300, H: 4, HK: 2, D: 64, gated: true, l2: true },
    // Long sequences, few heads: where the segments of CP matter. Ungated: with these gates (log-sigmoid
    // of a normal) a chunk of 64 tokens decays the state by ~e^-50, so no state crosses a segment.
    { B: 1, T: 4000, H: 2, HK: 2, D: 128, gated: false, l2: false },
    { B: 2, T: 2500, H: 2, HK: 1, D: 64, gated: false, l2: true },
  ];
  for (const c of cases) {
    using x = makeInputs(c.B, c.T, c.H, c.D, 11, c.HK);
    const options = { useQkL2norm: c.l2 };
    const run = (path: string) => {
      setPath(path);
      return c.gated
        ? chunkGatedDeltaRuleBackward(x.q, x.k, x.v, x.g, x.beta, x.dO, options)
        : chunkDeltaRuleBackward(x.q, x.k, x.v, x.beta, x.dO, options);
    };
    setVariant({});
    using general = run("general");
    using fastDefault = run("fast");
    for (const name of variants) {
      setVariant(VARIANTS[name]);
      using fast = run("fast");
      using again = run("fast");
      const parts: string[] = [];
      for (const key of GRADS) {
        const a = fast[key], b = general[key];
        if (a && b) parts.push(`${key} ${relRms(a, b).toExponential(2)}`);
      }
      if (VARIANTS[name].CP !== undefined) {
        const against: string[] = [];
        for (const key of GRADS) {
          const a = fast[key], b = fastDefault[key];
          if (a && b) against.push(`${key} ${relRms(a, b).toExponential(2)}`);
        }
        parts.push(`| vs default: ${against.join("  ")}`);
      }
      const same = GRADS.every((key) => sameBits(fast[key], again[key]));
      console.log(
        `  B${c.B}_T${c.T}_H${c.H}/${c.HK}_D${c.D}${c.l2 ? "_l2" : ""} ${
          c.gated ? "gated" : "delta"
        } ${name}: ` +
          `${parts.join("  ")}  ` +
          `(twice: ${same ? "bitwise identical" : "DIFFERENT"})`,
      );
    }
  }
  setVariant({});
  setPath("auto");
}

// The gated backward of each variant, stage by stage.
function stages(shapes: Shape[], variants: string[], iterations: number, l2: boolean) {
  const order = ["prep", "states", "dstates", "grads", "none"];
  const rows = [
    "| shape | variant | prep ms (GB/s) | states ms (GB/s) | dstates ms (GB/s) | grads ms (GB/s) | rest ms | bwd ms |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  setPath("fast");
  for (const s of shapes) {
    using x = makeInputs(s.B, s.T, s.H, s.D, 1);
    const bytes = stageBytes(s.D);
    const tokens = s.B * s.T * s.H;
    for (const name of variants) {
      const cumulative: number[] = [];
      for (const stop of order) {
        setVariant({ ...VARIANTS[name], STOP: stop });
        const bwd = () =>
          chunkGatedDeltaRuleBackward(x.q, x.k, x.v, x.g, x.beta, x.dO, { useQkL2norm: l2 })
            [Symbol.dispose]();
        cumulative.push(timeIt(bwd, { device: "cuda", warmup: 2, iterations }).medianMs);
      }
      const cell = (i: number, stage: string) => {
        const ms = cumulative[i] - (i > 0 ? cumulative[i - 1] : 0);
        return `${ms.toFixed(3)} (${(bytes[stage] * tokens / (ms * 1e-3) / 1e9).toFixed(0)})`;
      };
      rows.push(
        `| ${s.name} | ${name} | ${cell(0, "prep")} | ${cell(1, "states")} | ${cell(2, "dstates")} | ${
          cell(3, "grads")
        } | ${(cumulative[4] - cumulative[3]).toFixed(3)} | ${cumulative[4].toFixed(3)} |`,
      );
      console.log(rows[rows.length - 1]);
    }
  }
  setVariant({});
  setPath("auto");
  console.log(
    `\nstage times${
      l2 ? " with the L2 norm in the kernel" : ""
    } (prep includes the workspace allocation and the normalised copies; rest: the reduce):\n`,
  );
  console.log(rows.join("\n"));
  console.log("");
}

function main() {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      check: { type: "boolean", default: false },
      stages: { type: "boolean", default: false },
      l2norm: { type: "boolean", default: false },
      variants: { type: "string" },
      path: { type: "string", default: "auto" },
      shapes: { type: "string" },
      iterations: { type: "string", default: "10" },
    },
  });
  if (!cudaAvailable()) {
    console.log("linear_bwd_timing: no CUDA device; nothing to time");
    return;
  }
  const variants = values.variants?.split(",") ?? Object.keys(VARIANTS);
  for (const v of variants) if (!VARIANTS[v]) throw new Error(`--variants: unknown ${v}`);
  const wanted = values.shapes?.split(",");
  const shapes = SHAPES.filter((
    s,
  ) => (wanted ? wanted.includes(s.name) : !s.extra && (s.D !== 256 || values.path !== "auto")));
  const iterations = Number(values.iterations);
  if (values.check) check(variants);
  if (values.stages) stages(shapes, variants, iterations, values.l2norm!);
  setPath(values.path!);
  const rows: string[] = [];
  rows.push(
    "| op | shape | fwd ms | bwd ms | fwd+bwd ms | TFLOP/s | floor ms | of floor | FLA delta fwd+bwd ms | speedup |",
  );
  rows.push("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const s of shapes) {
    using x = makeInputs(s.B, s.T, s.H, s.D, 1);
    for (const gated of [false, true]) {
      const op = gated ? "chunkGatedDeltaRule" : "chunkDeltaRule";
      const fwd = () =>
        gated
          ? chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta)[Symbol.dispose]()
          : chunkDeltaRule(x.q, x.k, x.v, x.beta)[Symbol.dispose]();
      const bwd = () =>
        gated
          ? chunkGatedDeltaRuleBackward(x.q, x.k, x.v, x.g, x.beta, x.dO)[Symbol.dispose]()
          : chunkDeltaRuleBackward(x.q, x.k, x.v, x.beta, x.dO)[Symbol.dispose]();
      const opts = { device: "cuda", warmup: 2, iterations };
      let fwdMs = NaN;
      try {
        fwdMs = timeIt(fwd, opts).medianMs;
      } catch (e) {
        console.log(`${op} ${s.name} forward: ${(e as Error).message.split("\n")[0]}`);
      }
      const bwdMs = timeIt(bwd, opts).medianMs;
      const bothMs = Number.isNaN(fwdMs) ? NaN : timeIt(() => {
        fwd();
        bwd();
      }, opts).medianMs;
      const flops = forwardFlops(s) + backwardFlops(s);
      const floorMs = 1e3 * Math.max(flops / PEAK_FLOPS, minBytes(s) / PEAK_BYTES);
      const fla = s.flaFwdBwdMs;
      rows.push(
        `| ${op} | ${s.name} | ${fwdMs.toFixed(3)} | ${bwdMs.toFixed(3)} | ${bothMs.toFixed(3)} | ${
          (flops / (bothMs * 1e-3) / 1e12).toFixed(1)
        } | ${floorMs.toFixed(3)} | ${(floorMs / bothMs).toFixed(2)} | ${fla ?? "-"} | ${
          fla ? (fla / bothMs).toFixed(2) + "x" : "-"
        } |`,
      );
      console.log(rows[rows.length - 1]);
    }
  }
  console.log(`\nbackward path: ${values.path}\n`);
  console.log(rows.join("\n"));
}

main();
