// What the graph-capture tests share: bitwise comparison against the eager calls, and inputs refilled in
// place between replays (a graph replays on the same tensors).
import assert from "node:assert/strict";
import { Tensor } from "../mod.ts";

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
