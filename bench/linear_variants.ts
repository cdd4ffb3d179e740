/**
 * Times the stage-2 variants of the fast CUDA delta-rule forward in one GPU call, after checking each
 * against the general path: every variant runs on small shapes that break kernels (varlen with empty
 * and short sequences, tails, grouped heads, in-kernel L2 norm, initial state, chunk states, D = 128
 * and 256, bf16 and f16) and must match the general path within 0.005 relative RMS (bf16/f16, the
 * tests' rule) with no NaN and a bit-identical second run; then the six benchmark shapes are timed
 * per variant (median ms, stage 1 alone once per shape). Variants are picked through the
 * environment read by csrc/linear/cuda_dispatch.cu: `ATTNKIT_LINEAR_STATE_VARIANT=mma|wgmma|split`,
 * `ATTNKIT_LINEAR_STATE_BV=32|64|128`, `ATTNKIT_LINEAR_SM90_E=regs`, `ATTNKIT_LINEAR_CP=auto|P` (context-
 * parallel stage 2); a variant that does not exist for a head dim falls back to the automatic choice
 * (the table marks those cells with `*`). Each timing also prints the stage-2 microseconds per chunk
 * of a sequence (the dependent steps of the plain recurrence); `--profile` then runs the wgmma and
 * split variants once per shape with `ATTNKIT_LINEAR_STEP_PROFILE=1`, whose per-phase cycle counts
 * the library prints to stderr. `--variants a,b` times only the named variants.
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_variants.ts --json /tmp/variants.json
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_variants.ts --check-only
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_variants.ts --variants "wgmma bv128,split bv64" --profile
 * deno run -A bench/linear_variants.ts --device cpu --shapes 0   # the script's plumbing, no GPU
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { cudaAvailable, deviceInfo, Tensor, timeIt } from "../mod.ts";
import { deltaForward, type DeltaSettings, type ForwardOutputs } from "../ops/linear/delta_native.ts";

/** One stage-2 configuration: the environment it sets and, per head dim, whether it exists. */
interface Variant {
  name: string;
  env: Record<string, string>;
  /** Head dims the variant really runs at (elsewhere the dispatcher falls back to auto). */
  dims: number[];
}

