// Attention forward (functional `attention`) against the float64 oracle, under the FlashAttention rule
// stated in tests/attention_cases.ts: output max error <= 2x the plain same-precision reference's + the
// rounding allowance + 1e-5, LSE within 1e-3 relative, -inf exactly for rows that admit no key. Outputs
// are NaN-poisoned before each run; fresh inputs per run (withSeed prints the seed).
import { type AttentionCase, caseName, checkForward, cudaTest } from "./attention_cases.ts";
import { deviceTest, withSeed } from "./helpers.ts";

// Shapes that break kernels: lengths off the tile sizes (1, 17, 100, 1000), Sq != Skv both ways
// (causal with Sq > Skv leaves rows with no key), windows on either side, softcap, GQA 1 / 4 / 8,
// head dims 8 to 256, BHSD views.
const CASES: AttentionCase[] = [
  { dtype: "bfloat16", batch: 2, seqQ: 128, heads: 4, headsKv: 4, dim: 64 },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 8, headsKv: 2, dim: 128, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 17, seqKv: 128, heads: 8, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 2, seqQ: 128, seqKv: 17, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 128, seqKv: 17, heads: 2, headsKv: 2, dim: 96 },
  { dtype: "float16", batch: 1, seqQ: 17, seqKv: 128, heads: 2, headsKv: 2, dim: 96 },
  { dtype: "bfloat16", batch: 1, seqQ: 128, heads: 4, headsKv: 2, dim: 64, windowLeft: 20 },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 4, headsKv: 2, dim: 64, windowRight: 7 },
  {
    dtype: "bfloat16",
    batch: 1,
    seqQ: 100,
    seqKv: 128,
    heads: 4,
    headsKv: 1,
    dim: 64,
    windowLeft: 16,
    windowRight: 5,
  },
  { dtype: "float16", batch: 1, seqQ: 128, heads: 2, headsKv: 1, dim: 128, causal: true, windowLeft: 31 },
  // causal with a right window > 0: the causal bound wins
  { dtype: "bfloat16", batch: 1, seqQ: 64, heads: 2, headsKv: 1, dim: 64, causal: true, windowRight: 10 },
  {
    dtype: "bfloat16",
    batch: 1,
    seqQ: 128,
    heads: 4,
    headsKv: 1,
    dim: 128,
    causal: true,
    softcap: 2,
    qStd: 3,
  },
  {
    dtype: "float16",
    batch: 2,
    seqQ: 64,
    heads: 2,
    headsKv: 2,
    dim: 64,
    softcap: 0.5,
    scale: 0.3,
    qStd: 2,
  },
  { dtype: "bfloat16", batch: 1, seqQ: 128, heads: 2, headsKv: 1, dim: 256, causal: true },
  { dtype: "float16", batch: 1, seqQ: 33, heads: 3, headsKv: 1, dim: 40 },
  { dtype: "bfloat16", batch: 3, seqQ: 17, heads: 2, headsKv: 2, dim: 8, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 1, seqKv: 1, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 2, seqQ: 1, seqKv: 128, heads: 8, headsKv: 1, dim: 128, causal: true },
  { dtype: "bfloat16", batch: 1, seqQ: 128, seqKv: 1, heads: 2, headsKv: 1, dim: 64, causal: true },
  // no keys at all: every row admits none (output 0, LSE -inf, dq 0)
  { dtype: "bfloat16", batch: 2, seqQ: 5, seqKv: 0, heads: 2, headsKv: 1, dim: 64 },
  { dtype: "bfloat16", batch: 1, seqQ: 1000, heads: 2, headsKv: 1, dim: 64, causal: true },
  { dtype: "float16", batch: 2, seqQ: 64, heads: 4, headsKv: 2, dim: 64, causal: true, layout: "bhsd" },
  {
    dtype: "bfloat16",
    batch: 1,
    seqQ: 17,
    seqKv: 80,
    heads: 2,
    headsKv: 1,
    dim: 128,
    windowLeft: 9,
    layout: "bhsd",
  },
];

// Larger shapes for CUDA only (the JavaScript oracle's time bounds them: a few seconds each).
const CUDA_CASES: AttentionCase[] = [
  { dtype: "bfloat16", batch: 1, seqQ: 1000, heads: 4, headsKv: 1, dim: 128, causal: true },
  { dtype: "float16", batch: 1, seqQ: 500, seqKv: 1500, heads: 2, headsKv: 2, dim: 256 },
  { dtype: "bfloat16", batch: 1, seqQ: 777, heads: 8, headsKv: 1, dim: 64, causal: true, windowLeft: 128 },
  { dtype: "float16", batch: 3, seqQ: 129, seqKv: 383, heads: 4, headsKv: 4, dim: 128, softcap: 20, qStd: 4 },
  { dtype: "bfloat16", batch: 2, seqQ: 1000, heads: 2, headsKv: 1, dim: 64, causal: true, layout: "bhsd" },
];

for (const c of CASES) {
  deviceTest(
    `attention forward: ${caseName(c)}`,
    (device) => withSeed((seed) => checkForward(device, c, seed)),
  );
}
for (const c of CUDA_CASES) {
  cudaTest(
    `attention forward (large): ${caseName(c)}`,
    () => withSeed((seed) => checkForward("cuda", c, seed)),
  );
}
