// The compute-sanitizer driver's log reading and sharding (tools/sanitize.ts), on sample logs.
import assert from "node:assert/strict";
import { shardsOf, summarise } from "../tools/sanitize.ts";

Deno.test("sanitize: a log's error count, kernels and test summary are read", () => {
  const log = [
    "========= Invalid __global__ read of size 4 bytes",
    "=========     at void ak::linear::cuda::fast_grads<bf16, 128>(Problem)+0x10 in grads.cuh:1",
    "ok | 12 passed | 1 failed | 3 ignored (4s)",
    "========= ERROR SUMMARY: 7 errors",
  ].join("\n");
  const s = summarise(log);
  assert.equal(s.errors, 7);
  assert.equal(s.passed, 12);
  assert.equal(s.failed, 1);
  assert.ok(s.summarised);
  assert.deepEqual(Object.keys(s.kernels), ["void ak::linear::cuda::fast_grads<bf16, 128>"]);
  const crashed = summarise("Segmentation fault");
  assert.equal(crashed.errors, -1);
  assert.equal(crashed.summarised, false);
});

Deno.test("sanitize: shards are the test files of a folder and file#filter entries", async () => {
  const shards = await shardsOf("tests/fault,tests/variants.test.ts#linear.bwd");
  assert.deepEqual(shards.at(-1), { file: "tests/variants.test.ts", filter: "linear.bwd" });
  assert.ok(
    shards.slice(0, -1).every((s) => s.file.startsWith("tests/fault/") && s.file.endsWith(".test.ts")),
  );
});
