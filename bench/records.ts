/**
 * What the side-by-side benchmarks of the newer families share: the start of a CUDA script (its two common
 * options, the GPU's name), the copy ceiling, the result row (its error note, the planner's kernels as its
 * path), its JSON and markdown files in a results folder, and a timer that flushes the L2 before each call
 * (as triton's `do_bench` does).
 *
 * @example
 * ```ts
 * import { type BenchRecord, saveRecords } from "./records.ts";
 * const rows: BenchRecord[] = [];
 * saveRecords(Deno.makeTempDirSync(), "demo", "A title", "a GPU", rows);
 * ```
 *
 * @module
 */
import { cudaAvailable, deviceInfo, lastPlan, Tensor, timeIt } from "../mod.ts";
import { COPY_CEILING_GBPS } from "./ceilings.ts";

// The H200's device-copy ceiling in GB/s (ANCHORS.md), against which memory-bound rows are reported.
export { COPY_CEILING_GBPS };

/**
 * The options every CUDA benchmark script takes (`--results DIR`, `--iterations N`), for its `parseArgs`
 * beside its own.
 *
 * @example
 * ```ts
 * import { parseArgs } from "node:util";
 * import { BENCH_OPTIONS } from "./records.ts";
 * const { values } = parseArgs({ args: [], options: { ...BENCH_OPTIONS } });
 * console.log(values.results, values.iterations); // "bench/results" "20"
 * ```
 */
export const BENCH_OPTIONS = {
  results: { type: "string", default: "bench/results" },
  iterations: { type: "string", default: "20" },
} as const;

/**
 * The CUDA device's name, for a script that needs one; throws `<script>: needs a CUDA device` without it.
 *
 * @example
 * ```ts
 * import { cudaGpu } from "./records.ts";
 * try {
 *   console.log(cudaGpu("demo"));
 * } catch (e) {
 *   console.log((e as Error).message); // "demo: needs a CUDA device" on a machine without one
 * }
 * ```
 */
export function cudaGpu(script: string): string {
  if (!cudaAvailable()) throw new Error(`${script}: needs a CUDA device`);
  return deviceInfo("cuda").name;
}

/** One result row, as recorded in the JSON. */
export interface BenchRecord {
  /** attnkit's function or op, as exported. */
  op: string;
  shape: string;
  dtype: string;
  mode: string;
  /** attnkit's median ms (null when not timed; `note` says why). */
  ms: number | null;
  /** The reference, e.g. `fla.chunk_gla (ANCHORS.md)`. */
  ref: string;
  ref_ms: number | null;
  speedup: number | null;
  tflops: number | null;
  gbps: number | null;
  /** The planner's path. */
  path: string;
  note?: string;
}

/**
 * A row not yet timed: every figure null, the path unknown.
 *
 * @example
 * ```ts
 * import { newRecord } from "./records.ts";
 * console.log(newRecord("op", "B1", "bfloat16", "fwd", "torch", 1.5).ms); // null
 * ```
 */
export function newRecord(
  op: string,
  shape: string,
  dtype: string,
  mode: string,
  ref: string,
  refMs: number | null,
): BenchRecord {
  return {
    op,
    shape,
    dtype,
    mode,
    ms: null,
    ref,
    ref_ms: refMs,
    speedup: null,
    tflops: null,
    gbps: null,
    path: "?",
  };
}

/**
 * A row of a memory-bound op whose reference is the copy ceiling: the time `bytes` take at
 * COPY_CEILING_GBPS.
 *
 * @example
 * ```ts
 * import { ceilingRecord } from "./records.ts";
 * console.log(ceilingRecord("op", "B1", "bfloat16", "decode", 4252e6).ref_ms); // 1
 * ```
 */
export function ceilingRecord(
  op: string,
  shape: string,
  dtype: string,
  mode: string,
  bytes: number,
): BenchRecord {
  return newRecord(
    op,
    shape,
    dtype,
    mode,
    `copy ceiling ${COPY_CEILING_GBPS} GB/s`,
    bytes / (COPY_CEILING_GBPS * 1e9) * 1e3,
  );
}

/**
 * Fills a row's time and what follows from it: TFLOP/s and GB/s where the work names FLOPs and bytes,
 * the speedup where the row has a reference time.
 *
 * @example
 * ```ts
 * import { newRecord, setTime } from "./records.ts";
 * const r = newRecord("op", "B1", "bfloat16", "fwd", "ref", 2);
 * setTime(r, 1, { bytes: 1e9 });
 * console.log(r.gbps, r.speedup); // 1000 2
 * ```
 */
