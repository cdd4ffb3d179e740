// attnkit from several threads (Deno Workers): each thread has its own tuning table, so a setting or an
// op's kernelMap in one thread never changes the kernels another thread's calls get.
import assert from "node:assert/strict";
import { setTuning, tuning } from "../mod.ts";

interface Reply {
  before: Record<string, string>;
  after: Record<string, string>;
  pinned: Record<string, string> | undefined;
  afterCall: Record<string, string>;
}

function ask(worker: Worker): Promise<Reply> {
  return new Promise((resolve, reject) => {
    worker.onmessage = (e) => resolve(e.data as Reply);
    worker.onerror = (e) => {
      e.preventDefault();
      reject(new Error(e.message));
    };
    worker.postMessage("go");
  });
}

Deno.test("the tuning table is per thread: a Worker's settings never reach another thread", async () => {
  const initial = tuning().current;
  setTuning({ "linear.fwd.path": "general" });
  const worker = new Worker(new URL("./threads/tuning_worker.ts", import.meta.url), { type: "module" });
  try {
    const reply = await ask(worker);
    // The worker starts from the process's starting table (ATTNKIT_TUNE), not from this thread's.
    assert.deepEqual(reply.before, initial);
    assert.deepEqual(reply.after, { "attention.fwd": "general" });
    // Its op's kernelMap applied to its call and was taken back after it.
    assert.deepEqual(reply.pinned, { "attention.fwd": "wgmma" });
    assert.deepEqual(reply.afterCall, { "attention.fwd": "general" });
    // Nothing the worker set reached this thread.
    assert.deepEqual(tuning().current, { "linear.fwd.path": "general" });
  } finally {
    worker.terminate();
    setTuning("");
  }
});
