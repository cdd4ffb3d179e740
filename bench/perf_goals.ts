/**
 * Judges side-by-side records (`bench/attention_side_by_side.ts`, `bench/linear_side_by_side.ts`, or any
 * file of `{op, shape, mode, ref, ms, speedup, tflops, gbps}` rows) against the goals in
 * `bench/perf_goals.json`, and prints one markdown row per goal: the measured value, the goal, whether it
 * is met, and the fraction of the floor the row reaches (`bench/ceilings.ts`: its TFLOP/s and GB/s against
 * the H200's ceilings). A goal no record matches is reported as not measured, never as met. When several
 * files hold the same row, the one named last wins.
 *
 * @example
 * ```sh
 * deno run -A bench/perf_goals.ts /tmp/out/2026-12-05_attention.json /tmp/out/2026-12-05_linear.json
 * ```
 *
 * @module
 */
import { scriptArgs } from "../tools/script_args.ts";
import { floorFraction } from "./ceilings.ts";

/** What a goal bounds from below. */
export type GoalMetric = "speedup" | "tflops" | "gbps";

/** One goal: the record it reads (op, shape, mode, and the start of the reference's name) and its bound. */
export interface PerfGoal {
  /** The row's name in the table. */
  row: string;
  op: string;
  shape: string;
  mode: string;
  /** The reference's name starts with this (e.g. `fla.chunk_gated_delta_rule`, live or from ANCHORS.md). */
  ref: string;
  metric: GoalMetric;
  /** The least value that meets the goal. */
  goal: number;
}

/** The fields of a side-by-side record that the goals read. */
export interface GoalRecord {
  op: string;
  shape: string;
  mode: string;
  ref: string;
  ms: number | null;
  ref_ms: number | null;
  speedup: number | null;
  tflops: number | null;
  gbps: number | null;
}

/** A goal, the record that answers it (null: not measured), its value and whether it meets the goal. */
export interface GoalVerdict {
  goal: PerfGoal;
  record: GoalRecord | null;
  value: number | null;
  /** null when the record or its value is missing. */
  met: boolean | null;
}

const METRICS: readonly GoalMetric[] = ["speedup", "tflops", "gbps"];

function fail(where: string, what: string): never {
  throw new Error(`perf_goals: ${where}: ${what}`);
}

/**
 * The goals of a goals file's text (`{ goals: [...] }`), each field checked.
 *
 * @example
 * ```ts
 * import { parseGoals } from "./perf_goals.ts";
 * const [g] = parseGoals(JSON.stringify({ goals: [{ row: "r", op: "attention", shape: "S", mode: "fwd",
 *   ref: "sdpa_cudnn", metric: "speedup", goal: 1 }] }));
 * console.log(g.goal); // 1
 * ```
 */
export function parseGoals(text: string): PerfGoal[] {
  const doc = JSON.parse(text);
  if (!Array.isArray(doc?.goals)) fail("goals file", "expected an object with a `goals` array");
  return doc.goals.map((g: Record<string, unknown>, i: number) => {
    const where = `goal ${i}`;
    for (const key of ["row", "op", "shape", "mode", "ref"]) {
      if (typeof g?.[key] !== "string" || g[key] === "") fail(where, `\`${key}\` must be a non-empty string`);
    }
    if (!METRICS.includes(g.metric as GoalMetric)) {
      fail(where, `\`metric\` must be one of ${METRICS.join(", ")}`);
    }
    if (typeof g.goal !== "number" || !(g.goal > 0)) fail(where, "`goal` must be a positive number");
    return g as unknown as PerfGoal;
  });
}

/**
 * The records of a results file's text: the side-by-side files' `records` or the before / after files'
 * `results` array.
 *
 * @example
 * ```ts
 * import { parseRecords } from "./perf_goals.ts";
 * const rows = parseRecords(JSON.stringify({ records: [{ op: "attention", shape: "S", mode: "fwd",
 *   ref: "sdpa_cudnn", ms: 1, ref_ms: 1.2, speedup: 1.2, tflops: 600, gbps: null }] }));
 * console.log(rows.length); // 1
 * ```
 */