export function setTime(rec: BenchRecord, ms: number, work: { flops?: number; bytes?: number }): void {
  rec.ms = ms;
  if (work.flops) rec.tflops = work.flops / (ms * 1e-3) / 1e12;
  if (work.bytes) rec.gbps = work.bytes / (ms * 1e-3) / 1e9;
  if (rec.ref_ms !== null) rec.speedup = rec.ref_ms / ms;
}

/**
 * A row's note for a call that threw: `error: ` and the first 160 characters of its message.
 *
 * @example
 * ```ts
 * import { errorNote } from "./records.ts";
 * console.log(errorNote(new Error("out of memory"))); // "error: out of memory"
 * ```
 */
export function errorNote(e: unknown): string {
  return `error: ${(e as Error).message.slice(0, 160)}`;
}

/**
 * The kernels the last planned call ran, comma-separated, for a row's path ("?" when none was planned).
 *
 * @example
 * ```ts
 * import { plannedKernels } from "./records.ts";
 * console.log(plannedKernels()); // e.g. "linear.decode.tile"
 * ```
 */
export function plannedKernels(): string {
  return lastPlan()?.kernels.map((x) => x.name).join(", ") ?? "?";
}

/**
 * The commit the measurements ran on: `ATTNKIT_BENCH_COMMIT` where set (a copied tree whose `.git` is not
 * its own: the caller names the commit), else the checkout's short commit with "+modified" when tracked
 * files differ from it (so a record never names a commit its code was not), else "unknown" (no git, or
 * no repository).
 *
 * @example
 * ```ts
 * import { gitCommit } from "./records.ts";
 * console.log(gitCommit()); // e.g. "4a8ecb1" or "4a8ecb1+modified"
 * ```
 */
export function gitCommit(): string {
  const named = Deno.env.get("ATTNKIT_BENCH_COMMIT");
  if (named) return named;
  const git = (...args: string[]) => {
    try {
      const out = new Deno.Command("git", { args, stdout: "piped", stderr: "null" }).outputSync();
      return out.success ? new TextDecoder().decode(out.stdout).trim() : undefined;
    } catch {
      return undefined; // no git on this machine, or no permission to run it
    }
  };
  const head = git("rev-parse", "--short", "HEAD");
  if (!head) return "unknown";
  return git("status", "--porcelain", "--untracked-files=no") ? `${head}+modified` : head;
}

/**
 * Writes `<dir>/<date>_<stem>.json` and `.md` (a table of every row) for the rows so far, with the date,
 * the GPU and the commit measured.
 */
export function saveRecords(
  dir: string,
  stem: string,
  title: string,
  gpu: string,
  records: BenchRecord[],
  commit: string = gitCommit(),
): void {
  const date = new Date().toISOString().slice(0, 10);
  Deno.mkdirSync(dir, { recursive: true });
  Deno.writeTextFileSync(
    `${dir}/${date}_${stem}.json`,
    JSON.stringify({ date, gpu, commit, records }, null, 1),
  );
  const cell = (x: number | null, digits: number) => x?.toFixed(digits) ?? "-";
  const lines = [
    `# ${title}, ${date}, ${gpu}, commit ${commit}`,
    "",
    "| op | shape | mode | path | ms | ref | ref ms | speedup | TFLOP/s | GB/s |",
    "| --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ...records.map((r) =>
      `| ${r.op} | ${r.shape} | ${r.mode} | ${r.path} | ${r.ms?.toFixed(3) ?? r.note ?? "-"} | ${r.ref} | ` +
      `${cell(r.ref_ms, 3)} | ${cell(r.speedup, 2)} | ${cell(r.tflops, 1)} | ${cell(r.gbps, 0)} |`
    ),
  ];
  Deno.writeTextFileSync(`${dir}/${date}_${stem}.md`, lines.join("\n") + "\n");
}

/**
 * A CUDA timer: median ms of `iterations` calls after 3 warm-up calls, a 256 MiB buffer cleared before
 * each so the L2 holds none of the inputs. Dispose it to free the buffer.
 */
export class FlushedTimer implements Disposable {
  readonly #flush = Tensor.empty([64 * 1024 * 1024], { dtype: "float32", device: "cuda" });

  constructor(readonly iterations: number) {}

  /** The median milliseconds of `fn`. */
  time(fn: () => void): number {
    return timeIt(fn, {
      device: "cuda",
      warmup: 3,
      iterations: this.iterations,
      before: () => this.#flush.fill(0),
    })
      .medianMs;
  }

  [Symbol.dispose](): void {
    this.#flush.dispose();
  }
}
