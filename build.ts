/**
 * Builds attnkit's native library from `csrc/`.
 *
 * The CPU backend is always built, with the host C++ compiler. The CUDA kernels (sm_90a and sm_80
 * machine code plus sm_80 PTX by default) are compiled too when `nvcc` is on PATH and either a GPU
 * driver is present, or `--cuda` / `ATTNKIT_CUDA=1` asks for them, or the output folder already holds
 * a CUDA build; on a machine without a GPU the first build thus takes seconds, not minutes.
 * Incremental and parallel: one object per translation unit, rebuilt only when its source, a header
 * it includes, the flags or the compilers' versions change. Beside the library it records what it
 * was built from (`libattnkit.so.build.json`), which the library lookup compares with the sources.
 *
 * In a checkout it writes `lib/libattnkit.so`; with `--cache` it writes the per-user cache that the
 * library lookup also reads (`$XDG_CACHE_HOME/attnkit/<version>/`), which is what a copy used as a
 * dependency needs when its own folder is read-only. A copy imported over the network fetches the
 * shipped sources first.
 *
 * @example
 * ```sh
 * deno task build                                  # in a checkout: lib/libattnkit.so
 * deno run -A build.ts --cuda                      # compile the CUDA kernels without a GPU here (CI)
 * deno run -A build.ts --cpu-only                  # the CPU backend only
 * deno run -A build.ts --arch sm_90a               # only Hopper machine code
 * deno run --allow-read --allow-write --allow-run --allow-env path/to/attnkit/build.ts --cache
 * ```
 *
 * @module
 */
import { cudaRequestFromEnv, decideBackend, probeGpuDriver } from "./build/backend.ts";
import { checkArch, checkJobs, parseBuildArgs, USAGE, UsageError } from "./build/args.ts";
import {
  expandRows,
  instantiationUnit,
  type KernelRow,
  launcherHeader,
  launchersHeader,
  launchTableUnit,
  rowsHeader,
  unitGroups,
  unitName,
} from "./build/registry.ts";
import { REGISTRIES } from "./build/registries.ts";
import { wgmmaHeader } from "./build/wgmma.ts";
import { type BuildRecord, buildRecordPath, readBuildRecord } from "./ffi/build_record.ts";
import { sourceFingerprint } from "./ffi/fingerprint.ts";
import { ABI_FINGERPRINT, cacheDirectory, LIBRARY_FILE } from "./ffi/library.ts";
import { VERSION } from "./ffi/version.ts";

export {
  type BackendDecision,
  type BackendFacts,
  decideBackend,
  NO_DRIVER_NOTE,
  probeGpuDriver,
} from "./build/backend.ts";
export { parseBuildArgs, type ParsedBuildArgs, USAGE, UsageError } from "./build/args.ts";

/** Options of {@link buildLibrary}. */
export interface BuildOptions {
  /** Compile the CUDA kernels even without a GPU driver here (also `ATTNKIT_CUDA=1`). Needs nvcc. */
  cuda?: boolean;
  /** Build the CPU backend only, even when nvcc and a GPU are here (also `ATTNKIT_CUDA=0`). */
  cpuOnly?: boolean;
  /** CUDA targets, e.g. `["sm_90a", "sm_80"]` (default). PTX of the lowest target is embedded too. */
  arch?: string[];
  /** Parallel compiler processes, at least 1 (default: the number of cores). */
  jobs?: number;
  /** Output folder (default: `lib/` of a checkout, else the per-user cache). */
  outDir?: string;
  /** Print only when something is rebuilt. */
  quiet?: boolean;
  /** Pass `-Xptxas -v` to nvcc and print its register and spill report. */
  ptxasVerbose?: boolean;
  /** Compile the CUDA code with `-lineinfo` (source lines for ncu and compute-sanitizer). */
  lineinfo?: boolean;
  /** Compile only the units whose path contains one of these strings, and do not link. */
  only?: string[];
  /** The folder holding `csrc/` (default: this module's own folder, or the fetched sources of a remote one). */
  sourceRoot?: string;
  /** Whether a GPU driver is present (default: probed with {@link probeGpuDriver}). */
  gpuDriver?: boolean;
}

/** What {@link buildLibrary} did. */
export interface BuildResult {
  /** Path of the library. */
  library: string;
  /** Whether the CUDA backend is in it. */
  cuda: boolean;
  /** Translation units in the build. */
  units: number;
  /** Units compiled this time. */
  compiled: number;
  /** Whether the library was linked this time. */
  linked: boolean;
  /** Seconds the build took. */
  seconds: number;
}

