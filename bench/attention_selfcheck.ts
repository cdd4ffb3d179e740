/**
 * Self-check of the CUDA attention forward: runs the Hopper path (`ATTNKIT_ATTN_PATH=sm90`), the
 * general path (`=general`) and, on small shapes, the CPU backend on the same random inputs, over
 * the cases that break kernels (tile edges, rows with no keys, windows, softcap, GQA, varlen with
 * empty and length-1 sequences, strided BHSD views, Sq != Skv), then times both paths on the
 * benchmark shapes. One GPU call tells whether the fast path is right and how fast each path is.
 *
 * Pass rule per case: no NaN and every element written (outputs are poisoned with NaN first); with a
 * CPU reference, each path's max abs error is at most 2x the other path's error, floored at one
 * unit of the dtype's precision at the output's magnitude, plus 1e-5 (the FlashAttention rule with
 * the general path as the same-precision reference), and LSE within 1e-3 relative with the same
 * -inf rows; without one (large shapes), the two paths differ by at most 8 units of precision at the
 * output's magnitude. The Hopper path must also give bit-identical results on a second run (a
 * moving result is a race). Every Hopper kernel variant built for the case (`ATTNKIT_ATTN_FWD_KERNEL`
 * = v1, p2, p3, p4) is checked the same way, and the timed shapes print each variant's time (L2
 * cleared before each call).
 *
 * @example
 * ```sh
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_selfcheck.ts            # all cases
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_selfcheck.ts --quick    # no timing
 * ATTNKIT_LIB=lib/libattnkit.so deno run -A bench/attention_selfcheck.ts --json $OUT/selfcheck.json
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  attention,
  type AttentionOptions,
  compare,
  cudaAvailable,
  deviceInfo,
  Tensor,
  timeIt,
} from "../mod.ts";

interface Case {
  name: string;
  dtype: "float16" | "bfloat16";
  dim: number;
  heads: number;
  headsKv: number;
  batch?: number;
  seqQ?: number;
  seqKv?: number;
  lengthsQ?: number[];
  lengthsKv?: number[];
  causal?: boolean;
  windowLeft?: number;
  windowRight?: number;
  softcap?: number;
  layout?: "bshd" | "bhsd";
  qStd?: number;
  /** Compare with the CPU backend (small shapes only). */
  cpu: boolean;
  /** Time both paths. */
  time: boolean;
}

