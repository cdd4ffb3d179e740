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
import { type CacheFlags, cacheRecordName } from "./attention_decode.ts";
import {
  CASE_FLAGS_USAGE,
  CASE_OPTIONS,
  caseFlags,
  chooseDevice,
  defaultTiming,
  makeCase,
  timeMode,
} from "./cases.ts";
import { renderChart } from "./chart.ts";
import type { FeatureMapFlags } from "./feature_map.ts";
import { type PoolFlags, poolRecordName } from "./pool_decode.ts";
import type { Mode } from "./problem.ts";
import { note } from "./progress.ts";
import { readResults, type ResultRecord, type ResultsFile, resultsMarkdown } from "./results.ts";
import {
  isDecode,
  isPoolDecode,
  OP_FUNCTION,
  opLabel,
  opModes,
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
DIR/<op>.md and DIR/<op>.svg (attnkit vs the reference per shape). Progress goes to stderr. gbps counts
the least bytes a call moves: the decode ops' (gdn-decode, deltanet-decode, gla-decode: the fp32 state
read and written, the token's inputs and o; kda-decode, gdn-pool-decode: each resumed slot read and each
named slot written, the token's inputs and o; attention-decode: the K and V cache, q, o) and the forwards
of the linear ops and fmap (q, k, v, o and the float32 gates and beta, once each); it is null for
forward + backward, as tflops is for the decode ops.

${OPS_USAGE}

Options:
  --shapes LIST        comma-separated shapes, e.g. B1_T8192_H96_D128,B4_T2048_H16_D128
  --out DIR            where to write the results (created if needed)
  --ref FILE           a recorded results JSON: its reference times (ref_ms) for the same op, shape,
                       dtype and mode, or its attnkit times (ms) when it records no reference (a
                       before / after comparison)
  --modes LIST         fwd, bwd (attention only), fwdbwd (default fwd,fwdbwd; the decode ops fwd only)
  --dtype DTYPE        bf16 (default), fp16, fp32 (not attention, attention-decode)
  --device DEVICE      cpu, cuda, cuda:N (default: cuda when present)
  --causal             attention: causal mask for every shape (also a "_causal" shape suffix)
${CASE_FLAGS_USAGE}
  --iterations N       timed calls per value (default 3 on cpu, 20 on cuda)
  --warmup N           untimed calls first (default 1 on cpu, 3 on cuda)
  --seed N             seed of the random inputs (default 0)
  --title TEXT         the chart's and markdown's title
  -h, --help           this text

Shapes as check takes them (attnkit check --help). Examples:
  attnkit bench gdn --shapes B1_T8192_H96_D128,B4_T2048_H16_D128 --ref bench/results/2026-11-30g_linear.json --out out/
  attnkit bench gdn-decode --shapes B256_T1_H32_D128 --out out/ \\
    --ref bench/results/2026-12-04t_decode_tile_quads.json`;

const MODES: readonly Mode[] = ["fwd", "bwd", "fwdbwd"];

/** A recorded reference time for one (op, shape, dtype, mode). */
interface Reference {
  ref: string;
  ms: number;
}

/**
 * The op name a record carries: the op's function, with fmap's feature map and form as the side-by-side
 * benchmarks write them (`featureMapLinearAttention(elu+1, causal)`), attention-decode's cache layout
 * (`GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(page 64, ragged)`) and a pool decode step's
 * non-default gate transform and pool dtype (`recurrentKdaDecode(softplus, bfloat16 state)`), so --ref
 * pairs like with like.
 */
function recordName(op: OpName, fmap: FeatureMapFlags, cache: CacheFlags, pool: PoolFlags): string {
  if (op === "attention-decode") return cacheRecordName(cache);
  if (isPoolDecode(op)) return poolRecordName(op, pool);
  if (op !== "fmap") return OP_FUNCTION[op];
  const form = fmap.bidirectional ? "bidirectional" : "causal";
  return `${OP_FUNCTION[op]}(${fmap.phi}, ${form}${fmap.cosformer ? ", cosformer" : ""})`;
}

// The canonical key of a record of `op` (its name `name` where that tells variants apart), or undefined
// when its shape is not one the command line names.
function keyOf(op: OpName, name: string, shape: string, dtype: string, mode: string): string | undefined {
  const byName = op === "fmap" || op === "attention-decode" || isPoolDecode(op);
  try {
    return [byName ? name : op, shapeName(parseShape(shape, op), op), dtype, mode].join("|");
  } catch {
    return undefined;
  }
}

function opOf(fn: string): OpName | undefined {
  if (fn === "attentionBackward") return "attention";
  const base = fn.replace(/\(.*\)$/, ""); // featureMapLinearAttention(elu+1, causal)
  if (base === "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp") return "attention-decode";
  return (Object.keys(OP_FUNCTION) as OpName[]).find((op) => OP_FUNCTION[op] === base);
}

/** The references a results file records, per canonical (op, shape, dtype, mode). */
function referencesOf(file: ResultsFile, path: string): Map<string, Reference[]> {
  const found = new Map<string, Reference[]>();
  const previous = `attnkit ${file.commit ?? path}`;
  for (const r of file.records) {
    const op = opOf(r.op);
    const dtype = r.dtype.split(" ")[0]; // "bfloat16 (fp32 state)" -> "bfloat16"
    // The decode benchmarks call their one mode "decode": the decode ops' fwd.
    const mode = op && isDecode(op) && r.mode === "decode" ? "fwd" : r.mode;
    const key = op && keyOf(op, r.op, r.shape, dtype, mode);
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
      modes: { type: "string" },
      dtype: { type: "string", default: "bf16" },
      device: { type: "string" },
      ...CASE_OPTIONS,
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
  const { fmap, cache, pool } = caseFlags(op, values);
  const shapes: Shape[] = values.shapes.split(",").filter((s) => s).map((s) => parseShape(s, op));
  // By default every mode the op times but attention's bwd alone.
  const taken = opModes(op);
  const modes = (values.modes ?? taken.filter((m) => m !== "bwd").join(",")).split(",").map((m) => {
    if (!(MODES as readonly string[]).includes(m)) {
      throw new UsageError(`--modes: unknown mode "${m}"; modes: fwd, bwd, fwdbwd`);
    }
    if (!taken.includes(m as Mode)) {
      throw new UsageError(`--modes: ${opLabel(op)} times ${taken.join(" and ")}, not ${m}`);
    }
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

  const fn = recordName(op, fmap, cache, pool);
  const records: ResultRecord[] = [];
  const total = shapes.length * modes.length;
  let step = 0;
  for (const shape of shapes) {
    const causal = values.causal! || shape.causal;
    const name = shapeName({ ...shape, causal }, op);
    const settings = { shape, dtype, device, seed, l2norm: values.l2norm!, ...fmap, cache, pool };
    using c = makeCase(op, settings, causal);
    for (const mode of modes) {
      step++;
      note(`bench ${op} ${name} ${mode} (${step}/${total})`);
      const { ms } = timeMode(c, mode, device, timing, (first, calls) => {
        note(`  ${calls} more calls of about ${first.toFixed(1)} s`);
      });
      const flops = c.flops?.(mode), bytes = c.bytes?.(mode);
      const tflops = flops !== undefined ? flops / ms / 1e9 : null;
      const gbps = bytes !== undefined ? bytes / ms / 1e6 : null;
      const matched: Reference[] = refs.get(keyOf(op, fn, name, dtype, mode)!) ?? [];
      note(
        `  ${ms.toFixed(3)} ms` + (tflops !== null ? `, ${tflops.toPrecision(3)} TFLOP/s` : "") +
          (gbps !== null ? `, ${gbps.toPrecision(3)} GB/s` : "") +
          matched.map((r) => `; ${r.ref} ${r.ms.toFixed(3)} ms (${(r.ms / ms).toFixed(2)}x)`).join(""),
      );
      const base = { op: fn, shape: name, dtype, mode, ms, tflops, gbps };
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
  const title = values.title ?? `${fn} (attnkit ${VERSION})`;
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
