/**
 * The measured tables the planner's rules are held to: a tuning sweep (`tools/tune_sweep.ts --record`)
 * times one op at several shapes under every setting of some tuning keys, on one GPU, and records each
 * setting's kernels and milliseconds in `bench/results/<date>_<name>_sweep.json`. A planner rule is
 * right for a table when, at every shape, the kernels the planner picks untuned were measured and are
 * within the noise of the fastest setting (`tests/shipped_defaults.test.ts`). Re-measuring every table
 * (`tools/tune_sweep.ts --regenerate`) is how the shipped defaults are re-fitted on a new GPU or after a
 * kernel change.
 *
 * @example
 * ```ts
 * import { readSweepTables } from "./sweep_tables.ts";
 * for (const { file, table } of await readSweepTables("bench/results")) console.log(file, table.op, table.rows.length);
 * ```
 *
 * @module
 */
import type { PlanQuery } from "../mod.ts";

/** The ops a sweep can time, as `tools/tune_sweep.ts` names them. */
export const SWEEP_OPS = ["gdn-fwd", "gdn-fwdbwd", "gdn-bwd-recompute", "attn-fwd", "attn-bwd"] as const;

/** One op a sweep times. */
export type SweepOp = typeof SWEEP_OPS[number];

/** One setting of the swept keys at one shape. */
export interface SweepSetting {
  /** The tuning keys and values applied (the keys not named stay on auto). */
  spec: Record<string, string>;
  /** The kernels the call ran under it, in plan order (empty when it could not serve the call). */
  kernels: string[];
  /** Median milliseconds with the L2 flushed, or null when the setting cannot serve the call. */
  ms: number | null;
  /** Why it could not serve, or anything else worth keeping. */
  note?: string;
}

/** One shape of a sweep: every setting's time. */
export interface SweepRow {
  /** `B<b>_T<t>_H<h>_D<d>` (linear) or `B<b>_S<s>_H<h>[_KV<hkv>]_D<d>[_causal]` (attention). */
  shape: string;
  settings: SweepSetting[];
}

/** A recorded sweep: one op, one GPU, the keys swept, and a row per shape. */
export interface SweepTable {
  kind: "tuning sweep";
  date: string;
  gpu: string;
  commit: string;
  op: SweepOp;
  /** Always bfloat16 today. */
  dtype: string;
  keys: string[];
  /** Timed calls per setting (the median is kept). */
  iterations: number;
  rows: SweepRow[];
  /** Where the figures came from, when not from `--record` itself. */
  source?: string;
}

/** The sizes of a shape name: `B2_T4096_H16_D128` is `{ b: 2, t: 4096, h: 16, d: 128 }`. */
export function parseShape(shape: string): Record<string, number | boolean> {
  const out: Record<string, number | boolean> = {};
  for (const part of shape.split("_")) {
    if (part === "causal") {
      out.causal = true;
      continue;
    }
    const m = /^([A-Z]+)(\d+)$/.exec(part);
    if (!m) {
      throw new Error(
        `shape ${shape}: cannot read "${part}" (B<b>_T<t>_H<h>_D<d> or B<b>_S<s>_H<h>[_KV<kv>]_D<d>)`,
      );
    }
    out[m[1].toLowerCase()] = Number(m[2]);
  }
  return out;
}

/** The GPU of `explain` for a device name as `deviceInfo` reports it ("NVIDIA H200" is `h200`). */
export function plannerGpu(name: string): PlanQuery["gpu"] | undefined {
  const known = [["H200", "h200"], ["H100", "h100"], ["A100", "a100"], ["L40S", "l40s"]] as const;
  return known.find(([k]) => name.toUpperCase().includes(k))?.[1];
}

/**
 * The `explain` query of the call a sweep op makes at a shape (bf16; the delta-rule calls normalise q
 * and k, as the sweep's do). `gdn-fwdbwd` records the backward's plan, which takes the forward's states.
 */
