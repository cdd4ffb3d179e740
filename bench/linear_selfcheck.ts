/**
 * Self-check of the CUDA delta-rule forward: runs the fast chunked path (`ATTNKIT_LINEAR_PATH=fast`),
 * the general path (`=general`) and, on small shapes, the CPU backend on the same random inputs over
 * the cases that break kernels (tails, T = 1, varlen with empty and short sequences, grouped heads,
 * in-kernel L2 norm, head-major strided views, initial state, chunk states and WY factors, D = 64 /
 * 128 / 256, bf16 and f16), checks decode against the CPU, then times the two stages of the fast path
 * and decode on the benchmark shapes. One GPU call tells whether the fast path is right and fast.
 *
 * Pass rule per case: no NaN (outputs are poisoned first) and relative RMS error against the CPU
 * backend within 0.005 (bf16/f16; FLA's rule, the tests' tolerance) or 5e-5 (fp32); the fast path
 * must also give bit-identical outputs on a second run (a moving result is a race).
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_selfcheck.ts            # all cases + timing
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/linear_selfcheck.ts --quick    # no timing
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { cudaAvailable, deviceInfo, GatedDeltaNetDecodeFwdOp, Tensor, timeIt } from "../mod.ts";
import { deltaForward, type DeltaSettings, type ForwardOutputs } from "../ops/linear/delta_native.ts";
import { deltaDecode } from "../ops/linear/delta_native.ts";

interface Case {
  name: string;
  dtype: "bfloat16" | "float16" | "float32";
  B: number;
  T: number;
  H: number;
  HK?: number;
  K: number;
  V?: number;
  gated: boolean;
  l2norm?: boolean;
  chunk?: number;
  cuSeqlens?: number[];
  layout?: "bthd" | "bhtd";
  initialState?: boolean;
  /** Ask for chunk states and Aw/Au too (fixed length only). */
  factors?: boolean;
}

const CASES: Case[] = [
  {
    name: "bf16 D64 tail GQA l2 h0",
    dtype: "bfloat16",
    B: 2,
    T: 200,
    H: 4,
    HK: 2,
    K: 64,
    gated: true,
    l2norm: true,
  },
  { name: "bf16 D128 factors", dtype: "bfloat16", B: 1, T: 130, H: 3, K: 128, gated: true, factors: true },
  {
    name: "f16 D128 bhtd ungated l2 factors",
    dtype: "float16",
    B: 2,
    T: 64,
    H: 2,
    K: 128,
    gated: false,
    l2norm: true,
    layout: "bhtd",
    factors: true,
  },
  { name: "bf16 D256 l2", dtype: "bfloat16", B: 1, T: 100, H: 2, K: 256, gated: true, l2norm: true },
  {
    name: "bf16 D128 varlen empty/1/62/65",
    dtype: "bfloat16",
    B: 1,
    T: 300,
    H: 2,
    HK: 1,
    K: 128,
    gated: true,
    l2norm: true,
    cuSeqlens: [0, 1, 63, 63, 128, 300],
  },
  { name: "bf16 D64 T=1", dtype: "bfloat16", B: 3, T: 1, H: 3, K: 64, gated: true, l2norm: true },
  {
    name: "f16 D64 varlen",
    dtype: "float16",
    B: 1,
    T: 140,
    H: 2,
    K: 64,
    gated: true,
    cuSeqlens: [0, 65, 65, 130],
  },
  { name: "bf16 D128 T=1000", dtype: "bfloat16", B: 1, T: 1000, H: 2, K: 128, gated: true, l2norm: true },
  {
    name: "bf16 D64 bhtd no h0",
    dtype: "bfloat16",
    B: 2,
    T: 96,
    H: 2,
    K: 64,
    gated: true,
    layout: "bhtd",
    initialState: false,
  },
  {
    name: "bf16 D64 chunk 128 (fast, as 64)",
    dtype: "bfloat16",
    B: 1,
    T: 127,
    H: 2,
    HK: 1,
    K: 64,
    gated: true,
    chunk: 128,
  },
  // General path only (the fast path refuses these).
  {
    name: "fp32 K100 V60 (general)",
    dtype: "float32",
    B: 1,
    T: 70,
    H: 2,
    HK: 1,
    K: 100,
    V: 60,
    gated: true,
    l2norm: true,
    factors: true,
  },
  {
    name: "bf16 chunk 32 (general)",
    dtype: "bfloat16",
    B: 1,
    T: 90,
    H: 2,
    K: 64,
    gated: true,
    chunk: 32,
    factors: true,
  },
  { name: "fp32 D128 (general)", dtype: "float32", B: 1, T: 100, H: 2, K: 128, gated: false, l2norm: true },
];