const CASES: Case[] = [
  {
    name: "tile edges, causal",
    dtype: "bfloat16",
    dim: 128,
    heads: 4,
    headsKv: 4,
    batch: 2,
    seqQ: 1000,
    seqKv: 1000,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "Sq 17 < Skv 1000, GQA 4",
    dtype: "float16",
    dim: 64,
    heads: 4,
    headsKv: 1,
    batch: 1,
    seqQ: 17,
    seqKv: 1000,
    cpu: true,
    time: false,
  },
  {
    name: "Sq 1000 > Skv 17, causal (rows without keys)",
    dtype: "bfloat16",
    dim: 256,
    heads: 2,
    headsKv: 2,
    batch: 1,
    seqQ: 1000,
    seqKv: 17,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "window left 100, causal, GQA 2",
    dtype: "float16",
    dim: 128,
    heads: 4,
    headsKv: 2,
    batch: 1,
    seqQ: 1000,
    seqKv: 1000,
    causal: true,
    windowLeft: 100,
    cpu: true,
    time: false,
  },
  {
    name: "window 64 / 32, not causal",
    dtype: "bfloat16",
    dim: 64,
    heads: 2,
    headsKv: 2,
    batch: 2,
    seqQ: 777,
    seqKv: 777,
    windowLeft: 64,
    windowRight: 32,
    cpu: true,
    time: false,
  },
  {
    name: "window 0 / 0 (diagonal only), Sq < Skv",
    dtype: "bfloat16",
    dim: 128,
    heads: 2,
    headsKv: 1,
    batch: 1,
    seqQ: 300,
    seqKv: 1000,
    windowLeft: 0,
    windowRight: 0,
    cpu: true,
    time: false,
  },
  {
    name: "softcap 30, causal, peaky",
    dtype: "bfloat16",
    dim: 128,
    heads: 2,
    headsKv: 2,
    batch: 1,
    seqQ: 1000,
    seqKv: 1000,
    causal: true,
    softcap: 30,
    qStd: 4,
    cpu: true,
    time: false,
  },
  {
    name: "GQA 8:1, causal, S 513",
    dtype: "bfloat16",
    dim: 128,
    heads: 8,
    headsKv: 1,
    batch: 1,
    seqQ: 513,
    seqKv: 513,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "varlen causal, empty and length-1",
    dtype: "bfloat16",
    dim: 128,
    heads: 4,
    headsKv: 2,
    lengthsQ: [0, 1, 129, 1000, 17],
    lengthsKv: [5, 1, 129, 1000, 40],
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "varlen window 32 / 16",
    dtype: "float16",
    dim: 64,
    heads: 2,
    headsKv: 2,
    lengthsQ: [300, 0, 64, 200],
    lengthsKv: [300, 10, 200, 0],
    windowLeft: 32,
    windowRight: 16,
    cpu: true,
    time: false,
  },
  {
    name: "varlen D256 not causal",
    dtype: "bfloat16",
    dim: 256,
    heads: 2,
    headsKv: 1,
    lengthsQ: [130, 7, 256],
    lengthsKv: [64, 300, 256],
    cpu: true,
    time: false,
  },
  {
    name: "D64 tile edges, causal (192-row tiles)",
    dtype: "bfloat16",
    dim: 64,
    heads: 4,
    headsKv: 4,
    batch: 2,
    seqQ: 1000,
    seqKv: 1000,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "D64 Sq 1000 > Skv 17, causal (rows without keys)",
    dtype: "bfloat16",
    dim: 64,
    heads: 2,
    headsKv: 2,
    batch: 1,
    seqQ: 1000,
    seqKv: 17,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "D64 varlen causal, empty and length-1",
    dtype: "bfloat16",
    dim: 64,
    heads: 4,
    headsKv: 2,
    lengthsQ: [0, 1, 129, 1000, 17, 193],
    lengthsKv: [5, 1, 129, 1000, 40, 193],
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "D64 softcap 30, window 100 / 0, GQA 4, peaky",
    dtype: "float16",
    dim: 64,
    heads: 8,
    headsKv: 2,
    batch: 1,
    seqQ: 900,
    seqKv: 1000,
    windowLeft: 100,
    windowRight: 0,
    softcap: 30,
    qStd: 4,
    cpu: true,
    time: false,
  },
  {
    name: "BHSD strided view",
    dtype: "bfloat16",
    dim: 128,
    heads: 4,
    headsKv: 4,
    batch: 2,
    seqQ: 300,
    seqKv: 300,
    causal: true,
    layout: "bhsd",
    cpu: true,
    time: false,
  },
  {
    name: "Sq = Skv = 1",
    dtype: "float16",
    dim: 256,
    heads: 2,
    headsKv: 2,
    batch: 3,
    seqQ: 1,
    seqKv: 1,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "D 96 (general path only)",
    dtype: "bfloat16",
    dim: 96,
    heads: 2,
    headsKv: 2,
    batch: 1,
    seqQ: 200,
    seqKv: 333,
    causal: true,
    cpu: true,
    time: false,
  },
  {
    name: "D 8 (general path only)",
    dtype: "float16",
    dim: 8,
    heads: 2,
    headsKv: 1,
    batch: 1,
    seqQ: 70,
    seqKv: 70,
    cpu: true,
    time: false,
  },
  {
    name: "B4 S4096 H32/32 D128 causal",
    dtype: "bfloat16",
    dim: 128,
    heads: 32,
    headsKv: 32,
    batch: 4,
    seqQ: 4096,
    seqKv: 4096,
    causal: true,
    cpu: false,
    time: true,
  },
  {
    name: "B4 S4096 H32/32 D128",
    dtype: "bfloat16",
    dim: 128,
    heads: 32,
    headsKv: 32,
    batch: 4,
    seqQ: 4096,
    seqKv: 4096,
    cpu: false,
    time: true,
  },
  {
    name: "B4 S4096 H32/8 D128 causal",
    dtype: "bfloat16",
    dim: 128,
    heads: 32,
    headsKv: 8,
    batch: 4,
    seqQ: 4096,
    seqKv: 4096,
    causal: true,
    cpu: false,
    time: true,
  },
  {
    name: "B8 S2048 H16/16 D64 causal",
    dtype: "bfloat16",
    dim: 64,
    heads: 16,
    headsKv: 16,
    batch: 8,
    seqQ: 2048,
    seqKv: 2048,
    causal: true,
    cpu: false,
    time: true,
  },
  {
    name: "B2 S4096 H16/16 D256 causal",
    dtype: "bfloat16",
    dim: 256,
    heads: 16,
    headsKv: 16,
    batch: 2,
    seqQ: 4096,
    seqKv: 4096,
    causal: true,
    cpu: false,
    time: true,
  },
  {
    name: "B4 S4096 H32/32 D128 causal f16",
    dtype: "float16",
    dim: 128,
    heads: 32,
    headsKv: 32,
    batch: 4,
    seqQ: 4096,
    seqKv: 4096,
    causal: true,
    cpu: false,
    time: true,
  },
];

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
  qShape: number[];
  lseShape: number[];
  /** Query-key pairs the mask admits (for FLOPs). */
  pairs: number;
}

