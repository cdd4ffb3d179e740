// After an asynchronous device fault (an illegal address), later calls report a clear error naming the
// first failure, and nothing crashes. The fault is provoked in a child process (it ends the CUDA
// context for the rest of that process). CUDA only.
import assert from "node:assert/strict";
import { HAS_CUDA } from "./helpers.ts";

Deno.test({
  name: `a device fault leaves clear, sticky errors [cuda]${HAS_CUDA ? "" : " (no GPU: skipped)"}`,
  ignore: !HAS_CUDA,
  fn: async () => {
    const child = new URL("./fault/child.ts", import.meta.url).pathname;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", child],
      stdout: "piped",
      stderr: "piped",
    })
      .output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.ok(out.success, `the child process did not exit cleanly (${out.signal ?? out.code}):\n${stderr}`);
    const { first, later } = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
    assert.ok(first !== null, "the call after the fault reports it");
    assert.equal(first.code, "CUDA");
    assert.match(first.message, /illegal|address|fault/i);
    assert.ok(later !== null, "a later call is refused too");
    assert.equal(later.code, "CUDA");
    assert.match(later.message, /lost to an earlier fault/);
  },
});
