/**
 * Finds and loads the native library, and turns C status codes into exceptions.
 *
 * Lookup order: the `ATTNKIT_LIB` environment variable (a path to `libattnkit.so`), then `lib/`
 * beside this module (a checkout, built by `deno task build`), then the per-user cache
 * `$XDG_CACHE_HOME/attnkit/<version>/` (or `~/.cache/attnkit/<version>/`) that the exported
 * `./build` entry point fills for a copy imported as a dependency.
 *
 * @module
 */
import { AttnkitError, statusName } from "./errors.ts";
import { type Symbols, symbols } from "./symbols.ts";
import { VERSION } from "./version.ts";

/** The file name of the native library on this platform. */
export const LIBRARY_FILE = Deno.build.os === "darwin"
  ? "libattnkit.dylib"
  : Deno.build.os === "windows"
  ? "attnkit.dll"
  : "libattnkit.so";

// An environment variable, or undefined when unset or when the process may not read the environment
// (then the lookup goes on without it, and a failure says which permission was missing).
function envGet(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

// The permissions the lookup and loading need that this process lacks, as command-line flags.
function missingPermissions(): string[] {
  const needed: [Deno.PermissionName, string][] = [["ffi", "--allow-ffi"], ["read", "--allow-read"]];
  const missing: string[] = [];
  for (const [name, flag] of needed) {
    try {
      if (Deno.permissions.querySync({ name } as Deno.PermissionDescriptor).state !== "granted") {
        missing.push(flag);
      }
    } catch {
      // a runtime without the permissions API: the load itself reports what fails
    }
  }
  return missing;
}

/** The per-user cache folder for this version's library. */
export function cacheDirectory(): string {
  const base = envGet("XDG_CACHE_HOME") ?? `${envGet("HOME") ?? envGet("USERPROFILE") ?? "."}/.cache`;
  return `${base}/attnkit/${VERSION}`;
}

/** Where a checkout keeps its build (`lib/` beside `ffi/`), or undefined for a remote module. */
export function checkoutLibraryPath(): string | undefined {
  const url = new URL(`../lib/${LIBRARY_FILE}`, import.meta.url);
  return url.protocol === "file:" ? decodeURIComponent(url.pathname) : undefined;
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** The path the library would be loaded from, in lookup order; undefined when none exists. */
export function findLibrary(): string | undefined {
  const fromEnv = envGet("ATTNKIT_LIB");
  if (fromEnv) return fromEnv;
  const local = checkoutLibraryPath();
  if (local && exists(local)) return local;
  const cached = `${cacheDirectory()}/${LIBRARY_FILE}`;
  if (exists(cached)) return cached;
  return undefined;
}

let loaded: { symbols: Symbols; path: string } | undefined;

/** The loaded library's symbols (loaded on first use). Throws when no library is found. */
export function native(): Symbols {
  return load().symbols;
}

/** The path of the loaded library. */
export function libraryPath(): string {
  return load().path;
}

function load(): { symbols: Symbols; path: string } {
  if (loaded) return loaded;
  const missing = missingPermissions();
  if (missing.length > 0) {
    throw new AttnkitError(
      "LIBRARY_NOT_FOUND",
      "attnkit",
      `loading the native library needs ${missing.join(" and ")} (e.g. \`deno run ${missing.join(" ")} ` +
        `script.ts\`, or -A)`,
    );
  }
  const path = findLibrary();
  if (!path) {
    throw new AttnkitError(
      "LIBRARY_NOT_FOUND",
      "attnkit",
      `the native library ${LIBRARY_FILE} was not found. In a checkout run \`deno task build\`; ` +
        `for attnkit imported as a dependency run \`deno run -A jsr:@attnkit/attnkit/build\` (it builds into ` +
        `${cacheDirectory()}); or set ATTNKIT_LIB to a prebuilt library.`,
    );
  }
  let lib: Deno.DynamicLibrary<typeof symbols>;
  try {
    lib = Deno.dlopen(path, symbols);
  } catch (e) {
    throw new AttnkitError(
      "LIBRARY_NOT_FOUND",
      "attnkit",
      `could not load ${path}: ${(e as Error).message}. Rebuild it with \`deno task build\`.`,
    );
  }
  const version = readCString(lib.symbols.ak_version());
  if (version !== VERSION) {
    lib.close();
    throw new AttnkitError(
      "LIBRARY_NOT_FOUND",
      "attnkit",
      `${path} is version ${version}, this module is ${VERSION}: rebuild it with \`deno task build\`.`,
    );
  }
  loaded = { symbols: lib.symbols, path };
  return loaded;
}

/** Reads a NUL-terminated C string (empty for a null pointer). */
export function readCString(ptr: Deno.PointerValue): string {
  return ptr === null ? "" : new Deno.UnsafePointerView(ptr).getCString();
}

/**
 * Throws an AttnkitError for a failed status, with the library's message; returns for AK_OK.
 * `op` names the caller for messages; by default the C entry's own name leads the message.
 */
export function unwrap(status: number, op?: string): void {
  if (status === 0) return;
  const message = readCString(native().ak_last_error());
  const colon = message.indexOf(": ");
  const entry = colon > 0 ? message.slice(0, colon) : "attnkit";
  const text = colon > 0 ? message.slice(colon + 2) : message;
  throw new AttnkitError(statusName(status), op ?? entry, text || `failed with status ${status}`);
}