export function parseRecords(text: string): GoalRecord[] {
  const doc = JSON.parse(text);
  const rows = doc?.records ?? doc?.results;
  if (!Array.isArray(rows)) fail("results file", "expected an object with a `records` or `results` array");
  const num = (x: unknown) => (typeof x === "number" && Number.isFinite(x) ? x : null);
  return rows.map((r: Record<string, unknown>) => ({
    op: String(r.op),
    shape: String(r.shape),
    mode: String(r.mode),
    ref: String(r.ref),
    ms: num(r.ms),
    ref_ms: num(r.ref_ms),
    speedup: num(r.speedup),
    tflops: num(r.tflops),
    gbps: num(r.gbps),
  }));
}

/**
 * Each goal against the records (the last matching record wins).
 *
 * @example
 * ```ts
 * import { judgeGoals } from "./perf_goals.ts";
 * const goal = { row: "r", op: "attention", shape: "S", mode: "fwd", ref: "sdpa_cudnn",
 *   metric: "speedup" as const, goal: 1 };
 * const [v] = judgeGoals([goal], [{ op: "attention", shape: "S", mode: "fwd", ref: "sdpa_cudnn", ms: 1,
 *   ref_ms: 0.9, speedup: 0.9, tflops: null, gbps: null }]);
 * console.log(v.met); // false
 * ```
 */
export function judgeGoals(goals: readonly PerfGoal[], records: readonly GoalRecord[]): GoalVerdict[] {
  return goals.map((goal) => {
    const record = records.findLast((r) =>
      r.op === goal.op && r.shape === goal.shape && r.mode === goal.mode && r.ref.startsWith(goal.ref)
    ) ?? null;
    const value = record?.[goal.metric] ?? null;
    return { goal, record, value, met: value === null ? null : value >= goal.goal };
  });
}

const fmt = (x: number | null, digits: number) => (x === null ? "n/a" : x.toFixed(digits));

/**
 * The verdicts as a markdown table (TFLOP/s, GB/s and the fraction of the floor beside each verdict) and a
 * summary line.
 *
 * @example
 * ```ts
 * import { goalsTable } from "./perf_goals.ts";
 * console.log(goalsTable([])); // the header and "0 of 0 goals met"
 * ```
 */
export function goalsTable(verdicts: readonly GoalVerdict[]): string {
  const lines = [
    "| row | shape | mode | attnkit ms | ref | ref ms | metric | value | goal | met | TFLOP/s | GB/s | of floor |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const { goal, record, value, met } of verdicts) {
    const digits = goal.metric === "speedup" ? 2 : 0;
    const tflops = record?.tflops ?? null, gbps = record?.gbps ?? null;
    const floor = floorFraction(tflops, gbps);
    lines.push(
      `| ${goal.row} | ${goal.shape} | ${goal.mode} | ${fmt(record?.ms ?? null, 3)} | ${
        record?.ref ?? goal.ref
      } | ${fmt(record?.ref_ms ?? null, 3)} | ${goal.metric} | ${fmt(value, digits)} | ${goal.goal} | ${
        met === null ? "not measured" : met ? "yes" : "no"
      } | ${fmt(tflops, 0)} | ${fmt(gbps, 0)} | ${floor === null ? "n/a" : `${(100 * floor).toFixed(0)}%`} |`,
    );
  }
  const met = verdicts.filter((v) => v.met === true).length;
  const missing = verdicts.filter((v) => v.met === null).length;
  lines.push("", `${met} of ${verdicts.length} goals met${missing ? ` (${missing} not measured)` : ""}`);
  return lines.join("\n");
}

if (import.meta.main) {
  const { values, positionals } = scriptArgs({
    args: Deno.args,
    strict: true,
    allowPositionals: true,
    options: { goals: { type: "string", default: new URL("./perf_goals.json", import.meta.url).pathname } },
  });
  if (positionals.length === 0) {
    console.error("usage: deno run -A bench/perf_goals.ts [--goals FILE] RESULTS.json...");
    Deno.exit(2);
  }
  const goals = parseGoals(await Deno.readTextFile(values.goals!));
  const records = (await Promise.all(positionals.map((f) => Deno.readTextFile(f)))).flatMap(parseRecords);
  console.log(goalsTable(judgeGoals(goals, records)));
}