function cumulative(lengths: number[]): number[] {
  const out = [0];
  for (const l of lengths) out.push(out[out.length - 1] + l);
  return out;
}

// Keys admitted per row, summed: the FLOP count of a masked problem.
function admittedPairs(sq: number, skv: number, c: Case): number {
  const left = c.windowLeft ?? -1;
  const right = c.causal ? 0 : (c.windowRight ?? -1);
  let total = 0;
  for (let i = 0; i < sq; i++) {
    const p = i + skv - sq;
    const lo = left < 0 ? 0 : Math.max(0, p - left);
    const hi = right < 0 ? skv - 1 : Math.min(skv - 1, p + right);
    if (hi >= lo) total += hi - lo + 1;
  }
  return total;
}

function makeInputs(c: Case, seed: number, device: "cuda" | "cpu"): Inputs {
  const { dim: d, heads: h, headsKv: hk } = c;
  const options: AttentionOptions = {
    isCausal: c.causal ?? false,
    windowSizeLeft: c.windowLeft ?? -1,
    windowSizeRight: c.windowRight ?? -1,
    softcap: c.softcap ?? 0,
  };
  let qShape: number[], kShape: number[], lseShape: number[], pairs = 0;
  if (c.lengthsQ) {
    const tq = c.lengthsQ.reduce((a, b) => a + b, 0), tk = c.lengthsKv!.reduce((a, b) => a + b, 0);
    qShape = [tq, h, d];
    kShape = [tk, hk, d];
    lseShape = [h, tq];
    options.cuSeqlensQ = cumulative(c.lengthsQ);
    options.cuSeqlensKv = cumulative(c.lengthsKv!);
    c.lengthsQ.forEach((lq, i) => pairs += admittedPairs(lq, c.lengthsKv![i], c) * h);
  } else {
    const b = c.batch!, sq = c.seqQ!, skv = c.seqKv!;
    const bhsd = c.layout === "bhsd";
    qShape = bhsd ? [b, h, sq, d] : [b, sq, h, d];
    kShape = bhsd ? [b, hk, skv, d] : [b, skv, hk, d];
    lseShape = [b, h, sq];
    options.layout = c.layout ?? "bshd";
    pairs = admittedPairs(sq, skv, c) * b * h;
  }
  let q: Tensor;
  if (c.qStd && c.qStd !== 1) {
    // A peakier softmax: q drawn in float32, scaled on the host, rounded once to the dtype.
    using unit = Tensor.randn(qShape, { dtype: "float32", seed, offset: 0 });
    const scaled = Float32Array.from(unit.toArray() as Float32Array, (x) => x * c.qStd!);
    q = Tensor.from(scaled, { shape: qShape, dtype: c.dtype, device });
  } else {
    q = Tensor.randn(qShape, { dtype: c.dtype, device, seed, offset: 0 });
  }
  const k = Tensor.randn(kShape, { dtype: c.dtype, device, seed: seed + 1, offset: 0 });
  const v = Tensor.randn(kShape, { dtype: c.dtype, device, seed: seed + 2, offset: 0 });
  return { q, k, v, options, qShape, lseShape, pairs };
}

