// build.ts and the package around it: the csrc/ manifest a remote build fetches, versions that
// must agree, and incremental rebuilds.
import assert from "node:assert/strict";
import { buildLibrary } from "../build.ts";
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
  assert.deepEqual(config.exports, { ".": "./mod.ts", "./build": "./build.ts" });
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
    const options = { cpuOnly: true, outDir: out, only: ["core/common.cpp"], quiet: true };
    const first = await buildLibrary(options);
    assert.equal(first.units, 1);
    assert.equal(first.compiled, 1);
    assert.equal(first.cuda, false);
    const second = await buildLibrary(options);
    assert.equal(second.compiled, 0, "an unchanged unit is not rebuilt");
    // a stamp that no longer matches (as after a change of source or flags) forces a rebuild
    await Deno.writeTextFile(`${out}/obj/csrc_core_common_cpp.hash`, "stale");
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
