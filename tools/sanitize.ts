/**
 * Runs NVIDIA compute-sanitizer over the GPU tests (memcheck, racecheck, initcheck, synccheck by
 * default) and writes one summary row per tool: the errors the tool reports, the kernels it names and
 * the tests that ran. A tool over the whole suite is slow (initcheck tracks every byte), so the work is
 * split into shards, one `deno test` process per test file (or per `file#filter`), run `--parallel`
 * at a time. Only the tests' `[cuda]` variants run unless `--cpu-tests` is given (the tool sees no
 * host code). Build with `--lineinfo` first, so that reports name source lines (the explained sites
 * below are matched by line). On a GPU host:
 *
 * ```sh
 * deno task build --lineinfo
 * deno task sanitize --parallel 12 --out bench/results/sanitize.md
 * deno task sanitize --tools initcheck --tests "tests/variants.test.ts#linear.bwd"
 * ```
 *
 * @module
 */
import { checkedOptions, scriptArgs, wholeNumber } from "./script_args.ts";
import { expandRows, rowName } from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";

/**
 * Report sites whose cause is known and is not a defect of the kernel (bench/NOTES_reliability.md has
 * the evidence). A report is explained when one of its frames is `site` (`file:line`, so a build with
 * `--lineinfo` is needed): a moved line makes its reports unexplained again, never hides a new one.
 */
export const EXPLAINED: readonly Explained[] = [
  {
    tool: "initcheck",
    match: "any",
    // The delta-rule backward's tile loads of the states and v_new that the forward saved with
    // bulk-async (TMA) stores, and the gated linear family's grads loads of the states its split state
    // kernel saved the same way (bwd.cuh:118): initcheck does not record those stores as writes.
    sites: [
      "grads.cuh:400",
      "grads.cuh:401",
      "grads256.cuh:56",
      "grads256.cuh:62",
      "grads256.cuh:98",
      "bwd.cuh:118",
    ],
    why: "reads of memory written by TMA (bulk async) stores, which initcheck does not track",
  },
  {
    tool: "racecheck",
    // The Hopper attention backward's LSE and D stage rows: the producer's bulk copy into a stage and
    // the consumers' reads of it are ordered by the stage's full and empty mbarriers (the argument is
    // beside the copies in attention/bwd/sm90.cuh; tests/attention_race.test.ts is the stress test).
    // Every frame of the report must be one of these: a race with any other access stays unexplained.
    match: "all",
    sites: [
      "sm90.cuh:161",
      "softmax_grad.cuh:37",
      "softmax_grad.cuh:57",
      "softmax_grad.cuh:77",
      "softmax_grad.cuh:78",
    ],
    why:
      "bulk-async (TMA) copies into a stage against reads of it, ordered by mbarriers racecheck does not model",
  },
];

/** Report sites whose cause is known, for one tool. */
export interface Explained {
  tool: string;
  /** `any`: a report with one frame at a site is explained; `all`: every frame with a line must be. */
  match: "any" | "all";
  sites: readonly string[];
  why: string;
}

/** One tool's outcome over all its shards. */
export interface SanitizerRun {
  tool: string;
  /** Errors (or hazards, for racecheck) the tool counted; -1 when a shard printed no summary. */
  errors: number;
  /** Of those, the printed reports at an EXPLAINED site. */
  explained: number;
  /** The kernels its reports name, with how many reports each. */
  kernels: Record<string, number>;
  /** Tests passed and failed, summed over the shards' `deno test` summaries. */
  passed: number;
  failed: number;
  /** Shards whose test run printed no summary (a crash or a timeout). */
  broken: string[];
  seconds: number;
}

/** What one shard's log says. */
export interface ShardSummary {
  errors: number;
  explained: number;
  kernels: Record<string, number>;
  passed: number;
  failed: number;
  summarised: boolean;
}

/** A log's summary, built line by line (a shard's log can outgrow a string). */
class LogReader {
  #errors: number[] = [];
  #kernels: Record<string, number> = {};
  #known = 0;
  #tests: RegExpMatchArray | null = null;
  // Each report lists frames innermost first; its last device frame is the kernel.
  #kernel: string | undefined;
  #atKnownSite = false;
  #atOtherSite = false;

