// The seed-001 op classes (construct once, call many) against the float64 oracle under the
// FlashAttention rule of tests/attention_cases.ts, with their defaults (isCausal true), their own
// options, and their call checks (sizes fixed at construction, dtype fixed by the first call).
import assert from "node:assert/strict";
import {
  AttnkitError,
  type Device,
  GroupedQueryAttentionBwdOp,
  GroupedQueryAttentionDenseFwdOp,
  GroupedQueryAttentionFwdOp,
  GroupedQueryAttentionPrefillVarlenFwdOp,
  GroupedQueryAttentionSlidingWindowFwdOp,
  GroupedQueryAttentionSlidingWindowVarlenFwdOp,
  MultiHeadAttentionBwdOp,
  MultiHeadAttentionFwdOp,
  Tensor,
} from "../mod.ts";
import { type AttentionCase, checkBackward, checkForward, type ForwardRunner } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

function refuses(fn: () => unknown, pattern: RegExp): void {
  assert.throws(
    fn,
    (e: unknown) => e instanceof AttnkitError && e.code === "INVALID_ARGUMENT" && pattern.test(e.message),
  );
}

// Two calls of one op on fresh inputs: the op is built once.
async function twice(device: Device, c: AttentionCase, run: ForwardRunner, lse = true) {
  await withSeed((seed) => checkForward(device, c, seed, run, lse));
  await withSeed((seed) => checkForward(device, c, seed, run, lse));
}

deviceTest("MultiHeadAttentionFwdOp: causal by default, output and LSE", async (device) => {
  const op = new MultiHeadAttentionFwdOp({ batch: 2, heads: 4, seqLen: 100, dim: 64 });
  const c: AttentionCase = {
    dtype: "bfloat16",
    batch: 2,
    seqQ: 100,
    heads: 4,
    headsKv: 4,
    dim: 64,
    causal: true,
  };
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out));
});

deviceTest("GroupedQueryAttentionFwdOp: smScale and softcap", async (device) => {
  const op = new GroupedQueryAttentionFwdOp({
    batch: 1,
    heads: 8,
    headsKv: 2,
    seqLen: 80,
    dim: 128,
    isCausal: false,
    smScale: 0.2,
    softcap: 4,
  });
  const c: AttentionCase = {
    dtype: "float16",
    batch: 1,
    seqQ: 80,
    heads: 8,
    headsKv: 2,
    dim: 128,
    smScale: 0.2,
    softcap: 4,
    qStd: 2,
  };
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out));
});

deviceTest("MultiHeadAttentionBwdOp and GroupedQueryAttentionBwdOp: gradients", async (device) => {
  const mha = new MultiHeadAttentionBwdOp({ batch: 1, heads: 2, seqLen: 64, dim: 64, deterministic: true });
  await withSeed((seed) =>
    checkBackward(
      device,
      { dtype: "bfloat16", batch: 1, seqQ: 64, heads: 2, headsKv: 2, dim: 64, causal: true },
      seed,
      true,
      (x, a, out) => mha.forward(x.q, x.k, x.v, a.output, a.dOut, a.lse, out),
    )
  );
  const gqa = new GroupedQueryAttentionBwdOp({
    batch: 2,
    heads: 4,
    headsKv: 1,
    seqLen: 50,
    dim: 96,
    isCausal: false,
    windowSizeLeft: 7,
    windowSizeRight: 3,
    softcap: 2,
  });
  await withSeed((seed) =>
    checkBackward(
      device,
      {
        dtype: "float16",
        batch: 2,
        seqQ: 50,
        heads: 4,
        headsKv: 1,
        dim: 96,
        windowLeft: 7,
        windowRight: 3,
        softcap: 2,
        qStd: 2,
      },
      seed,
      false,
      (x, a, out) => gqa.forward(x.q, x.k, x.v, a.output, a.dOut, a.lse, out),
    )
  );
});

deviceTest(
  "GroupedQueryAttentionDenseFwdOp: rectangular, window, softcap; shapes per call",
  async (device) => {
    const op = new GroupedQueryAttentionDenseFwdOp({ windowSizeLeft: 24, softcap: 5 }); // causal by default
    const run: ForwardRunner = (x, out) => op.forward(x.q, x.k, x.v, out);
    const base = { heads: 8, headsKv: 1, dim: 64, causal: true, windowLeft: 24, softcap: 5 } as const;
    await withSeed((seed) =>
      checkForward(device, { ...base, dtype: "bfloat16", batch: 1, seqQ: 17, seqKv: 90 }, seed, run)
    );
    await withSeed((seed) =>
      checkForward(device, { ...base, dtype: "bfloat16", batch: 2, seqQ: 90, seqKv: 40 }, seed, run)
    );
  },
);

