/**
 * `attnkit chart`: renders recorded results JSON as an SVG chart.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { renderChart } from "./chart.ts";
import { readResults, type ResultsFile } from "./results.ts";
import { UsageError } from "./shape.ts";

/** The usage of `attnkit chart`. */
export const CHART_USAGE = `Usage: attnkit chart RESULTS.json [MORE.json ...] [-o CHART.svg] [options]

Renders benchmark results (the JSON that attnkit bench and the side-by-side benchmarks write) as an
SVG chart: one row per op, shape and mode, attnkit against each reference. Several files are drawn
as one chart (the first file's GPU, date and commit head it). Without -o the SVG goes to stdout.

Options:
  -o, --out FILE         the SVG file to write
  --metric ms|speedup    times on a log axis with the speedups beside them (default), or speedup bars
  --title TEXT           the title (default: "attnkit vs" the references)
  --ref-name FROM=TO     show the reference FROM as TO (repeatable)
  -h, --help             this text`;

/** Runs `attnkit chart` with its arguments; returns the exit status. */
export async function chartCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: "string", short: "o" },
      metric: { type: "string", default: "ms" },
      title: { type: "string" },
      "ref-name": { type: "string", multiple: true },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(CHART_USAGE);
    return 0;
  }
  if (positionals.length === 0) throw new UsageError("missing the results JSON to draw");
  if (values.metric !== "ms" && values.metric !== "speedup") {
    throw new UsageError(`--metric: expected ms or speedup, got "${values.metric}"`);
  }
  const refNames: Record<string, string> = {};
  for (const pair of values["ref-name"] ?? []) {
    const at = pair.indexOf("=");
    if (at <= 0) throw new UsageError(`--ref-name: expected FROM=TO, got "${pair}"`);
    refNames[pair.slice(0, at)] = pair.slice(at + 1);
  }
  const files = await Promise.all(positionals.map((p) => readResults(p)));
  const merged: ResultsFile = { ...files[0], records: files.flatMap((f) => f.records) };
  const svg = renderChart(merged, { metric: values.metric, title: values.title, refNames });
  if (values.out === undefined) {
    await Deno.stdout.write(new TextEncoder().encode(svg));
  } else {
    await Deno.writeTextFile(values.out, svg);
    console.error(`wrote ${values.out} (${merged.records.length} records)`);
  }
  return 0;
}
