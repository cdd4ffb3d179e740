// Graph capture of the split-key decode over a KV cache: GQA decode over a contiguous and a paged cache, at
// batch 1 with a long cache (the keys split, so the split kernel and the merge run back to back) and at a
// batch that needs no split, captured once with `checkIndices: false` and replayed with new queries, caches,
// lengths and (paged) a new page order, bit for bit against the same calls made eagerly; memory back to its
// baseline.
import assert from "node:assert/strict";
import {
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  lastPlan,
  Tensor,
} from "../mod.ts";
import { refill, replays } from "./graph_fixtures.ts";
import { expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";

const dev = "cuda" as const;
const H = 8, Hkv = 2, D = 128, PAGE = 64;

/** Overwrites an int32 tensor in place with `values` (the graph keeps reading the same address). */
function setInt32(t: Tensor, values: Int32Array): void {
  using fresh = Tensor.from(values, { shape: t.shape, device: t.device });
  t.copyFrom(fresh);
}

Deno.test({
  name: "captureGraph: GQA decode over contiguous and paged caches replays bit for bit, split or not [cuda]",
  ignore: !HAS_CUDA,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        for (const [B, S] of [[1, 8192], [3, 320]]) {
          for (const paged of [false, true]) {
            const pages = S / PAGE;
            const sizes = {
              batch: B,
              heads: H,
              headsKv: Hkv,
              seqlenKv: paged ? B * S : S,
              dim: D,
              checkIndices: false,
            };
            using q = Tensor.randn([B, H, D], { dtype: "bfloat16", device: dev, seed });
            const kvShape = paged ? [B * S, Hkv, D] : [B, S, Hkv, D];
            using k = Tensor.randn(kvShape, { dtype: "bfloat16", device: dev, seed: seed + 1 });
            using v = Tensor.randn(kvShape, { dtype: "bfloat16", device: dev, seed: seed + 2 });
            using lengths = Tensor.full([B], S, { dtype: "int32", device: dev });
            using table = Tensor.from(Int32Array.from({ length: B * pages }, (_, i) => i), {
              shape: [B, pages],
              device: dev,
            });
            const call = paged
              ? (() => {
                const op = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, pageSize: PAGE });
                return () => op.forward(q, k, v, lengths, table);
              })()
              : (() => {
                const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp(sizes);
                return () => op.forward(q, k, v, lengths);
              })();
            const what = `B${B} S${S}${paged ? " paged" : ""}`;
            replays(what, call, (r) => {
              for (const [i, t] of [q, k, v].entries()) refill(t, seed + 10 * r + i);
              // Lengths that end inside a page and, in round 2, an empty sequence; pages in reversed order.
              setInt32(
                lengths,
                Int32Array.from({ length: B }, (_, b) => r === 2 && b === B - 1 ? 0 : S - 37 * r - b),
              );
              if (paged) setInt32(table, Int32Array.from({ length: B * pages }, (_, i) => B * pages - 1 - i));
            });
            const splits = Number(lastPlan()?.details.splits);
            assert.ok(B === 1 ? splits > 1 : splits === 1, `${what}: ${splits} splits`);
          }
        }
      })
    ),
});
