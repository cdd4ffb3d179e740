/**
 * `attnkit bench`: times an op over a list of shapes and writes the table as JSON (the records of
 * attnkit's side-by-side benchmarks), markdown and an SVG chart, optionally against reference times
 * recorded in another results file.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { deviceInfo, type DType } from "../mod.ts";
import { VERSION } from "../ffi/version.ts";
import { chooseDevice, defaultTiming, makeCase, timeMode } from "./cases.ts";
import { renderChart } from "./chart.ts";
import type { Mode } from "./problem.ts";
import { note } from "./progress.ts";
import { readResults, type ResultRecord, type ResultsFile, resultsMarkdown } from "./results.ts";
import {
  checkL2norm,
  OP_FUNCTION,
  type OpName,
  OPS_USAGE,
  parseCount,
  parseDtype,
  parseOp,
  parseShape,
  type Shape,
  shapeName,
  UsageError,
} from "./shape.ts";

/** The usage of `attnkit bench`. */
export const BENCH_USAGE = `Usage: attnkit bench <op> --shapes A,B,... --out DIR [options]

Times <op> on each shape (median of the timed calls; on a GPU the L2 cache is cleared before each) and
writes DIR/<op>.json (records {op, shape, dtype, mode, ms, ref, ref_ms, speedup, tflops, gbps}),
DIR/<op>.md and DIR/<op>.svg (attnkit vs the reference per shape). Progress goes to stderr.

${OPS_USAGE}

Options:
  --shapes LIST        comma-separated shapes, e.g. B1_T8192_H96_D128,B4_T2048_H16_D128
  --out DIR            where to write the results (created if needed)
  --ref FILE           a recorded results JSON: its reference times (ref_ms) for the same op, shape,
                       dtype and mode, or its attnkit times (ms) when it records no reference (a
                       before / after comparison)
  --modes LIST         fwd, bwd (attention only), fwdbwd (default fwd,fwdbwd)
  --dtype DTYPE        bf16 (default), fp16, fp32 (linear ops only)
  --device DEVICE      cpu, cuda, cuda:N (default: cuda when present)
  --causal             attention: causal mask for every shape (also a "_causal" shape suffix)
  --l2norm             gdn, deltanet: L2-normalise q and k in the kernel (useQkL2norm)
  --iterations N       timed calls per value (default 3 on cpu, 20 on cuda)
  --warmup N           untimed calls first (default 1 on cpu, 3 on cuda)
  --seed N             seed of the random inputs (default 0)
  --title TEXT         the chart's and markdown's title
  -h, --help           this text

Example:
  attnkit bench gdn --shapes B1_T8192_H96_D128,B4_T2048_H16_D128 --ref bench/results/2026-11-30g_linear.json --out out/`;

const MODES: readonly Mode[] = ["fwd", "bwd", "fwdbwd"];

/** A recorded reference time for one (op, shape, dtype, mode). */
interface Reference {
  ref: string;
  ms: number;
}

// The canonical key of a record, or undefined when its shape is not one the command line names.
function keyOf(op: OpName, shape: string, dtype: string, mode: string): string | undefined {
  try {
    return [op, shapeName(parseShape(shape, op), op), dtype, mode].join("|");
  } catch {
    return undefined;
  }
}

function opOf(fn: string): OpName | undefined {
  if (fn === "attentionBackward") return "attention";
  return (Object.keys(OP_FUNCTION) as OpName[]).find((op) => OP_FUNCTION[op] === fn);
}

/** The references a results file records, per canonical (op, shape, dtype, mode). */
function referencesOf(file: ResultsFile, path: string): Map<string, Reference[]> {
  const found = new Map<string, Reference[]>();
  const previous = `attnkit ${file.commit ?? path}`;
  for (const r of file.records) {
    const op = opOf(r.op);
    const dtype = r.dtype.split(" ")[0]; // "bfloat16 (fp32 state)" -> "bfloat16"
    const key = op && keyOf(op, r.shape, dtype, r.mode);
    if (!key) continue;
    const ref = r.ref_ms !== null && r.ref !== null
      ? { ref: r.ref, ms: r.ref_ms }
      : r.ms !== null
      ? { ref: previous, ms: r.ms }
      : undefined;
    if (!ref) continue;
    const list = found.get(key) ?? [];
    if (!list.some((x) => x.ref === ref.ref)) list.push(ref);
    found.set(key, list);
  }
  return found;
}