function setPath(path: "sm90" | "general" | "auto"): void {
  if (path === "auto") Deno.env.delete("ATTNKIT_ATTN_PATH");
  else Deno.env.set("ATTNKIT_ATTN_PATH", path);
}

interface RunResult {
  output: Tensor;
  lse: Tensor;
}

// Runs one path into NaN-poisoned buffers; undefined when the path refuses the call.
function runPath(
  inp: Inputs,
  dtype: Case["dtype"],
  path: "sm90" | "general" | "auto",
  kernel?: Kernel,
): RunResult | undefined {
  const device = inp.q.device;
  const output = Tensor.empty(inp.qShape, { dtype, device }).fill(NaN);
  const lse = Tensor.empty(inp.lseShape, { dtype: "float32", device }).fill(NaN);
  setPath(path);
  if (kernel) Deno.env.set("ATTNKIT_ATTN_FWD_KERNEL", kernel);
  try {
    attention(inp.q, inp.k, inp.v, { ...inp.options, out: { output, lse } });
    return { output, lse };
  } catch (e) {
    output.dispose();
    lse.dispose();
    if (
      path === "sm90" && e instanceof Error && /cannot take the Hopper path|is not built for/.test(e.message)
    ) {
      return undefined;
    }
    throw e;
  } finally {
    setPath("auto");
    Deno.env.delete("ATTNKIT_ATTN_FWD_KERNEL");
  }
}

/** The Hopper forward kernels (`ATTNKIT_ATTN_FWD_KERNEL`); each case runs those built for it. */
const KERNELS = ["v1", "p2", "p3", "p4"] as const;
type Kernel = typeof KERNELS[number];

function eps(dtype: Case["dtype"]): number {
  return dtype === "bfloat16" ? 2 ** -8 : 2 ** -11;
}

function maxAbsOf(t: Tensor): number {
  let m = 0;
  for (const x of t.toArray() as Float32Array) if (Number.isFinite(x)) m = Math.max(m, Math.abs(x));
  return m;
}

function sameBits(a: Tensor, b: Tensor): boolean {
  const x = a.toRawBits(), y = b.toRawBits();
  if (x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

// LSE error relative to max(1, |ref|), over rows finite in both; -1 when the -inf rows differ.
function lseError(actual: Tensor, expected: Tensor): number {
  const a = actual.toArray() as Float32Array, e = expected.toArray() as Float32Array;
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i])) return -1;
    if (e[i] === -Infinity || a[i] === -Infinity) {
      if (a[i] !== e[i]) return -1;
      continue;
    }
    worst = Math.max(worst, Math.abs(a[i] - e[i]) / Math.max(1, Math.abs(e[i])));
  }
  return worst;
}

interface Row {
  name: string;
  status: "pass" | "FAIL" | "general only";
  notes: string[];
  fastErr?: number;
  generalErr?: number;
  fastVsGeneral?: number;
  lseErr?: number;
  deterministic?: boolean;
  fastMs?: number;
  generalMs?: number;
  fastNoPingPongMs?: number;
  /** Median ms of each Hopper kernel variant built for the case (timed shapes). */
  kernelMs?: Partial<Record<Kernel, number>>;
  /** Max abs error of each variant against the CPU reference, or against the general path. */
  kernelErr?: Partial<Record<Kernel, number>>;
  fastTflops?: number;
  generalTflops?: number;
}

