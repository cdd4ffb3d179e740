// attnkit from several threads (Deno Workers): each thread has its own tuning table, so a setting or an
// op's kernelMap in one thread never changes the kernels another thread's calls get; on CUDA each has
// its own stream and graph capture, so a capture in one never takes in another's work.
import assert from "node:assert/strict";
import { cudaAvailable, memoryStats, setTuning, tuning } from "../mod.ts";

interface Reply {
  before: Record<string, string>;
  after: Record<string, string>;
  pinned: Record<string, string> | undefined;
  afterCall: Record<string, string>;
}

/** Posts `message` to `worker` and resolves with its reply, or rejects with its uncaught error. */
function ask<R>(worker: Worker, message: unknown): Promise<R> {
  return new Promise((resolve, reject) => {
    worker.onmessage = (e) => resolve(e.data as R);
    worker.onerror = (e) => {
      e.preventDefault();
      reject(new Error(e.message));
    };
    worker.postMessage(message);
  });
}

Deno.test("the tuning table is per thread: a Worker's settings never reach another thread", async () => {
  const initial = tuning().current;
  setTuning({ "linear.fwd.path": "general" });
  const worker = new Worker(new URL("./threads/tuning_worker.ts", import.meta.url), { type: "module" });
  try {
    const reply = await ask<Reply>(worker, "go");
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

Deno.test({
  name: "CUDA from two Workers at once, one capturing and replaying a graph: both get their own results",
  ignore: !cudaAvailable(),
  fn: async () => {
    const url = new URL("./threads/cuda_worker.ts", import.meta.url);
    const workers = [new Worker(url, { type: "module" }), new Worker(url, { type: "module" })];
    try {
      const replies = await Promise.all(
        (["plain", "capture"] as const).map((mode, i) =>
          ask<{ wrong?: number; error?: string }>(workers[i], { mode, rounds: 200 })
        ),
      );
      assert.deepEqual(replies, [{ wrong: 0 }, { wrong: 0 }]);
    } finally {
      for (const w of workers) w.terminate();
    }
  },
});

Deno.test("memoryStats: a Worker's tensors count in its thread's bytes, not in this thread's", async () => {
  const before = memoryStats("cpu").threadBytesInUse;
  const worker = new Worker(new URL("./threads/holding_worker.ts", import.meta.url), { type: "module" });
  try {
    assert.equal(await ask<number>(worker, "hold"), 1 << 20, "the worker holds its 1 MiB");
    assert.equal(memoryStats("cpu").threadBytesInUse, before, "which is not this thread's");
    assert.equal(await ask<number>(worker, "release"), 0);
  } finally {
    worker.terminate();
  }
});