async function gitCommit(): Promise<string | undefined> {
  const here = new URL(".", import.meta.url);
  if (here.protocol !== "file:") return undefined;
  try {
    const out = await new Deno.Command("git", {
      args: ["-C", decodeURIComponent(here.pathname), "rev-parse", "--short", "HEAD"],
      stdout: "piped",
      stderr: "null",
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : undefined;
  } catch {
    return undefined; // no git, or no permission to run it
  }
}

/** Runs `attnkit bench` with its arguments; returns the exit status. */
export async function benchCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      shapes: { type: "string" },
      out: { type: "string" },
      ref: { type: "string" },
      modes: { type: "string", default: "fwd,fwdbwd" },
      dtype: { type: "string", default: "bf16" },
      device: { type: "string" },
      causal: { type: "boolean", default: false },
      l2norm: { type: "boolean", default: false },
      iterations: { type: "string" },
      warmup: { type: "string" },
      seed: { type: "string" },
      title: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(BENCH_USAGE);
    return 0;
  }
  const op = parseOp(positionals[0]);
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
  if (!values.shapes) throw new UsageError("missing --shapes");
  if (!values.out) throw new UsageError("missing --out");
  if (op !== "attention" && values.causal) throw new UsageError(`--causal: ${op} is causal by construction`);
  checkL2norm(op, values.l2norm);
  const shapes: Shape[] = values.shapes.split(",").filter((s) => s).map((s) => parseShape(s, op));
  const modes = values.modes!.split(",").map((m) => {
    if (!(MODES as readonly string[]).includes(m)) {
      throw new UsageError(`--modes: unknown mode "${m}"; modes: fwd, bwd, fwdbwd`);
    }
    if (m === "bwd" && op !== "attention") throw new UsageError(`--modes: ${op} times fwd and fwdbwd`);
    return m as Mode;
  });
  const dtype: DType = parseDtype(values.dtype!, op);
  const device = chooseDevice(values.device);
  const timing = defaultTiming(device);
  timing.iterations = parseCount(values.iterations, "iterations", timing.iterations, 1);
  timing.warmup = parseCount(values.warmup, "warmup", timing.warmup);
  timing.adaptive = values.iterations === undefined && values.warmup === undefined;
  const seed = parseCount(values.seed, "seed", 0);
  const refFile = values.ref ? await readResults(values.ref) : undefined;
  const refs = refFile ? referencesOf(refFile, values.ref!) : new Map<string, Reference[]>();
  const gpu = device === "cpu" ? "cpu" : deviceInfo(device).name;
  if (refFile?.gpu && !refFile.gpu.startsWith(gpu)) {
    note(`note: ${values.ref} was recorded on ${refFile.gpu}; this run is on ${gpu}`);
  }

  const records: ResultRecord[] = [];
  const total = shapes.length * modes.length;
  let step = 0;
  for (const shape of shapes) {
    const causal = values.causal! || shape.causal;
    const name = shapeName({ ...shape, causal }, op);
    using c = makeCase(op, { shape, dtype, device, seed, l2norm: values.l2norm! }, causal);
    for (const mode of modes) {
      step++;
      note(`bench ${op} ${name} ${mode} (${step}/${total})`);
      const { ms } = timeMode(c, mode, device, timing, (first, calls) => {
        note(`  ${calls} more calls of about ${first.toFixed(1)} s`);
      });
      const tflops = c.flops(mode) / ms / 1e9;
      const matched: Reference[] = refs.get(keyOf(op, name, dtype, mode)!) ?? [];
      note(
        `  ${ms.toFixed(3)} ms, ${tflops.toPrecision(3)} TFLOP/s` +
          matched.map((r) => `; ${r.ref} ${r.ms.toFixed(3)} ms (${(r.ms / ms).toFixed(2)}x)`).join(""),
      );
      const base = { op: OP_FUNCTION[op], shape: name, dtype, mode, ms, tflops, gbps: null };
      if (matched.length === 0) records.push({ ...base, ref: null, ref_ms: null, speedup: null });
      for (const r of matched) records.push({ ...base, ref: r.ref, ref_ms: r.ms, speedup: r.ms / ms });
    }
  }

  const file: ResultsFile = {
    date: new Date().toISOString().slice(0, 10),
    gpu,
    commit: await gitCommit(),
    records,
  };
  const title = values.title ?? `${OP_FUNCTION[op]} (attnkit ${VERSION})`;
  await Deno.mkdir(values.out, { recursive: true });
  const base = `${values.out.replace(/\/+$/, "")}/${op}`;
  await Deno.writeTextFile(
    `${base}.json`,
    JSON.stringify({ ...file, attnkit: VERSION, device }, null, 2) + "\n",
  );
  const markdown = resultsMarkdown(file, title);
  await Deno.writeTextFile(`${base}.md`, markdown);
  await Deno.writeTextFile(`${base}.svg`, renderChart(file, { title: values.title }));
  console.log(markdown);
  console.log(`wrote ${base}.json, ${base}.md and ${base}.svg`);
  return 0;
}