export function sweepQuery(op: SweepOp, shape: string, gpu: PlanQuery["gpu"]): PlanQuery {
  const s = parseShape(shape);
  const n = (key: string) => {
    const v = s[key];
    if (typeof v !== "number") throw new Error(`shape ${shape}: ${key.toUpperCase()} missing for ${op}`);
    return v;
  };
  if (op.startsWith("gdn")) {
    const linear = {
      gpu,
      dtype: "bfloat16",
      b: n("b"),
      t: n("t"),
      h: n("h"),
      k: n("d"),
    } as const;
    // The forward's plan does not depend on the normalisation (its prep applies it either way).
    if (op === "gdn-fwd") return { op: "linear.fwd", ...linear };
    return { op: "linear.bwd", ...linear, l2norm: true, saved: op === "gdn-fwdbwd" };
  }
  const hq = n("h");
  return {
    op: op === "attn-fwd" ? "attention.fwd" : "attention.bwd",
    gpu,
    dtype: "bfloat16",
    b: n("b"),
    sq: n("s"),
    hq,
    hkv: typeof s.kv === "number" ? s.kv : hq,
    d: n("d"),
  };
}

/** A sweep table and the file it was read from. */
export interface RecordedSweep {
  file: string;
  table: SweepTable;
}

/** Reads every `*_sweep.json` of a folder, oldest first (the names start with the date). */
export async function readSweepTables(dir: string): Promise<RecordedSweep[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) if (e.isFile && e.name.endsWith("_sweep.json")) names.push(e.name);
  const out: RecordedSweep[] = [];
  for (const name of names.sort()) {
    const table = JSON.parse(await Deno.readTextFile(`${dir}/${name}`)) as SweepTable;
    checkTable(table, name);
    out.push({ file: `${dir}/${name}`, table });
  }
  return out;
}

function checkTable(t: SweepTable, name: string): void {
  const fail = (what: string) => {
    throw new Error(`${name}: ${what}`);
  };
  if (t.kind !== "tuning sweep") fail(`kind is ${t.kind}, expected "tuning sweep"`);
  if (!(SWEEP_OPS as readonly string[]).includes(t.op)) {
    fail(`op ${t.op} is not one of ${SWEEP_OPS.join(", ")}`);
  }
  if (!Array.isArray(t.rows) || t.rows.length === 0) fail("no rows");
  for (const row of t.rows) {
    parseShape(row.shape);
    if (!row.settings.some((s) => typeof s.ms === "number")) fail(`${row.shape}: no setting was timed`);
  }
}

/** The tables to hold the planner to: the newest of each (GPU, op, keys). */
export function newestTables(recorded: readonly RecordedSweep[]): RecordedSweep[] {
  const newest = new Map<string, RecordedSweep>();
  for (const r of recorded) {
    newest.set(`${r.table.gpu} | ${r.table.op} | ${[...r.table.keys].sort().join(",")}`, r);
  }
  return [...newest.values()];
}

/** How the planner's untuned choice fares at one row of a table. */
export interface RowVerdict {
  shape: string;
  /** The kernels the planner picks. */
  planner: string[];
  /** The planner's measured milliseconds (null: no setting of the table ran those kernels). */
  plannerMs: number | null;
  /** The fastest setting and its milliseconds. */
  best: SweepSetting;
  /** plannerMs / best.ms (null with plannerMs). */
  ratio: number | null;
}

/**
 * The planner's choice at each row of a table against the row's fastest setting. `plan` returns the
 * kernels the planner picks for a query (in a test: `explain(query).kernels` names).
 */
export function judgePlanner(table: SweepTable, plan: (q: PlanQuery) => string[]): RowVerdict[] {
  const gpu = plannerGpu(table.gpu);
  if (!gpu) throw new Error(`${table.op} sweep: the planner knows no GPU named like ${table.gpu}`);
  return table.rows.map((row) => {
    const planner = plan(sweepQuery(table.op, row.shape, gpu));
    const timed = row.settings.filter((s) => typeof s.ms === "number");
    const best = timed.reduce((a, b) => (b.ms! < a.ms! ? b : a));
    const same = timed.filter((s) => s.kernels.join(" + ") === planner.join(" + "));
    // Several settings can resolve to the planner's kernels (auto and the explicit value): their best.
    const plannerMs = same.length ? Math.min(...same.map((s) => s.ms!)) : null;
    return {
      shape: row.shape,
      planner,
      plannerMs,
      best,
      ratio: plannerMs === null ? null : plannerMs / best.ms!,
    };
  });
}