deviceTest("GroupedQueryAttentionSlidingWindowFwdOp: causal window", async (device) => {
  const op = new GroupedQueryAttentionSlidingWindowFwdOp({
    batch: 1,
    heads: 4,
    headsKv: 2,
    seqLen: 130,
    dim: 64,
    windowSizeLeft: 15,
  });
  const c: AttentionCase = {
    dtype: "float16",
    batch: 1,
    seqQ: 130,
    heads: 4,
    headsKv: 2,
    dim: 64,
    causal: true,
    windowLeft: 15,
  };
  await twice(device, c, (x, out) => op.forward(x.q, x.k, x.v, out), false);
});

const RAGGED = { lengthsQ: [5, 0, 1, 40], lengthsKv: [9, 3, 0, 40] };

deviceTest("GroupedQueryAttentionPrefillVarlenFwdOp: causal packed prefill", async (device) => {
  const op = new GroupedQueryAttentionPrefillVarlenFwdOp({
    batch: 4,
    heads: 4,
    headsKv: 1,
    dim: 128,
    maxSeqlenQ: 40,
    maxSeqlenKv: 40,
    validateInputs: true,
  });
  const c: AttentionCase = { dtype: "bfloat16", heads: 4, headsKv: 1, dim: 128, causal: true, ...RAGGED };
  await twice(device, c, (x, out) => {
    using cuQ = Tensor.from(new Int32Array(x.geometry.qStart), { device });
    using cuKv = Tensor.from(new Int32Array(x.geometry.kvStart), { device });
    op.forward(x.q, x.k, x.v, cuQ, cuKv, out);
  });
});

deviceTest("GroupedQueryAttentionSlidingWindowVarlenFwdOp: window on both sides", async (device) => {
  const op = new GroupedQueryAttentionSlidingWindowVarlenFwdOp({
    batch: 4,
    heads: 2,
    headsKv: 2,
    dim: 64,
    isCausal: false,
    windowSizeLeft: 4,
    windowSizeRight: 2,
  });
  const c: AttentionCase = {
    dtype: "float16",
    heads: 2,
    headsKv: 2,
    dim: 64,
    windowLeft: 4,
    windowRight: 2,
    ...RAGGED,
  };
  await twice(device, c, (x, out) => {
    using cuQ = Tensor.from(new Int32Array(x.geometry.qStart), { device });
    using cuK = Tensor.from(new Int32Array(x.geometry.kvStart), { device });
    op.forward(x.q, x.k, x.v, cuQ, cuK, 40, out);
  }, false);
});

deviceTest(
  "attention op classes: sizes fixed at construction, dtype fixed by the first call",
  (device) =>
    expectNoLeak(device, () => {
      refuses(
        () => new GroupedQueryAttentionFwdOp({ batch: 1, heads: 6, headsKv: 4, seqLen: 8, dim: 64 }),
        /heads: 6 query heads are not a multiple of headsKv \(4\)/,
      );
      refuses(
        () => new MultiHeadAttentionFwdOp({ batch: 1, heads: 2, seqLen: 8, dim: 100 }),
        /dim: expected a multiple of 8/,
      );
      refuses(
        () => new MultiHeadAttentionBwdOp({ batch: 0, heads: 2, seqLen: 8, dim: 64 }),
        /batch: expected an integer >= 1/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ windowSizeLeft: -2 }),
        /windowSizeLeft: expected -1 \(unlimited\) or an integer size >= 0, got -2/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ softcap: -1 }),
        /softcap: expected a finite number >= 0/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ smScale: 0 }),
        /smScale: expected a finite number > 0/,
      );

      const op = new MultiHeadAttentionFwdOp({ batch: 1, heads: 2, seqLen: 8, dim: 64 });
      using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using wrong = Tensor.randn([1, 9, 2, 64], { dtype: "bfloat16", device, seed: 1 });
      using half = Tensor.randn([1, 8, 2, 64], { dtype: "float16", device, seed: 1 });
      refuses(
        () => op.forward(wrong, q, q),
        /MultiHeadAttentionFwdOp: q: expected shape \[1, 8, 2, 64\], got \[1, 9, 2, 64\]/,
      );
      op.forward(q, q, q)[Symbol.dispose]();
      refuses(() => op.forward(half, half, half), /first called with bfloat16; got float16/);

      const varlen = new GroupedQueryAttentionPrefillVarlenFwdOp({
        batch: 2,
        heads: 2,
        headsKv: 2,
        dim: 64,
        maxSeqlenQ: 4,
        maxSeqlenKv: 8,
        validateInputs: true,
      });
      using pq = Tensor.randn([8, 2, 64], { dtype: "bfloat16", device, seed: 2 });
      using cu = Tensor.from(new Int32Array([0, 3, 8]), { device });
      refuses(
        () => varlen.forward(pq, pq, pq, cu, cu),
        /cuSeqlensQ: sequence 1 has 5 tokens, more than maxSeqlenQ \(4\)/,
      );
      using cu3 = Tensor.from(new Int32Array([0, 8]), { device });
      refuses(() => varlen.forward(pq, pq, pq, cu3, cu3), /cuSeqlensQ: expected shape \[3\], got \[2\]/);
    }),
);