const VARIANTS: Variant[] = [
  { name: "mma", env: { ATTNKIT_LINEAR_STATE_VARIANT: "mma" }, dims: [64, 128, 256] },
  {
    name: "mma bv32",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "mma", ATTNKIT_LINEAR_STATE_BV: "32" },
    dims: [64, 128, 256],
  },
  {
    name: "mma bv64",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "mma", ATTNKIT_LINEAR_STATE_BV: "64" },
    dims: [64, 128, 256],
  },
  {
    name: "mma bv128",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "mma", ATTNKIT_LINEAR_STATE_BV: "128" },
    dims: [128],
  },
  {
    name: "wgmma bv64",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "wgmma", ATTNKIT_LINEAR_STATE_BV: "64" },
    dims: [128, 256],
  },
  {
    name: "wgmma bv128",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "wgmma", ATTNKIT_LINEAR_STATE_BV: "128" },
    dims: [128],
  },
  // (e) with K^T from registers instead of an M-major shared operand (D = 128 only).
  {
    name: "wgmma bv64 e-regs",
    env: {
      ATTNKIT_LINEAR_STATE_VARIANT: "wgmma",
      ATTNKIT_LINEAR_STATE_BV: "64",
      ATTNKIT_LINEAR_SM90_E: "regs",
    },
    dims: [128],
  },
  {
    name: "wgmma bv128 e-regs",
    env: {
      ATTNKIT_LINEAR_STATE_VARIANT: "wgmma",
      ATTNKIT_LINEAR_STATE_BV: "128",
      ATTNKIT_LINEAR_SM90_E: "regs",
    },
    dims: [128],
  },
  { name: "auto", env: {}, dims: [64, 128, 256] },
  // Round 4. Last: a fault in a new kernel leaves a sticky error, so the older variants run first.
  {
    name: "wgmma cp auto",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "wgmma", ATTNKIT_LINEAR_CP: "auto" },
    dims: [128, 256],
  },
  {
    name: "wgmma cp3",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "wgmma", ATTNKIT_LINEAR_CP: "3" },
    dims: [128, 256],
  },
  {
    name: "split bv64",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "split", ATTNKIT_LINEAR_STATE_BV: "64" },
    dims: [128],
  },
  {
    name: "split bv128",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "split", ATTNKIT_LINEAR_STATE_BV: "128" },
    dims: [128],
  },
  { name: "split", env: { ATTNKIT_LINEAR_STATE_VARIANT: "split" }, dims: [128] },
  // Round 5: loads with cp.async instead of TMA (the default on fixed-length calls).
  {
    name: "split bv64 cp.async",
    env: {
      ATTNKIT_LINEAR_STATE_VARIANT: "split",
      ATTNKIT_LINEAR_STATE_BV: "64",
      ATTNKIT_LINEAR_SPLIT_TMA: "0",
    },
    dims: [128],
  },
  // Round 5: one output warpgroup at VT 64 (the default has two, one per chunk parity).
  {
    name: "split bv64 out1",
    env: {
      ATTNKIT_LINEAR_STATE_VARIANT: "split",
      ATTNKIT_LINEAR_STATE_BV: "64",
      ATTNKIT_LINEAR_SPLIT_OUTPUTS: "1",
    },
    dims: [128],
  },
  {
    name: "split cp auto",
    env: { ATTNKIT_LINEAR_STATE_VARIANT: "split", ATTNKIT_LINEAR_CP: "auto" },
    dims: [128],
  },
  { name: "split cp4", env: { ATTNKIT_LINEAR_STATE_VARIANT: "split", ATTNKIT_LINEAR_CP: "4" }, dims: [128] },
];
// The variants --profile runs (the kernels that record the step profile).
const PROFILED = [
  "wgmma bv64",
  "wgmma bv128",
  "split bv64",
  "split bv128",
  "wgmma cp auto",
  "split cp auto",
  "split bv64 out1",
];

// "cpu" checks this script's plumbing on a machine without a GPU (every "variant" then runs on the CPU).
let DEVICE = "cuda";

const ENV_KEYS = [
  "ATTNKIT_LINEAR_STATE_VARIANT",
  "ATTNKIT_LINEAR_STATE_BV",
  "ATTNKIT_LINEAR_SM90_E",
  "ATTNKIT_LINEAR_PATH",
  "ATTNKIT_LINEAR_CP",
  "ATTNKIT_LINEAR_STEP_PROFILE",
  "ATTNKIT_LINEAR_SPLIT_OUTPUTS",
  "ATTNKIT_LINEAR_SPLIT_TMA",
];

// A variant that names an explicit kernel runs without context parallelism unless it asks for it (the
// library's default is CP auto since 2026-11-30); "auto" keeps the library's defaults.
function setEnv(env: Record<string, string>) {
  for (const k of ENV_KEYS) Deno.env.delete(k);
  if (env.ATTNKIT_LINEAR_STATE_VARIANT && !env.ATTNKIT_LINEAR_CP) Deno.env.set("ATTNKIT_LINEAR_CP", "off");
  for (const [k, v] of Object.entries(env)) Deno.env.set(k, v);
}

interface Shape {
  name: string;
  dtype: "bfloat16" | "float16";
  B: number;
  T: number;
  H: number;
  HK?: number;
  D: number;
  l2norm: boolean;
  cuSeqlens?: number[];
  initialState: boolean;
  chunkStates?: boolean;
}

const CHECKS: Shape[] = [
  {
    name: "bf16 D128 varlen 0/1/63/65/172 GQA l2 h0",
    dtype: "bfloat16",
    B: 1,
    T: 320,
    H: 4,
    HK: 2,
    D: 128,
    l2norm: true,
    cuSeqlens: [0, 1, 1, 64, 129, 301],
    initialState: true,
  },
  {
    name: "f16 D128 T=200 chunk states",
    dtype: "float16",
    B: 2,
    T: 200,
    H: 3,
    D: 128,
    l2norm: false,
    initialState: true,
    chunkStates: true,
  },
  // Long enough for several chunks per segment when a variant splits sequences (ATTNKIT_LINEAR_CP).
  {
    name: "bf16 D128 T=1100 l2 h0",
    dtype: "bfloat16",
    B: 2,
    T: 1100,
    H: 2,
    D: 128,
    l2norm: true,
    initialState: true,
  },
  {
    name: "bf16 D256 T=150 l2 h0",
    dtype: "bfloat16",
    B: 2,
    T: 150,
    H: 2,
    D: 256,
    l2norm: true,
    initialState: true,
  },
];

