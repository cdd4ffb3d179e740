/**
 * Benchmark results as recorded in JSON: one record per (op, shape, dtype, mode) with attnkit's time
 * and a reference's, read from any of the layouts the recorded files use, and printed as markdown.
 *
 * @module
 */
import { type AttnkitError, invalidArgument } from "../ffi/errors.ts";
import { checkArgument } from "../ops/args.ts";

/** One row of a results file: attnkit's time for a call and, when known, a reference's. */
export interface ResultRecord {
  /** attnkit's function, e.g. `chunkGatedDeltaRule` or `attention`. */
  op: string;
  /** The shape's name, e.g. `B2_T4096_H16_D128`. */
  shape: string;
  /** The inputs' dtype. */
  dtype: string;
  /** `fwd`, `bwd`, `fwdbwd` or `decode`. */
  mode: string;
  /** attnkit's median milliseconds (null when not run). */
  ms: number | null;
  /** What the reference is, e.g. `fla.chunk_gated_delta_rule` (null when none). */
  ref: string | null;
  /** The reference's milliseconds. */
  ref_ms: number | null;
  /** `ref_ms / ms` (above 1: attnkit is faster). */
  speedup: number | null;
  /** attnkit's TFLOP/s. */
  tflops: number | null;
  /** attnkit's GB/s (memory-bound modes). */
  gbps: number | null;
  /** Why a value is missing, or anything else worth a word. */
  note?: string;
}

/** A results file: where and when it was measured, and its records. */
export interface ResultsFile {
  /** `YYYY-MM-DD`. */
  date?: string;
  /** The GPU (or `cpu`). */
  gpu?: string;
  /** The commit measured. */
  commit?: string;
  /** The records, in the order measured. */
  records: ResultRecord[];
}

// A results file that cannot be read: an AttnkitError naming the file (or argument) and the field.
function formatError(message: string): AttnkitError {
  return invalidArgument("parseResults", message);
}

function numberOrNull(value: unknown, where: string): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw formatError(`${where}: expected a finite number or null, got ${JSON.stringify(value)}`);
  }
  return value;
}

function stringField(value: unknown, where: string): string {
  if (typeof value !== "string" || value === "") {
    throw formatError(`${where}: expected a non-empty string, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Reads a parsed results JSON: an object with `records` (attnkit's bench and side-by-side scripts) or
 * `results` (before / after runs), or a bare array of records. Missing optional numbers become null
 * (the speedup is derived from ms and ref_ms when absent); a record without op, shape or mode is
 * refused with its index. `name` is how messages call the input (e.g. its file).
 *
 * @example
 * ```ts
 * import { parseResults } from "@attnkit/attnkit/cli";
 * const file = parseResults([{ op: "attention", shape: "B1_S64_H2_D64", mode: "fwd", ms: 2, ref: "x", ref_ms: 3 }]);
 * console.log(file.records[0].speedup); // 1.5
 * ```
 */
export function parseResults(json: unknown, name = "results"): ResultsFile {
  checkArgument("parseResults", "name", name, "string");
  const top = Array.isArray(json) ? { records: json } : json;
  if (typeof top !== "object" || top === null) {
    throw formatError(`${name}: expected a JSON object with "records", got ${typeof json}`);
  }
  const obj = top as Record<string, unknown>;
  const list = obj.records ?? obj.results;
  if (!Array.isArray(list) || list.length === 0) {
    throw formatError(`${name}: no "records" (or "results") array of benchmark rows`);
  }
  const records = list.map((raw, i): ResultRecord => {
    const where = `${name}: record ${i}`;
    if (typeof raw !== "object" || raw === null) throw formatError(`${where}: not an object`);
    const r = raw as Record<string, unknown>;
    const ms = numberOrNull(r.ms, `${where}.ms`);
    const refMs = numberOrNull(r.ref_ms, `${where}.ref_ms`);
    const record: ResultRecord = {
      op: stringField(r.op, `${where}.op`),
      shape: stringField(r.shape, `${where}.shape`),
      dtype: typeof r.dtype === "string" ? r.dtype : "",
      mode: stringField(r.mode, `${where}.mode`),
      ms,
      ref: typeof r.ref === "string" && r.ref !== "" ? r.ref : null,
      ref_ms: refMs,
      speedup: numberOrNull(r.speedup, `${where}.speedup`) ??
        (ms !== null && refMs !== null && ms > 0 ? refMs / ms : null),
      tflops: numberOrNull(r.tflops, `${where}.tflops`),
      gbps: numberOrNull(r.gbps, `${where}.gbps`),
    };
    if (typeof r.note === "string" && r.note !== "") record.note = r.note;
    return record;
  });
  const text = (v: unknown) => (typeof v === "string" && v !== "" ? v : undefined);
  return { date: text(obj.date), gpu: text(obj.gpu), commit: text(obj.commit), records };
}

/** Reads and parses a results JSON file. */
export async function readResults(path: string): Promise<ResultsFile> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw formatError(`${path}: ${e instanceof Error ? e.message : e}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw formatError(`${path}: not JSON (${e instanceof Error ? e.message : e})`);
  }
  return parseResults(json, path);
}

function fixed(x: number | null, digits: number): string {
  return x === null ? "n/a" : x.toFixed(digits);
}

// Throughput: one decimal, or three significant digits below 10 (a CPU run's 0.00711).
function rate(x: number | null): string {
  return x === null ? "n/a" : x >= 10 ? x.toFixed(1) : x.toPrecision(3);
}

/** The results as a markdown document: a title line with GPU, date and commit, then one table. */
export function resultsMarkdown(file: ResultsFile, title: string): string {
  const where = [file.gpu, file.date, file.commit ? `commit ${file.commit}` : undefined].filter((s) => s);
  const lines = [
    `# ${title}${where.length ? ` (${where.join(", ")})` : ""}`,
    "",
    "| op | shape | dtype | mode | attnkit ms | TFLOP/s | GB/s | ref | ref ms | speedup | note |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
  ];
  for (const r of file.records) {
    lines.push(
      `| ${r.op} | ${r.shape} | ${r.dtype} | ${r.mode} | ${fixed(r.ms, 3)} | ${rate(r.tflops)} | ` +
        `${rate(r.gbps)} | ${r.ref ?? "n/a"} | ${fixed(r.ref_ms, 3)} | ${fixed(r.speedup, 2)} | ` +
        `${r.note ?? ""} |`,
    );
  }
  return lines.join("\n") + "\n";
}
