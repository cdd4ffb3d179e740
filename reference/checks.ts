/**
 * Argument checks of the oracles: a problem with a missing or mistyped field, arrays shorter than its
 * sizes, or offsets that do not delimit sequences is refused with an `AttnkitError` naming the field,
 * instead of reading past an array (NaN) or looping on garbage.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { checkArgument, describeValue, numberIn, type OptionKind, type OptionSpec } from "../ops/args.ts";

/** Host numbers: an Array of numbers or a (non-bigint) typed array. */
export const NUMBERS: OptionKind = (v) => {
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      if (typeof v[i] !== "number") return `an array of numbers (element ${i} is ${describeValue(v[i])})`;
    }
    return undefined;
  }
  const typed = ArrayBuffer.isView(v) && !(v instanceof DataView) && !(v instanceof BigInt64Array) &&
    !(v instanceof BigUint64Array);
  return typed ? undefined : "an array of numbers (an Array or a typed array)";
};

/** Sequence offsets: integers from 0, nondecreasing, at least two. */
export const OFFSETS: OptionKind = (v) => {
  const what = "offsets: an array of at least 2 integers from 0, nondecreasing";
  if (!Array.isArray(v) && !(ArrayBuffer.isView(v) && !(v instanceof DataView))) return what;
  const a = v as ArrayLike<unknown>;
  if (a.length < 2 || a[0] !== 0) return what;
  for (let i = 1; i < a.length; i++) {
    const x = a[i], prev = a[i - 1] as number;
    if (!Number.isSafeInteger(x) || (x as number) < prev) {
      return `${what} (element ${i} is ${describeValue(x)})`;
    }
  }
  return undefined;
};

/** A finite number. */
export const FINITE: OptionKind = (
  v,
) => (typeof v === "number" && Number.isFinite(v) ? undefined : "a finite number");

/** A count: an integer in [min, 2^31). */
export function count(min: number): OptionKind {
  return numberIn(min, 2 ** 31 - 1, true);
}

/**
 * Checks an object of fields: each field of the spec that is present has its kind, and the `required`
 * ones are present. Other keys are left alone (a problem object may carry a caller's own notes, such
 * as which variant it describes). Returns it typed.
 */
export function checkFields<T extends object>(
  op: string,
  name: string,
  value: unknown,
  spec: OptionSpec,
  required: readonly string[],
): T {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw invalidArgument(op, `${name}: expected an object, got ${describeValue(value)}`);
  }
  const fields = value as Record<string, unknown>;
  for (const [key, kind] of Object.entries(spec)) {
    const v = fields[key];
    if (v === undefined || v === null) {
      if (required.includes(key)) throw invalidArgument(op, `${name}.${key}: required`);
      continue;
    }
    checkArgument(op, `${name}.${key}`, v, kind);
  }
  return fields as T;
}

/** Refuses an array shorter than a problem's sizes need. */
export function expectLength(
  op: string,
  name: string,
  values: ArrayLike<number>,
  needed: number,
  what: string,
): void {
  if (values.length < needed) {
    throw invalidArgument(
      op,
      `${name}: holds ${values.length} values, expected at least ${needed} (${what})`,
    );
  }
}

/** Checks a plain array argument (host numbers). */
export function checkNumbers(op: string, name: string, value: unknown): ArrayLike<number> {
  const expected = (NUMBERS as (v: unknown) => string | undefined)(value);
  if (expected !== undefined) {
    throw invalidArgument(op, `${name}: expected ${expected}, got ${describeValue(value)}`);
  }
  return value as ArrayLike<number>;
}

/** Checks a plain array argument (host numbers) and refuses it when shorter than a problem's sizes need. */
export function expectNumbers(
  op: string,
  name: string,
  value: unknown,
  needed: number,
  what: string,
): ArrayLike<number> {
  const values = checkNumbers(op, name, value);
  expectLength(op, name, values, needed, what);
  return values;
}
