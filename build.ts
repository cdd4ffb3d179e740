/**
 * Builds attnkit's native library from `csrc/`.
 *
 * With `nvcc` on PATH it compiles the CUDA backend (sm_90a and sm_80 machine code plus sm_80 PTX by
 * default) and the CPU backend; without it, the CPU backend alone with the host C++ compiler.
 * Incremental and parallel: one object per translation unit, rebuilt only when its source, a header
 * it includes or the flags change.
 *
 * In a checkout it writes `lib/libattnkit.so`; for a copy imported as a dependency (whose folder is
 * read-only) it fetches the shipped sources and builds into the per-user cache that the library
 * lookup reads (`$XDG_CACHE_HOME/attnkit/<version>/`).
 *
 * @example
 * ```sh
 * deno task build                       # in a checkout
 * deno run -A build.ts --cpu-only       # the CPU backend only
 * deno run -A build.ts --arch sm_90a    # only Hopper machine code
 * deno run -A jsr:@attnkit/attnkit/build   # attnkit as a dependency: build into the cache
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
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
import { cacheDirectory, LIBRARY_FILE } from "./ffi/library.ts";
import { VERSION } from "./ffi/version.ts";

/** Options of {@link buildLibrary}. */
export interface BuildOptions {
  /** Build the CPU backend only, even when nvcc is available. */
  cpuOnly?: boolean;
  /** CUDA targets, e.g. `["sm_90a", "sm_80"]` (default). PTX of the lowest target is embedded too. */
  arch?: string[];
  /** Parallel compiler processes (default: the number of cores). */
  jobs?: number;
  /** Output folder (default: `lib/` of a checkout, else the per-user cache). */
  outDir?: string;
  /** Print only when something is rebuilt. */
  quiet?: boolean;
  /** Pass `-Xptxas -v` to nvcc and print its register and spill report. */
  ptxasVerbose?: boolean;
  /** Compile only the units whose path contains one of these strings, and do not link. */
  only?: string[];
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
  /** Seconds the build took. */
  seconds: number;
}

const DEFAULT_ARCH = ["sm_90a", "sm_80"];

