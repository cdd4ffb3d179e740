// GroupedQueryAttentionDenseFwdOp with float8_e4m3 inputs (per-(batch, KV head) scales) and fused RoPE
// (neox and interleaved, full and partial rotary width, bshd and bhsd), against the float64 oracle under
// FlashAttention's rule (tests/attention_cases.ts): the oracle takes the exact dequantised and rotated
// values (rotated in float64 from the tables as given), the same-precision reference the op's rounding
// (float32 products and sums, one rounding to the output dtype). float8 inputs without RoPE run as one
// native call: on Hopper at D 128 on 8-bit tensor cores, whose probabilities are rounded to e4m3 (times
// 256), so their reference rounds P the same way (float8Precision) and takes the exact dequantised inputs;
// other head dims are widened natively first. Outputs are poisoned with NaN before the call. And the
// refusals of the options and of the optional inputs.
import assert from "node:assert/strict";
import { type DType, GroupedQueryAttentionDenseFwdOp, Tensor } from "../mod.ts";
import { checkDense, type DenseCase } from "./attention_dense_cases.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

const CASES: DenseCase[] = [
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    layout: "bshd",
    B: 2,
    Sq: 5,
    Skv: 9,
    H: 4,
    Hkv: 2,
    D: 64,
    causal: true,
  },
  { input: "float8_e4m3", dtype: "float16", layout: "bhsd", B: 1, Sq: 7, Skv: 7, H: 3, Hkv: 1, D: 128 },
  // float8 with no keys (widened natively: the 8-bit kernel needs some) and with no queries.
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    layout: "bshd",
    B: 2,
    Sq: 3,
    Skv: 0,
    H: 4,
    Hkv: 2,
    D: 128,
    causal: true,
  },
  { input: "float8_e4m3", dtype: "float16", layout: "bhsd", B: 2, Sq: 0, Skv: 5, H: 4, Hkv: 2, D: 128 },
  // The 8-bit kernel's edges: several 128-row tiles and key lengths off 16 and 128, GQA, both layouts and
  // output dtypes, one query row, soft cap, a left window, queries past the keys.
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    layout: "bshd",
    B: 2,
    Sq: 200,
    Skv: 301,
    H: 4,
    Hkv: 2,
    D: 128,
    causal: true,
  },
  { input: "float8_e4m3", dtype: "float16", layout: "bhsd", B: 1, Sq: 130, Skv: 257, H: 3, Hkv: 3, D: 128 },
  { input: "float8_e4m3", dtype: "bfloat16", layout: "bshd", B: 3, Sq: 1, Skv: 999, H: 8, Hkv: 1, D: 128 },
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    layout: "bhsd",
    B: 1,
    Sq: 150,
    Skv: 150,
    H: 2,
    Hkv: 1,
    D: 128,
    causal: true,
    softcap: 5,
    windowLeft: 37,
  },
  {
    input: "float8_e4m3",
    dtype: "float16",
    layout: "bshd",
    B: 1,
    Sq: 40,
    Skv: 17,
    H: 2,
    Hkv: 2,
    D: 128,
    causal: true,
  },
  {
    input: "bfloat16",
    dtype: "bfloat16",
    layout: "bshd",
    B: 2,
    Sq: 4,
    Skv: 11,
    H: 4,
    Hkv: 4,
    D: 64,
    causal: true,
    rope: { layout: "neox" },
  },
  {
    input: "float16",
    dtype: "float16",
    layout: "bhsd",
    B: 1,
    Sq: 6,
    Skv: 6,
    H: 2,
    Hkv: 1,
    D: 64,
    rope: { rotaryDim: 32, layout: "interleaved" },
  },
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    layout: "bshd",
    B: 1,
    Sq: 3,
    Skv: 8,
    H: 2,
    Hkv: 2,
    D: 64,
    causal: true,
    rope: { rotaryDim: 16, layout: "neox" },
  },
];

deviceTest(
  "dense GQA with float8 inputs and fused RoPE matches the float64 oracle",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, c] of CASES.entries()) checkDense(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "dense GQA refuses inconsistent float8 and RoPE inputs and options, naming them",
  (device) =>
    expectNoLeak(device, () => {
      using q = Tensor.randn([1, 4, 2, 64], { dtype: "bfloat16", device });
      using q8 = Tensor.randn([1, 4, 2, 64], { dtype: "float8_e4m3", device });
      using s = Tensor.ones([1, 2], { device });
      using cos = Tensor.ones([8, 32], { dtype: "bfloat16", device });
      using short = Tensor.ones([2, 32], { dtype: "bfloat16", device });
      using cos16 = Tensor.ones([8, 32], { dtype: "float16", device });
      const plain = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd" });
      const rope = new GroupedQueryAttentionDenseFwdOp({
        layout: "bshd",
        posEncodingMode: "rope",
        dtype: "bfloat16",
      });
      const fp8 = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", dtype: "bfloat16" });
      refuses(() => plain.forward(q8, q8, q8, s, s, s), /dtype: float8_e4m3 inputs need the output dtype/);
      refuses(
        () => fp8.forward(q8, q8, q8, s, s, undefined),
        /all three are required for float8_e4m3 inputs/,
      );
      refuses(() => plain.forward(q, q, q, s, s, s), /the scales are for float8_e4m3 inputs only/);
      refuses(
        () => plain.forward(q, q, q, undefined, undefined, undefined, cos, cos),
        /the tables need posEncodingMode/,
      );
      refuses(
        () => rope.forward(q, q, q, undefined, undefined, undefined, cos),
        /both are required with posEncodingMode/,
      );
      refuses(
        () => rope.forward(q, q, q, undefined, undefined, undefined, short, short),
        /ropeCos: 2 positions, fewer than Skv \(4\)/,
      );
      refuses(
        () => rope.forward(q, q, q, undefined, undefined, undefined, cos16, cos16),
        /ropeCos: expected the output dtype bfloat16/,
      );
      using k8 = Tensor.randn([1, 4, 2, 64], { dtype: "float8_e4m3", device });
      using wrongScale = Tensor.ones([1, 3], { device });
      refuses(() => fp8.forward(q8, k8, k8, wrongScale, s, s), /qScale: expected shape \[1, 2\]/);
      using longQ = Tensor.randn([1, 5, 2, 64], { dtype: "bfloat16", device });
      refuses(
        () => rope.forward(longQ, q, q, undefined, undefined, undefined, cos, cos),
        /RoPE needs Sq <= Skv/,
      );
      const options = { layout: "bshd" } as const;
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...options, rotaryDim: 32 }),
        /rotaryDim: only with posEncodingMode/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...options, posEncodingMode: "alibi" as never }),
        /posEncodingMode/,
      );
      refuses(
        () => new GroupedQueryAttentionDenseFwdOp({ ...options, posEncodingMode: "rope", rotaryDim: 7 }),
        /rotaryDim: expected an even integer/,
      );
      refuses(() =>
        new GroupedQueryAttentionDenseFwdOp({
          ...options,
          posEncodingMode: "rope",
          ropeLayout: "gptj" as never,
        }), /ropeLayout/);
      const wide = new GroupedQueryAttentionDenseFwdOp({
        ...options,
        posEncodingMode: "rope",
        rotaryDim: 128,
      });
      using cos64 = Tensor.ones([8, 64], { dtype: "bfloat16", device });
      refuses(
        () => wide.forward(q, q, q, undefined, undefined, undefined, cos64, cos64),
        /rotaryDim: 128 is more than the head dim 64/,
      );
      const dt: DType = "bfloat16";
      assert.equal(rope.dtype, dt);
    }),
);