function checkCase(c: Case, seed: number, timing: boolean, device: "cuda" | "cpu"): Row {
  const row: Row = { name: c.name, status: "pass", notes: [] };
  const inp = makeInputs(c, seed, device);
  try {
    const gen = runPath(inp, c.dtype, "general")!;
    const fast = runPath(inp, c.dtype, "sm90");
    try {
      const scale = maxAbsOf(gen.output);
      const unit = eps(c.dtype) * Math.max(scale, 1e-3);
      const check = (label: string, r: RunResult) => {
        const cmp = compare(r.output, gen.output);
        if (cmp.nanCount > 0 || cmp.nonFiniteMismatches > 0) {
          row.status = "FAIL";
          row.notes.push(
            `${label}: ${cmp.nanCount} NaN / unwritten, ${cmp.nonFiniteMismatches} non-finite mismatches`,
          );
        }
      };
      check("general", gen);
      if (fast === undefined) {
        row.status = "general only";
      } else {
        check("sm90", fast);
        row.fastVsGeneral = compare(fast.output, gen.output).maxAbs;
        const again = runPath(inp, c.dtype, "sm90")!;
        row.deterministic = sameBits(again.output, fast.output);
        again.output.dispose();
        again.lse.dispose();
        if (!row.deterministic) {
          row.status = "FAIL";
          row.notes.push("sm90: two runs differ (race?)");
        }
      }
      if (c.cpu) {
        using qc = inp.q.device === "cpu" ? inp.q.clone() : inp.q.to("cpu");
        using kc = inp.k.device === "cpu" ? inp.k.clone() : inp.k.to("cpu");
        using vc = inp.v.device === "cpu" ? inp.v.clone() : inp.v.to("cpu");
        using ref = attention(qc, kc, vc, { ...inp.options, returnLse: true });
        row.generalErr = compare(gen.output, ref.output).maxAbs;
        const genLse = lseError(gen.lse, ref.lse);
        if (genLse < 0 || genLse > 1e-3) {
          row.status = "FAIL";
          row.notes.push(
            `general: LSE error ${genLse < 0 ? "(-inf rows or NaN differ)" : genLse.toExponential(2)}`,
          );
        }
        if (fast) {
          row.fastErr = compare(fast.output, ref.output).maxAbs;
          row.lseErr = lseError(fast.lse, ref.lse);
          const bound = 2 * Math.max(row.generalErr, unit) + 1e-5;
          if (!(row.fastErr <= bound)) {
            row.status = "FAIL";
            row.notes.push(`sm90: error ${row.fastErr.toExponential(2)} > bound ${bound.toExponential(2)}`);
          }
          if (row.lseErr < 0 || row.lseErr > 1e-3) {
            row.status = "FAIL";
            row.notes.push(
              `sm90: LSE error ${row.lseErr < 0 ? "(-inf rows or NaN differ)" : row.lseErr.toExponential(2)}`,
            );
          }
          // And the general path against the Hopper one, the same way round.
          const genBound = 2 * Math.max(row.fastErr, unit) + 1e-5;
          if (!(row.generalErr <= genBound)) {
            row.status = "FAIL";
            row.notes.push(
              `general: error ${row.generalErr.toExponential(2)} > bound ${genBound.toExponential(2)}`,
            );
          }
        }
      } else if (fast && !(row.fastVsGeneral! <= 8 * unit)) {
        row.status = "FAIL";
        row.notes.push(
          `sm90 vs general: ${row.fastVsGeneral!.toExponential(2)} > 8 units (${
            (8 * unit).toExponential(2)
          })`,
        );
      }
      if (fast && !c.cpu) {
        const l = lseError(fast.lse, gen.lse);
        row.lseErr = l;
        if (l < 0 || l > 1e-3) {
          row.status = "FAIL";
          row.notes.push(`sm90 vs general LSE: ${l < 0 ? "(-inf rows or NaN differ)" : l.toExponential(2)}`);
        }
      }
    } finally {
      gen.output.dispose();
      gen.lse.dispose();
      fast?.output.dispose();
      fast?.lse.dispose();
    }

    checkVariants(c, inp, row);

    if (timing && c.time) {
      const flops = 4 * inp.pairs * c.dim;
      // A 256 MB fill before each call, outside the timed region (as the side-by-side script and
      // do_bench do): it clears the L2 and keeps the GPU busy while the host prepares the launch,
      // so the time is the kernel's and not the host's.
      using flush = Tensor.empty([64 << 20], { dtype: "float32", device: "cuda" });
      const before = () => void flush.fill(0);
      const time = (path: "sm90" | "general", pingPong = true) => {
        using output = Tensor.empty(inp.qShape, { dtype: c.dtype, device: "cuda" });
        setPath(path);
        if (!pingPong) Deno.env.set("ATTNKIT_ATTN_PINGPONG", "0");
        try {
          return timeIt(() => attention(inp.q, inp.k, inp.v, { ...inp.options, out: { output } }), {
            device: "cuda",
            warmup: 3,
            iterations: 20,
            before,
          }).medianMs;
        } finally {
          setPath("auto");
          Deno.env.delete("ATTNKIT_ATTN_PINGPONG");
        }
      };
      row.generalMs = time("general");
      row.generalTflops = flops / row.generalMs / 1e9;
      if (row.status !== "general only") {
        row.fastMs = time("sm90");
        row.fastTflops = flops / row.fastMs / 1e9;
        row.fastNoPingPongMs = time("sm90", false);
        row.kernelMs = {};
        for (const k of Object.keys(row.kernelErr ?? {}) as Kernel[]) {
          Deno.env.set("ATTNKIT_ATTN_FWD_KERNEL", k);
          try {
            row.kernelMs[k] = time("sm90");
          } finally {
            Deno.env.delete("ATTNKIT_ATTN_FWD_KERNEL");
          }
        }
      }
    }
  } finally {
    inp.q.dispose();
    inp.k.dispose();
    inp.v.dispose();
  }
  return row;
}

