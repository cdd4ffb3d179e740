/**
 * Finds and loads the native library, checks that it belongs to this module, and turns C status codes
 * into exceptions.
 *
 * Lookup order: the `ATTNKIT_LIB` environment variable (a path to `libattnkit.so`), then `lib/`
 * beside this module (a checkout, built by `deno task build`), then the per-user cache
 * `$XDG_CACHE_HOME/attnkit/<version>/` (or `~/.cache/attnkit/<version>/`), which `build.ts --cache`
 * fills for a copy used as a dependency. The library must report this module's version and ABI; one
 * built from a checkout whose sources changed since is named with the command that rebuilds it.
 *
 * @module
 */
import { buildRecordPath, readBuildRecord, staleLibraryReason } from "./build_record.ts";
import { AttnkitError, statusName } from "./errors.ts";
import { abiFingerprint } from "./fingerprint.ts";
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

// Whether the environment may be read; the lookup works without it, minus ATTNKIT_LIB and the cache.
function envGranted(): boolean {
  try {
    return Deno.permissions.querySync({ name: "env" }).state === "granted";
  } catch {
    return true;
  }
}

/** The per-user cache folder for this version's library. */
export function cacheDirectory(): string {
  const base = envGet("XDG_CACHE_HOME") ?? `${envGet("HOME") ?? envGet("USERPROFILE") ?? "."}/.cache`;
  return `${base}/attnkit/${VERSION}`;
}

/** The folder of this copy of attnkit (holding `mod.ts`, `build.ts`, `csrc/`), or undefined when it is remote. */
export function moduleRoot(): string | undefined {
  const url = new URL("..", import.meta.url);
  return url.protocol === "file:" ? decodeURIComponent(url.pathname).replace(/\/$/, "") : undefined;
}

