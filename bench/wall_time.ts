/**
 * What the `deno bench` files share: each case's calls timed by the wall clock up to the device's finish,
 * and once the run ends a table of every case's median time, with its rate (`benchRates`: TFLOP/s or GB/s
 * per case); where and at which shapes the linear benches run (`linearSites`, `FLA_SHAPES`); inputs made once on
 * first use (`once`); and the guard that keeps a CUDA call off the general path (`generalPathReason`).
 *
 * @example
 * ```ts
 * import { benchWallTimes, byteRate } from "./wall_time.ts";
 * const bytes = 8e6;
 * benchWallTimes([{ name: "fill [cpu]", device: "cpu", run: () => new Float64Array(bytes / 8).fill(1) }], {
 *   group: (name) => name,
 *   heading: "\nmedian wall time per call:",
 *   row: (c, ms) => `  ${c.name} ${ms.toFixed(3)} ms ${byteRate(bytes, ms)}`,
 * });
 * ```
 *
 * @module
 */
import { modeFactor } from "../cli/flops.ts";
import { cudaAvailable, type Device, type DType, explain, type PlanQuery, synchronize } from "../mod.ts";

/** One benchmark case. */
export interface WallCase {
  /** Deno's name of the case; the table's rows are keyed by it. */
  name: string;
  /** The device waited for after each call. */
  device: Device;
  /** Makes the inputs (once); where given, it runs before the timed part, out of Deno's figures too. */
  prepare?: () => void;
  /** One call. */
  run: () => void;
  /** Why the case is not run (Deno lists it as ignored; the table says why). */
  ignore?: string;
}

/** How the table after the run reads. */
export interface WallTable<C extends WallCase> {
  /** Deno's group of a case, from its name. */
  group: (name: string) => string;
  /** The line above the rows. */
  heading: string;
  /** A case's row, from its median milliseconds. */
  row: (c: C, ms: number) => string;
}

/**
 * Registers each case with `Deno.bench`, keeping the wall time of its every call (the run and the wait for
 * the device), and prints the table of medians when the process ends (a case never run has no row, one
 * ignored a row saying why).
 */
export function benchWallTimes<C extends WallCase>(cases: readonly C[], table: WallTable<C>): void {
  const samples = new Map<string, number[]>();
  for (const c of cases) {
    Deno.bench({
      name: c.name,
      group: table.group(c.name),
      ignore: c.ignore !== undefined,
      fn: (b) => {
        if (c.prepare) {
          c.prepare();
          synchronize(c.device);
          b.start();
        }
        const t0 = performance.now();
        c.run();
        synchronize(c.device);
        const ms = performance.now() - t0;
        if (c.prepare) b.end();
        const list = samples.get(c.name) ?? [];
        list.push(ms);
        samples.set(c.name, list);
      },
    });
  }
  globalThis.addEventListener("unload", () => {
    const rows: string[] = [];
    for (const c of cases) {
      const s = [...(samples.get(c.name) ?? [])].sort((a, b) => a - b);
      if (s.length > 0) rows.push(table.row(c, s[s.length >> 1]));
      else if (c.ignore !== undefined) rows.push(`  ${c.name}: not run, ${c.ignore}`);
    }
    // No table where `--filter` left none of this file's cases.
    if (rows.length > 0) console.log([table.heading, ...rows].join("\n"));
  });
}

/**
 * `flops` in `ms` as a table cell: TFLOP/s, or GFLOP/s below 1 TFLOP/s.
 *
 * @example
 * ```ts
 * import { flopRate } from "./wall_time.ts";
 * console.log(flopRate(2e12, 1000), flopRate(5e11, 1000)); // "     2.0 TFLOP/s" "  500.00 GFLOP/s"
 * ```
 */
export function flopRate(flops: number, ms: number): string {
  const tflops = flops / ms / 1e9;
  return tflops >= 1
    ? `${tflops.toFixed(1).padStart(8)} TFLOP/s`
    : `${(tflops * 1e3).toFixed(2).padStart(8)} GFLOP/s`;
}

/**
 * `bytes` in `ms` as a table cell, in GB/s.
 *
 * @example
 * ```ts
 * import { byteRate } from "./wall_time.ts";
 * console.log(byteRate(4e9, 1000)); // "     4.0 GB/s"
 * ```
 */
export function byteRate(bytes: number, ms: number): string {
  return `${(bytes / ms / 1e6).toFixed(1).padStart(8)} GB/s`;
}

/** A case rated by its FLOPs (TFLOP/s) or, without them, by the bytes it moves (GB/s). */
export interface RatedCase extends WallCase {
  /** FLOPs of one call. */
  flops?: number;
  /** Bytes one call moves (read with `flops` absent). */
  bytes?: number;
}

/**
 * {@link benchWallTimes} for cases named `<op> <mode> <shape> <dtype> [<device>]`: grouped by op, mode and
 * device, and the table's row the median wall time with TFLOP/s (or GB/s where a case counts bytes).
 *
 * @example
 * ```ts
 * import { benchRates } from "./wall_time.ts";
 * benchRates([
 *   { name: "fill fwd N1e6 float64 [cpu]", device: "cpu", bytes: 8e6, run: () => new Float64Array(1e6).fill(1) },
 * ]);
 * ```
 */
