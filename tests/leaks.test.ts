// Leak diagnostics: a tensor the garbage collector reclaims without dispose() is reported (once per
// place of creation, with that place) when leak reports are on, its memory is freed either way, and
// memoryStats counts live tensors and their bytes. Collection is forced in a child process run with
// --v8-flags=--expose-gc (tests/leaks/child.ts).
import assert from "node:assert/strict";
import { AttnkitError, debugSettings, type MemoryStats, memoryStats, setDebug, Tensor } from "../mod.ts";

const CHILD = new URL("./leaks/child.ts", import.meta.url).pathname;
const REPORT = /was reclaimed by the garbage collector without dispose\(\)/g;

interface ChildRun {
  stats: { base: MemoryStats; dropped: MemoryStats; after: MemoryStats };
  stderr: string;
}

async function runChild(arg: string, env: Record<string, string> = {}): Promise<ChildRun> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--expose-gc", CHILD, arg],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `the child process failed (${out.signal ?? out.code}):\n${stderr}`);
  const stats = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
  return { stats, stderr };
}

// The line of the child that makes the dropped tensors, as a report names it.
async function creationLine(): Promise<number> {
  const lines = (await Deno.readTextFile(CHILD)).split("\n");
  return lines.findIndex((l) => l.includes("Tensor.zeros([64])")) + 1;
}

function assertCollected({ base, dropped, after }: ChildRun["stats"]): void {
  assert.equal(dropped.liveTensors, base.liveTensors + 3, "three tensors live before the collection");
  assert.equal(dropped.tensorBytes, base.tensorBytes + 3 * 64 * 4, "holding 3 x 256 bytes");
  assert.equal(after.liveTensors, base.liveTensors, "the collected tensors are counted gone");
  assert.equal(after.tensorBytes, base.tensorBytes, "their bytes too");
  assert.equal(after.bytesInUse, base.bytesInUse, "and the backstop freed their memory");
}

Deno.test("a tensor collected without dispose() is reported once, with where it was made", async () => {
  const run = await runChild("report");
  assertCollected(run.stats);
  const reports = run.stderr.match(REPORT) ?? [];
  assert.equal(reports.length, 1, `one report for three leaks from one place:\n${run.stderr}`);
  assert.match(run.stderr, /a Tensor \[64\] float32 on cpu/);
  assert.match(run.stderr, new RegExp(`leaks/child\\.ts:${await creationLine()}:`), run.stderr);
  assert.match(run.stderr, /makeAndDrop/);
});

Deno.test("ATTNKIT_DEBUG=leaks turns reports on from the environment", async () => {
  const run = await runChild("env", { ATTNKIT_DEBUG: "leaks" });
  assertCollected(run.stats);
  assert.equal((run.stderr.match(REPORT) ?? []).length, 1, run.stderr);
});

Deno.test("without the debug option nothing is reported, and the memory is freed all the same", async () => {
  const run = await runChild("quiet", { ATTNKIT_DEBUG: "" });
  assertCollected(run.stats);
  assert.doesNotMatch(run.stderr, REPORT);
});

Deno.test("memoryStats counts live tensors and their bytes, views once", () => {
  const base = memoryStats("cpu");
  const a = Tensor.zeros([8, 4], { dtype: "float64" });
  const view = a.reshape([32]);
  let now = memoryStats("cpu");
  assert.equal(now.liveTensors, base.liveTensors + 2, "a tensor and its view are two tensors");
  assert.equal(now.tensorBytes, base.tensorBytes + 256, "sharing one block of 256 bytes");
  a.dispose();
  now = memoryStats("cpu");
  assert.equal(now.liveTensors, base.liveTensors + 1);
  assert.equal(now.tensorBytes, base.tensorBytes + 256, "the view still holds the memory");
  view.dispose();
  view.dispose(); // a second dispose counts nothing
  now = memoryStats("cpu");
  assert.equal(now.liveTensors, base.liveTensors, "back to the baseline after dispose");
  assert.equal(now.tensorBytes, base.tensorBytes);
  assert.equal(now.threadBytesInUse, base.threadBytesInUse);
});

Deno.test("setDebug checks its options and keeps what it is not given", () => {
  const before = debugSettings().leaks;
  try {
    setDebug({ leaks: true });
    assert.equal(debugSettings().leaks, true);
    setDebug({});
    assert.equal(debugSettings().leaks, true, "an empty object changes nothing");
    assert.throws(
      () => setDebug({ leak: true } as never),
      (e) => e instanceof AttnkitError && /did you mean 'leaks'/.test(e.message),
    );
    assert.throws(
      () => setDebug({ leaks: "yes" } as never),
      (e) => e instanceof AttnkitError && /leaks: expected a boolean/.test(e.message),
    );
    {
      using kept = Tensor.zeros([2]); // disposed in time: nothing to report
      void kept;
    }
  } finally {
    setDebug({ leaks: before });
  }
});
