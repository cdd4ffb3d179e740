// The seeded fuzz of the public API (tests/fuzz/): 10,000 calls on the CPU backend (4,000 on CUDA when a
// GPU is present), half valid calls on small random inputs and half certainly-invalid ones. The runner
// lives in a child process, so a crash is reported as such, with the case it happened in. Passing
// means: no crash, no hang, every invalid call refused with an AttnkitError, every valid call
// succeeded with finite outputs, nothing but AttnkitError thrown, and device memory back to where it
// started. Replay a failure with its seed: ATTNKIT_TEST_SEED=<seed>.
import assert from "node:assert/strict";
import { deviceTest, withSeed } from "./helpers.ts";
import type { FuzzReport } from "./fuzz/run.ts";
import * as ak from "../mod.ts";
import { DRAWN_INDIRECTLY } from "./fuzz/cases.ts";

const RUNNER = new URL("./fuzz/run.ts", import.meta.url).pathname;

async function runFuzz(device: string, seed: number, calls: number): Promise<FuzzReport> {
  const dir = await Deno.makeTempDir({ prefix: "attnkit-fuzz-" });
  try {
    const [out, progress] = [`${dir}/report.json`, `${dir}/progress.txt`];
    const args = ["run", "-A", RUNNER, "--device", device, "--seed", `${seed}`, "--calls", `${calls}`];
    const child = new Deno.Command(Deno.execPath(), {
      args: [...args, "--out", out, "--progress", progress],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), 300_000);
    const result = await child.output();
    clearTimeout(timer);
    if (!result.success) {
      const lines = (await Deno.readTextFile(progress).catch(() => "")).trim().split("\n");
      const stderr = new TextDecoder().decode(result.stderr).split("\n").slice(-8).join("\n");
      throw new Error(
        `the fuzz process died (${result.signal ?? `exit ${result.code}`}) in case ${
          lines.at(-1)
        }:\n${stderr}`,
      );
    }
    return JSON.parse(await Deno.readTextFile(out)) as FuzzReport;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

deviceTest("fuzz: no crash, no stray exception, no accepted invalid call, no leak", async (device) => {
  await withSeed(async (seed) => {
    const report = await runFuzz(device, seed, device === "cpu" ? 10_000 : 4_000);
    const c = report.counts;
    const shown = report.examples.map((e) => `  ${e.outcome}: case ${e.index} ${e.name}: ${e.message}`).join(
      "\n",
    );
    console.log(
      `fuzz ${device}: ${report.calls} calls in ${
        report.seconds.toFixed(1)
      } s: ${c.ok} ok, ${c.refused} refused, ` +
        `${c["refused valid"]} refused valid, ${c["accepted invalid"]} accepted invalid, ${
          c["non-finite"]
        } non-finite, ` +
        `${c["other throw"]} other throws, ${report.leakedBytes} bytes leaked`,
    );
    assert.equal(c.ok + c.refused, report.calls, `every call ends as expected:\n${shown}`);
    assert.ok(c.ok > report.calls / 4 && c.refused > report.calls / 4, "both halves of the catalog ran");
    assert.equal(report.leakedBytes, 0, "device memory returns to its baseline");
    assert.equal(report.leakedHostBytes, 0, "host memory returns to its baseline");
  });
});

Deno.test("fuzz: the catalog draws every function and class the module exports", () => {
  const folder = new URL("./fuzz/", import.meta.url);
  let catalog = "";
  for (const e of Deno.readDirSync(folder)) {
    if (e.isFile && e.name.endsWith(".ts")) catalog += Deno.readTextFileSync(new URL(e.name, folder));
  }
  const exported = Object.entries(ak).filter(([, v]) => typeof v === "function").map(([name]) => name);
  // Called as `ak.name`, or looked up by a quoted name (the families' tables of functions).
  const drawn = (name: string) => new RegExp(`\\bak\\.${name}\\b|["'\`]${name}["'\`]`).test(catalog);
  const missing = exported.filter((name) => !drawn(name) && !(name in DRAWN_INDIRECTLY));
  assert.deepEqual(missing, [], "exports no fuzz generator calls (add a case, tests/fuzz/)");
  const stale = Object.keys(DRAWN_INDIRECTLY).filter((name) => !exported.includes(name));
  assert.deepEqual(stale, [], "DRAWN_INDIRECTLY names that are not exports");
});
