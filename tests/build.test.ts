// build.ts and the package around it: the csrc/ manifest a remote build fetches, versions that
// must agree, incremental rebuilds, the command line, the CUDA decision, the build record and the
// checks the library lookup makes with it (version, ABI, stale sources, a missing library).
import assert from "node:assert/strict";
import { buildLibrary, decideBackend, NO_DRIVER_NOTE, parseBuildArgs, UsageError } from "../build.ts";
import { cudaRequestFromEnv } from "../build/backend.ts";
import {
  expandRows,
  type KernelFamily,
  launcherHeader,
  launchersHeader,
  launchTableUnit,
  rowName,
  rowsHeader,
} from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";
import { buildRecordPath, readBuildRecord, staleLibraryReason } from "../ffi/build_record.ts";
import { abiFingerprint, sha256Hex, sourceFingerprint } from "../ffi/fingerprint.ts";
import { ABI_FINGERPRINT, LIBRARY_FILE } from "../ffi/library.ts";
import { VERSION } from "../ffi/version.ts";
import { nativeVersion } from "../mod.ts";

const root = new URL("../", import.meta.url);
const csrc = new URL("csrc/", root);

async function walk(dir: URL, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    const rel = prefix + e.name;
    if (e.isDirectory) out.push(...(await walk(new URL(`${e.name}/`, dir), `${rel}/`)));
    else if (/\.(cpp|cu|h|cuh)$/.test(e.name)) out.push(rel);
  }
  return out.sort();
}

Deno.test("csrc/files.json lists exactly the sources and headers under csrc/", async () => {
  const manifest: string[] = JSON.parse(await Deno.readTextFile(new URL("files.json", csrc)));
  assert.deepEqual(manifest, await walk(csrc), "run `deno task build` to refresh csrc/files.json");
});

// Quoted includes name a file from csrc/ (the build's include folder), or one the build generates.
const GENERATED = new Set([
  "generated/registry_rows.h",
  "generated/wgmma_ops.cuh",
  ...REGISTRIES.map((family) => launcherHeader(family)),
]);

