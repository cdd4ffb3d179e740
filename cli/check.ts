/**
 * `attnkit check`: runs an op on fresh random inputs, compares every output with the float64 oracle
 * under the dtype's tolerance rule, and times it (TFLOP/s, and GB/s where the op's bytes are counted).
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  CASE_FLAGS_USAGE,
  CASE_OPTIONS,
  caseFlags,
  chooseDevice,
  defaultTiming,
  makeCase,
  oracleSeconds,
  timeMode,
} from "./cases.ts";
import type { CheckRow, Mode, OpCase } from "./problem.ts";
import { note, Progress } from "./progress.ts";
import {
  checkBackward,
  CliError,
  OPS_USAGE,
  parseCount,
  parseDtype,
  parseOp,
  parseShape,
  shapeName,
  UsageError,
} from "./shape.ts";

/** The usage of `attnkit check`. */
export const CHECK_USAGE = `Usage: attnkit check <op> --shape SHAPE [options]

Runs <op> on fresh random inputs, compares each output with the float64 oracle under the dtype's
tolerance, and times it. Exit status 0 when every output passes, 1 when one fails, 2 on a usage error.

${OPS_USAGE}

Options:
  --shape SHAPE        e.g. B2_T1000_H4_D128; attention B2_S1024_H8_HKV2_D128 (HKV: key-value heads,
                       SKV: key length); linear ops HK (query/key heads), DV (value dim); fmap DV;
                       gdn-decode, deltanet-decode, gla-decode, kda-decode, gdn-pool-decode
                       B256_H32_D128 (no T: one token; T1 allowed), HK, DV; attention-decode
                       B1_SKV65536_H32_HKV8_D128 (SKV or S: the cache length; one query token), HKV
  --dtype DTYPE        bf16 (default), fp16, fp32 (not attention, attention-decode)
  --device DEVICE      cpu, cuda, cuda:N (default: cuda when present)
  --causal             attention: causal mask (also a "_causal" shape suffix)
${CASE_FLAGS_USAGE}
  --backward           check the gradients too, and time forward + backward (not the decode ops)
  --seed N             seed of the random inputs (default 0)
  --oracle-batches N   compare only the first N batch rows (the op runs on all; the oracle is slow)
  --force              run the oracle even when it would take more than 5 minutes
  --iterations N       timed calls (default 3 on cpu, 20 on cuda; 0 skips timing)
  --warmup N           untimed calls first (default 1 on cpu, 3 on cuda)
  --quiet              no progress on stderr
  -h, --help           this text

Examples:
  attnkit check gdn --shape B2_T1000_H4_D128 --dtype bf16 --device cuda --backward
  attnkit check fmap --shape B2_T1024_H8_D64 --feature-map relu --bidirectional --backward
  attnkit check gdn-decode --shape B256_H32_D128 --l2norm   # GB/s beside the time
  attnkit check kda-decode --shape B64_H16_D128 --state-dtype bf16   # a slot pool, random slots`;

// Above this many seconds the oracle refuses to start without --force; above NOTE_SECONDS it says so.
const LIMIT_SECONDS = 300;
const NOTE_SECONDS = 10;

function fmt(x: number): string {
  return Number.isFinite(x) ? x.toExponential(2) : String(x);
}

function rowLine(r: CheckRow): string {
  const verdict = r.pass ? "PASS" : `FAIL${r.problem ? ` (${r.problem})` : ""}`;
  return `  ${r.name.padEnd(12)} max abs ${fmt(r.maxAbs).padEnd(9)}  rel RMS ${fmt(r.relRms).padEnd(9)}  ` +
    `${r.bound}  ${verdict}`;
}

function seconds(s: number): string {
  return s < 120 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : `${(s / 60).toFixed(1)} min`;
}

// A rate as the time line prints it: a few digits, more of them below 1.
function rate(x: number): string {
  return x >= 1 ? x.toFixed(1) : x.toPrecision(2);
}

// The TFLOP/s and GB/s of a mode's median time, where the case counts them.
function rates(c: OpCase, mode: Mode, ms: number): string {
  const flops = c.flops?.(mode), bytes = c.bytes?.(mode);
  return [
    ...(flops !== undefined ? [`${rate(flops / ms / 1e9)} TFLOP/s`] : []),
    ...(bytes !== undefined ? [`${rate(bytes / ms / 1e6)} GB/s`] : []),
  ].map((x) => `  ${x}`).join("");
}

