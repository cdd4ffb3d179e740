/**
 * The command line of the repository's scripts (the fuzz runner, the sanitizer, the tuning sweep, the
 * benchmark scripts): node:util's `parseArgs` in strict mode, but a wrong flag or value ends the script
 * with one line naming it and the options the script takes (exit status 2), not with a TypeError and its
 * stack. Numbers are read with `wholeNumber`, which refuses what `Number` would silently turn into NaN.
 *
 * @example
 * ```ts
 * import { scriptArgs, wholeNumber } from "./tools/script_args.ts";
 * const { values } = scriptArgs({ args: ["--calls", "10"], options: { calls: { type: "string" } } });
 * console.log(wholeNumber("--calls", values.calls ?? "1")); // 10
 * ```
 *
 * @module
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { isParseArgsError, parseArgsMessage } from "../cli/parse_args_error.ts";
import { readWholeNumber } from "../cli/whole_number.ts";

/** A wrong command line, as `scriptArgs` and `wholeNumber` report it. */
export class ScriptUsageError extends Error {
  override name = "ScriptUsageError";
}

/** The options of a parseArgs configuration, one per line, as a script's usage lists them. */
export function optionList(config: ParseArgsConfig): string {
  const lines = Object.entries(config.options ?? {}).map(([name, o]) => {
    const value = o.type === "string" ? ` <${name}>` : "";
    const shown = o.default === undefined ? "" : `  (default ${JSON.stringify(o.default)})`;
    return `  --${name}${value}${o.multiple ? " (repeatable)" : ""}${shown}`;
  });
  return lines.length > 0 ? `options:\n${lines.join("\n")}` : "takes no options";
}

function scriptName(): string {
  const path = new URL(Deno.mainModule).pathname;
  const cwd = Deno.cwd();
  return path.startsWith(cwd + "/") ? path.slice(cwd.length + 1) : path.split("/").pop()!;
}

/**
 * `parseArgs(config)` (strict unless the config says otherwise); on a parse error prints the error and the
 * option list and exits with status 2 when run as a script, or throws `ScriptUsageError` when `exit` is false.
 *
 * @example
 * ```ts
 * import { scriptArgs } from "./tools/script_args.ts";
 * const { values } = scriptArgs({ args: ["--device", "cpu"], options: { device: { type: "string" } } });
 * console.log(values.device); // "cpu"
 * ```
 */
export function scriptArgs<T extends ParseArgsConfig>(
  config: T,
  exit = true,
): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    if (!isParseArgsError(e)) throw e;
    const message = parseArgsMessage(e);
    if (!exit) throw new ScriptUsageError(message);
    console.error(`${scriptName()}: ${message}\n${optionList(config)}`);
    Deno.exit(2);
  }
}

/**
 * The whole number `text` spells, at least `min`; throws `ScriptUsageError` naming `flag` otherwise.
 *
 * @example
 * ```ts
 * import { wholeNumber } from "./tools/script_args.ts";
 * console.log(wholeNumber("--seed", "7", 0)); // 7
 * ```
 */
export function wholeNumber(flag: string, text: string, min = 1): number {
  return readWholeNumber(flag, text, min, (m) => new ScriptUsageError(m));
}

/**
 * The value `read` returns from a script's options; a `ScriptUsageError` it throws becomes one line on
 * stderr and exit status 2.
 *
 * @example
 * ```ts
 * import { checkedOptions, wholeNumber } from "./tools/script_args.ts";
 * const calls = checkedOptions(() => wholeNumber("--calls", "3"));
 * console.log(calls); // 3
 * ```
 */
export function checkedOptions<T>(read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (!(e instanceof ScriptUsageError)) throw e;
    console.error(`${scriptName()}: ${e.message}`);
    Deno.exit(2);
  }
}

/**
 * `wholeNumber` for a script's option, ending the script with its usage line (exit status 2) when wrong.
 *
 * @example
 * ```ts
 * import { numberOption } from "./tools/script_args.ts";
 * console.log(numberOption("--iterations", "20")); // 20
 * ```
 */
export function numberOption(flag: string, text: string, min = 1): number {
  return checkedOptions(() => wholeNumber(flag, text, min));
}
