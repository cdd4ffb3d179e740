// Varlen (packed THD with cu_seqlens) attention, forward and backward, against the float64 oracle
// under the FlashAttention rule of tests/attention_cases.ts. Each sequence is aligned on its own
// lengths; the cases hold empty query sequences, length-1 sequences, a sequence with no keys (its rows
// give output 0 and LSE -inf), Sq > Skv under causal, and lengths off the tile sizes.
import assert from "node:assert/strict";
import { attention, attentionBackward, Tensor } from "../mod.ts";
import { type AttentionCase, caseName, checkBackward, checkForward, cudaTest } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

const RAGGED = { lengthsQ: [0, 1, 17, 64, 5, 30], lengthsKv: [3, 0, 17, 100, 5, 2] };

const CASES: AttentionCase[] = [
  { dtype: "bfloat16", heads: 8, headsKv: 2, dim: 64, ...RAGGED },
  { dtype: "float16", heads: 8, headsKv: 2, dim: 64, causal: true, ...RAGGED },
  { dtype: "bfloat16", heads: 4, headsKv: 1, dim: 128, windowLeft: 8, windowRight: 2, ...RAGGED },
  {
    dtype: "float16",
    heads: 2,
    headsKv: 2,
    dim: 96,
    causal: true,
    windowLeft: 10,
    softcap: 3,
    qStd: 2,
    ...RAGGED,
  },
  {
    dtype: "bfloat16",
    heads: 8,
    headsKv: 1,
    dim: 256,
    causal: true,
    lengthsQ: [1, 1, 1],
    lengthsKv: [1, 40, 7],
  },
  { dtype: "float16", heads: 2, headsKv: 1, dim: 64, causal: true, lengthsQ: [3], lengthsKv: [0] },
];

// Larger shapes for CUDA only (the JavaScript oracle's time bounds them).
const CUDA_CASES: AttentionCase[] = [
  {
    dtype: "bfloat16",
    heads: 4,
    headsKv: 1,
    dim: 64,
    causal: true,
    lengthsQ: [1000, 1, 513, 0, 257, 64, 129],
    lengthsKv: [1000, 300, 513, 10, 400, 64, 1],
  },
  {
    dtype: "float16",
    heads: 8,
    headsKv: 2,
    dim: 128,
    windowLeft: 100,
    windowRight: 0,
    lengthsQ: [700, 65, 127],
    lengthsKv: [900, 65, 255],
  },
];

for (const c of CASES) {
  deviceTest(
    `attention varlen forward: ${caseName(c)}`,
    (device) => withSeed((seed) => checkForward(device, c, seed)),
  );
  deviceTest(
    `attention varlen backward: ${caseName(c)}`,
    (device) => withSeed((seed) => checkBackward(device, c, seed)),
  );
}
for (const c of CUDA_CASES) {
  cudaTest(
    `attention varlen forward (large): ${caseName(c)}`,
    () => withSeed((seed) => checkForward("cuda", c, seed)),
  );
  cudaTest(
    `attention varlen backward (large): ${caseName(c)}`,
    () => withSeed((seed) => checkBackward("cuda", c, seed)),
  );
}

deviceTest("attention varlen: no tokens at all gives empty results", (device) =>
  expectNoLeak(device, () => {
    using q = Tensor.empty([0, 4, 64], { dtype: "bfloat16", device });
    using kv = Tensor.empty([0, 2, 64], { dtype: "bfloat16", device });
    const cu = [0, 0, 0];
    const options = { layout: "thd", cuSeqlensQ: cu, cuSeqlensK: cu, isCausal: true } as const;
    using fwd = attention(q, kv, kv, { ...options, returnLse: true });
    assert.deepEqual(fwd.output.shape, [0, 4, 64]);
    assert.deepEqual(fwd.lse.shape, [4, 0]);
    using grads = attentionBackward(fwd.output, q, kv, kv, fwd.output, fwd.lse, options);
    assert.deepEqual(grads.dk.shape, [0, 2, 64]);
    using again = fwd.backward(fwd.output);
    assert.deepEqual(again.dq.shape, [0, 4, 64]);
  }));

deviceTest(
  "attention varlen: keys without queries get zero dk and dv",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.empty([0, 2, 64], { dtype: "float16", device });
      using k = Tensor.randn([9, 1, 64], { dtype: "float16", device, seed: 1 });
      using v = Tensor.randn([9, 1, 64], { dtype: "float16", device, seed: 2 });
      const options = { layout: "thd", cuSeqlensQ: [0, 0, 0], cuSeqlensK: [0, 4, 9] } as const;
      using fwd = attention(q, k, v, { ...options, returnLse: true });
      using dk = Tensor.full([9, 1, 64], NaN, { dtype: "float16", device });
      using dv = Tensor.full([9, 1, 64], NaN, { dtype: "float16", device });
      using dq = Tensor.empty([0, 2, 64], { dtype: "float16", device });
      attentionBackward(fwd.output, q, k, v, fwd.output, fwd.lse, { ...options, out: { dq, dk, dv } });
      assert.ok((dk.toArray() as Float32Array).every((x) => x === 0), "dk");
      assert.ok((dv.toArray() as Float32Array).every((x) => x === 0), "dv");
    }),
);