/** Runs `attnkit check` with its arguments; returns the exit status. */
export function checkCommand(args: string[]): number {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      shape: { type: "string" },
      dtype: { type: "string", default: "bf16" },
      device: { type: "string" },
      ...CASE_OPTIONS,
      backward: { type: "boolean", default: false },
      seed: { type: "string" },
      "oracle-batches": { type: "string" },
      force: { type: "boolean", default: false },
      iterations: { type: "string" },
      warmup: { type: "string" },
      quiet: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(CHECK_USAGE);
    return 0;
  }
  const op = parseOp(positionals[0]);
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
  if (values.shape === undefined) throw new UsageError("missing --shape");
  const shape = parseShape(values.shape, op);
  const causal = values.causal || shape.causal;
  checkBackward(op, values.backward!);
  const { fmap, cache, pool } = caseFlags(op, values);
  const { bidirectional } = fmap;
  // The oracle's cost follows fmap's causal form as it does attention's mask.
  const masked = op === "fmap" ? !bidirectional : causal;
  const dtype = parseDtype(values.dtype!, op);
  const seed = parseCount(values.seed, "seed", 0);
  const batches = parseCount(values["oracle-batches"], "oracle-batches", shape.batch, 1);
  if (batches > shape.batch) {
    throw new UsageError(`--oracle-batches: ${batches} is more than the shape's ${shape.batch} batch rows`);
  }
  const device = chooseDevice(values.device);
  const timing = defaultTiming(device);
  timing.iterations = parseCount(values.iterations, "iterations", timing.iterations);
  timing.warmup = parseCount(values.warmup, "warmup", timing.warmup);
  timing.adaptive = values.iterations === undefined && values.warmup === undefined;
  const backward = values.backward!;
  const quiet = values.quiet!;

  // The CPU backend's plain loops take about half the oracle's time a call: count the checked call and
  // the first timed one there.
  const opCalls = timing.iterations > 0 ? 2 : 1;
  const opSeconds = device === "cpu"
    ? opCalls * oracleSeconds(op, shape, masked, shape.batch, backward) / 2
    : 0;
  const estimate = oracleSeconds(op, shape, masked, batches, backward) + opSeconds;
  if (estimate > LIMIT_SECONDS && !values.force) {
    let fit = 0;
    while (
      fit < batches && oracleSeconds(op, shape, masked, fit + 1, backward) + opSeconds <= LIMIT_SECONDS
    ) fit++;
    const hint = fit > 0
      ? `compare ${fit} batch row${fit > 1 ? "s" : ""} with --oracle-batches ${fit}`
      : device === "cpu"
      ? "use a smaller shape on the CPU"
      : "use a shorter sequence or fewer heads";
    throw new CliError(
      `the check would take about ${seconds(estimate)} (the float64 oracle over ${batches} batch ` +
        `row${batches > 1 ? "s" : ""}${
          device === "cpu" ? ", and the op on the CPU backend" : ""
        }); ${hint}, ` +
        `or pass --force`,
      2,
      false,
    );
  }
  const settings = { shape, dtype, device, seed, l2norm: values.l2norm!, ...fmap, cache, pool };
  using c = makeCase(op, settings, causal);
  const title = `attnkit check ${op} ${shapeName(shape, op)}${causal && !shape.causal ? "_causal" : ""} ` +
    `${dtype} on ${device} (seed ${seed})`;
  console.log(title);
  console.log(`  inputs       ${c.description}`);
  if (estimate > NOTE_SECONDS && !quiet) {
    note(`check: about ${seconds(estimate)} of work on the CPU`);
  }

  const progress = new Progress("oracle", quiet);
  const rows = c.check(batches, backward, (done, total) => progress.update(done, total));
  const oracleTime = progress.finish();
  console.log(
    `  oracle       float64, batch rows ${batches} of ${shape.batch}${
      backward ? ", forward and backward" : ""
    } ` +
      `(${seconds(oracleTime)})`,
  );
  for (const r of rows) console.log(rowLine(r));

  if (timing.iterations > 0) {
    const modes = backward ? ["fwd", "fwdbwd"] as const : ["fwd"] as const;
    for (const mode of modes) {
      const { ms, calls } = timeMode(c, mode, device, timing, (first, more) => {
        if (!quiet) note(`timing ${mode}: ${more} more calls of about ${seconds(first)}`);
      });
      console.log(
        `  time ${mode.padEnd(7)} ${ms.toFixed(3)} ms (${calls > 1 ? `median of ${calls}` : "one call"})` +
          rates(c, mode, ms),
      );
    }
  }
  const failed = rows.filter((r) => !r.pass).map((r) => r.name);
  console.log(failed.length === 0 ? "PASS" : `FAIL: ${failed.join(", ")}`);
  return failed.length === 0 ? 0 : 1;
}