  constructor(readonly explained: readonly string[], readonly all: boolean) {}

  #commit(): void {
    if (this.#kernel) this.#kernels[this.#kernel] = (this.#kernels[this.#kernel] ?? 0) + 1;
    if (this.#kernel && this.#atKnownSite && !(this.all && this.#atOtherSite)) this.#known++;
    this.#kernel = undefined;
    this.#atKnownSite = false;
    this.#atOtherSite = false;
  }

  line(line: string): void {
    const summary = line.match(/(?:ERROR|RACECHECK) SUMMARY: (\d+) (?!errors were not printed)/);
    if (summary) this.#errors.push(Number(summary[1]));
    // A test process that never touched the GPU: nothing for the tool to check.
    if (line.includes("Target application terminated before first instrumented API call")) {
      this.#errors.push(0);
    }
    if (/^=+ (?:Invalid|Uninitialized|Error|Warning|Barrier|Race|Program hit)/.test(line)) this.#commit();
    const frame = line.match(/(?:Device Frame:| at) (.+?)\+0x[0-9a-f]+(?: in (\S+))?/);
    if (frame) {
      this.#kernel = functionName(frame[1]);
      if (frame[2] && this.explained.includes(frame[2])) this.#atKnownSite = true;
      else if (frame[2]) this.#atOtherSite = true;
    }
    if (line.includes("Saved host backtrace")) this.#commit();
    this.#tests = line.match(/^(?:ok|FAILED) \| (\d+) passed[^|]*\| (\d+) failed/) ?? this.#tests;
  }

  result(): ShardSummary {
    this.#commit();
    const tests = this.#tests;
    return {
      errors: this.#errors.length === 0 ? -1 : this.#errors.reduce((a, b) => a + b),
      explained: this.#known,
      kernels: this.#kernels,
      passed: tests ? Number(tests[1]) : 0,
      failed: tests ? Number(tests[2]) : 0,
      summarised: tests !== null,
    };
  }
}

/**
 * Reads a compute-sanitizer log: its summary count, the kernels it names, how many reports are at a
 * site `explained` lists (`file:line`), the test summary.
 */
export function summarise(log: string, explained: readonly string[] = [], all = false): ShardSummary {
  const reader = new LogReader(explained, all);
  for (const line of log.split("\n")) reader.line(line);
  return reader.result();
}

/** summarise() of a log file, read as a stream of lines. */
export async function summariseFile(
  path: string,
  explained: readonly string[] = [],
  all = false,
): Promise<ShardSummary> {
  const reader = new LogReader(explained, all);
  using file = await Deno.open(path);
  let rest = "";
  for await (const text of file.readable.pipeThrough(new TextDecoderStream())) {
    const lines = (rest + text).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) reader.line(line);
  }
  reader.line(rest);
  return reader.result();
}

/** A frame's function without its parameter list or a leading `void`. */
function functionName(frame: string): string {
  let name = frame.trim().replace(/^void /, "");
  if (name.endsWith(")")) {
    let depth = 0;
    for (let i = name.length - 1; i >= 0; --i) {
      if (name[i] === ")") depth++;
      else if (name[i] === "(" && --depth === 0) {
        name = name.slice(0, i);
        break;
      }
    }
  }
  return name;
}

// Test files a folder expands without: a deliberate device fault (the sanitizer would report it), and
// files whose GPU work is run elsewhere or which do none (builds, child-process drivers, the fuzz).
const NOT_SANITIZED = new Set([
  "device_fault.test.ts",
  "build.test.ts",
  "fuzz.test.ts",
  "leaks.test.ts",
  "cli.test.ts",
  "chart.test.ts",
  "sanitize.test.ts",
]);

/**
 * The variants test's filters, one per kernel row (its test names are `variant <row> [cuda]`): a row is
 * a shard of its own, so that the slow ones under initcheck do not hold a whole stage back.
 */