const BENCH: [number, number, number, number][] = [
  [1, 8192, 96, 128],
  [2, 16384, 16, 128],
  [4, 2048, 16, 128],
  [4, 4096, 64, 128],
  [8, 2048, 32, 256],
  [8, 1024, 8, 64],
];
// FLA's chunk_gated_delta_rule forward on this H200 (ANCHORS.md), ms.
const FLA_GDN: Record<string, number> = {
  B1_T8192_H96_D128: 1.403,
  B2_T16384_H16_D128: 0.949,
  B4_T4096_H64_D128: 1.714,
  B8_T2048_H32_D256: 2.104,
  B8_T1024_H8_D64: 0.468,
};

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  g: Tensor;
  beta: Tensor;
  h0?: Tensor;
  cu?: Tensor;
}

function makeInputs(s: Shape): Inputs {
  const HK = s.HK ?? s.H, device = DEVICE, dtype = s.dtype;
  const N = s.cuSeqlens ? s.cuSeqlens.length - 1 : s.B;
  const keyStd = s.l2norm ? 1 : s.D ** -0.5;
  return {
    q: Tensor.randn([s.B, s.T, HK, s.D], { dtype, device }),
    k: Tensor.randn([s.B, s.T, HK, s.D], { dtype, device, std: keyStd }),
    v: Tensor.randn([s.B, s.T, s.H, s.D], { dtype, device }),
    g: Tensor.rand([s.B, s.T, s.H], { low: -0.25, high: 0, device }),
    beta: Tensor.rand([s.B, s.T, s.H], { device }),
    h0: s.initialState ? Tensor.randn([N, s.H, s.D, s.D], { device, std: 0.5 }) : undefined,
    cu: s.cuSeqlens ? Tensor.from(new Int32Array(s.cuSeqlens), { device }) : undefined,
  };
}

function dispose(x: Inputs) {
  for (const t of [x.q, x.k, x.v, x.g, x.beta, x.h0, x.cu]) t?.dispose();
}

function forward(s: Shape, x: Inputs): ForwardOutputs {
  const settings: DeltaSettings = {
    layout: "bthd",
    gated: true,
    chunkSize: 64,
    recurrent: false,
    l2norm: s.l2norm,
    initialState: x.h0,
    cuSeqlens: x.cu,
  };
  return deltaForward("variants", { q: x.q, k: x.k, v: x.v, g: x.g, beta: x.beta }, settings, {
    finalState: true,
    chunkStates: s.chunkStates,
  });
}

function host(o: ForwardOutputs): Record<string, Float32Array> {
  const out: Record<string, Float32Array> = {};
  for (const [k, t] of Object.entries(o)) if (t) out[k] = t.toArray() as Float32Array;
  for (const t of Object.values(o)) t?.dispose();
  return out;
}

function relRms(a: Float32Array, e: Float32Array, count: number) {
  let sq = 0, ref = 0, nan = 0;
  for (let i = 0; i < count; i++) {
    if (!Number.isFinite(a[i])) {
      nan++;
      continue;
    }
    sq += (a[i] - e[i]) ** 2;
    ref += e[i] * e[i];
  }
  return { rel: ref > 0 ? Math.sqrt(sq / ref) : Math.sqrt(sq), nan };
}

/** Checks every variant against the general path (variant by variant, the older first, so a fault
 * in a new kernel costs only what follows it); returns the lines and the failure count. */