export function benchRates(cases: readonly RatedCase[]): void {
  const width = Math.max(0, ...cases.map((c) => c.name.length));
  benchWallTimes(cases, {
    group: (name) => name.replace(/^(\S+ \S+).*\[(\w+)\]$/, "$1 [$2]"),
    heading: "\nmedian wall time per call (including the wait for the device):",
    row: (c, ms) => {
      const rate = c.flops === undefined ? byteRate(c.bytes ?? 0, ms) : flopRate(c.flops, ms);
      return `  ${c.name.padEnd(width)} ${ms.toFixed(3).padStart(10)} ms ${rate}`;
    },
  });
}

/** A linear-attention problem: batch, tokens, heads, head dim (K = V). */
export interface LinearShape {
  /** Batch. */
  B: number;
  /** Tokens per sequence. */
  T: number;
  /** Heads. */
  H: number;
  /** Head dim of q, k and v. */
  D: number;
}

/** flash-linear-attention's six benchmark shapes (../shared/ANCHORS.md), which the side-by-side scripts use. */
export const FLA_SHAPES: readonly LinearShape[] = [
  { B: 1, T: 8192, H: 96, D: 128 },
  { B: 2, T: 16384, H: 16, D: 128 },
  { B: 4, T: 2048, H: 16, D: 128 },
  { B: 4, T: 4096, H: 64, D: 128 },
  { B: 8, T: 2048, H: 32, D: 256 },
  { B: 8, T: 1024, H: 8, D: 64 },
];

/** The name the side-by-side records use, e.g. `B4_T2048_H16_D128`. */
export function linearShapeName(s: LinearShape): string {
  return `B${s.B}_T${s.T}_H${s.H}_D${s.D}`;
}

/** Where a linear bench runs: a device, its dtype, its chunked shapes and its decode size. */
export interface LinearSite {
  /** The device. */
  device: Device;
  /** The inputs' dtype. */
  dtype: DType;
  /** The shapes of the chunked forward and backward. */
  shapes: readonly LinearShape[];
  /** The decode step's sequences, heads and head dim (K = V). */
  decode: { B: number; H: number; D: number };
}

/**
 * The linear benches' sites, bfloat16: the CPU backend at one small shape (so the whole `deno bench` stays
 * quick), and CUDA when present at `cudaShapes` (default FLA's six) with decode at B 256, H 32, D 128.
 */
export function linearSites(cudaShapes: readonly LinearShape[] = FLA_SHAPES): LinearSite[] {
  const dtype = "bfloat16";
  const sites: LinearSite[] = [
    { device: "cpu", dtype, shapes: [{ B: 1, T: 256, H: 4, D: 64 }], decode: { B: 8, H: 4, D: 64 } },
  ];
  if (cudaAvailable()) {
    sites.push({ device: "cuda", dtype, shapes: cudaShapes, decode: { B: 256, H: 32, D: 128 } });
  }
  return sites;
}

/**
 * `make`, called on first use and remembered: the inputs and buffers of a case, made only when a case
 * that needs them runs (so `--filter` allocates nothing else).
 */
export function once<T>(make: () => T): () => T {
  let made: { value: T } | undefined;
  return () => (made ??= { value: make() }).value;
}

/**
 * Why a call on `device` of `dtype` described by `query` would take the general path on CUDA (host copies:
 * minutes a call at the benchmark shapes), or undefined where a kernel serves it or the device is the CPU
 * (whose only path that is).
 */
export function generalPathReason(
  device: Device,
  dtype: DType,
  query: Omit<PlanQuery, "device" | "dtype">,
): string | undefined {
  if (device === "cpu") return undefined;
  // A dtype the planner has no kernels for is its to refuse, with the reason.
  const plan = explain({ ...query, device, dtype: dtype as PlanQuery["dtype"] });
  return plan.path === "general" ? `the general path (${plan.details.why ?? "no kernel"})` : undefined;
}

/** The two training cases of an op at one shape (see {@link trainingCases}). */
export interface TrainingCases {
  /** The op's name in the cases' names, e.g. `chunkGla`. */
  op: string;
  /** The shape's name, e.g. `B4_T2048_H16_D128`. */
  shape: string;
  /** The device. */
  device: Device;
  /** The inputs' dtype. */
  dtype: DType;
  /** FLOPs of one forward. */
  flops: number;
  /** The planner's queries for the forward and the backward, less device and dtype. */
  plans: readonly [Omit<PlanQuery, "device" | "dtype">, Omit<PlanQuery, "device" | "dtype">];
  /** Makes the inputs and buffers (once). */
  prepare: () => void;
  /** One forward, its result freed. */
  forward: () => void;
  /** One forward and its backward, as a training step runs them. */
  forwardBackward: () => void;
}

/**
 * `<op> fwd` and `<op> fwd+bwd` at one shape, counting forward + backward as the linear ops do
 * (cli/flops.ts's `modeFactor`, 3x the forward); on CUDA each is ignored where the planner would take the
 * general path for its forward or backward.
 */
export function trainingCases(t: TrainingCases): RatedCase[] {
  const name = (mode: string) => `${t.op} ${mode} ${t.shape} ${t.dtype} [${t.device}]`;
  const fwdGeneral = generalPathReason(t.device, t.dtype, t.plans[0]);
  const common = { device: t.device, prepare: t.prepare };
  return [
    { ...common, name: name("fwd"), flops: t.flops, ignore: fwdGeneral, run: t.forward },
    {
      ...common,
      name: name("fwd+bwd"),
      flops: modeFactor("linear", "fwdbwd") * t.flops,
      ignore: fwdGeneral ?? generalPathReason(t.device, t.dtype, t.plans[1]),
      run: t.forwardBackward,
    },
  ];
}
