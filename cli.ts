/**
 * attnkit's command line, for quick checks without writing a script:
 *
 * - `attnkit check <op> --shape B2_T1000_H4_D128 --dtype bf16 --device cuda [--backward]` runs an op
 *   on fresh random inputs against the float64 oracle and prints each output's error against the
 *   dtype's tolerance (PASS / FAIL, exit status 1 on a failure), the time and the TFLOP/s (GB/s for
 *   the memory-bound decode steps, and beside the linear forwards);
 * - `attnkit bench <op> --shapes A,B --out DIR [--ref results.json]` times an op over shapes and
 *   writes JSON, markdown and an SVG chart;
 * - `attnkit tune <attention|attention-decode|gdn|deltanet> --shapes A,B [--backward]` tunes shapes
 *   into the tuning cache (every kernel that can serve them, timed against the planner's choice) and
 *   prints the candidates and winners;
 * - `attnkit info` prints the devices, the native library and its kernels;
 * - `attnkit chart results.json -o chart.svg` draws recorded results.
 *
 * Ops: `gdn` (chunkGatedDeltaRule), `deltanet` (chunkDeltaRule), `kda` (chunkKda), `gla` (chunkGla),
 * `simple-gla` (chunkSimpleGla), `retention` (chunkRetention), `linear-attn` (chunkLinearAttn), `fmap`
 * (featureMapLinearAttention: `--feature-map elu+1|relu|identity|softmax_free`, `--bidirectional`,
 * `--eps`, `--cosformer`),
 * `attention`, and the decode steps, forward only: `gdn-decode` (GatedDeltaNetDecodeFwdOp, one token
 * against a float32 state: `B256_H32_D128`), `deltanet-decode` (DeltaNetDecodeFwdOp), `gla-decode`
 * (GLADecodeFwdOp), `kda-decode` (recurrentKdaDecode: `--gate-transform bounded|softplus`,
 * `--lower-bound`) and `gdn-pool-decode` (recurrentGdnDecode), both on random slots of a state pool
 * (`--state-dtype fp32|bf16`), and `attention-decode`
 * (GroupedQueryAttentionDecodeWithKVCacheFwdOp, one query token against a KV cache of SKV rows:
 * `B1_SKV65536_H32_HKV8_D128`; `--page-size P` pages it, `--ragged` draws each sequence's length). `tune` serves attention, attention-decode, gdn and deltanet, the ops
 * with a `tune` option. Run it as
 * `deno run -A jsr:@attnkit/attnkit/cli <command>`, or `deno task attnkit <command>` in a checkout.
 * Exit status: 0 success, 1 a failed check or a runtime error, 2 a usage error.
 *
 * @example
 * ```ts
 * import { main } from "@attnkit/attnkit/cli";
 * const status = await main(["check", "attention", "--shape", "B1_S64_H2_D64", "--device", "cpu"]);
 * console.log(status); // 0 when every output passed
 * ```
 *
 * @module
 */
import { AttnkitError } from "./mod.ts";
import { invalidArgument } from "./ffi/errors.ts";
import { describeValue } from "./ops/args.ts";
import { BENCH_USAGE, benchCommand } from "./cli/bench.ts";
import { CHART_USAGE, chartCommand } from "./cli/chart_command.ts";
import { CHECK_USAGE, checkCommand } from "./cli/check.ts";
import { isParseArgsError } from "./cli/parse_args_error.ts";
import { INFO_USAGE, infoCommand } from "./cli/info.ts";
import { TUNE_USAGE, tuneCommand } from "./cli/tune.ts";
import { CliError, OPS_NAMES } from "./cli/shape.ts";

export { type ChartOptions, renderChart } from "./cli/chart.ts";
export { parseResults, type ResultRecord, type ResultsFile } from "./cli/results.ts";

const USAGE = `Usage: attnkit <command> [options]

Commands:
  check <op>   run an op against the float64 oracle: errors vs tolerance, time, TFLOP/s or GB/s
  bench <op>   time an op over shapes; write JSON, markdown and an SVG chart
  tune <op>    tune shapes into the tuning cache (every kernel that serves them, timed)
  info         devices, the native library, kernels
  chart FILE   draw recorded results JSON as an SVG chart

${OPS_NAMES}
Run "attnkit <command> --help" for a command's options.`;

const COMMANDS: Record<string, { usage: string; run: (args: string[]) => number | Promise<number> }> = {
  check: { usage: CHECK_USAGE, run: checkCommand },
  bench: { usage: BENCH_USAGE, run: benchCommand },
  tune: { usage: TUNE_USAGE, run: tuneCommand },
  info: { usage: INFO_USAGE, run: infoCommand },
  chart: { usage: CHART_USAGE, run: chartCommand },
};

/**
 * Runs the command line with its arguments (without the program name) and returns the exit status:
 * 0 success, 1 a failed check or an error while running, 2 a usage error (printed with the usage).
 *
 * @example
 * ```ts
 * import { main } from "@attnkit/attnkit/cli";
 * const status = await main(["info"]);
 * ```
 */
export function main(args: readonly string[]): Promise<number> {
  // Checked before anything runs, so a wrong argument throws here rather than in the promise.
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) {
    throw invalidArgument("main", `args: expected an array of strings, got ${describeValue(args)}`);
  }
  return run(args);
}

async function run(args: readonly string[]): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    (name === undefined ? console.error : console.log)(USAGE);
    return name === undefined ? 2 : 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    console.error(`attnkit: unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  try {
    return await command.run(rest);
  } catch (e) {
    if (isParseArgsError(e)) {
      console.error(`attnkit ${name}: ${e.message}\n\n${command.usage}`);
      return 2;
    }
    if (e instanceof CliError) {
      console.error(`attnkit ${name}: ${e.message}${e.showUsage ? `\n\n${command.usage}` : ""}`);
      return e.status;
    }
    if (e instanceof AttnkitError) {
      console.error(`attnkit ${name}: ${e.message}`);
      return 1;
    }
    throw e;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
