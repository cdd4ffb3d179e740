/**
 * How node:util's `parseArgs` reports a bad command line, read in one place by the command line, the
 * build script's arguments and the repository's scripts. No imports: the build reads it before any
 * library exists.
 *
 * @module
 */

/** Whether `e` is parseArgs' report of a bad flag: a TypeError carrying an `ERR_PARSE_ARGS_*` code. */
export function isParseArgsError(e: unknown): e is Error {
  return e instanceof Error && String((e as { code?: unknown }).code ?? "").startsWith("ERR_PARSE_ARGS");
}

/**
 * parseArgs' message without its hint about positional arguments, which does not apply to a command
 * that takes none (the flag it names is kept: "Unknown option '--cuda-only'").
 */
export function parseArgsMessage(e: Error): string {
  return e.message.replace(/\. To specify a positional argument.*$/s, "");
}