interface Toolchain {
  cxx: string;
  nvcc?: string;
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
 * Builds (or brings up to date) the native library and returns where it is.
 *
 * @example
 * ```ts
 * import { buildLibrary } from "@attnkit/attnkit/build";
 * const result = await buildLibrary({ quiet: true });
 * console.log(result.library);
 * ```
 */
export async function buildLibrary(options: BuildOptions = {}): Promise<BuildResult> {
  const started = performance.now();
  const log = (line: string) => {
    if (!options.quiet) console.error(line);
  };
  const sourceRoot = await resolveSourceRoot();
  const outDir = options.outDir ?? defaultOutDir(sourceRoot);
  const toolchain = await findToolchain(options.cpuOnly ?? false);
  const cuda = toolchain.nvcc !== undefined;
  const arch = options.arch ?? DEFAULT_ARCH;
  const objDir = `${outDir}/obj`;
  await Deno.mkdir(objDir, { recursive: true });

  const csrc = `${sourceRoot}/csrc`;
  const genDir = `${outDir}/gen`;
  const sources = await listSources(csrc);
  if (isLocalModule()) await writeManifest(csrc, sources);
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
    const hash = await sha256(`${flags.join(" ")}\n${toolchain.cxx}\n${toolchain.nvcc ?? ""}\n${content}`);
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
  for (const g of generated) await addUnit(g.path, g.label, true, g.targets);

  const stale: Unit[] = [];
  for (const u of units) {
    if ((await readText(u.stamp)) !== u.hash || !(await exists(u.object))) stale.push(u);
  }
  const mode = cuda ? `cuda ${arch.join(", ")}` : "cpu only";
  if (stale.length > 0) log(`attnkit build (${mode}): compiling ${stale.length} of ${units.length} units`);

  const jobs = Math.max(1, options.jobs ?? navigator.hardwareConcurrency ?? 2);
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

  const library = `${outDir}/${LIBRARY_FILE}`;
  if (options.only) {
    return { library, cuda, units: units.length, compiled: stale.length, seconds: elapsed(started) };
  }
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
  const linkStamp = `${outDir}/${LIBRARY_FILE}.hash`;
  if (stale.length > 0 || (await readText(linkStamp)) !== linkHash || !(await exists(library))) {
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
    await Deno.writeTextFile(linkStamp, linkHash);
    log(`attnkit build: linked ${library} (${mode}) in ${elapsed(started).toFixed(1)} s`);
  }
  return { library, cuda, units: units.length, compiled: stale.length, seconds: elapsed(started) };
}

interface GeneratedUnit {
  path: string;
  label: string;
  targets: string[];
}

/**
 * Writes the generated sources into `genDir`: the row table (every build), and for a CUDA build the
 * wgmma wrappers, each family's launcher declarations, one instantiation unit per kernel and dtype whose architecture is among the targets,
 * and the launch table. Files are rewritten only when their text changes. Returns the units to compile.
 */
async function generateSources(
  genDir: string,
  rows: KernelRow[],
  cuda: boolean,
  arch: string[],
): Promise<GeneratedUnit[]> {
  await writeIfChanged(`${genDir}/generated/registry_rows.h`, rowsHeader(rows));
  if (!cuda) return [];
  await writeIfChanged(`${genDir}/generated/wgmma_ops.cuh`, wgmmaHeader());
  for (const family of REGISTRIES) {
    await writeIfChanged(`${genDir}/${launcherHeader(family)}`, launchersHeader(family));
  }
  const units: GeneratedUnit[] = [];
  const built: boolean[] = rows.map(() => false);
  for (const group of unitGroups(rows)) {
    const targets = group[0].arch === "sm90a" ? arch.filter((a) => a === "sm_90a") : arch;
    if (targets.length === 0) continue;
    for (const r of group) built[r.index] = true;
    const name = unitName(group);
    const path = `${genDir}/kernels/${name}`;
    await writeIfChanged(path, instantiationUnit(group));
    units.push({ path, label: `gen/kernels/${name}`, targets });
  }
  const plain = arch.filter((a) => !a.endsWith("a")).map((a) => Number(a.slice(3))).sort((a, b) => a - b);
  const described = [...arch, ...(plain.length > 0 ? [`compute_${plain[0]}`] : [])];
  const table = `${genDir}/launch_table.cu`;
  await writeIfChanged(table, launchTableUnit(rows, built, described));
  units.push({ path: table, label: "gen/launch_table.cu", targets: arch });
  return units;
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
  return flags;
}

// Keeps the lines of a ptxas report that matter: function names, registers, spills, stack.
function summariseReport(stderr: string): string {
  return stderr.split("\n").filter((l) => /Compiling entry|Used \d+ registers|spill|stack frame/.test(l))
    .join("\n");
}

async function findToolchain(cpuOnly: boolean): Promise<Toolchain> {
  const cxx = Deno.env.get("CXX") ?? (await firstWorking(["g++", "c++", "clang++"]));
  if (!cxx) throw new Error("attnkit build: no C++ compiler found (tried $CXX, g++, c++, clang++)");
  if (cpuOnly) return { cxx };
  const nvcc = Deno.env.get("ATTNKIT_NVCC") ?? ((await firstWorking(["nvcc"])) ? "nvcc" : undefined);
  if (!nvcc) return { cxx };
  const cudaHome = await cudaHomeOf(nvcc);
  return cudaHome ? { cxx, nvcc, cudaHome } : { cxx };
}

async function firstWorking(candidates: string[]): Promise<string | undefined> {
  for (const c of candidates) {
    try {
      const out = await new Deno.Command(c, { args: ["--version"], stdout: "null", stderr: "null" }).output();
      if (out.success) return c;
    } catch {
      // not installed
    }
  }
  return undefined;
}

// The toolkit root, from CUDA_HOME or from what nvcc itself reports (it may be a wrapper script).
async function cudaHomeOf(nvcc: string): Promise<string | undefined> {
  const candidates: string[] = [];
  const env = Deno.env.get("CUDA_HOME") ?? Deno.env.get("CUDA_PATH");
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
  if ((await readText(`${dir}/files.json`)) !== text) await Deno.writeTextFile(`${dir}/files.json`, text);
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
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      "cpu-only": { type: "boolean", default: false },
      arch: { type: "string" },
      jobs: { type: "string" },
      out: { type: "string" },
      quiet: { type: "boolean", default: false },
      "ptxas-verbose": { type: "boolean", default: false },
      only: { type: "string", multiple: true },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(
      "usage: deno run -A build.ts [--cpu-only] [--arch sm_90a,sm_80] [--jobs N] [--out DIR] [--quiet]\n" +
        "                            [--ptxas-verbose] [--only PATH_PART ...]",
    );
    Deno.exit(0);
  }
  try {
    const result = await buildLibrary({
      cpuOnly: values["cpu-only"],
      arch: values.arch?.split(",").map((s) => s.trim()).filter(Boolean),
      jobs: values.jobs ? Number(values.jobs) : undefined,
      outDir: values.out,
      quiet: values.quiet,
      ptxasVerbose: values["ptxas-verbose"],
      only: values.only,
    });
    if (!values.quiet && values.only) {
      console.error(
        `attnkit build: compiled ${result.compiled} of ${result.units} matching units (not linked: --only)`,
      );
    } else if (!values.quiet) {
      console.error(
        `attnkit build: ${result.library} is up to date (${result.cuda ? "CUDA + CPU" : "CPU only"}; ` +
          `${result.compiled} of ${result.units} units compiled, ${result.seconds.toFixed(1)} s)`,
      );
    }
  } catch (e) {
    console.error((e as Error).message);
    Deno.exit(1);
  }
}