// "cpu" checks this script's plumbing on a machine without a GPU (both "paths" then run on the CPU).
let DEVICE = "cuda";

const BENCH_SHAPES: [number, number, number, number][] = [
  [1, 8192, 96, 128],
  [2, 16384, 16, 128],
  [4, 2048, 16, 128],
  [4, 4096, 64, 128],
  [8, 2048, 32, 256],
  [8, 1024, 8, 64],
];

function relRms(actual: ArrayLike<number>, expected: ArrayLike<number>, count = expected.length) {
  let sq = 0, ref = 0, nan = 0;
  for (let i = 0; i < count; i++) {
    const a = actual[i], e = expected[i];
    if (!Number.isFinite(a)) {
      nan++;
      continue;
    }
    sq += (a - e) ** 2;
    ref += e * e;
  }
  return { rel: ref > 0 ? Math.sqrt(sq / ref) : Math.sqrt(sq), nan };
}

function setPath(path: "fast" | "general" | "auto") {
  Deno.env.set("ATTNKIT_LINEAR_PATH", path);
}

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  g?: Tensor;
  beta: Tensor;
  h0?: Tensor;
  cu?: Tensor;
}

function makeInputs(c: Case, device: string): Inputs {
  const HK = c.HK ?? c.H, V = c.V ?? c.K;
  const bhtd = c.layout === "bhtd";
  const rows = (heads: number, d: number) => bhtd ? [c.B, heads, c.T, d] : [c.B, c.T, heads, d];
  const dtype = c.dtype;
  // Without the L2 norm, keys of norm about 1 (std K^-0.5) keep the recurrence stable.
  const keyStd = c.l2norm ? 1 : c.K ** -0.5;
  const N = c.cuSeqlens ? c.cuSeqlens.length - 1 : c.B;
  return {
    q: Tensor.randn(rows(HK, c.K), { dtype, device }),
    k: Tensor.randn(rows(HK, c.K), { dtype, device, std: keyStd }),
    v: Tensor.randn(rows(c.H, V), { dtype, device }),
    g: c.gated
      ? Tensor.rand(bhtd ? [c.B, c.H, c.T] : [c.B, c.T, c.H], { low: -0.25, high: 0, device })
      : undefined,
    beta: Tensor.rand(bhtd ? [c.B, c.H, c.T] : [c.B, c.T, c.H], { device }),
    h0: c.initialState === false ? undefined : Tensor.randn([N, c.H, c.K, V], { device, std: 0.5 }),
    cu: c.cuSeqlens ? Tensor.from(new Int32Array(c.cuSeqlens), { device }) : undefined,
  };
}

function toDevice(x: Inputs, device: string): Inputs {
  return {
    q: x.q.to(device),
    k: x.k.to(device),
    v: x.v.to(device),
    g: x.g?.to(device),
    beta: x.beta.to(device),
    h0: x.h0?.to(device),
    cu: x.cu?.to(device),
  };
}

function dispose(x: Inputs) {
  for (const t of [x.q, x.k, x.v, x.g, x.beta, x.h0, x.cu]) t?.dispose();
}

function forward(c: Case, x: Inputs): ForwardOutputs {
  const s: DeltaSettings = {
    layout: c.layout ?? "bthd",
    gated: c.gated,
    chunkSize: c.chunk ?? 64,
    recurrent: false,
    l2norm: c.l2norm ?? false,
    initialState: x.h0,
    cuSeqlens: x.cu,
  };
  return deltaForward("selfcheck", { q: x.q, k: x.k, v: x.v, g: x.g, beta: x.beta }, s, {
    finalState: true,
    chunkStates: c.factors,
    factors: c.factors,
  });
}

function host(t: Tensor | undefined): Float32Array | undefined {
  return t ? (t.toArray() as Float32Array) : undefined;
}

interface Result {
  name: string;
  path: string;
  fields: Record<string, { rel: number; nan: number }>;
  ok: boolean;
  note?: string;
}

function outputsOf(o: ForwardOutputs): Record<string, Float32Array | undefined> {
  return {
    output: host(o.output),
    finalState: host(o.finalState),
    chunkStates: host(o.chunkStates),
    aw: host(o.aw),
    au: host(o.au),
  };
}

// Rows of the output past the last packed sequence are unspecified: compare only the leading ones.
function outputCount(c: Case, o: Float32Array): number {
  if (!c.cuSeqlens) return o.length;
  return o.length / c.T * c.cuSeqlens[c.cuSeqlens.length - 1];
}

