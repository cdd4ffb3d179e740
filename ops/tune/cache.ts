/**
 * The on-disk cache of tuning results: one JSON file per user (`$XDG_CACHE_HOME/attnkit/<version>/tune.json`,
 * else `~/.cache/attnkit/<version>/tune.json`, or the path given to {@link setTuneCachePath}), read once per
 * process, written atomically (a temporary file beside it, then a rename, so a reader never sees half a
 * file and concurrent writers never corrupt it). A file that does not parse, or is of another format or
 * library version, is ignored with one warning and replaced at the next write.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { VERSION } from "../../ffi/version.ts";

/** One candidate a tuning run tried. */
export interface TuneCandidate {
  /** Its tuning settings over the table in force (empty: the planner's own choice). */
  readonly spec: Readonly<Record<string, string>>;
  /** Its median milliseconds; null when it could not serve the call or disagreed with the planner's output. */
  readonly ms: number | null;
  /** Why it has no time, or why its time comes from fewer rounds (a candidate dropped early). */
  readonly note?: string;
}

/** A tuning result: the winner and everything tried. */
export interface TuneRecord {
  /** The winner's settings (empty: the planner's own choice won). */
  readonly spec: Readonly<Record<string, string>>;
  /** The winner's median milliseconds. */
  readonly ms: number;
  /** Every candidate tried. */
  readonly candidates: readonly TuneCandidate[];
  /** When it was measured (ISO 8601). */
  readonly at: string;
}

const FORMAT = "attnkit-tune";

let chosenPath: string | undefined;
// `written`: the entries this process stored in the file at `path`, merged into every later write, so
// that a write racing another process's can lose that process's newest entries, never this one's.
let loaded: { path: string; entries: Map<string, TuneRecord>; written: Map<string, TuneRecord> } | undefined;
let warned = false;

function warnOnce(message: string): void {
  if (warned) return;
  warned = true;
  console.warn(`attnkit: tuning cache: ${message} (this warning is shown once)`);
}

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name) || undefined;
  } catch {
    return undefined; // no --allow-env: the default path without it
  }
}

/**
 * Where the tuning cache lives.
 *
 * @example
 * ```ts
 * import { tuneCachePath } from "@attnkit/attnkit";
 * console.log(tuneCachePath()); // e.g. /home/me/.cache/attnkit/0.1.0/tune.json
 * ```
 */
export function tuneCachePath(): string {
  if (chosenPath !== undefined) return chosenPath;
  const base = env("XDG_CACHE_HOME") ?? `${env("HOME") ?? "."}/.cache`;
  return `${base}/attnkit/${VERSION}/tune.json`;
}

/**
 * Puts the tuning cache at `path` (a file; its folder is created when first written), or back at the
 * default with `undefined`. Results already read stay in memory only for the old path.
 *
 * @example
 * ```ts
 * import { setTuneCachePath, tuneCachePath } from "@attnkit/attnkit";
 * setTuneCachePath(`${Deno.makeTempDirSync()}/tune.json`);
 * console.log(tuneCachePath());
 * setTuneCachePath(undefined);
 * ```
 */
export function setTuneCachePath(path: string | undefined): void {
  if (path !== undefined && (typeof path !== "string" || path === "")) {
    throw invalidArgument(
      "setTuneCachePath",
      `path: expected a file path or undefined, got ${JSON.stringify(path)}`,
    );
  }
  chosenPath = path;
  loaded = undefined;
}

function isSpec(x: unknown): x is Record<string, string> {
  return x !== null && typeof x === "object" && !Array.isArray(x) &&
    Object.values(x as object).every((v) => typeof v === "string");
}

function isRecord(x: unknown): x is TuneRecord {
  if (x === null || typeof x !== "object") return false;
  const r = x as Record<string, unknown>;
  return isSpec(r.spec) && typeof r.ms === "number" && Number.isFinite(r.ms) && r.ms >= 0 &&
    typeof r.at === "string" && Array.isArray(r.candidates) &&
    r.candidates.every((c) =>
      c !== null && typeof c === "object" && isSpec(c.spec) &&
      (c.ms === null || (typeof c.ms === "number" && Number.isFinite(c.ms)))
    );
}

/** The entries of the file at `path` (none when it is missing; none, with a warning, when it is unusable). */
function readEntries(path: string): Map<string, TuneRecord> {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) {
      warnOnce(`cannot read ${path} (${(e as Error).message}); not used`);
    }
    return new Map();
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    warnOnce(`${path} is not JSON; ignored`);
    return new Map();
  }
  const file = parsed as { format?: unknown; version?: unknown; entries?: unknown };
  if (
    file?.format !== FORMAT || file.version !== VERSION || file.entries === null ||
    typeof file.entries !== "object"
  ) {
    warnOnce(`${path} is not an attnkit ${VERSION} tuning cache; ignored`);
    return new Map();
  }
  const entries = new Map<string, TuneRecord>();
  for (const [key, record] of Object.entries(file.entries as object)) {
    if (!isRecord(record)) {
      warnOnce(`${path} holds a malformed entry (${key}); ignored`);
      return new Map();
    }
    entries.set(key, record);
  }
  return entries;
}

function entries(): Map<string, TuneRecord> {
  const path = tuneCachePath();
  if (loaded?.path !== path) loaded = { path, entries: readEntries(path), written: new Map() };
  return loaded.entries;
}

/** The cached result for `key`, if any. */
export function readTuneRecord(key: string): TuneRecord | undefined {
  return entries().get(key);
}

/**
 * Stores `record` under `key`: in memory, and in the file (re-read first, so entries other processes
 * wrote since are kept, with every entry this process wrote before). A file that cannot be written costs
 * a warning, never the call.
 */
export function writeTuneRecord(key: string, record: TuneRecord): void {
  entries().set(key, record);
  loaded!.written.set(key, record);
  const path = tuneCachePath();
  const merged = readEntries(path);
  for (const [k, v] of loaded!.written) merged.set(k, v);
  const slash = path.lastIndexOf("/");
  const tmp = `${path}.${Deno.pid}.${crypto.randomUUID()}.tmp`;
  try {
    if (slash > 0) Deno.mkdirSync(path.slice(0, slash), { recursive: true });
    Deno.writeTextFileSync(
      tmp,
      JSON.stringify({ format: FORMAT, version: VERSION, entries: Object.fromEntries(merged) }, null, 1),
    );
    Deno.renameSync(tmp, path);
  } catch (e) {
    warnOnce(`cannot write ${path} (${(e as Error).message}); results kept for this process only`);
    try {
      Deno.removeSync(tmp);
    } catch {
      // nothing was written
    }
  }
}

/**
 * Empties the tuning cache: the file and what this process read of it.
 *
 * @example
 * ```ts
 * import { clearTuneCache, setTuneCachePath } from "@attnkit/attnkit";
 * setTuneCachePath(`${Deno.makeTempDirSync()}/tune.json`);
 * clearTuneCache();
 * setTuneCachePath(undefined);
 * ```
 */
export function clearTuneCache(): void {
  const path = tuneCachePath();
  loaded = { path, entries: new Map(), written: new Map() };
  try {
    Deno.removeSync(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) {
      throw invalidArgument("clearTuneCache", `cannot remove ${path}: ${(e as Error).message}`);
    }
  }
}
