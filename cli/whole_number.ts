/**
 * One reading of a whole-number flag value for the command line and the repository's scripts: digits only
 * (no sign, exponent or fraction, which `Number` would accept or turn into NaN), a safe integer, at least
 * `min`. Each caller raises its own usage error with the message this returns.
 *
 * @example
 * ```ts
 * import { readWholeNumber } from "./cli/whole_number.ts";
 * console.log(readWholeNumber("--seed", "7", 0, (m) => new Error(m))); // 7
 * ```
 *
 * @module
 */

/** The whole number `text` spells, at least `min`; otherwise throws `fail(message)`, the message naming `flag`. */
export function readWholeNumber(
  flag: string,
  text: string,
  min: number,
  fail: (message: string) => Error,
): number {
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min) {
    throw fail(`${flag}: expected a whole number of at least ${min}, got "${text}"`);
  }
  return n;
}
