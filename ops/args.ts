/**
 * Checks of option objects and plain arguments, shared by every public function: an option object is
 * `undefined` or a plain object whose every key is known and whose every value has the expected type
 * (or is undefined or null, which ask for the default);
 * anything else throws an `AttnkitError` (INVALID_ARGUMENT) that names the key and, for an unknown
 * one, the nearest valid name (`causal` -> `isCausal`, `use_qk_l2norm_in_kernel` -> `useQkL2norm`).
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";

/**
 * What an option takes: a type name, a list of allowed strings, or a check that returns what was
 * expected (a phrase) when the value does not fit, and undefined when it does.
 */
export type OptionKind =
  | "boolean"
  | "number"
  | "integer"
  | "string"
  | "object"
  | "function"
  | "any"
  | readonly string[]
  | ((value: unknown) => string | undefined);

/** The keys an option object may hold, and what each takes. */
export type OptionSpec = Readonly<Record<string, OptionKind>>;

/** A value as messages show it: short, and never throwing. */
export function describeValue(v: unknown): string {
  if (v === null) return "null";
  if (v === undefined) return "undefined";
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? `${v.slice(0, 37)}...` : v);
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return String(v);
  if (typeof v === "function") return "a function";
  if (typeof v === "symbol") return "a symbol";
  if (Array.isArray(v)) return `an array of ${v.length}`;
  const name = (v as { constructor?: { name?: string } }).constructor?.name;
  return name && name !== "Object" ? `a ${name}` : "an object";
}

function expectedOf(kind: OptionKind, value: unknown): string | undefined {
  if (typeof kind === "function") return kind(value);
  if (Array.isArray(kind)) {
    return kind.includes(value as string) ? undefined : `one of ${kind.map((k) => `"${k}"`).join(", ")}`;
  }
  switch (kind) {
    case "boolean":
      return typeof value === "boolean" ? undefined : "a boolean";
    case "number":
      return typeof value === "number" && !Number.isNaN(value) ? undefined : "a number";
    case "integer":
      return Number.isSafeInteger(value) ? undefined : "an integer";
    case "string":
      return typeof value === "string" ? undefined : "a string";
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value) ? undefined : "an object";
    case "function":
      return typeof value === "function" ? undefined : "a function";
    default:
      return undefined;
  }
}

// Edit distance, for "did you mean".
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; ++i) {
    const cur = [i];
    for (let j = 1; j <= b.length; ++j) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length];
}

// Folds the spellings of other libraries (snake_case, `is_` prefixes, `_in_kernel` suffixes) together.
function fold(key: string): string {
  return key.toLowerCase().replace(/_in_kernel$/, "").replace(/[_-]/g, "").replace(/^is/, "");
}

// Names other libraries give to options of ours, folded.
const ALIASES: Readonly<Record<string, string>> = {
  softmaxscale: "scale",
  smscale: "scale",
  logitsoftcap: "softcap",
  windowsize: "windowSizeLeft",
  cuseqlenskv: "cuSeqlensK",
  maxseqlenkv: "maxSeqlenK",
  qkl2norm: "useQkL2norm",
  l2norm: "useQkL2norm",
  savestates: "saveForBackward",
  headfirst: "layout",
};

/** The known key nearest to `key`, or undefined when none is close. */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  const folded = fold(key);
  const alias = ALIASES[folded];
  if (alias !== undefined && known.includes(alias)) return alias;
  const exact = known.find((k) => fold(k) === folded);
  if (exact) return exact;
  const prefix = known.find((k) => fold(k).startsWith(folded) || folded.startsWith(fold(k)));
  if (prefix && Math.min(folded.length, fold(prefix).length) >= 4) return prefix;
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const k of known) {
    const d = distance(folded, fold(k));
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return bestDistance <= Math.max(2, Math.floor(folded.length / 3)) ? best : undefined;
}

/**
 * Checks an option object against its spec and returns it (an empty object for `undefined`).
 * `name` is how messages call the object (`options`, or a nested key such as `out`).
 */
export function checkOptions<T extends object>(
  op: string,
  options: unknown,
  spec: OptionSpec,
  name = "options",
): T {
  if (options === undefined) return {} as T;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw invalidArgument(op, `${name}: expected an object of options, got ${describeValue(options)}`);
  }
  const proto = Object.getPrototypeOf(options);
  if (proto !== Object.prototype && proto !== null) {
    // A Tensor here usually means one argument too many (e.g. the gated argument list on the ungated function).
    throw invalidArgument(op, `${name}: expected an object of options, got ${describeValue(options)}`);
  }
  const known = Object.keys(spec);
  for (const key of Object.keys(options as object)) {
    const kind = spec[key];
    if (kind === undefined) {
      const near = nearestKey(key, known);
      throw invalidArgument(
        op,
        `${name}: unknown option '${key}'${near ? ` (did you mean '${near}'?)` : ""}; known: ${
          known.join(", ")
        }`,
      );
    }
    const value = (options as Record<string, unknown>)[key];
    if (value === undefined || value === null) continue; // null, like undefined, asks for the default
    const expected = expectedOf(kind, value);
    if (expected !== undefined) {
      throw invalidArgument(op, `${name}.${key}: expected ${expected}, got ${describeValue(value)}`);
    }
  }
  return options as T;
}

/** Checks a plain argument against a kind and returns it. */
export function checkArgument<T>(op: string, name: string, value: unknown, kind: OptionKind): T {
  const expected = expectedOf(kind, value);
  if (expected !== undefined) {
    throw invalidArgument(op, `${name}: expected ${expected}, got ${describeValue(value)}`);
  }
  return value as T;
}

/** A kind: a number in [min, max] (either bound optional), integer when asked. */
export function numberIn(
  min?: number,
  max?: number,
  integer = false,
): (value: unknown) => string | undefined {
  const range = min !== undefined && max !== undefined
    ? ` in [${min}, ${max}]`
    : min !== undefined
    ? ` >= ${min}`
    : max !== undefined
    ? ` <= ${max}`
    : "";
  const what = `${integer ? "an integer" : "a number"}${range}`;
  return (value) => {
    if (typeof value !== "number" || Number.isNaN(value)) return what;
    if (integer && !Number.isSafeInteger(value)) return what;
    if ((min !== undefined && value < min) || (max !== undefined && value > max)) return what;
    return undefined;
  };
}

/**
 * An optional boolean option or argument: `fallback` when undefined; anything else but a boolean (null
 * included) is refused, naming it.
 */
export function booleanOption(op: string, name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") {
    throw invalidArgument(op, `${name}: expected a boolean, got ${typeof value}`);
  }
  return value;
}