/** Where a checkout keeps its build (`lib/` beside `ffi/`), or undefined for a remote module. */
export function checkoutLibraryPath(): string | undefined {
  const root = moduleRoot();
  return root === undefined ? undefined : `${root}/lib/${LIBRARY_FILE}`;
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** The permissions `build.ts` needs, as flags. */
export const BUILD_PERMISSIONS = "--allow-read --allow-write --allow-run --allow-env";

/**
 * The command that builds this copy's library into the per-user cache, where the lookup finds it:
 * this copy's own `build.ts` when it is a local folder (works offline, also when that folder is
 * read-only), else the published build entry point (needs the network).
 *
 * @example
 * ```ts
 * import { cacheBuildCommand } from "./library.ts";
 * console.log(cacheBuildCommand()); // deno run --allow-read ... /path/to/attnkit/build.ts --cache
 * ```
 */
export function cacheBuildCommand(): string {
  const root = moduleRoot();
  return root !== undefined
    ? `deno run ${BUILD_PERMISSIONS} ${root}/build.ts --cache`
    : `deno run ${BUILD_PERMISSIONS} --allow-net=jsr.io jsr:@attnkit/attnkit@${VERSION}/build`;
}

/** Where the library was found; decides what a message tells the user to run. */
type Origin = "env" | "checkout" | "cache";

/** The path the library would be loaded from, in lookup order; undefined when none exists. */
export function findLibrary(): string | undefined {
  return locate()?.path;
}

function locate(): { path: string; origin: Origin } | undefined {
  const fromEnv = envGet("ATTNKIT_LIB");
  if (fromEnv) return { path: fromEnv, origin: "env" };
  const local = checkoutLibraryPath();
  if (local && exists(local)) return { path: local, origin: "checkout" };
  const cached = `${cacheDirectory()}/${LIBRARY_FILE}`;
  if (exists(cached)) return { path: cached, origin: "cache" };
  return undefined;
}

// What to run to replace the library found at `origin`.
function rebuildAdvice(origin: Origin): string {
  const root = moduleRoot();
  if (origin === "env") {
    return `build one from attnkit ${VERSION} (\`deno run ${BUILD_PERMISSIONS} build.ts --out DIR\` in its ` +
      `checkout) and point ATTNKIT_LIB at it, or unset ATTNKIT_LIB`;
  }
  if (origin === "checkout") return `run \`deno task build\` in ${root}`;
  return `run \`${cacheBuildCommand()}\``;
}

/**
 * The message for a missing library: the commands that build one (offline ones first) and the
 * permissions they and the loading need.
 */
function notFoundMessage(): string {
  const root = moduleRoot();
  const checkout = root !== undefined && exists(`${root}/build.ts`);
  const steps = checkout
    ? `In this checkout run \`deno task build\` (in ${root}; it builds lib/). For a copy whose folder is ` +
      `read-only, build into the per-user cache instead: \`${cacheBuildCommand()}\` (builds into ` +
      `${cacheDirectory()}).`
    : `Build it into the per-user cache (${cacheDirectory()}): offline, from a checkout of attnkit ${VERSION}, ` +
      `\`deno run ${BUILD_PERMISSIONS} path/to/attnkit/build.ts --cache\`; online, \`${cacheBuildCommand()}\`.`;
  const looked = envGranted()
    ? `looked at ATTNKIT_LIB, ${checkoutLibraryPath() ?? "lib/ of a checkout"} and ${cacheDirectory()}`
    : `looked at ${checkoutLibraryPath() ?? "lib/ of a checkout"} only: without --allow-env neither ` +
      `ATTNKIT_LIB nor the per-user cache (found through HOME or XDG_CACHE_HOME) can be read`;
  return `the native library ${LIBRARY_FILE} was not found (${looked}). ${steps} The build needs ` +
    `${BUILD_PERMISSIONS} and a C++ compiler (nvcc for the CUDA kernels); loading needs --allow-ffi and ` +
    `--allow-read (--allow-env to honour ATTNKIT_LIB and XDG_CACHE_HOME). Or set ATTNKIT_LIB to a prebuilt ` +
    `library.`;
}

let loaded: { symbols: Symbols; path: string } | undefined;
let warned = false;

/** The loaded library's symbols (loaded on first use). Throws when no library is found. */
export function native(): Symbols {
  return load().symbols;
}

/** The path of the loaded library. */
export function libraryPath(): string {
  return load().path;
}

function libraryError(message: string): AttnkitError {
  return new AttnkitError("LIBRARY_NOT_FOUND", "attnkit", message);
}

/**
 * The version and ABI fingerprint a library reports, read through a handle of its own so that a
 * library from another release is named as such before its symbol table is bound. The caller closes
 * the handle once the library is bound (closing it earlier would unload and reload the library).
 */
function identify(
  path: string,
  origin: Origin,
): { version: string; abi?: string; handle: { close(): void } } {
  let probe;
  try {
    probe = Deno.dlopen(path, {
      ak_version: { parameters: [], result: "pointer" },
      ak_abi_fingerprint: { parameters: [], result: "pointer", optional: true },
    });
  } catch (e) {
    const reason = (e as Error).message;
    const what = /ak_version/.test(reason)
      ? `${path} is not an attnkit library (it has no ak_version)`
      : `could not load ${path}: ${reason}`;
    throw libraryError(`${what}: ${rebuildAdvice(origin)}.`);
  }
  const version = readCString(probe.symbols.ak_version());
  const abi = probe.symbols.ak_abi_fingerprint ? readCString(probe.symbols.ak_abi_fingerprint()) : undefined;
  return { version, abi, handle: probe };
}

/** The ABI fingerprint of this module's symbol table; a library built for another table differs. */
export const ABI_FINGERPRINT: string = abiFingerprint(symbols);

function load(): { symbols: Symbols; path: string } {
  if (loaded) return loaded;
  const missing = missingPermissions();
  if (missing.length > 0) {
    throw libraryError(
      `loading the native library needs ${missing.join(" and ")} (e.g. \`deno run ${missing.join(" ")} ` +
        `script.ts\`, or -A)`,
    );
  }
  const found = locate();
  if (!found) throw libraryError(notFoundMessage());
  const { path, origin } = found;
  if (origin === "env" && !exists(path)) {
    throw libraryError(`ATTNKIT_LIB names ${path}, which is not a file: ${rebuildAdvice(origin)}.`);
  }
  const { version, abi, handle } = identify(path, origin);
  try {
    return bind(path, origin, version, abi);
  } finally {
    handle.close();
  }
}

function bind(
  path: string,
  origin: Origin,
  version: string,
  abi: string | undefined,
): { symbols: Symbols; path: string } {
  const source = origin === "env" ? `ATTNKIT_LIB=${path}` : path;
  const advice = rebuildAdvice(origin);
  if (version !== VERSION) {
    throw libraryError(
      `version mismatch: ${source} is attnkit ${version}, this module is ${VERSION}: ${advice}.`,
    );
  }
  // A library without a fingerprint predates them; binding the symbol table below still checks that
  // every entry this module calls is there.
  if (abi !== undefined && abi !== ABI_FINGERPRINT) {
    const ids = `ABI ${abi.slice(0, 12)}, expected ${ABI_FINGERPRINT.slice(0, 12)}`;
    throw libraryError(
      `ABI mismatch: ${source} was built for another symbol table than this module's (${ids}; same ` +
        `version ${VERSION}, another revision): ${advice}.`,
    );
  }
  warnIfStale(path, origin);
  let lib: Deno.DynamicLibrary<typeof symbols>;
  try {
    lib = Deno.dlopen(path, symbols);
  } catch (e) {
    const reason = (e as Error).message;
    const symbol = /symbol[^a-z_]*([a-z_][a-z0-9_]*)/i.exec(reason)?.[1];
    throw libraryError(
      symbol
        ? `ABI mismatch: ${source} lacks the entry ${symbol} that this module calls (built from another ` +
          `revision of attnkit ${VERSION}): ${advice}.`
        : `could not load ${source}: ${reason}: ${advice}.`,
    );
  }
  loaded = { symbols: lib.symbols, path };
  return loaded;
}

// A checkout's library (or one its build put in the cache) built from other sources than the
// checkout's present ones: say so once, with the command, and go on (it may still be what is wanted).
function warnIfStale(path: string, origin: Origin): void {
  const root = moduleRoot();
  if (warned || origin === "env" || root === undefined) return;
  const record = readBuildRecord(path);
  if (origin === "cache" && record?.sourceRoot !== root) return;
  const reason = staleLibraryReason(
    path,
    root,
    origin === "checkout" ? `cd ${root} && deno task build` : cacheBuildCommand(),
    record,
  );
  if (reason) {
    warned = true;
    console.warn(`attnkit: ${reason} (${buildRecordPath(path)} records what it was built from).`);
  }
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
