/**
 * Runs NVIDIA compute-sanitizer over the GPU tests, one tool after the other (memcheck, racecheck,
 * initcheck, synccheck by default), and writes a summary per tool: the error count the tool reports
 * and the kernels it names. On a GPU host:
 *
 * ```sh
 * deno task sanitize --out bench/results/sanitize.md
 * deno task sanitize --tools initcheck --filter "linear.bwd" --tests tests/variants.test.ts
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";

/** One tool's outcome. */
export interface SanitizerRun {
  tool: string;
  /** Errors (or hazards, for racecheck) the tool counted; -1 when it printed no summary. */
  errors: number;
  /** The kernels its reports name, with how many reports each. */
  kernels: Record<string, number>;
  /** The test summary line of the run. */
  tests: string;
  seconds: number;
}

/** Reads a compute-sanitizer log: its summary count and the kernels it names. */
export function summarise(tool: string, log: string): Omit<SanitizerRun, "seconds"> {
  const summary = log.match(/(?:ERROR|RACECHECK) SUMMARY: (\d+)/g) ?? [];
  const errors = summary.length === 0
    ? -1
    : summary.map((s) => Number(s.match(/(\d+)/)![1])).reduce((a, b) => a + b);
  const kernels: Record<string, number> = {};
  for (const m of log.matchAll(/(?:in|kernel) (\w[\w:<>, ]*?)(?:\(|$)/gm)) {
    if (/^(ak|void|bwd|fwd|chunk|attention|fast|linear|__)/.test(m[1]) || m[1].includes("kernel")) {
      kernels[m[1]] = (kernels[m[1]] ?? 0) + 1;
    }
  }
  const tests = log.match(/^(ok|FAILED) \|.*$/m)?.[0] ?? "no test summary";
  return { tool, errors, kernels, tests };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      tools: { type: "string", default: "memcheck,racecheck,initcheck,synccheck" },
      tests: { type: "string", default: "tests/variants.test.ts" },
      filter: { type: "string" },
      out: { type: "string" },
      logs: { type: "string" },
    },
  });
  const runs: SanitizerRun[] = [];
  for (const tool of values.tools.split(",")) {
    const started = performance.now();
    const extra: string[] = [];
    const args = [
      "--tool",
      tool,
      ...extra,
      "--target-processes",
      "all",
      "--print-limit",
      "100",
      Deno.execPath(),
      "test",
      "--allow-ffi",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-run",
      ...values.tests.split(","),
      ...(values.filter ? ["--filter", values.filter] : []),
    ];
    const out = await new Deno.Command("compute-sanitizer", {
      args,
      stdout: "piped",
      stderr: "piped",
      env: { NO_COLOR: "1" }, // plain summary lines
    })
      .output();
    const log = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    if (values.logs) await Deno.writeTextFile(`${values.logs}/${tool}.log`, log);
    const run = { ...summarise(tool, log), seconds: (performance.now() - started) / 1000 };
    runs.push(run);
    console.log(`${tool}: ${run.errors} reported, ${run.tests} (${run.seconds.toFixed(0)} s)`);
  }
  if (values.out) {
    const lines = [
      `# compute-sanitizer over ${values.tests}${values.filter ? ` (filter ${values.filter})` : ""}`,
      "",
      "| tool | reported | kernels named | tests | seconds |",
      "| --- | ---: | --- | --- | ---: |",
      ...runs.map((r) =>
        `| ${r.tool} | ${r.errors} | ${
          Object.entries(r.kernels).map(([k, n]) => `${k} (${n})`).join(", ") || "-"
        } | ${r.tests} | ${r.seconds.toFixed(0)} |`
      ),
      "",
    ];
    await Deno.writeTextFile(values.out, lines.join("\n"));
    await Deno.writeTextFile(values.out.replace(/\.md$/, ".json"), JSON.stringify(runs, null, 1));
  }
}
