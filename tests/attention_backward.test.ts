// Attention backward (functional `attentionBackward`, fed the kernel's own forward output and LSE, and the
// forward result's own `backward(dO)`) against the float64 oracle's exact gradients, under the
// FlashAttention rule of tests/attention_cases.ts: each of dq, dk, dv within 3x the plain same-precision
// reference's max error + the rounding allowance + 1e-5. Gradient buffers are NaN-poisoned before each
// run.
import assert from "node:assert/strict";
import { attention, attentionBackward, type Device, kernels, lastPlan, Tensor } from "../mod.ts";
import {
  type AttentionCase,
  caseName,
  checkBackward,
  cudaTest,
  makeInputs,
  resultBackward,
} from "./attention_cases.ts";
import { deviceTest, expectNoLeak, withSeed } from "./helpers.ts";

const CASES: AttentionCase[] = [
  { dtype: "bfloat16", batch: 2, seqQ: 64, heads: 2, headsKv: 2, dim: 64 },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 8, headsKv: 2, dim: 128, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 17, seqKv: 128, heads: 8, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 1, seqQ: 100, seqKv: 17, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 128, seqKv: 100, heads: 4, headsKv: 4, dim: 96 },
  { dtype: "bfloat16", batch: 1, seqQ: 128, heads: 4, headsKv: 2, dim: 96, windowLeft: 16, windowRight: 8 },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 2, headsKv: 1, dim: 64, windowRight: 5 },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 2, headsKv: 1, dim: 64, causal: true, windowLeft: 20 },
  {
    dtype: "bfloat16",
    batch: 1,
    seqQ: 64,
    heads: 4,
    headsKv: 1,
    dim: 128,
    causal: true,
    softcap: 1.5,
    qStd: 3,
  },
  { dtype: "float16", batch: 1, seqQ: 64, heads: 2, headsKv: 2, dim: 256, causal: true },
  { dtype: "bfloat16", batch: 2, seqQ: 33, heads: 3, headsKv: 1, dim: 40, scale: 0.2 },
  { dtype: "bfloat16", batch: 1, seqQ: 1, seqKv: 1, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 1, seqQ: 1, seqKv: 64, heads: 4, headsKv: 1, dim: 64, causal: true },
  // no keys at all: every row admits none (output 0, LSE -inf, dq 0)
  { dtype: "bfloat16", batch: 2, seqQ: 5, seqKv: 0, heads: 2, headsKv: 1, dim: 64 },
  { dtype: "bfloat16", batch: 1, seqQ: 1000, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 2, seqQ: 48, heads: 4, headsKv: 1, dim: 64, causal: true, layout: "bhsd" },
];

// Larger shapes for CUDA only (the JavaScript oracle's time bounds them).
const CUDA_CASES: AttentionCase[] = [
  { dtype: "bfloat16", batch: 1, seqQ: 1000, heads: 4, headsKv: 1, dim: 128, causal: true },
  { dtype: "float16", batch: 1, seqQ: 700, seqKv: 1000, heads: 2, headsKv: 2, dim: 64 },
  { dtype: "bfloat16", batch: 1, seqQ: 513, heads: 4, headsKv: 1, dim: 256, causal: true, windowLeft: 100 },
  {
    dtype: "float16",
    batch: 2,
    seqQ: 300,
    seqKv: 129,
    heads: 4,
    headsKv: 4,
    dim: 128,
    causal: true,
    softcap: 10,
  },
];

for (const c of CASES) {
  deviceTest(
    `attention backward: ${caseName(c)}`,
    (device) => withSeed((seed) => checkBackward(device, c, seed)),
  );
}
// The forward result's backward: the same oracle check, with no option repeated (mask, window,
// softcap, scale and layout all come from the forward).
for (const c of CASES.filter((c) => c.windowLeft !== undefined || c.softcap || c.scale || c.layout)) {
  deviceTest(
    `attention result.backward(dO): ${caseName(c)}`,
    (device) => withSeed((seed) => checkBackward(device, c, seed, false, resultBackward)),
  );
}
// Deterministic: on Hopper the wgmma kernels with dQ added in key-tile order (several key tiles of 128
// a query tile: causal with GQA, a sliding window, a right-only window (whose last key tile goes first
// at D 64), packed sequences of unequal lengths), elsewhere (and at D 256) the general kernel.
const DETERMINISTIC_CASES: AttentionCase[] = [
  { dtype: "bfloat16", batch: 1, seqQ: 200, heads: 8, headsKv: 1, dim: 64, causal: true },
  {
    dtype: "bfloat16",
    batch: 2,
    seqQ: 300,
    seqKv: 600,
    heads: 4,
    headsKv: 2,
    dim: 64,
    windowLeft: 0,
    windowRight: 150,
  },
  {
    dtype: "float16",
    heads: 2,
    headsKv: 1,
    dim: 64,
    lengthsQ: [420, 0, 260],
    lengthsKv: [420, 0, 260],
    causal: true,
  },
  { dtype: "bfloat16", batch: 2, seqQ: 520, heads: 6, headsKv: 2, dim: 128, causal: true },
  { dtype: "float16", batch: 1, seqQ: 700, heads: 3, headsKv: 3, dim: 128, windowLeft: 200, windowRight: 0 },
  { dtype: "bfloat16", heads: 4, headsKv: 2, dim: 128, lengthsQ: [300, 0, 450], lengthsKv: [300, 0, 450] },
  { dtype: "bfloat16", batch: 1, seqQ: 300, heads: 2, headsKv: 1, dim: 256, causal: true },
];
for (const c of DETERMINISTIC_CASES) {
  deviceTest(
    `attention backward: deterministic runs are checked and bit-identical: ${caseName(c)}`,
    (device) => withSeed(async (seed) => await deterministicCase(device, c, seed)),
  );
}
async function deterministicCase(device: Device, c: AttentionCase, seed: number): Promise<void> {
  await checkBackward(device, c, seed, true);
  await expectNoLeak(device, () => {
    using inputs = makeInputs(device, c, seed);
    using dOut = Tensor.randn(inputs.q.shape, { dtype: c.dtype, device, seed: seed + 3 });
    using fwd = attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLse: true });
    const run = () => {
      using g = attentionBackward(dOut, inputs.q, inputs.k, inputs.v, fwd.output, fwd.lse, {
        ...inputs.options,
        deterministic: true,
      });
      return [g.dq.toRawBits(), g.dk.toRawBits(), g.dv.toRawBits()];
    };
    assert.deepEqual(run(), run());
    const hopper = device !== "cpu" && kernels(device).some((k) => k.runnable && k.arch === "sm90a");
    if (hopper && c.dim !== 256) assert.match(lastPlan()!.kernels[0].name, /^attention\.bwd\.wgmma(_v2)?</);
  });
}
for (const c of CUDA_CASES) {
  cudaTest(
    `attention backward (large): ${caseName(c)}`,
    () => withSeed((seed) => checkBackward("cuda", c, seed)),
  );
}