const DEFAULT_ARCH = ["sm_90a", "sm_80"];

interface Toolchain {
  cxx: string;
  cxxVersion: string;
  nvcc?: string;
  nvccVersion?: string;
  cudaHome?: string;
}

interface Unit {
  source: string; // absolute path of the source file
  label: string; // what the progress lines call it
  object: string;
  stamp: string;
  hash: string;
  cuda: boolean;
  flags: string[];
}

/**
 * Builds (or brings up to date) the native library and returns where it is. Throws when a compiler
 * fails, when an option is invalid, or when CUDA is asked for and no toolkit is found.
 *
 * @example
 * ```ts
 * import { buildLibrary } from "@attnkit/attnkit/build";
 * // One small unit into a scratch folder (a real build leaves out `only` and `outDir`).
 * const outDir = await Deno.makeTempDir();
 * const result = await buildLibrary({ cpuOnly: true, outDir, only: ["gen/abi.cpp"], quiet: true });
 * console.log(result.compiled, result.cuda); // 1 false
 * await Deno.remove(outDir, { recursive: true });
 * ```
 */
export async function buildLibrary(options: BuildOptions = {}): Promise<BuildResult> {
  const started = performance.now();
  const log = (line: string) => {
    if (!options.quiet) console.error(line);
  };
  const arch = checkArch(options.arch ?? DEFAULT_ARCH);
  const jobs = checkJobs(options.jobs ?? navigator.hardwareConcurrency ?? 2);
  if (options.outDir !== undefined && options.outDir.trim() === "") {
    throw new UsageError("outDir: expected a folder, got an empty path");
  }
  const sourceRoot = options.sourceRoot ?? (await resolveSourceRoot());
  const outDir = options.outDir ?? defaultOutDir(sourceRoot);
  const library = `${outDir}/${LIBRARY_FILE}`;
  const previous = readBuildRecord(library);
  const { toolchain, note } = await chooseToolchain(options, outDir, previous);
  const cuda = toolchain.nvcc !== undefined;
  const objDir = `${outDir}/obj`;
  await Deno.mkdir(objDir, { recursive: true });

  const csrc = `${sourceRoot}/csrc`;
  const genDir = `${outDir}/gen`;
  const sources = await listSources(csrc);
  if (isLocalModule() && options.sourceRoot === undefined) await writeManifest(csrc, sources);
  const rows = expandRows(REGISTRIES);
  const generated = await generateSources(genDir, rows, cuda, arch);
  const includes = [csrc, genDir];
  const headerCache = new Map<string, string>();
  const units: Unit[] = [];
  const addUnit = async (path: string, label: string, isCuda: boolean, targets: string[]) => {
    if (options.only && !options.only.some((s) => label.includes(s))) return;
    const flags = isCuda
      ? nvccFlags(toolchain, targets, options, includes)
      : cxxFlags(toolchain, cuda, includes);
    const content = await includeClosure(path, includes, headerCache);
    const compilers = isCuda ? `${toolchain.cxxVersion}\n${toolchain.nvccVersion}` : toolchain.cxxVersion;
    const hash = await sha256(`${flags.join(" ")}\n${toolchain.cxx}\n${compilers}\n${content}`);
    const base = label.replace(/[\/.]/g, "_");
    units.push({
      source: path,
      label,
      object: `${objDir}/${base}.o`,
      stamp: `${objDir}/${base}.hash`,
      hash,
      cuda: isCuda,
      flags,
    });
  };
  for (const rel of sources) {
    const isCuda = rel.endsWith(".cu");
    if (!isCuda && !rel.endsWith(".cpp")) continue;
    if (isCuda && !cuda) continue;
    await addUnit(`${csrc}/${rel}`, `csrc/${rel}`, isCuda, arch);
  }
  for (const g of generated) await addUnit(g.path, g.label, g.cuda, g.targets);

  const stale: Unit[] = [];
  for (const u of units) {
    if ((await readText(u.stamp)) !== u.hash || !(await exists(u.object))) stale.push(u);
  }
  const mode = cuda ? `cuda ${arch.join(", ")}` : "cpu only";
  if (note && (!options.quiet || stale.length > 0)) console.error(`attnkit build: ${note}`);
  if (stale.length > 0) log(`attnkit build (${mode}): compiling ${stale.length} of ${units.length} units`);

  let done = 0;
  const failures: string[] = [];
  const queue = [...stale].sort((a, b) => Number(b.cuda) - Number(a.cuda)); // slow CUDA units first
  const worker = async () => {
    for (let u = queue.shift(); u; u = queue.shift()) {
      if (failures.length > 0) return;
      const t0 = performance.now();
      const cmd = [u.cuda ? toolchain.nvcc! : toolchain.cxx, ...u.flags, "-c", u.source, "-o", u.object];
      const out = await run(cmd);
      done++;
      const secs = ((performance.now() - t0) / 1000).toFixed(1);
      const total = ((performance.now() - started) / 1000).toFixed(0);
      if (!out.ok) {
        failures.push(`${u.label}:\n${out.stderr}${out.stdout}`);
        console.error(`[${done}/${stale.length}] FAILED ${u.label} (${secs} s)`);
        continue;
      }
      await Deno.writeTextFile(u.stamp, u.hash);
      const report = options.ptxasVerbose && u.cuda ? `\n${summariseReport(out.stderr)}` : "";
      if (!options.quiet || stale.length > 0) {
        console.error(`[${done}/${stale.length}] ${u.label} ${secs} s (elapsed ${total} s)${report}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, stale.length) }, worker));
  if (failures.length > 0) {
    throw new Error(`attnkit build failed:\n${failures.join("\n")}`);
  }

  const result = (linked: boolean): BuildResult => ({
    library,
    cuda,
    units: units.length,
    compiled: stale.length,
    linked,
    seconds: elapsed(started),
  });
  if (options.only) return result(false);
  const linkFlags = cuda
    ? [
      `-L${toolchain.cudaHome}/lib64`,
      "-lcudart_static",
      "-ldl",
      "-lrt",
      "-lpthread",
      "-Wl,--exclude-libs,ALL",
    ]
    : ["-lpthread"];
  const linkHash = await sha256([...units.map((u) => u.hash), ...linkFlags].join("\n"));
  const record: BuildRecord = {
    version: VERSION,
    abi: ABI_FINGERPRINT,
    sources: sourceFingerprint(sourceRoot),
    sourceRoot,
    build: linkHash,
    cuda,
    arch: cuda ? arch : [],
    compilers: { cxx: toolchain.cxxVersion, ...(cuda ? { nvcc: toolchain.nvccVersion } : {}) },
  };
  let linked = false;
  if (stale.length > 0 || previous?.build !== linkHash || !(await exists(library))) {
    const tmp = `${library}.tmp`;
    const out = await run([
      toolchain.cxx,
      "-shared",
      "-o",
      tmp,
      ...units.map((u) => u.object),
      ...linkFlags,
    ]);
    if (!out.ok) throw new Error(`attnkit link failed:\n${out.stderr}${out.stdout}`);
    await Deno.rename(tmp, library);
    linked = true;
    log(`attnkit build: linked ${library} (${mode}) in ${elapsed(started).toFixed(1)} s`);
  }
  // Rewritten whenever it differs, also without a link: an edit that changes no object (a comment in
  // a registry) still changes the sources' fingerprint the lookup compares.
  const recordText = JSON.stringify(record, null, 2) + "\n";
  if ((await readText(buildRecordPath(library))) !== recordText) {
    await Deno.writeTextFile(buildRecordPath(library), recordText);
  }
  await Deno.remove(`${library}.hash`).catch(() => {}); // the stamp of builds before the record
  return result(linked);
}

interface GeneratedUnit {
  path: string;
  label: string;
  targets: string[];
  cuda: boolean;
}

/**
 * Writes the generated sources into `genDir`: the row table and the ABI fingerprint (every build),
 * and for a CUDA build the wgmma wrappers, each family's launcher declarations, one instantiation
 * unit per kernel and dtype whose architecture is among the targets, and the launch table. Files are
 * rewritten only when their text changes. Returns the units to compile.
 */
async function generateSources(
  genDir: string,
  rows: KernelRow[],
  cuda: boolean,
  arch: string[],
): Promise<GeneratedUnit[]> {
  await writeIfChanged(`${genDir}/generated/registry_rows.h`, rowsHeader(rows));
  const abi = `${genDir}/abi.cpp`;
  await writeIfChanged(abi, abiUnit(ABI_FINGERPRINT));
  const units: GeneratedUnit[] = [{ path: abi, label: "gen/abi.cpp", targets: [], cuda: false }];
  if (!cuda) return units;
  await writeIfChanged(`${genDir}/generated/wgmma_ops.cuh`, wgmmaHeader());
  for (const family of REGISTRIES) {
    await writeIfChanged(`${genDir}/${launcherHeader(family)}`, launchersHeader(family));
  }
  const built: boolean[] = rows.map(() => false);
  for (const group of unitGroups(rows)) {
    const targets = group[0].arch === "sm90a" ? arch.filter((a) => a === "sm_90a") : arch;
    if (targets.length === 0) continue;
    for (const r of group) built[r.index] = true;
    const name = unitName(group);
    const path = `${genDir}/kernels/${name}`;
    await writeIfChanged(path, instantiationUnit(group));
    units.push({ path, label: `gen/kernels/${name}`, targets, cuda: true });
  }
  const plain = arch.filter((a) => !a.endsWith("a")).map((a) => Number(a.slice(3))).sort((a, b) => a - b);
  const described = [...arch, ...(plain.length > 0 ? [`compute_${plain[0]}`] : [])];
  const table = `${genDir}/launch_table.cu`;
  await writeIfChanged(table, launchTableUnit(rows, built, described));
  units.push({ path: table, label: "gen/launch_table.cu", targets: arch, cuda: true });
  return units;
}

// The C entry that reports which FFI symbol table the library was built for (read by the lookup,
// which refuses a library built for another table).
function abiUnit(fingerprint: string): string {
  return `// Generated by build.ts: the fingerprint of the FFI symbol table (ffi/symbols.ts) this library
// was built for. The library lookup compares it with its own table's.
#if defined(_WIN32)
#define AK_ABI_EXPORT __declspec(dllexport)
#else
#define AK_ABI_EXPORT __attribute__((visibility("default")))
#endif
extern "C" AK_ABI_EXPORT const char* ak_abi_fingerprint(void) { return "${fingerprint}"; }
`;
}

async function writeIfChanged(path: string, text: string): Promise<void> {
  if ((await readText(path)) === text) return;
  await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
  await Deno.writeTextFile(path, text);
}

function elapsed(started: number): number {
  return (performance.now() - started) / 1000;
}

function cxxFlags(t: Toolchain, cuda: boolean, includes: string[]): string[] {
  const flags = [
    "-std=c++17",
    "-O3",
    "-fPIC",
    "-fvisibility=hidden",
    "-ffp-contract=off", // the random-number and rounding code must match the CUDA backend bit for bit
    "-Wall",
    `-DAK_VERSION="${VERSION}"`,
    `-DAK_WITH_CUDA=${cuda ? 1 : 0}`,
    ...includes.map((i) => `-I${i}`),
  ];
  if (cuda) flags.push(`-I${t.cudaHome}/include`);
  return flags;
}

function nvccFlags(t: Toolchain, arch: string[], options: BuildOptions, includes: string[]): string[] {
  const flags = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC,-fvisibility=hidden,-ffp-contract=off",
    "--expt-relaxed-constexpr",
    `-DAK_VERSION="${VERSION}"`,
    "-DAK_WITH_CUDA=1",
    `-ccbin=${t.cxx}`,
    ...includes.map((i) => `-I${i}`),
  ];
  for (const a of arch) {
    const m = /^sm_(\d+)(a?)$/.exec(a);
    if (!m) throw new Error(`--arch: expected targets like sm_90a or sm_80, got ${a}`);
    flags.push(`-gencode=arch=compute_${m[1]}${m[2]},code=sm_${m[1]}${m[2]}`);
  }
  // PTX of the lowest plain target, so newer GPUs can run it through the driver's compiler.
  const plain = arch.filter((a) => !a.endsWith("a")).map((a) => Number(a.slice(3))).sort((a, b) => a - b);
  if (plain.length > 0) flags.push(`-gencode=arch=compute_${plain[0]},code=compute_${plain[0]}`);
  if (options.ptxasVerbose) flags.push("-Xptxas=-v");
  if (options.lineinfo) flags.push("-lineinfo");
  return flags;
}

// Keeps the lines of a ptxas report that matter: function names, registers, spills, stack, and the
// performance warnings (wgmma serialised: C7518 / C7520 and the like).
function summariseReport(stderr: string): string {
  return stderr.split("\n").filter((l) =>
    /Compiling entry|Used \d+ registers|spill|stack frame|Performance Loss/.test(l)
  )
    .join("\n");
}

// The compilers, and whether the CUDA kernels are built (see build/backend.ts for the rule).
async function chooseToolchain(
  options: BuildOptions,
  outDir: string,
  previous: BuildRecord | undefined,
): Promise<{ toolchain: Toolchain; note?: string }> {
  const cxxFromEnv = envGet("CXX");
  const cxxFound = cxxFromEnv
    ? { command: cxxFromEnv, version: await versionOf(cxxFromEnv) }
    : await firstWorking(["g++", "c++", "clang++"]);
  if (!cxxFound?.version) {
    throw new Error(
      cxxFromEnv
        ? `attnkit build: CXX=${cxxFromEnv} does not run (\`${cxxFromEnv} --version\` failed)`
        : "attnkit build: no C++ compiler found (tried $CXX, g++, c++, clang++): install g++ or clang++",
    );
  }
  const cpu: Toolchain = { cxx: cxxFound.command, cxxVersion: firstLine(cxxFound.version) };
  // Explicit options win over ATTNKIT_CUDA, which wins over the build's own choice.
  const fromEnv = options.cuda || options.cpuOnly ? undefined : cudaRequestFromEnv(envGet("ATTNKIT_CUDA"));
  const askedCuda = options.cuda ?? fromEnv === true;
  const cpuOnly = options.cpuOnly ?? fromEnv === false;
  if (askedCuda && cpuOnly) throw new UsageError("cuda and cpuOnly contradict each other");
  if (cpuOnly) return { toolchain: cpu };
  const nvccCommand = envGet("ATTNKIT_NVCC") ?? "nvcc";
  const nvccVersion = await versionOf(nvccCommand);
  const previousCuda = previous?.cuda ??
    ((await exists(`${outDir}/${LIBRARY_FILE}.hash`)) &&
      (await exists(`${outDir}/obj/gen_launch_table_cu.o`)));
  const needsProbe = nvccVersion !== undefined && !askedCuda && !previousCuda;
  const driver = needsProbe ? options.gpuDriver ?? (await probeGpuDriver()) : (options.gpuDriver ?? false);
  const decision = decideBackend({
    nvcc: nvccVersion !== undefined,
    driver,
    askedCuda,
    cpuOnly,
    previousCuda,
  });
  if (!decision.cuda) return { toolchain: cpu, note: decision.note };
  const cudaHome = await cudaHomeOf(nvccCommand);
  if (!cudaHome) {
    if (askedCuda) {
      throw new Error(
        `attnkit build: the CUDA kernels were asked for but ${nvccCommand}'s toolkit has no ` +
          "include/cuda_runtime.h and lib64/libcudart_static.a: set CUDA_HOME to the toolkit's folder",
      );
    }
    return { toolchain: cpu };
  }
  const release = nvccVersion!.split("\n").filter((l) => /release|Build/.test(l)).join("; ");
  return {
    toolchain: { ...cpu, nvcc: nvccCommand, nvccVersion: release || firstLine(nvccVersion!), cudaHome },
  };
}

function firstLine(text: string): string {
  return text.trim().split("\n")[0].trim();
}

// `command --version`'s output, or undefined when it does not run.
async function versionOf(command: string): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(command, { args: ["--version"], stdout: "piped", stderr: "null" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout) : undefined;
  } catch {
    return undefined; // not installed, or not allowed to run
  }
}

async function firstWorking(candidates: string[]): Promise<{ command: string; version: string } | undefined> {
  for (const command of candidates) {
    const version = await versionOf(command);
    if (version !== undefined) return { command, version };
  }
  return undefined;
}

// An environment variable, or undefined when unset or not readable (no --allow-env).
function envGet(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

// The toolkit root, from CUDA_HOME or from what nvcc itself reports (it may be a wrapper script).
async function cudaHomeOf(nvcc: string): Promise<string | undefined> {
  const candidates: string[] = [];
  const env = envGet("CUDA_HOME") ?? envGet("CUDA_PATH");
  if (env) candidates.push(env);
  const out = await run([nvcc, "-dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"]);
  const top = /#\$ TOP=(.*)/.exec(out.stderr + out.stdout);
  if (top) candidates.push(top[1].trim());
  candidates.push("/usr/local/cuda");
  for (const c of candidates) {
    if ((await exists(`${c}/include/cuda_runtime.h`)) && (await exists(`${c}/lib64/libcudart_static.a`))) {
      return c;
    }
  }
  return undefined;
}

async function run(cmd: string[]): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  const out = await new Deno.Command(cmd[0], { args: cmd.slice(1), stdout: "piped", stderr: "piped" })
    .output();
  const dec = new TextDecoder();
  return { ok: out.success, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

// The source file and every local header it includes (recursively), concatenated for hashing.
// Quoted includes resolve against the including file's folder, then the include folders.
async function includeClosure(path: string, includes: string[], cache: Map<string, string>): Promise<string> {
  const seen = new Set<string>();
  const parts: string[] = [];
  const visit = async (file: string) => {
    const norm = normalize(file);
    if (seen.has(norm)) return;
    seen.add(norm);
    let text = cache.get(norm);
    if (text === undefined) {
      text = await Deno.readTextFile(norm);
      cache.set(norm, text);
    }
    parts.push(`// ${norm}\n${text}`);
    const dir = norm.slice(0, norm.lastIndexOf("/"));
    for (const m of text.matchAll(/^\s*#\s*include\s*"([^"]+)"/gm)) {
      for (const base of [dir, ...includes]) {
        const target = normalize(`${base}/${m[1]}`);
        if (await exists(target)) {
          await visit(target);
          break;
        }
      }
    }
  };
  await visit(path);
  return parts.join("\n");
}

function normalize(path: string): string {
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") out.pop();
    else if (part !== "." && part !== "") out.push(part);
  }
  return (path.startsWith("/") ? "/" : "") + out.join("/");
}

async function listSources(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory) out.push(...(await listSources(`${dir}/${e.name}`, rel)));
    else if (/\.(cpp|cu|h|cuh)$/.test(e.name)) out.push(rel);
  }
  return out.sort();
}

// csrc/files.json lists the sources, so a remote copy of the module knows what to fetch.
async function writeManifest(dir: string, sources: string[]): Promise<void> {
  const text = JSON.stringify(sources, null, 2) + "\n";
  if ((await readText(`${dir}/files.json`)) === text) return;
  try {
    await Deno.writeTextFile(`${dir}/files.json`, text);
  } catch {
    // a read-only copy (a dependency building into the cache): its manifest is the published one
  }
}

function isLocalModule(): boolean {
  return new URL(import.meta.url).protocol === "file:";
}

// Local checkout: its own folder. Remote module: fetch csrc/ into the cache once per version.
async function resolveSourceRoot(): Promise<string> {
  if (isLocalModule()) return decodeURIComponent(new URL(".", import.meta.url).pathname).replace(/\/$/, "");
  const root = `${cacheDirectory()}/src`;
  const manifest = await fetchText(new URL("./csrc/files.json", import.meta.url));
  const files: string[] = JSON.parse(manifest);
  for (const rel of files) {
    const target = `${root}/csrc/${rel}`;
    const text = await fetchText(new URL(`./csrc/${rel}`, import.meta.url));
    if ((await readText(target)) === text) continue;
    await Deno.mkdir(target.slice(0, target.lastIndexOf("/")), { recursive: true });
    await Deno.writeTextFile(target, text);
  }
  return root;
}

function defaultOutDir(sourceRoot: string): string {
  return isLocalModule() ? `${sourceRoot}/lib` : cacheDirectory();
}

async function fetchText(url: URL): Promise<string> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`attnkit build: could not fetch ${url}: ${res.status}`);
  return await res.text();
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

if (import.meta.main) {
  let parsed;
  try {
    parsed = parseBuildArgs(Deno.args);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(e.showUsage ? `build.ts: ${e.message}\n\n${USAGE}` : `build.ts: ${e.message}`);
    Deno.exit(2);
  }
  if (parsed.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const { options } = parsed;
  try {
    const result = await buildLibrary({
      ...options,
      outDir: parsed.cache ? cacheDirectory() : options.outDir,
    });
    if (!options.quiet && options.only) {
      console.error(
        `attnkit build: compiled ${result.compiled} of ${result.units} matching units (not linked: --only)`,
      );
    } else if (!options.quiet) {
      console.error(
        `attnkit build: ${result.library} is up to date (${result.cuda ? "CUDA + CPU" : "CPU only"}; ` +
          `${result.compiled} of ${result.units} units compiled, ${result.seconds.toFixed(1)} s)`,
      );
    }
  } catch (e) {
    console.error(e instanceof UsageError ? `build.ts: ${e.message}` : (e as Error).message);
    Deno.exit(e instanceof UsageError ? 2 : 1);
  }
}