Deno.test("every local #include in csrc/ resolves to a file in the manifest or a generated one", async () => {
  const manifest = new Set<string>(JSON.parse(await Deno.readTextFile(new URL("files.json", csrc))));
  for (const file of manifest) {
    const text = await Deno.readTextFile(new URL(file, csrc));
    for (const m of text.matchAll(/^\s*#\s*include\s*"([^"]+)"/gm)) {
      assert.ok(
        manifest.has(m[1]) || GENERATED.has(m[1]),
        `${file} includes "${m[1]}", which is neither in csrc/files.json nor generated`,
      );
    }
  }
});

Deno.test("the registries expand into unique, well-formed rows; the generated C++ names each", () => {
  const rows = expandRows(REGISTRIES);
  assert.ok(rows.length > 50);
  assert.equal(new Set(rows.map(rowName)).size, rows.length, "one row per instance");
  assert.deepEqual(rows.map((r) => r.index), rows.map((_, i) => i));
  const header = rowsHeader(rows);
  for (const r of rows) assert.ok(header.includes(`// ${r.index}\n`), `row ${r.index} in the row table`);
  // A row whose architecture the build leaves out gets a null launcher.
  const built = rows.map((r) => r.arch !== "sm90a");
  const table = launchTableUnit(rows, built, ["sm_80", "compute_80"]);
  const sm90 = rows.find((r) => r.arch === "sm90a")!;
  assert.ok(table.includes(`nullptr,  // ${sm90.index}: not built`));
  assert.ok(table.includes('kBuiltTargets = "sm_80 compute_80"'));
  const bad = (k: Partial<KernelFamily["kernels"][number]>): KernelFamily => ({
    family: "demo",
    params: ["demo/params.h"],
    kernels: [{
      stage: "demo.fwd",
      variant: "mma",
      launcher: "ak::demo::Fwd",
      args: "FwdParams<T>",
      header: "demo.cuh",
      arch: "sm80",
      instances: [{ dtypes: ["bfloat16"], d: [64] }],
      doc: "",
      ...k,
    }],
  });
  assert.throws(() => expandRows([bad({ stage: "other.fwd" })]), /stage must look like demo/);
  assert.throws(() => expandRows([bad({ variant: "Split" })]), /variant must be/);
  assert.throws(
    () => expandRows([bad({ instances: [{ dtypes: ["bfloat16", "bfloat16"], d: [64] }] })]),
    /listed twice/,
  );
  // Every launcher is declared once, in its namespace, with its argument type.
  for (const family of REGISTRIES) {
    const declared = launchersHeader(family);
    for (const k of family.kernels) {
      const name = k.launcher.slice(k.launcher.lastIndexOf("::") + 2);
      assert.equal(declared.split(`struct ${name} {`).length, 2, `${k.launcher} declared once`);
    }
  }
  const demo = launchersHeader(bad({}));
  assert.match(demo, /#include "demo\/params.h"/);
  assert.match(demo, /namespace ak::demo \{[^]*struct Fwd \{\n {2}using Args = FwdParams<T>;/);
  assert.throws(() => launchersHeader(bad({ launcher: "Fwd" })), /namespace-qualified/);
});

Deno.test("deno.json, ffi/version.ts and the native library agree on the version", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", root)));
  assert.equal(config.version, VERSION);
  assert.equal(nativeVersion(), VERSION);
  assert.equal(config.name, "@attnkit/attnkit");
  assert.equal(config.exports["."], "./mod.ts");
  assert.equal(config.exports["./build"], "./build.ts");
  for (const path of ["mod.ts", "build.ts", "build/", "ffi/", "ops/", "csrc/", "README.md", "LICENSE"]) {
    assert.ok(config.publish.include.includes(path), `deno.json publish.include lacks ${path}`);
  }
  for (const task of ["build", "test", "bench", "demo", "check"]) {
    assert.ok(config.tasks[task], `task ${task}`);
  }
});

Deno.test("build.ts recompiles only what changed", async () => {
  const out = await Deno.makeTempDir({ prefix: "attnkit-build-" });
  try {
    const options = { cpuOnly: true, outDir: out, only: ["gen/abi.cpp"], quiet: true }; // the quickest unit
    const first = await buildLibrary(options);
    assert.equal(first.units, 1);
    assert.equal(first.compiled, 1);
    assert.equal(first.cuda, false);
    const second = await buildLibrary(options);
    assert.equal(second.compiled, 0, "an unchanged unit is not rebuilt");
    // a stamp that no longer matches (as after a change of source or flags) forces a rebuild
    await Deno.writeTextFile(`${out}/obj/gen_abi_cpp.hash`, "stale");
    const third = await buildLibrary(options);
    assert.equal(third.compiled, 1);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("build.ts --help prints its usage", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("build.ts", root).pathname, "--help"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success);
  assert.match(new TextDecoder().decode(out.stdout), /usage: .*--cpu-only.*--arch/s);
});

// ---- the command line ----

async function runBuildTs(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("build.ts", root).pathname, ...args],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("build.ts refuses an unknown flag with its usage and exit code 2, without a stack trace", async () => {
  const out = await runBuildTs(["--cuda-only"]);
  assert.equal(out.code, 2);
  assert.match(out.stderr, /^build.ts: Unknown option '--cuda-only'\n\nusage: /);
  assert.doesNotMatch(out.stderr, /^\s+at /m, "no stack trace");
  const positional = await runBuildTs(["sm_90a"]);
  assert.equal(positional.code, 2);
  assert.match(positional.stderr, /Unexpected argument 'sm_90a'[^]*usage: /);
});

Deno.test("build.ts refuses bad values with one line naming the flag, before building anything", async () => {
  for (
    const [args, flag] of [
      [["--jobs", "abc"], "--jobs"],
      [["--jobs", "0"], "--jobs"],
      [["--arch", "sm_xx"], "--arch"],
      [["--out="], "--out"],
    ] as const
  ) {
    const out = await runBuildTs([...args]);
    assert.equal(out.code, 2, `${args.join(" ")}`);
    const lines = out.stderr.trim().split("\n");
    assert.equal(lines.length, 1, `one line for ${args.join(" ")}: ${out.stderr}`);
    assert.ok(lines[0].startsWith(`build.ts: ${flag}: `), lines[0]);
  }
});

Deno.test("parseBuildArgs: flags, values and contradictions", () => {
  const ok = parseBuildArgs([
    "--cuda",
    "--arch",
    "sm_90a, sm_80",
    "--jobs",
    "3",
    "--only",
    "core/",
    "--quiet",
  ]);
  assert.deepEqual(ok.options.arch, ["sm_90a", "sm_80"]);
  assert.equal(ok.options.jobs, 3);
  assert.equal(ok.options.cuda, true);
  assert.deepEqual(ok.options.only, ["core/"]);
  assert.equal(parseBuildArgs(["--cache"]).cache, true);
  const refused = (args: string[], pattern: RegExp) =>
    assert.throws(() => parseBuildArgs(args), (e) => e instanceof UsageError && pattern.test(e.message));
  refused(["--jobs", "1.5"], /^--jobs: /);
  refused(["--jobs=-2"], /^--jobs: /);
  refused(["--arch", ""], /^--arch: /);
  refused(["--arch", "sm_75"], /^--arch: sm_75 is older than sm_80/);
  refused(["--arch", "sm_90a,sm_90a"], /^--arch: .*twice/);
  refused(["--only", ""], /^--only: /);
  refused(["--cuda", "--cpu-only"], /contradict/);
  refused(["--cache", "--out", "x"], /--cache and --out/);
  refused(["--verbose"], /Unknown option '--verbose'/);
});

Deno.test("buildLibrary refuses bad options too", async () => {
  await assert.rejects(() => buildLibrary({ jobs: 0, only: ["none"] }), /--jobs/);
  await assert.rejects(() => buildLibrary({ jobs: Number("abc"), only: ["none"] }), /--jobs/);
  await assert.rejects(() => buildLibrary({ arch: ["sm_xx"], only: ["none"] }), /--arch/);
  await assert.rejects(() => buildLibrary({ outDir: "", only: ["none"] }), /outDir/);
});

// ---- whether the CUDA kernels are compiled ----

Deno.test("decideBackend: CUDA only with a driver, when asked, or when the folder already holds it", () => {
  assert.deepEqual(decideBackend({ nvcc: true, driver: false }), { cuda: false, note: NO_DRIVER_NOTE });
  assert.match(NO_DRIVER_NOTE, /^no GPU driver found: .*--cuda/);
  assert.equal(decideBackend({ nvcc: true, driver: true }).cuda, true);
  assert.equal(decideBackend({ nvcc: true, driver: false, askedCuda: true }).cuda, true);
  assert.equal(decideBackend({ nvcc: true, driver: false, previousCuda: true }).cuda, true);
  assert.equal(decideBackend({ nvcc: true, driver: true, cpuOnly: true }).cuda, false);
  assert.equal(decideBackend({ nvcc: true, driver: true, previousCuda: true, cpuOnly: true }).cuda, false);
  assert.deepEqual(decideBackend({ nvcc: false, driver: true }), { cuda: false }, "no toolkit: no note");
  assert.throws(() => decideBackend({ nvcc: false, driver: false, askedCuda: true }), /no CUDA toolkit/);
  assert.equal(cudaRequestFromEnv("1"), true);
  assert.equal(cudaRequestFromEnv("0"), false);
  assert.equal(cudaRequestFromEnv(""), undefined);
  assert.throws(() => cudaRequestFromEnv("yes"), /ATTNKIT_CUDA: expected 1 .* or 0/);
});

const HAS_NVCC = await new Deno.Command("nvcc", { args: ["--version"], stdout: "null", stderr: "null" })
  .output().then((o) => o.success, () => false);

Deno.test({
  name: "buildLibrary follows the injected driver probe (nvcc present)",
  ignore: !HAS_NVCC,
  fn: async () => {
    const out = await Deno.makeTempDir({ prefix: "attnkit-build-" });
    try {
      const only = ["gen/abi.cpp"]; // the smallest unit: the decision is what is tested
      const cpu = await buildLibrary({ outDir: out, only, quiet: true, gpuDriver: false });
      assert.equal(cpu.cuda, false, "no driver, not asked: CPU only");
      const gpu = await buildLibrary({ outDir: out, only, quiet: true, gpuDriver: true });
      assert.equal(gpu.cuda, true, "a driver: CUDA");
      const asked = await buildLibrary({ outDir: out, only, quiet: true, gpuDriver: false, cuda: true });
      assert.equal(asked.cuda, true, "asked: CUDA without a driver");
    } finally {
      await Deno.remove(out, { recursive: true });
    }
  },
});

// ---- the build record, staleness, and the lookup's checks ----

Deno.test("sha256Hex and the fingerprints", () => {
  assert.equal(sha256Hex([""]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert.equal(sha256Hex(["a".repeat(1000)]), sha256Hex(["a".repeat(999), "a"]));
  assert.notEqual(
    abiFingerprint({ ak_f: { parameters: ["pointer"], result: "i32" } }),
    abiFingerprint({ ak_f: { parameters: ["pointer"], result: "i64" } }),
  );
});

// A source tree of one unit, so a whole build (compile, link, record) takes a second or two.
async function miniTree(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "attnkit-tree-" });
  await Deno.mkdir(`${dir}/csrc`);
  await Deno.writeTextFile(
    `${dir}/csrc/mini.cpp`,
    'extern "C" __attribute__((visibility("default"))) const char* ak_version(void) { return AK_VERSION; }\n',
  );
  return dir;
}

Deno.test("the build record ties a library to its sources: an edit is stale, a touch is not", async () => {
  const dir = await miniTree();
  try {
    const options = { sourceRoot: dir, cpuOnly: true, quiet: true };
    const first = await buildLibrary(options);
    assert.equal(first.library, `${dir}/lib/${LIBRARY_FILE}`);
    assert.deepEqual([first.units, first.compiled, first.linked], [2, 2, true]); // mini.cpp, gen/abi.cpp
    const record = readBuildRecord(first.library)!;
    assert.equal(record.version, VERSION);
    assert.equal(record.abi, ABI_FINGERPRINT);
    assert.equal(record.sources, sourceFingerprint(dir));
    assert.equal(record.cuda, false);
    assert.match(record.compilers.cxx, /\S/);
    assert.equal(staleLibraryReason(first.library, dir, "deno task build"), undefined);

    await Deno.utime(`${dir}/csrc/mini.cpp`, new Date(), new Date()); // a touch changes no content
    assert.equal(staleLibraryReason(first.library, dir, "deno task build"), undefined);
    const touched = await buildLibrary(options);
    assert.deepEqual([touched.compiled, touched.linked], [0, false]);

    await Deno.writeTextFile(`${dir}/csrc/mini.cpp`, "// edited\n", { append: true });
    assert.match(
      staleLibraryReason(first.library, dir, "deno task build")!,
      /other sources.*`deno task build`/,
    );
    const rebuilt = await buildLibrary(options);
    assert.deepEqual([rebuilt.compiled, rebuilt.linked], [1, true]);
    assert.equal(staleLibraryReason(first.library, dir, "deno task build"), undefined);

    await Deno.writeTextFile(`${dir}/csrc/new.h`, "#pragma once\n"); // an added file counts too
    assert.ok(staleLibraryReason(first.library, dir, "deno task build"));
    const added = await buildLibrary(options);
    assert.deepEqual([added.compiled, added.linked], [0, false], "nothing includes it: nothing to compile");
    assert.equal(staleLibraryReason(first.library, dir, "deno task build"), undefined, "record rewritten");
    assert.ok(await Deno.stat(buildRecordPath(first.library)));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// Loads the library in a child process (the lookup runs once per process) with this module's ffi/ and
// returns what it printed: the version, or the error's code and message.
async function loadInChild(moduleRootDir: string, env: Record<string, string>): Promise<string> {
  const script = `import { native, readCString } from "${moduleRootDir}/ffi/library.ts";
try { console.log(readCString(native().ak_version())); } catch (e) { console.log(e.code, e.message); }`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1", ATTNKIT_LIB: "", ...env }, // an ATTNKIT_LIB of this run would win the lookup
  }).output();
  const dec = new TextDecoder();
  return dec.decode(out.stderr) + dec.decode(out.stdout);
}

async function compileLibrary(dir: string, name: string, cpp: string): Promise<string> {
  await Deno.writeTextFile(`${dir}/${name}.cpp`, cpp);
  const out = await new Deno.Command("g++", {
    args: ["-shared", "-fPIC", "-o", `${dir}/${name}.so`, `${dir}/${name}.cpp`],
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return `${dir}/${name}.so`;
}

const exported = 'extern "C" __attribute__((visibility("default"))) const char*';

Deno.test("a library given by ATTNKIT_LIB is checked by version and ABI", async () => {
  const dir = await Deno.makeTempDir({ prefix: "attnkit-abi-" });
  const here = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
  try {
    const older = await compileLibrary(dir, "older", `${exported} ak_version(void) { return "0.0.1"; }`);
    assert.match(
      await loadInChild(here, { ATTNKIT_LIB: older }),
      /LIBRARY_NOT_FOUND attnkit: version mismatch: ATTNKIT_LIB=\S+older.so is attnkit 0.0.1, this module is/,
    );
    const otherAbi = await compileLibrary(
      dir,
      "other_abi",
      `${exported} ak_version(void) { return "${VERSION}"; }\n${exported} ak_abi_fingerprint(void) { return "0123"; }`,
    );
    assert.match(
      await loadInChild(here, { ATTNKIT_LIB: otherAbi }),
      /ABI mismatch: ATTNKIT_LIB=\S+other_abi.so was built for another symbol table .*ABI 0123, expected/,
    );
    const partial = await compileLibrary(
      dir,
      "partial",
      `${exported} ak_version(void) { return "${VERSION}"; }\n` +
        `${exported} ak_abi_fingerprint(void) { return "${ABI_FINGERPRINT}"; }`,
    );
    assert.match(
      await loadInChild(here, { ATTNKIT_LIB: partial }),
      /ABI mismatch: .* lacks the entry ak_\w+/,
    );
    assert.match(
      await loadInChild(here, { ATTNKIT_LIB: `${dir}/none.so` }),
      /ATTNKIT_LIB names \S+none.so, which/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// A copy of this module's ffi/ in a folder of its own, so the lookup sees that folder as its checkout.
async function ffiCopy(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "attnkit-copy-" });
  await Deno.mkdir(`${dir}/ffi`);
  for await (const e of Deno.readDir(new URL("../ffi/", import.meta.url))) {
    if (e.isFile) await Deno.copyFile(new URL(`../ffi/${e.name}`, import.meta.url), `${dir}/ffi/${e.name}`);
  }
  return dir;
}

Deno.test("a missing library names the offline build into the per-user cache and the permissions", async () => {
  const dir = await ffiCopy();
  try {
    const env = { XDG_CACHE_HOME: `${dir}/cache` };
    const remoteLike = await loadInChild(dir, env); // no build.ts here: point to a checkout's
    assert.match(remoteLike, /LIBRARY_NOT_FOUND attnkit: the native library libattnkit.so was not found/);
    assert.match(remoteLike, /offline, from a checkout of attnkit .*path\/to\/attnkit\/build.ts --cache/);
    assert.match(remoteLike, /--allow-read --allow-write --allow-run --allow-env/);
    assert.match(remoteLike, /loading needs --allow-ffi and --allow-read/);
    assert.ok(remoteLike.includes(`${dir}/cache/attnkit/${VERSION}`), "names the cache folder");
    await Deno.writeTextFile(`${dir}/build.ts`, "");
    const checkout = await loadInChild(dir, env); // a checkout: its own build.ts, into lib/ or the cache
    assert.ok(checkout.includes(`run \`deno task build\` (in ${dir}`), checkout);
    assert.ok(checkout.includes(`--allow-env ${dir}/build.ts --cache\``), checkout);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a checkout's library built from other sources is named with the command that rebuilds it", async () => {
  const dir = await ffiCopy();
  try {
    await Deno.mkdir(`${dir}/csrc`);
    await Deno.writeTextFile(
      `${dir}/csrc/mini.cpp`,
      `${exported} ak_version(void) { return AK_VERSION; }\n`,
    );
    await buildLibrary({ sourceRoot: dir, cpuOnly: true, quiet: true });
    const fresh = await loadInChild(dir, {});
    assert.doesNotMatch(fresh, /other sources/);
    assert.match(fresh, /lacks the entry/, "the one-unit library lacks the real entries");
    await Deno.writeTextFile(`${dir}/csrc/mini.cpp`, "// edited\n", { append: true });
    const stale = await loadInChild(dir, {});
    assert.ok(stale.includes(`other sources than those in ${dir}`), stale);
    assert.ok(stale.includes(`run \`cd ${dir} && deno task build\``), stale);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