// Every Hopper kernel variant built for the case, checked like the default one: no NaN or unwritten
// element, bit-identical on a second run, and within the error bound (against the CPU reference when
// the case has one, else within 8 units of the general path); the LSE within 1e-3.
function checkVariants(c: Case, inp: Inputs, row: Row): void {
  if (row.status === "general only") return;
  const gen = runPath(inp, c.dtype, "general")!;
  const ref = c.cpu ? cpuReference(inp) : undefined;
  try {
    const scale = maxAbsOf(gen.output);
    const unit = eps(c.dtype) * Math.max(scale, 1e-3);
    const expected = ref ?? gen;
    const bound = ref ? 2 * Math.max(compare(gen.output, ref.output).maxAbs, unit) + 1e-5 : 8 * unit;
    row.kernelErr = {};
    for (const k of KERNELS) {
      const r = runPath(inp, c.dtype, "sm90", k);
      if (r === undefined) continue;
      try {
        const cmp = compare(r.output, expected.output);
        row.kernelErr[k] = cmp.maxAbs;
        if (cmp.nanCount > 0 || cmp.nonFiniteMismatches > 0) {
          row.status = "FAIL";
          row.notes.push(
            `${k}: ${cmp.nanCount} NaN / unwritten, ${cmp.nonFiniteMismatches} non-finite mismatches`,
          );
        } else if (!(cmp.maxAbs <= bound)) {
          row.status = "FAIL";
          row.notes.push(`${k}: error ${cmp.maxAbs.toExponential(2)} > bound ${bound.toExponential(2)}`);
        }
        const l = lseError(r.lse, expected.lse);
        if (l < 0 || l > 1e-3) {
          row.status = "FAIL";
          row.notes.push(`${k}: LSE error ${l < 0 ? "(-inf rows or NaN differ)" : l.toExponential(2)}`);
        }
        const again = runPath(inp, c.dtype, "sm90", k)!;
        if (!sameBits(again.output, r.output)) {
          row.status = "FAIL";
          row.notes.push(`${k}: two runs differ (race?)`);
        }
        again.output.dispose();
        again.lse.dispose();
      } finally {
        r.output.dispose();
        r.lse.dispose();
      }
    }
  } finally {
    gen.output.dispose();
    gen.lse.dispose();
    ref?.output.dispose();
    ref?.lse.dispose();
  }
}

function cpuReference(inp: Inputs): RunResult {
  using qc = inp.q.device === "cpu" ? inp.q.clone() : inp.q.to("cpu");
  using kc = inp.k.device === "cpu" ? inp.k.clone() : inp.k.to("cpu");
  using vc = inp.v.device === "cpu" ? inp.v.clone() : inp.v.to("cpu");
  const r = attention(qc, kc, vc, { ...inp.options, returnLse: true });
  return { output: r.output, lse: r.lse };
}

function fmt(x: number | undefined, digits = 3): string {
  return x === undefined ? "-" : x < 0 ? "bad" : x.toExponential(digits - 1);
}

