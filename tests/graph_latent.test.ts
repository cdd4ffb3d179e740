// Graph capture of the latent decode and the indexer on tensor cores: MLA decode (a long cache over one
// block's heads, so that the lists split and a combine runs, and a batch that needs no split), DSA decode
// with unchecked lists and the lightning indexer with unchecked ranges, captured once and replayed with new
// values (and new lists and ranges), bit for bit against the same calls made eagerly; memory back to its
// baseline.
import assert from "node:assert/strict";
import {
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  FP8LightningIndexerFwdOp,
  lastPlan,
  MultiHeadLatentAttentionDecodeWithKVCacheFwdOp,
  Tensor,
} from "../mod.ts";
import { refill, replays } from "./graph_fixtures.ts";
import { expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";

const dev = "cuda" as const;

Deno.test({
  name: "captureGraph: MLA and DSA decode and the indexer on tensor cores replay bit for bit [cuda]",
  ignore: !HAS_CUDA,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        for (const [B, H, S] of [[1, 16, 600], [2, 32, 65]]) {
          const op = new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
            batch: B,
            heads: H,
            headsKv: 1,
            seqlenKv: S,
            dim: 512,
            peDim: 64,
          });
          using q = Tensor.randn([B, H, 512], { dtype: "bfloat16", device: dev, seed });
          using qPe = Tensor.randn([B, H, 64], { dtype: "bfloat16", device: dev, seed: seed + 1 });
          using k = Tensor.randn([B, S, 1, 512], { dtype: "bfloat16", device: dev, seed: seed + 2 });
          using kPe = Tensor.randn([B, S, 1, 64], { dtype: "bfloat16", device: dev, seed: seed + 3 });
          const call = () => op.forward(q, qPe, k, kPe);
          {
            using _o = call();
            assert.equal(lastPlan()?.details.splits, B === 1 ? 2 : 1);
          }
          replays(`MLA B${B} H${H} S${S}`, call, (r) => {
            for (const [i, t] of [q, qPe, k, kPe].entries()) refill(t, seed + 10 * r + i);
          });
        }
        {
          const sizes = {
            batch: 2,
            heads: 20,
            seqLen: 1,
            seqLenKv: 300,
            dim: 512,
            dimTail: 64,
            topk: 128,
            qStartIndexS: 299,
            checkIndices: false,
          };
          const op = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp(sizes);
          using q = Tensor.randn([2, 1, 20, 576], { dtype: "bfloat16", device: dev, seed: seed + 4 });
          using kv = Tensor.randn([2, 300, 1, 576], { dtype: "bfloat16", device: dev, seed: seed + 5 });
          const lists = (r: number) =>
            Int32Array.from({ length: 2 * 128 }, (_, i) => (i % 9 === r ? -1 : (i * 7 + 13 * r) % 300));
          using indices = Tensor.from(lists(0), { shape: [2, 1, 1, 128], device: dev });
          replays("DSA", () => op.forward(q, kv, indices), (r) => {
            refill(q, seed + 40 + r);
            using next = Tensor.from(lists(r + 1), { shape: [2, 1, 1, 128], device: dev });
            indices.copyFrom(next);
          });
        }
        {
          const op = new FP8LightningIndexerFwdOp({ checkIndices: false });
          using qWide = Tensor.randn([5, 64, 128], { device: dev, seed: seed + 6 });
          using kWide = Tensor.randn([700, 128], { device: dev, seed: seed + 7 });
          using q = qWide.cast("float8_e4m3");
          using k = kWide.cast("float8_e4m3");
          using w = Tensor.randn([5, 64], { device: dev, seed: seed + 8 });
          using ks = Tensor.from(new Int32Array([0, 5, 100, 600, 0]), { device: dev });
          using ke = Tensor.from(new Int32Array([700, 5, 650, 700, 64]), { device: dev });
          replays("indexer", () => op.forward(q, k, w, ks, ke), (r) => {
            refill(w, seed + 50 + r);
            using lo = Tensor.from(new Int32Array([r, 0, 100 + r, 512, 3]), { device: dev });
            ks.copyFrom(lo);
          });
        }
      })
    ),
});