function checkCase(c: Case): Result[] {
  const results: Result[] = [];
  const cuda = makeInputs(c, DEVICE);
  const cpu = toDevice(cuda, "cpu");
  try {
    const ref = (() => {
      const o = forward(c, cpu);
      const h = outputsOf(o);
      for (const t of Object.values(o)) t?.dispose();
      return h;
    })();
    const tol = c.dtype === "float32" ? 5e-5 : 5e-3;
    for (const path of ["fast", "general"] as const) {
      setPath(path);
      let outs: Record<string, Float32Array | undefined>;
      let again: Float32Array | undefined;
      try {
        const o = forward(c, cuda);
        outs = outputsOf(o);
        for (const t of Object.values(o)) t?.dispose();
        if (path === "fast") {
          const o2 = forward(c, cuda);
          again = host(o2.output);
          for (const t of Object.values(o2)) t?.dispose();
        }
      } catch (e) {
        const msg = (e instanceof Error ? e.message : String(e)).split("\n")[0];
        const refused = msg.includes("cannot serve");
        results.push({ name: c.name, path, fields: {}, ok: refused, note: refused ? "refused" : msg });
        continue;
      }
      const fields: Result["fields"] = {};
      let ok = true;
      for (const [key, r] of Object.entries(ref)) {
        const a = outs[key];
        if (!r || !a) continue;
        const count = key === "output" ? outputCount(c, r) : r.length;
        const d = relRms(a, r, count);
        fields[key] = d;
        if (d.nan > 0 || !(d.rel <= (key === "output" || key === "finalState" ? tol : tol * 4))) ok = false;
      }
      let note: string | undefined;
      if (again && outs.output) {
        const n = outputCount(c, outs.output);
        let same = true;
        for (let i = 0; i < n; i++) {
          if (!Object.is(again[i], outs.output[i])) same = false;
        }
        if (!same) {
          ok = false;
          note = "second run differs (race?)";
        }
      }
      results.push({ name: c.name, path, fields, ok, note });
    }
  } finally {
    setPath("auto");
    dispose(cuda);
    dispose(cpu);
  }
  return results;
}

function checkDecode(
  dtype: "bfloat16" | "float32",
  stateDtype: "float32" | "bfloat16",
  K: number,
  V: number,
) {
  const B = 4, H = 4, HK = 2;
  const name = `decode ${dtype} state ${stateDtype} K${K} V${V}`;
  using q = Tensor.randn([B, HK, K], { dtype, device: DEVICE });
  using k = Tensor.randn([B, HK, K], { dtype, device: DEVICE });
  using v = Tensor.randn([B, H, V], { dtype, device: DEVICE });
  using g = Tensor.rand([B, H], { low: -0.3, high: 0, device: DEVICE });
  using beta = Tensor.rand([B, H], { device: DEVICE });
  using s32 = Tensor.randn([B, H, K, V], { device: DEVICE, std: 0.5 });
  using state = s32.cast(stateDtype);
  const settings = { gated: true, l2norm: true, inPlace: false };
  const inputs = { q, k, v, g, beta, state };
  const ours = deltaDecode("selfcheck", inputs, settings);
  const cpuIn = {
    q: q.to("cpu"),
    k: k.to("cpu"),
    v: v.to("cpu"),
    g: g.to("cpu"),
    beta: beta.to("cpu"),
    state: state.to("cpu"),
  };
  const ref = deltaDecode("selfcheck", cpuIn, settings);
  const tol = dtype === "float32" ? 5e-6 : 5e-3;
  const o = relRms(host(ours.output)!, host(ref.output)!);
  const st = relRms(host(ours.newState)!, host(ref.newState)!);
  for (const t of [ours.output, ours.newState, ref.output, ref.newState, ...Object.values(cpuIn)]) {
    t.dispose();
  }
  const ok = o.nan === 0 && st.nan === 0 && o.rel <= tol && st.rel <= (stateDtype === "float32" ? tol : 5e-3);
  return { name, path: "cuda", fields: { output: o, newState: st }, ok } as Result;
}