function checkVariants(): { lines: string[]; failed: number } {
  const lines: string[] = [];
  let failed = 0;
  const refs = CHECKS.map((s) => {
    const x = makeInputs(s);
    setEnv({ ATTNKIT_LINEAR_PATH: "general" });
    const ref = host(forward(s, x));
    setEnv({});
    return { s, x, ref };
  });
  try {
    for (const v of VARIANTS) {
      for (const { s, x, ref } of refs) {
        setEnv({ ...v.env, ATTNKIT_LINEAR_PATH: "fast" });
        let line: string;
        try {
          const a = host(forward(s, x));
          const b = host(forward(s, x));
          let ok = true;
          const parts: string[] = [];
          for (const [key, r] of Object.entries(ref)) {
            const count = key === "output" && s.cuSeqlens
              ? r.length / s.T * s.cuSeqlens[s.cuSeqlens.length - 1]
              : r.length;
            const d = relRms(a[key], r, count);
            parts.push(`${key} ${d.rel.toExponential(2)}${d.nan ? ` NaN ${d.nan}` : ""}`);
            if (d.nan > 0 || !(d.rel <= 5e-3)) ok = false;
            for (let i = 0; i < count; i++) {
              if (!Object.is(a[key][i], b[key][i])) {
                ok = false;
                parts.push(`${key} differs on a second run (race?)`);
                break;
              }
            }
          }
          line = `${ok ? "ok  " : "FAIL"} [${v.name}] ${s.name}: ${parts.join(", ")}`;
          if (!ok) failed++;
        } catch (e) {
          failed++;
          line = `FAIL [${v.name}] ${s.name}: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`;
        }
        lines.push(line);
        console.log(line);
      }
    }
  } finally {
    setEnv({});
    for (const { x } of refs) dispose(x);
  }
  return { lines, failed };
}

interface TimingRecord {
  shape: string;
  variant: string;
  ms: number;
  fallback: boolean;
}

function benchShape([B, T, H, D]: [number, number, number, number]): Shape {
  return {
    name: `B${B}_T${T}_H${H}_D${D}`,
    dtype: "bfloat16",
    B,
    T,
    H,
    D,
    l2norm: false,
    initialState: false,
  };
}

/** Times stage 1 alone, then every variant, at the benchmark shapes (variant by variant, the older
 * first); returns the markdown table and the records. */
function timeVariants(iterations: number): { lines: string[]; records: TimingRecord[] } {
  const records: TimingRecord[] = [];
  const cells = new Map<string, string[]>();
  using flush = Tensor.empty([64 << 20], { dtype: "float32", device: DEVICE });
  const before = () => void flush.fill(0);
  const timeAll = (label: string, env: Record<string, string>, each: (s: Shape, ms: number) => void) => {
    for (const dims of BENCH) {
      const s = benchShape(dims);
      const x = makeInputs(s);
      try {
        setEnv({ ...env, ATTNKIT_LINEAR_PATH: "fast" });
        const run = () => void host1(forward(s, x));
        each(s, timeIt(run, { device: DEVICE, warmup: 2, iterations, before }).medianMs);
      } catch (e) {
        const msg = `error: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`;
        cells.get(s.name)?.push(msg) ?? cells.set(s.name, [msg]);
        console.log(`${label} ${s.name}: ${msg}`);
      } finally {
        Deno.env.delete("ATTNKIT_LINEAR_FAST_STAGES");
        setEnv({});
        dispose(x);
      }
    }
  };
  const push = (name: string, cell: string) => cells.get(name)?.push(cell) ?? cells.set(name, [cell]);
  const stage1 = new Map<string, number>();
  timeAll("stage 1", { ATTNKIT_LINEAR_FAST_STAGES: "prep" }, (s, ms) => {
    stage1.set(s.name, ms);
    push(s.name, ms.toFixed(3));
    console.log(`stage 1 ${s.name}: ${ms.toFixed(3)} ms`);
  });
  const best = new Map<string, number>();
  for (const v of VARIANTS) {
    timeAll(v.name, v.env, (s, ms) => {
      const fallback = !v.dims.includes(s.D);
      records.push({ shape: s.name, variant: v.name, ms, fallback });
      push(s.name, `${ms.toFixed(3)}${fallback ? "*" : ""}`);
      if (!fallback) best.set(s.name, Math.min(best.get(s.name) ?? Infinity, ms));
      // Stage 2 per dependent step of the plain recurrence (a chunk of 64 tokens of one sequence).
      const steps = Math.ceil(s.T / 64), s1 = stage1.get(s.name);
      const perStep = s1 !== undefined
        ? `, stage 2 ${((ms - s1) * 1000 / steps).toFixed(2)} us/chunk step`
        : "";
      console.log(`[${v.name}] ${s.name}: ${ms.toFixed(3)} ms${perStep}`);
    });
  }
  const head = ["shape", "stage 1", ...VARIANTS.map((v) => v.name), "FLA GDN", "best x FLA"];
  const lines = [`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`];
  for (const dims of BENCH) {
    const name = benchShape(dims).name;
    const fla = FLA_GDN[name], b = best.get(name);
    const row = [
      ...(cells.get(name) ?? []),
      fla ? fla.toFixed(3) : "-",
      fla && b ? (fla / b).toFixed(2) : "-",
    ];
    lines.push(`| ${name} | ${row.join(" | ")} |`);
  }
  return { lines, records };
}

