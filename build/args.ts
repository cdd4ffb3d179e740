/**
 * The command line of `build.ts`: its usage text and a strict parser that refuses unknown flags and
 * bad values with a message naming the flag.
 *
 * @example
 * ```ts
 * import { parseBuildArgs } from "./args.ts";
 * const parsed = parseBuildArgs(["--cpu-only", "--jobs", "4"]);
 * console.log(parsed.options.cpuOnly, parsed.options.jobs); // true 4
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { parseArgsMessage } from "../cli/parse_args_error.ts";

/** The usage text of `build.ts`. */
export const USAGE = `usage: deno run -A build.ts [options]

Builds attnkit's native library: lib/libattnkit.so in a checkout. The CUDA kernels are compiled when
nvcc is on PATH and a GPU driver is present (or when asked); otherwise the CPU backend alone.

  --cuda             compile the CUDA kernels too, even without a GPU driver here (or ATTNKIT_CUDA=1)
  --cpu-only         build the CPU backend only (or ATTNKIT_CUDA=0)
  --arch LIST        CUDA targets, comma-separated (default sm_90a,sm_80)
  --jobs N           parallel compiler processes (default: the number of cores)
  --out DIR          output folder (default: lib/ of a checkout)
  --cache            build into the per-user cache, where the library lookup finds it
                     (for a copy used as a dependency whose folder is read-only)
  --only PATH_PART   compile only the units whose path contains PATH_PART, without linking (repeatable)
  --ptxas-verbose    print each CUDA kernel's registers and spills
  --lineinfo         keep source lines in the CUDA code (for ncu's source view and the sanitizers)
  --quiet            print only when something is rebuilt
  --help             print this text`;

/**
 * A command line that `build.ts` refuses; the message names the flag. `showUsage` is set when the
 * command line itself is malformed (an unknown flag, a missing value), so the usage text helps.
 */
export class UsageError extends Error {
  /** Always `"UsageError"`. */
  override name = "UsageError";
  /** Print the usage text after the message. */
  readonly showUsage: boolean;
  /** Makes the error; `showUsage` for a malformed command line. */
  constructor(message: string, showUsage = false) {
    super(message);
    this.showUsage = showUsage;
  }
}

/** What {@link parseBuildArgs} returns. */
export interface ParsedBuildArgs {
  /** `--help` was given. */
  help: boolean;
  /** `--cache` was given: build into the per-user cache. */
  cache: boolean;
  /** The build's options, as `buildLibrary` takes them (`outDir` unset with `--cache`). */
  options: {
    cuda?: boolean;
    cpuOnly?: boolean;
    arch?: string[];
    jobs?: number;
    outDir?: string;
    quiet: boolean;
    ptxasVerbose: boolean;
    lineinfo: boolean;
    only?: string[];
  };
}

/** The oldest GPU architecture attnkit's kernels are written for. */
export const MIN_SM = 80;

/**
 * Checks a list of CUDA targets (`sm_90a`, `sm_80`) and returns it; throws a {@link UsageError} naming
 * `--arch` and the bad entry otherwise.
 *
 * @example
 * ```ts
 * import { checkArch } from "./args.ts";
 * console.log(checkArch(["sm_90a", "sm_80"])); // ["sm_90a", "sm_80"]
 * ```
 */
export function checkArch(arch: readonly string[]): string[] {
  if (arch.length === 0) {
    throw new UsageError("--arch: expected targets like sm_90a,sm_80, got an empty list");
  }
  for (const a of arch) {
    const m = /^sm_(\d{2,3})a?$/.exec(a);
    if (!m) throw new UsageError(`--arch: expected targets like sm_90a or sm_80, got "${a}"`);
    if (Number(m[1]) < MIN_SM) {
      throw new UsageError(
        `--arch: ${a} is older than sm_${MIN_SM}, the oldest architecture attnkit supports`,
      );
    }
  }
  if (new Set(arch).size !== arch.length) throw new UsageError(`--arch: a target is listed twice in ${arch}`);
  return [...arch];
}

/**
 * Checks a count of parallel jobs: a whole number of at least 1. Throws a {@link UsageError} naming
 * `--jobs` otherwise.
 *
 * @example
 * ```ts
 * import { checkJobs } from "./args.ts";
 * console.log(checkJobs("8")); // 8
 * ```
 */
export function checkJobs(value: string | number): number {
  const n = typeof value === "number" ? value : /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new UsageError(`--jobs: expected a whole number of at least 1, got ${JSON.stringify(value)}`);
  }
  return n;
}

/**
 * Parses `build.ts`'s arguments. Unknown flags, positional arguments, missing or bad values and
 * contradicting flags throw a {@link UsageError}.
 *
 * @example
 * ```ts
 * import { parseBuildArgs, UsageError } from "./args.ts";
 * try {
 *   parseBuildArgs(["--jobs", "abc"]);
 * } catch (e) {
 *   console.log(e instanceof UsageError, (e as Error).message); // true --jobs: expected a whole number ...
 * }
 * ```
 */
export function parseBuildArgs(args: string[]): ParsedBuildArgs {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        cuda: { type: "boolean", default: false },
        "cpu-only": { type: "boolean", default: false },
        arch: { type: "string" },
        jobs: { type: "string" },
        out: { type: "string" },
        cache: { type: "boolean", default: false },
        quiet: { type: "boolean", default: false },
        "ptxas-verbose": { type: "boolean", default: false },
        lineinfo: { type: "boolean", default: false },
        only: { type: "string", multiple: true },
        help: { type: "boolean", default: false },
      },
    }));
  } catch (e) {
    // node:util's own messages name the flag ("Unknown option '--cuda-only'"); keep them, lose the stack.
    throw new UsageError(parseArgsMessage(e as Error), true);
  }
  if (values.cuda && values["cpu-only"]) throw new UsageError("--cuda and --cpu-only contradict each other");
  if (values.out !== undefined && values.out.trim() === "") {
    throw new UsageError("--out: expected a folder, got an empty path");
  }
  if (values.cache && values.out !== undefined) {
    throw new UsageError("--cache and --out both choose the output folder: give one");
  }
  for (const part of values.only ?? []) {
    if (part.trim() === "") {
      throw new UsageError("--only: expected part of a source path, got an empty string");
    }
  }
  return {
    help: values.help,
    cache: values.cache,
    options: {
      cuda: values.cuda || undefined,
      cpuOnly: values["cpu-only"] || undefined,
      arch: values.arch === undefined ? undefined : checkArch(values.arch.split(",").map((s) => s.trim())),
      jobs: values.jobs === undefined ? undefined : checkJobs(values.jobs),
      outDir: values.out,
      quiet: values.quiet,
      ptxasVerbose: values["ptxas-verbose"],
      lineinfo: values.lineinfo,
      only: values.only,
    },
  };
}
