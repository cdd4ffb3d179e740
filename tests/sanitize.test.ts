// The compute-sanitizer driver's log reading and sharding (tools/sanitize.ts), on sample logs.
import assert from "node:assert/strict";
import { shardsOf, summarise, summariseFile } from "../tools/sanitize.ts";
import { expandRows, rowName } from "../build/registry.ts";
import { REGISTRIES } from "../build/registries.ts";

Deno.test("sanitize: a log's error count, kernels and test summary are read", async () => {
  const log = [
    "========= Invalid __global__ read of size 4 bytes",
    "=========     at ak::arch::cp_async16(void *, const void *)+0x1390 in sm80.cuh:123",
    "=========         Device Frame: void ak::tile_load<bf16>(T1 *, int)+0x1320 in warp_tiles.cuh:127",
    "=========         Device Frame: void ak::fast_grads<bf16, (int)128>(ak::Problem, ak::FastWork<T1>)+0x110 in g.cuh:4",
    "=========     Saved host backtrace up to driver entry point at kernel launch time",
    "ok | 12 passed | 1 failed | 3 ignored (4s)",
    "========= ERROR SUMMARY: 7 errors",
  ].join("\n");
  const s = summarise(log);
  assert.equal(s.errors, 7);
  assert.equal(s.passed, 12);
  assert.equal(s.failed, 1);
  assert.ok(s.summarised);
  assert.deepEqual(Object.keys(s.kernels), ["ak::fast_grads<bf16, (int)128>"]);
  assert.equal(s.explained, 0);
  // A report with a frame at an explained site counts as explained; others do not.
  const explained = summarise(log, ["g.cuh:4"]);
  assert.equal(explained.explained, 1);
  assert.equal(summarise(log, ["g.cuh:5", "sm80.cuh:12"]).explained, 0);
  const path = Deno.makeTempFileSync({ suffix: ".log" });
  try {
    Deno.writeTextFileSync(path, log);
    assert.deepEqual(await summariseFile(path, ["g.cuh:4"]), explained);
  } finally {
    Deno.removeSync(path);
  }
  // A process that never touched the GPU has nothing to report: 0 errors, not a missing summary.
  const idle = summarise(
    "ok | 4 passed | 0 failed (9ms)\n========= Error: Target application terminated before first instrumented API call",
  );
  assert.equal(idle.errors, 0);
  assert.ok(idle.summarised);
  const crashed = summarise("Segmentation fault");
  assert.equal(crashed.errors, -1);
  assert.equal(crashed.summarised, false);
});

Deno.test("sanitize: a folder gives its tests (the variants test per kernel row, no deliberate fault)", async () => {
  const shards = await shardsOf("tests");
  assert.ok(!shards.some((s) => s.file.endsWith("device_fault.test.ts")));
  const variants = shards.filter((s) => s.file.endsWith("variants.test.ts"));
  const rows = expandRows(REGISTRIES).map(rowName);
  assert.equal(variants.length, rows.length);
  // Each filter names exactly one row's test (`variant <row> [cuda]`), no other row's.
  for (const [i, s] of variants.entries()) {
    assert.deepEqual(rows.filter((r) => `variant ${r} [cuda]`.includes(s.filter!)), [rows[i]]);
  }
});

Deno.test("sanitize: shards are the test files of a folder and file#filter entries", async () => {
  const shards = await shardsOf("tests/fault,tests/variants.test.ts#linear.bwd");
  assert.deepEqual(shards.at(-1), { file: "tests/variants.test.ts", filter: "linear.bwd" });
  assert.ok(
    shards.slice(0, -1).every((s) => s.file.startsWith("tests/fault/") && s.file.endsWith(".test.ts")),
  );
});

Deno.test("sanitize: a racecheck report is explained only when every frame is at an explained site", () => {
  const report = (read: string) =>
    [
      "========= Error: Race reported between Write access at ak::arch::bulk_load(unsigned int)+0x8b20 in sm90.cuh:156",
      `=========     and Read access at void ak::bwd::probs_and_grads<__half>(int)+0x2300 in ${read} [384 hazards]`,
      "=========     and Read access at void ak::bwd::probs_and_grads<__half>(int)+0x2310 in softmax_grad.cuh:74 [384 hazards]",
      "ok | 1 passed | 0 failed (5s)",
      "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
    ].join("\n");
  const sites = ["sm90.cuh:156", "softmax_grad.cuh:74"];
  assert.equal(summarise(report("softmax_grad.cuh:74"), sites, true).explained, 1);
  // One read elsewhere makes the pair unexplained under "all", not under "any".
  assert.equal(summarise(report("softmax_grad.cuh:90"), sites, true).explained, 0);
  assert.equal(summarise(report("softmax_grad.cuh:90"), sites, false).explained, 1);
  assert.equal(summarise(report("softmax_grad.cuh:74"), sites, true).errors, 1);
});
