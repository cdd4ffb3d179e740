// A Worker for tests/threads.test.ts: reports the tuning table it starts with, sets its own, reports it
// again, and runs one call with a kernel pinned through the op's kernelMap.
import { GroupedQueryAttentionFwdOp, lastChoice, setTuning, Tensor, tuning } from "../../mod.ts";

// The worker's global scope (typed here: the checked files share the main thread's library types).
const scope = self as unknown as { onmessage: (() => void) | null; postMessage(data: unknown): void };

scope.onmessage = () => {
  const before = tuning().current;
  setTuning({ "attention.fwd": "general" });
  const after = tuning().current;
  using q = Tensor.randn([1, 8, 2, 16], { dtype: "float16" });
  const op = new GroupedQueryAttentionFwdOp({
    layout: "bshd",
    batch: 1,
    heads: 2,
    headsKv: 2,
    seqLen: 8,
    dim: 16,
    kernelMap: { "attention.fwd": "wgmma" },
  });
  using _r = op.forward(q, q, q);
  const pinned = lastChoice()?.spec;
  const afterCall = tuning().current;
  setTuning("");
  scope.postMessage({ before, after, pinned, afterCall });
};
