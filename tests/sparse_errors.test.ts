// The sparse-attention ops refuse bad input with an AttnkitError that names the argument.
// (tolerance rule: tests/sparse_fixtures.ts)
import {
  assertClose,
  DeepSeekSparseAttentionDecodeWithKVCacheFwdOp,
  FP8LightningIndexerFwdOp,
  NSACmpFwdVarlenOp,
  NSAFwdVarlenOp,
  nsaTokenIndices,
  NSATopkVarlenOp,
  Tensor,
} from "../mod.ts";
import { deviceTest, expectNoLeak, refuses } from "./helpers.ts";
import { CHUNKS_REFUSED } from "./sparse_fixtures.ts";

// ---- Bad input ----

deviceTest(
  "sparse ops refuse wrong dtypes, shapes and token indices, naming the argument",
  (device) =>
    expectNoLeak(device, () => {
      const offsets = [0, 10, 16], T = 16;
      using tokens = nsaTokenIndices(offsets, { device });
      using wrongTokens = nsaTokenIndices([0, 9, 16], { device });
      using tokens64 = tokens.cast("int64");
      using q = Tensor.randn([T, 4, 16], { device, seed: 1 });
      using q64 = q.cast("float64");
      using qBf = q.cast("bfloat16");
      using kCmp = Tensor.randn([3, 2, 16], { device, seed: 2 });
      using vCmp = Tensor.randn([3, 2, 8], { device, seed: 3 });
      const chunks = [0, 2, 3];
      const cmpSizes = { seqNum: 2, cSeqLen: T, heads: 4, chunkNum: 3, group: 2, bs: 4, bc: 4 };
      const cmp = new NSACmpFwdVarlenOp({ ...cmpSizes, dimK: 16, dimV: 8 });
      refuses(() => cmp.forward(q64, kCmp, vCmp, offsets, chunks, tokens), /q: expected dtype/);
      refuses(() => cmp.forward(q, vCmp, vCmp, offsets, chunks, tokens), /kCmp: expected shape/);
      refuses(() => cmp.forward(q, kCmp, kCmp, offsets, chunks, tokens), /vCmp: expected shape/);
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, chunks, wrongTokens), /tokenIndices/);
      refuses(() => cmp.forward(q, kCmp, vCmp, [0, 16], chunks, tokens), /offsets/);
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 1, 2], tokens), CHUNKS_REFUSED); // sequence 0 needs 2 rows
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 2, 4], tokens), CHUNKS_REFUSED); // past kCmp's 3 rows
      refuses(() => cmp.forward(q, kCmp, vCmp, offsets, [0, 2, 1], tokens), CHUNKS_REFUSED);
      {
        using badOut = Tensor.empty([T, 4, 8], { dtype: "bfloat16", device });
        refuses(() => cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens, { output: badOut }), /out\.output/);
      }
      {
        // Unchecked, the token indices' values are not read (their shape still is).
        const loose = new NSACmpFwdVarlenOp({ ...cmpSizes, dimK: 16, dimV: 8, checkIndices: false });
        using r = loose.forward(q, kCmp, vCmp, offsets, chunks, wrongTokens);
        using r64 = cmp.forward(q, kCmp, vCmp, offsets, chunks, tokens64);
        assertClose(r.output, r64.output, { maxAbs: 0 });
        refuses(() => loose.forward(q, kCmp, vCmp, offsets, chunks, kCmp), /tokenIndices/);
      }

      const topk = new NSATopkVarlenOp({ ...cmpSizes, dim: 16, selectedBlockNum: 2 });
      using lse = Tensor.zeros([T, 4], { device });
      using lse16 = lse.cast("float16");
      refuses(() => topk.forward(q, kCmp, lse16, offsets, chunks, tokens), /lseIn: expected dtype/);
      refuses(() => topk.forward(q64, kCmp, lse, offsets, chunks, tokens), /q: expected dtype/);
      refuses(
        () =>
          new NSATopkVarlenOp({ ...cmpSizes, dim: 16, selectedBlockNum: 2 }).forward(
            qBf,
            kCmp,
            lse,
            offsets,
            chunks,
            tokens,
          ),
        /kCmp: expected bfloat16/,
      );
      refuses(
        () => topk.forward(qBf, qBf, lse, offsets, chunks, tokens),
        /q: this op was first called with float32/,
      );
      refuses(() => topk.forward(q, kCmp, lse, offsets, chunks, wrongTokens), /tokenIndices/);
      {
        using badOut = Tensor.empty([T, 2, 3], { dtype: "int32", device });
        refuses(() => topk.forward(q, kCmp, lse, offsets, chunks, tokens, badOut), /out: expected shape/);
      }
      refuses(
        () => new NSATopkVarlenOp({ ...cmpSizes, bc: 2, dim: 16, selectedBlockNum: 2 }),
        /bc/,
      );

      const sel = new NSAFwdVarlenOp({
        batch: 2,
        heads: 4,
        cSeqLen: T,
        dim: 16,
        blockSize: 4,
        groups: 2,
        selectedBlocks: 2,
      });
      using k = Tensor.randn([T, 2, 16], { device, seed: 4 });
      using v = Tensor.randn([T, 2, 8], { device, seed: 5 });
      using blocks = Tensor.zeros([T, 2, 2], { dtype: "int32", device });
      using blocks64 = blocks.cast("int64");
      using counts = Tensor.ones([T, 2], { dtype: "int32", device });
      using counts64 = counts.cast("int64");
      using countsWide = Tensor.ones([T, 4], { dtype: "int32", device });
      refuses(
        () => sel.forward(q, k, v, blocks64, undefined, offsets, tokens),
        /blockIndices: expected dtype int32/,
      );
      refuses(
        () => sel.forward(q, k, v, blocks, counts64, offsets, tokens),
        /blockCounts: expected dtype int32/,
      );
      refuses(() => sel.forward(q, k, v, blocks, countsWide, offsets, tokens), /blockCounts: expected shape/);
      refuses(() => sel.forward(q64, k, v, blocks, undefined, offsets, tokens), /q: expected dtype/);
      refuses(() => sel.forward(q, q, v, blocks, undefined, offsets, tokens), /k: expected shape/);
      refuses(() => sel.forward(q, k, v, blocks, undefined, offsets, wrongTokens), /tokenIndices/);
      refuses(() => sel.forward(q, k, v, blocks, 1.5, offsets, tokens), /blockCounts/);

      const dsa = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
        batch: 1,
        heads: 2,
        seqLen: 1,
        seqLenKv: 8,
        dim: 16,
        dimTail: 8,
        topk: 4,
        qStartIndexS: 7,
      });
      using dq = Tensor.randn([1, 1, 2, 24], { device, seed: 6 });
      using dq64 = dq.cast("float64");
      using dkv = Tensor.randn([1, 8, 1, 24], { device, seed: 7 });
      using dkvBf = dkv.cast("bfloat16");
      using idx = Tensor.zeros([1, 1, 1, 4], { dtype: "int32", device });
      using idx64 = idx.cast("int64");
      using idxShort = Tensor.zeros([1, 1, 1, 3], { dtype: "int32", device });
      refuses(() => dsa.forward(dq64, dkv, idx), /q: expected dtype/);
      refuses(() => dsa.forward(dq, dkvBf, idx), /kv: expected float32 like q/);
      refuses(() => dsa.forward(dq, dkv, idx64), /indices: expected dtype int32/);
      refuses(() => dsa.forward(dq, dkv, idxShort), /indices: expected shape/);
      refuses(() => dsa.forward(dq, dq, idx), /kv: expected shape/);

      const indexer = new FP8LightningIndexerFwdOp();
      using iq = Tensor.randn([3, 2, 16], { dtype: "bfloat16", device, seed: 8 });
      using iq32 = iq.cast("float32");
      using ik = Tensor.randn([5, 16], { dtype: "bfloat16", device, seed: 9 });
      using ik8 = ik.cast("float8_e4m3");
      using ikShort = Tensor.randn([5, 8], { dtype: "bfloat16", device, seed: 9 });
      using iw = Tensor.ones([3, 2], { device });
      using iwBf = iw.cast("bfloat16");
      using iks = Tensor.zeros([3], { dtype: "int32", device });
      using iks64 = iks.cast("int64");
      using ike = Tensor.full([3], 5, { dtype: "int32", device });
      using iscale = Tensor.ones([4], { device });
      refuses(() => indexer.forward(iq32, ik, iw, iks, ike), /indexQ: expected dtype/);
      refuses(() => indexer.forward(iq, ik8, iw, iks, ike), /indexK/);
      refuses(() => indexer.forward(iq, ikShort, iw, iks, ike), /indexK: expected shape/);
      refuses(() => indexer.forward(iq, ik, iwBf, iks, ike), /weights: expected dtype/);
      refuses(() => indexer.forward(iq, ik, iw, iks64, ike), /cuSeqlenKs: expected dtype int32/);
      refuses(() => indexer.forward(iq, ik, iw, iks, ike, iscale), /indexKScale: expected shape/);
    }),
);
