// GroupedQueryAttentionDenseFwdOp with float8_e4m3 inputs (per-(batch, KV head) scales) and fused RoPE
// (neox and interleaved, full and partial rotary width, bshd and bhsd), against the float64 oracle under
// FlashAttention's rule (tests/attention_cases.ts): the oracle takes the exact dequantised and rotated
// values (rotated in float64 from the tables as given), the same-precision reference the op's rounding
// (float32 products and sums, one rounding to the output dtype). And the refusals of the options and of
// the optional inputs.
import assert from "node:assert/strict";
import { type Device, type DType, GroupedQueryAttentionDenseFwdOp, Tensor } from "../mod.ts";
import { attentionReference, FLOAT64, roundBf16, roundF16, samePrecision } from "../reference/mod.ts";
import { expectFlashRule } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

interface DenseCase {
  input: "float8_e4m3" | "bfloat16" | "float16";
  dtype: "bfloat16" | "float16";
  layout: "bshd" | "bhsd";
  B: number;
  Sq: number;
  Skv: number;
  H: number;
  Hkv: number;
  D: number;
  causal?: boolean;
  rope?: { rotaryDim?: number; layout: "neox" | "interleaved" };
}

/** `[B, H, S, D]`-ordered values in `[B, S, H, D]` order. */
function bhsdToBshd(x: Float64Array, [B, S, H, D]: number[]): Float64Array {
  const y = new Float64Array(x.length);
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      for (let h = 0; h < H; h++) {
        for (let d = 0; d < D; d++) y[((b * S + s) * H + h) * D + d] = x[((b * H + h) * S + s) * D + d];
      }
    }
  }
  return y;
}

function checkDense(device: Device, c: DenseCase, seed: number): void {
  const { B, Sq, Skv, H, Hkv, D } = c;
  const fp8 = c.input === "float8_e4m3";
  const round = c.dtype === "bfloat16" ? roundBf16 : roundF16;
  const shapeOf = (S: number, heads: number) => (c.layout === "bshd" ? [B, S, heads, D] : [B, heads, S, D]);
  using q = Tensor.randn(shapeOf(Sq, H), { dtype: c.input, device, seed });
  using k = Tensor.randn(shapeOf(Skv, Hkv), { dtype: c.input, device, seed: seed + 1 });
  using v = Tensor.randn(shapeOf(Skv, Hkv), { dtype: c.input, device, seed: seed + 2 });
  const scales = fp8
    ? [3, 4, 5].map((s) => Tensor.rand([B, Hkv], { device, seed: seed + s, low: 0.25, high: 2 }))
    : [];
  using _s = { [Symbol.dispose]: () => scales.forEach((s) => s.dispose()) };
  const rotary = c.rope?.rotaryDim ?? D, half = rotary / 2, P = Skv + 3;
  const angles = (f: (x: number) => number) =>
    Float64Array.from(
      { length: P * half },
      (_, i) => f(Math.floor(i / half) * 10000 ** (-(i % half) / half)),
    );
  using cos = Tensor.from(angles(Math.cos), { shape: [P, half], dtype: c.dtype, device });
  using sin = Tensor.from(angles(Math.sin), { shape: [P, half], dtype: c.dtype, device });
  const op = new GroupedQueryAttentionDenseFwdOp({
    layout: c.layout,
    isCausal: c.causal ?? false,
    dtype: c.dtype,
    ...(c.rope ? { posEncodingMode: "rope", rotaryDim: c.rope.rotaryDim, ropeLayout: c.rope.layout } : {}),
  });
  const [qs, ks, vs] = fp8 ? scales : [undefined, undefined, undefined];
  using out = c.rope || fp8
    ? op.forward(q, k, v, qs, ks, vs, c.rope ? cos : undefined, c.rope ? sin : undefined)
    : op.forward(q, k, v);
  assert.equal(out.dtype, c.dtype);
  assert.deepEqual(out.shape, q.shape);
  // bshd host copies of the inputs, dequantised exactly and as the op rounds them.
  const bshdValues = (t: Tensor) => {
    using p = c.layout === "bshd" ? t.clone() : t.permute([0, 2, 1, 3]);
    using b = p.cast("float32");
    return Float64Array.from(b.toArray() as Float32Array);
  };
  const [cosH, sinH] = [cos, sin].map((t) => Float64Array.from(t.toArray() as Float32Array));
  const prepared = [q, k, v].map((t, which) => {
    const x = bshdValues(t), S = which === 0 ? Sq : Skv, heads = which === 0 ? H : Hkv;
    const s = fp8 ? (scales[which].toArray() as Float32Array) : undefined;
    const exact = new Float64Array(x.length), rounded = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      const h = Math.floor(i / D) % heads, b = Math.floor(i / (S * heads * D));
      const f = s ? s[b * Hkv + Math.floor(h / (heads / Hkv))] : 1;
      exact[i] = x[i] * f;
      rounded[i] = s ? round(Math.fround(x[i] * f)) : x[i];
    }
    if (!c.rope || which === 2) return { exact, rounded };
    // Row s of q sits at position s + Skv - Sq, of k at s.
    const first = which === 0 ? Skv - Sq : 0;
    const rot = (src: Float64Array, f32: boolean) => {
      const y = Float64Array.from(src);
      const r32 = f32 ? Math.fround : (z: number) => z;
      for (let row = 0; row < B * S * heads; row++) {
        const pos = first + (Math.floor(row / heads) % S);
        for (let i = 0; i < half; i++) {
          const [ia, ib] = c.rope!.layout === "neox" ? [i, i + half] : [2 * i, 2 * i + 1];
          const a = src[row * D + ia],
            b = src[row * D + ib],
            co = cosH[pos * half + i],
            si = sinH[pos * half + i];
          const ra = r32(r32(a * co) - r32(b * si)), rb = r32(r32(b * co) + r32(a * si));
          y[row * D + ia] = f32 ? round(ra) : ra;
          y[row * D + ib] = f32 ? round(rb) : rb;
        }
      }
      return y;
    };
    return { exact: rot(exact, false), rounded: rot(rounded, true) };
  });
  const problem = (w: "exact" | "rounded") => ({
    q: prepared[0][w],
    k: prepared[1][w],
    v: prepared[2][w],
    qStart: Array.from({ length: B + 1 }, (_, b) => b * Sq),
    kvStart: Array.from({ length: B + 1 }, (_, b) => b * Skv),
    heads: H,
    headsKv: Hkv,
    dim: D,
    smScale: D ** -0.5,
    softcap: 0,
    causal: c.causal ?? false,
    windowLeft: -1,
    windowRight: c.causal ? 0 : -1,
  });
  const oracle = attentionReference(problem("exact"), FLOAT64).output;
  const reference = attentionReference(problem("rounded"), samePrecision(c.dtype)).output;
  const got = Float64Array.from(out.toArray() as Float32Array);
  const gotBshd = c.layout === "bshd" ? got : bhsdToBshd(got, [B, Sq, H, D]);
  expectFlashRule(`output ${JSON.stringify(c)}`, gotBshd, oracle, reference, 2);
}

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