function variantRows(): string[] {
  return expandRows(REGISTRIES).map((r) => `variant ${rowName(r)} [cuda]`);
}

/**
 * The shards of a `--tests` list: files, `file#filter` entries, and folders. A folder gives its
 * `*.test.ts` files but those in NOT_SANITIZED, and its variants test as one shard per kernel row
 * (that test is most of the GPU work).
 */
export async function shardsOf(list: string): Promise<{ file: string; filter?: string }[]> {
  const shards: { file: string; filter?: string }[] = [];
  for (const entry of list.split(",").map((s) => s.trim()).filter(Boolean)) {
    const [path, filter] = entry.split("#");
    const info = await Deno.stat(path);
    if (info.isDirectory) {
      const names: string[] = [];
      for await (const e of Deno.readDir(path)) {
        if (e.isFile && e.name.endsWith(".test.ts") && !NOT_SANITIZED.has(e.name)) names.push(e.name);
      }
      for (const n of names.sort()) {
        const file = `${path.replace(/\/$/, "")}/${n}`;
        if (n === "variants.test.ts") {
          shards.push(...variantRows().map((filter) => ({ file, filter })));
        } else shards.push({ file });
      }
    } else {
      shards.push({ file: path, filter });
    }
  }
  return shards;
}

/** Runs `jobs` with at most `limit` at a time, keeping their order in the results. */
async function pool<T>(jobs: (() => Promise<T>)[], limit: number): Promise<T[]> {
  const results: T[] = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await jobs[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
  return results;
}

async function runShard(
  tool: string,
  shard: { file: string; filter?: string },
  logs: string | undefined,
  timeoutSeconds: number,
  cpuTests: boolean,
): Promise<ShardSummary & { name: string }> {
  const name = shard.filter ? `${shard.file}#${shard.filter}` : shard.file;
  const args = [
    "--tool",
    tool,
    ...(tool === "racecheck" ? ["--racecheck-report", "analysis"] : []),
    "--target-processes",
    "all",
    // initcheck: every report printed, so that each can be matched against the explained sites, with
    // device frames only: the reader needs no host backtrace, and the delta-rule backward's shards print
    // hundreds of thousands of (explained) reports, each with one to symbolise.
    "--print-limit",
    tool === "initcheck" ? "10000000" : "100",
    ...(tool === "initcheck" ? ["--show-backtrace", "device"] : []),
    Deno.execPath(),
    "test",
    "--allow-ffi",
    "--allow-read",
    "--allow-write",
    "--allow-env",
    "--allow-run",
    shard.file,
    ...(shard.filter ? ["--filter", shard.filter] : []),
  ];
  // The log goes to a file, not a pipe: a shard killed at its time limit may leave its test process
  // behind holding a pipe open, and the summary must not wait for it. `timeout -k` kills the tool.
  const file = await Deno.makeTempFile({ prefix: "ak-sanitize-", suffix: ".log" });
  const limit = timeoutSeconds > 0 ? ["timeout", "-k", "5", String(Math.ceil(timeoutSeconds))] : [];
  const command = [...limit, "compute-sanitizer", ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(
    " ",
  );
  await new Deno.Command("sh", {
    args: ["-c", `exec ${command} > '${file}' 2>&1 < /dev/null`],
    // Plain summary lines; the CPU backend's test variants only when asked (the tool sees no host code).
    env: { NO_COLOR: "1", ...(cpuTests ? {} : { ATTNKIT_TEST_DEVICES: "cuda" }) },
  }).output();
  const known = EXPLAINED.filter((e) => e.tool === tool);
  const summary = await summariseFile(
    file,
    known.flatMap((e) => e.sites),
    known.some((e) => e.match === "all"),
  );
  if (logs) await Deno.copyFile(file, `${logs}/${tool}_${name.replace(/[^\w.-]+/g, "_")}.log`);
  await Deno.remove(file);
  return { ...summary, name };
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    strict: true,
    options: {
      tools: { type: "string", default: "memcheck,racecheck,initcheck,synccheck" },
      tests: { type: "string", default: "tests/" },
      parallel: { type: "string", default: "4" },
      "shard-timeout": { type: "string", default: "0" },
      deadline: { type: "string", default: "0" },
      "cpu-tests": { type: "boolean", default: false },
      out: { type: "string" },
      logs: { type: "string" },
    },
  });
  const { parallel, shardTimeout, deadlineS } = checkedOptions(() => ({
    parallel: wholeNumber("--parallel", values.parallel, 1),
    shardTimeout: wholeNumber("--shard-timeout", values["shard-timeout"], 0), // 0: none
    deadlineS: wholeNumber("--deadline", values.deadline, 0), // 0: none
  }));
  // With a deadline (seconds from now), a shard gets at most the time left, and one not started by
  // then is reported as not run rather than holding the summary back.
  const deadline = deadlineS > 0 ? Date.now() + deadlineS * 1000 : Infinity;
  if (values.logs) await Deno.mkdir(values.logs, { recursive: true });
  const shards = await shardsOf(values.tests);
  const tools = values.tools.split(",");
  const started = performance.now();
  const jobs = tools.flatMap((tool) =>
    shards.map((s) => (): Promise<ShardSummary & { name: string }> => {
      const left = (deadline - Date.now()) / 1000;
      if (left < 5) {
        const name = s.filter ? `${s.file}#${s.filter}` : s.file;
        return Promise.resolve({
          errors: 0,
          explained: 0,
          kernels: {},
          passed: 0,
          failed: 0,
          summarised: false,
          name: `${name} (not run)`,
        });
      }
      const limit = deadline === Infinity
        ? shardTimeout
        : Math.min(shardTimeout > 0 ? shardTimeout : left, left);
      return runShard(tool, s, values.logs, limit, values["cpu-tests"]!);
    })
  );
  const done = await pool(jobs, parallel);
  const seconds = (performance.now() - started) / 1000;
  const runs: SanitizerRun[] = tools.map((tool, t) => {
    const mine = done.slice(t * shards.length, (t + 1) * shards.length);
    const kernels: Record<string, number> = {};
    for (const s of mine) for (const [k, n] of Object.entries(s.kernels)) kernels[k] = (kernels[k] ?? 0) + n;
    return {
      tool,
      errors: mine.some((s) => s.errors < 0) ? -1 : mine.reduce((a, s) => a + s.errors, 0),
      explained: mine.reduce((a, s) => a + s.explained, 0),
      kernels,
      passed: mine.reduce((a, s) => a + s.passed, 0),
      failed: mine.reduce((a, s) => a + s.failed, 0),
      broken: mine.filter((s) => !s.summarised).map((s) => s.name),
      seconds,
    };
  });
  for (const r of runs) {
    console.log(
      `${r.tool}: ${r.errors} reported (${r.explained} explained), ${r.passed} passed, ${r.failed} failed` +
        (r.broken.length ? `, no test summary from ${r.broken.join(", ")}` : ""),
    );
  }
  if (values.out) {
    const lines = [
      `# compute-sanitizer over ${values.tests} (${shards.length} shards, ${parallel} at a time, ${
        seconds.toFixed(0)
      } s)`,
      "",
      "| tool | reported | explained | kernels named | tests passed | failed | shards without a summary |",
      "| --- | ---: | ---: | --- | ---: | ---: | --- |",
      ...runs.map((r) =>
        `| ${r.tool} | ${r.errors} | ${r.explained} | ${
          Object.entries(r.kernels).map(([k, n]) => `${k} (${n})`).join(", ") || "-"
        } | ${r.passed} | ${r.failed} | ${r.broken.join(", ") || "-"} |`
      ),
      "",
      ...EXPLAINED.filter((e) => tools.includes(e.tool)).map((e) =>
        `Explained (${e.tool}, at ${e.sites.join(", ")}): ${e.why}.`
      ),
      "",
    ];
    await Deno.writeTextFile(values.out, lines.join("\n"));
    await Deno.writeTextFile(values.out.replace(/\.md$/, ".json"), JSON.stringify(runs, null, 1));
  }
}
