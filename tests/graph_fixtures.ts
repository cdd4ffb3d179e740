// What the graph-capture tests share: bitwise comparison against the eager calls, inputs refilled in place
// between replays (a graph replays on the same tensors), and the capture-and-replay check itself.
import assert from "node:assert/strict";
import { captureGraph, Tensor } from "../mod.ts";

/** Bitwise equality of two tensors' contents (NaN equals NaN). */
export function sameBits(actual: Tensor, expected: Tensor, what: string): void {
  const a = actual.toArray(), e = expected.toArray();
  assert.equal(a.length, e.length, `${what}: length`);
  for (let i = 0; i < a.length; ++i) {
    if (!Object.is(a[i], e[i])) assert.fail(`${what}: element ${i} is ${a[i]}, the eager call gave ${e[i]}`);
  }
}

/** New normal values in `t`, in place on its device. */
export function refill(t: Tensor, seed: number): void {
  using fresh = Tensor.randn(t.shape, { dtype: t.dtype, device: t.device, seed });
  t.copyFrom(fresh);
}

/**
 * Captures `call` on CUDA once, then checks three replays, each after `refresh(round)` gave the inputs new
 * contents, bit for bit against the same call made eagerly.
 */
export function replays(what: string, call: () => Tensor, refresh: (round: number) => void): void {
  call().dispose(); // loads the kernels before the capture
  using graph = captureGraph(call, { device: "cuda" });
  try {
    for (let r = 0; r < 3; r++) {
      refresh(r);
      using eager = call();
      graph.replay();
      graph.synchronize();
      sameBits(graph.result, eager, `${what}, round ${r}`);
    }
  } finally {
    graph.result.dispose();
  }
}