/** Runs each profiled variant once per shape with ATTNKIT_LINEAR_STEP_PROFILE=1: the library prints
 * the mean cycles per phase of a chunk step (per warpgroup) to stderr after each stage-2 launch. */
function profileVariants() {
  for (const v of VARIANTS.filter((v) => PROFILED.includes(v.name))) {
    for (const dims of BENCH) {
      const s = benchShape(dims);
      if (!v.dims.includes(s.D)) continue;
      const x = makeInputs(s);
      try {
        setEnv({ ...v.env, ATTNKIT_LINEAR_PATH: "fast" });
        host1(forward(s, x)); // warm (function attributes, scratch)
        console.log(`profile [${v.name}] ${s.name}:`);
        Deno.env.set("ATTNKIT_LINEAR_STEP_PROFILE", "1");
        host1(forward(s, x));
      } catch (e) {
        console.log(
          `profile [${v.name}] ${s.name}: error: ${
            (e instanceof Error ? e.message : String(e)).split("\n")[0]
          }`,
        );
      } finally {
        setEnv({});
        dispose(x);
      }
    }
  }
}

function host1(o: ForwardOutputs) {
  for (const t of Object.values(o)) t?.dispose();
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      "check-only": { type: "boolean", default: false },
      iterations: { type: "string", default: "10" },
      json: { type: "string" },
      device: { type: "string", default: "cuda" },
      shapes: { type: "string", default: "6" },
      variants: { type: "string" },
      profile: { type: "boolean", default: false },
    },
  });
  if (values.variants) {
    const wanted = values.variants.split(",").map((n) => n.trim());
    const unknown = wanted.filter((n) => !VARIANTS.some((v) => v.name === n));
    if (unknown.length > 0) throw new Error(`--variants: unknown ${unknown.join(", ")}`);
    VARIANTS.splice(0, VARIANTS.length, ...VARIANTS.filter((v) => wanted.includes(v.name)));
  }
  DEVICE = values.device!;
  if (DEVICE === "cuda" && !cudaAvailable()) {
    console.error("linear_variants: no CUDA device");
    Deno.exit(1);
  }
  BENCH.splice(Number(values.shapes));
  console.log(`# linear stage-2 variants on ${DEVICE === "cuda" ? deviceInfo("cuda").name : "cpu"}`);
  const check = checkVariants();
  console.log(
    `\n${check.failed === 0 ? "all variants agree with the general path" : `${check.failed} FAILED`}\n`,
  );
  let timing: { lines: string[]; records: TimingRecord[] } = { lines: [], records: [] };
  if (!values["check-only"]) {
    timing = timeVariants(Number(values.iterations));
    console.log(
      `\n${timing.lines.join("\n")}\n(ms, median; * = that variant does not exist at this D and ran auto)`,
    );
  }
  if (values.profile && DEVICE === "cuda") profileVariants();
  if (values.json) {
    await Deno.writeTextFile(
      values.json,
      JSON.stringify({ checks: check.lines, timing: timing.records }, null, 2) + "\n",
    );
  }
  if (check.failed > 0) Deno.exitCode = 1;
}
