// A Worker for tests/threads.test.ts: CUDA work on this thread while another does its own. "plain": a
// chain of tensor ops checked against the host; "capture": the same chain captured into a graph while
// the other thread runs, then replayed. Replies with the number of wrong elements seen.
import { captureGraph, Tensor } from "../../mod.ts";

const scope = self as unknown as {
  onmessage: ((e: MessageEvent<{ mode: "plain" | "capture"; rounds: number }>) => void) | null;
  postMessage(data: unknown): void;
};

function expected(x: Float32Array, k: number): Float32Array {
  return x.map((v) => Math.fround(Math.fround(v * 2) + k));
}

scope.onmessage = (e) => {
  const { mode, rounds } = e.data;
  let wrong = 0;
  try {
    using x = Tensor.randn([4096], { device: "cuda", seed: mode === "plain" ? 1 : 2 });
    const host = x.toArray() as Float32Array;
    using y = Tensor.zeros([4096], { device: "cuda" });
    using graph = mode === "capture" ? captureGraph(() => y.copyFrom(x.mul(2).add(3))) : undefined;
    for (let r = 0; r < rounds; r++) {
      if (graph) {
        graph.replay();
        graph.synchronize();
      } else {
        using t = x.mul(2).add(3);
        y.copyFrom(t);
      }
      const got = y.toArray() as Float32Array;
      const want = expected(host, 3);
      for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) wrong++;
      y.fill(0);
    }
    scope.postMessage({ wrong });
  } catch (err) {
    scope.postMessage({ error: String(err) });
  }
};