function describe(row: Row): string {
  const variants = Object.entries(row.kernelMs ?? {}).map(([k, ms]) => `${k} ${ms!.toFixed(3)}`).join(", ");
  const errs = Object.entries(row.kernelErr ?? {}).map(([k, e]) => `${k} ${fmt(e)}`).join(" ");
  const t = row.fastMs !== undefined
    ? ` | sm90 ${row.fastMs.toFixed(3)} ms ${row.fastTflops!.toFixed(0)} TFLOP/s (no ping-pong ${
      row.fastNoPingPongMs!.toFixed(3)
    } ms; ${variants}) | general ${row.generalMs!.toFixed(3)} ms ${row.generalTflops!.toFixed(0)} TFLOP/s`
    : row.generalMs !== undefined
    ? ` | general ${row.generalMs.toFixed(3)} ms ${row.generalTflops!.toFixed(0)} TFLOP/s`
    : "";
  const head = `${row.status.padEnd(12)} ${row.name.padEnd(48)} sm90 err ${fmt(row.fastErr)} general err ${
    fmt(row.generalErr)
  } sm90-general ${fmt(row.fastVsGeneral)} lse ${fmt(row.lseErr)} det ${row.deterministic ?? "-"}${
    errs ? ` [${errs}]` : ""
  }${t}`;
  return [head, ...row.notes.map((n) => `             ${n}`)].join("\n");
}

// Runs case `index` in a child process, so that a kernel fault (a sticky CUDA error) or a hang
// costs that case alone.
async function runChild(index: number, args: string[], timeoutMs: number): Promise<Row> {
  const name = CASES[index].name;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL(import.meta.url).pathname, "--case", String(index), ...args],
      stdout: "piped",
      stderr: "piped",
      signal: abort.signal,
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    const line = text.split("\n").find((l) => l.startsWith("ROW "));
    if (line) return JSON.parse(line.slice(4)) as Row;
    const tail = (text + new TextDecoder().decode(out.stderr)).trim().split("\n").slice(-8);
    const why = abort.signal.aborted ? `timed out after ${timeoutMs / 1000} s (hang?)` : `exit ${out.code}`;
    return { name, status: "FAIL", notes: [`child process ${why}`, ...tail] };
  } finally {
    clearTimeout(timer);
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      json: { type: "string" },
      only: { type: "string" },
      // Internal: run one case in this process and print its row as JSON.
      case: { type: "string" },
      seed: { type: "string" },
      // "cpu" exercises this script's own plumbing on the CPU backend (both "paths" are the CPU there).
      device: { type: "string", default: "cuda" },
    },
  });
  const device = values.device === "cpu" ? "cpu" : "cuda";
  if (device === "cuda" && !cudaAvailable()) {
    console.error("attention_selfcheck: no CUDA device; nothing to check (--device cpu checks the script)");
    Deno.exit(0);
  }
  const seed = Number(
    values.seed ?? Deno.env.get("ATTNKIT_TEST_SEED") ?? crypto.getRandomValues(new Uint32Array(1))[0],
  );
  if (values.case !== undefined) {
    const i = Number(values.case);
    let row: Row;
    try {
      row = checkCase(CASES[i], seed + 17 * i, !values.quick && device === "cuda", device);
    } catch (e) {
      row = {
        name: CASES[i].name,
        status: "FAIL",
        notes: [`threw: ${e instanceof Error ? e.message : String(e)}`],
      };
    }
    console.log(`ROW ${JSON.stringify(row)}`);
    Deno.exit(0);
  }
  const deviceName = device === "cuda" ? deviceInfo("cuda").name : "cpu";
  console.log(`attention_selfcheck on ${deviceName}`);
  console.log(`seed ${seed} (replay with ATTNKIT_TEST_SEED=${seed})`);
  const childArgs = ["--seed", String(seed), "--device", device, ...(values.quick ? ["--quick"] : [])];
  const rows: Row[] = [];
  for (const [i, c] of CASES.entries()) {
    if (values.only && !c.name.includes(values.only)) continue;
    if (device === "cpu" && !c.cpu) continue;
    const row = await runChild(i, childArgs, c.time && !values.quick ? 180_000 : 90_000);
    rows.push(row);
    console.log(describe(row));
  }
  const failed = rows.filter((r) => r.status === "FAIL").length;
  console.log(`attention_selfcheck: ${rows.length - failed} passed, ${failed} failed`);
  if (values.json) {
    await Deno.writeTextFile(values.json, JSON.stringify({ device: deviceName, seed, rows }, null, 2) + "\n");
  }
  Deno.exit(failed > 0 ? 1 : 0);
}