function timeShapes(iterations: number) {
  const lines = [
    "| shape | fast ms | stage 1 ms | stage 2 ms (diff) | TFLOP/s |",
    "| --- | --- | --- | --- | --- |",
  ];
  using flush = Tensor.empty([64 << 20], { dtype: "float32", device: DEVICE });
  const before = () => void flush.fill(0);
  for (const [B, T, H, D] of BENCH_SHAPES) {
    const c: Case = {
      name: "",
      dtype: "bfloat16",
      B,
      T,
      H,
      K: D,
      gated: true,
      initialState: false,
      l2norm: false,
    };
    const x = makeInputs(c, DEVICE);
    try {
      setPath("fast");
      const run = () => {
        const o = forward(c, x);
        for (const t of Object.values(o)) t?.dispose();
      };
      const full = timeIt(run, { device: DEVICE, warmup: 2, iterations, before }).medianMs;
      Deno.env.set("ATTNKIT_LINEAR_FAST_STAGES", "prep");
      const prep = timeIt(run, { device: DEVICE, warmup: 2, iterations, before }).medianMs;
      Deno.env.delete("ATTNKIT_LINEAR_FAST_STAGES");
      const flops = B * T * H * (6 * D * D + 10 * 64 * D);
      lines.push(
        `| B${B}_T${T}_H${H}_D${D} | ${full.toFixed(3)} | ${prep.toFixed(3)} | ${
          (full - prep).toFixed(3)
        } | ${(flops / full / 1e9).toFixed(1)} |`,
      );
    } catch (e) {
      lines.push(
        `| B${B}_T${T}_H${H}_D${D} | error: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]} |`,
      );
    } finally {
      Deno.env.delete("ATTNKIT_LINEAR_FAST_STAGES");
      setPath("auto");
      dispose(x);
    }
  }
  // Decode: fp32 state [256, 32, 128, 128], read + written.
  {
    const B = 256, H = 32, D = 128;
    using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device: DEVICE });
    using k = Tensor.randn([B, H, D], { dtype: "bfloat16", device: DEVICE });
    using v = Tensor.randn([B, H, D], { dtype: "bfloat16", device: DEVICE });
    using g = Tensor.rand([B, H], { low: -0.3, high: 0, device: DEVICE });
    using beta = Tensor.rand([B, H], { device: DEVICE });
    using state = Tensor.randn([B, H, D, D], { device: DEVICE, std: 0.1 });
    using newState = Tensor.empty([B, H, D, D], { device: DEVICE });
    using output = Tensor.empty([B, H, D], { dtype: "bfloat16", device: DEVICE });
    const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true });
    const ms = timeIt(() => void op.forward(q, k, v, g, beta, state, { output, newState }), {
      device: DEVICE,
      warmup: 3,
      iterations,
      before,
    }).medianMs;
    const gbps = 2 * B * H * D * D * 4 / ms / 1e6;
    lines.push(
      "",
      `decode B${B} H${H} K=V=${D} fp32 state: ${ms.toFixed(3)} ms, ${gbps.toFixed(0)} GB/s ` +
        `(${(gbps / 4252 * 100).toFixed(0)}% of the 4252 GB/s copy ceiling; FLA 0.374 ms)`,
    );
  }
  return lines;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      only: { type: "string" },
      iterations: { type: "string", default: "10" },
      json: { type: "string" },
      device: { type: "string", default: "cuda" },
    },
  });
  DEVICE = values.device!;
  if (DEVICE === "cuda" && !cudaAvailable()) {
    console.error("linear_selfcheck: no CUDA device");
    Deno.exit(1);
  }
  console.log(`# linear self-check on ${DEVICE === "cuda" ? deviceInfo("cuda").name : "cpu"}`);
  const results: Result[] = [];
  for (const c of CASES) {
    if (values.only && !c.name.includes(values.only)) continue;
    const rs = checkCase(c);
    for (const r of rs) {
      const fields = Object.entries(r.fields).map(([k, d]) =>
        `${k} ${d.rel.toExponential(2)}${d.nan ? ` NaN ${d.nan}` : ""}`
      )
        .join(", ");
      console.log(`${r.ok ? "ok  " : "FAIL"} ${r.name} [${r.path}] ${fields}${r.note ? ` (${r.note})` : ""}`);
    }
    results.push(...rs);
  }
  for (
    const [dt, sd, K, V] of [
      ["bfloat16", "float32", 128, 128],
      ["bfloat16", "bfloat16", 128, 128],
      ["float32", "float32", 128, 128],
      ["bfloat16", "float32", 60, 100],
    ] as const
  ) {
    const r = checkDecode(dt, sd, K, V);
    const fields = Object.entries(r.fields).map(([k, d]) =>
      `${k} ${d.rel.toExponential(2)}${d.nan ? ` NaN ${d.nan}` : ""}`
    )
      .join(", ");
    console.log(`${r.ok ? "ok  " : "FAIL"} ${r.name} ${fields}`);
    results.push(r);
  }
  const failed = results.filter((r) => !r.ok).length;
  console.log(`\n${results.length - failed} passed, ${failed} failed`);
  if (!values.quick) {
    console.log("\n" + timeShapes(Number(values.iterations)).join("\n"));
  }
  if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(results, null, 2) + "\n");
  if (failed > 0) Deno.exitCode = 1;
}
