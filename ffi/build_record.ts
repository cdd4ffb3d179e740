/**
 * The side file a build writes beside the native library (`libattnkit.so.build.json`): what the
 * library was built from, so that a library older than its sources is recognised without rebuilding.
 *
 * @module
 */
import { sourceFingerprint } from "./fingerprint.ts";

/** What a build records about the library it linked. */
export interface BuildRecord {
  /** The package version compiled in (`ak_version()`). */
  version: string;
  /** The fingerprint of the FFI symbol table the library was built for (`ak_abi_fingerprint()`). */
  abi: string;
  /** The fingerprint of the sources (`csrc/`, `build/`) it was built from. */
  sources: string;
  /** The folder holding those sources. */
  sourceRoot: string;
  /** A hash of every unit's sources, flags and compiler versions, and the link flags. */
  build: string;
  /** Whether the CUDA kernels are in it. */
  cuda: boolean;
  /** The CUDA targets (empty for a CPU-only build). */
  arch: string[];
  /** The compilers' version lines. */
  compilers: { cxx: string; nvcc?: string };
}

/**
 * The side file of a library path.
 *
 * @example
 * ```ts
 * import { buildRecordPath } from "./build_record.ts";
 * console.log(buildRecordPath("lib/libattnkit.so")); // lib/libattnkit.so.build.json
 * ```
 */
export function buildRecordPath(library: string): string {
  return `${library}.build.json`;
}

/**
 * Reads a library's build record; undefined when it has none (a library from an older build, or one
 * copied without it) or when it cannot be read.
 *
 * @example
 * ```ts
 * import { readBuildRecord } from "./build_record.ts";
 * console.log(readBuildRecord("/nonexistent/libattnkit.so")); // undefined
 * ```
 */
export function readBuildRecord(library: string): BuildRecord | undefined {
  try {
    const record = JSON.parse(Deno.readTextFileSync(buildRecordPath(library)));
    return typeof record?.sources === "string" && typeof record?.build === "string" ? record : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Why the library at `library` is older than the sources in `sourceRoot`, or undefined when it was
 * built from exactly those sources (or when that cannot be told: no record, no sources there, no
 * permission to read them). The message names the command that rebuilds it. `record`: the library's
 * build record when the caller has read it already.
 *
 * @example
 * ```ts
 * import { staleLibraryReason } from "./build_record.ts";
 * console.log(staleLibraryReason("/nonexistent/libattnkit.so", ".", "deno task build")); // undefined
 * ```
 */
export function staleLibraryReason(
  library: string,
  sourceRoot: string,
  rebuild: string,
  record: BuildRecord | undefined = readBuildRecord(library),
): string | undefined {
  if (!record) return undefined;
  let present: string;
  try {
    Deno.statSync(`${sourceRoot}/csrc`);
    present = sourceFingerprint(sourceRoot);
  } catch {
    return undefined;
  }
  if (present === record.sources) return undefined;
  return `${library} was built from other sources than those in ${sourceRoot} (csrc/ or build/ changed ` +
    `since): run \`${rebuild}\` to rebuild it`;
}
