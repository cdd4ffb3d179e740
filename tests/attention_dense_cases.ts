// The dense GQA op's check for float8_e4m3 and RoPE inputs (shared by tests/attention_dense_transforms.test.ts
// and the registry sweep of tests/variants.test.ts): one case against the float64 oracle under FlashAttention's
// rule. The oracle takes the exact dequantised and rotated values; the same-precision reference the op's
// rounding: float32 products and sums, one rounding to the output dtype, and for the 8-bit tensor-core kernel
// (float8 without RoPE on a GPU at D 128) probabilities rounded to e4m3 times 256 (float8Precision) from the
// e4m3 values themselves. The output is poisoned with NaN before the call; the plan's path is checked.
import assert from "node:assert/strict";
import { type Device, GroupedQueryAttentionDenseFwdOp, lastPlan, Tensor } from "../mod.ts";
import {
  attentionReference,
  FLOAT64,
  float8Precision,
  roundBf16,
  roundF16,
  samePrecision,
} from "../reference/mod.ts";
import { expectFlashRule, packedProblem } from "./attention_cases.ts";
import { poison } from "./helpers.ts";

/** One dense call: inputs, output dtype, layout, extents, mask, soft cap and RoPE. */
export interface DenseCase {
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
  softcap?: number;
  windowLeft?: number;
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

/** Runs one case on `device` and holds it to the oracle. */
export function checkDense(device: Device, c: DenseCase, seed: number): void {
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
    softcap: c.softcap,
    windowSizeLeft: c.windowLeft,
    ...(c.rope ? { posEncodingMode: "rope", rotaryDim: c.rope.rotaryDim, ropeLayout: c.rope.layout } : {}),
  });
  const [qs, ks, vs] = fp8 ? scales : [undefined, undefined, undefined];
  using poisoned = poison(Tensor.empty(q.shape, { dtype: c.dtype, device }));
  using out = c.rope || fp8
    ? op.forward(q, k, v, qs, ks, vs, c.rope ? cos : undefined, c.rope ? sin : undefined, {
      output: poisoned,
    })
    : op.forward(q, k, v, { output: poisoned });
  assert.equal(out.dtype, c.dtype);
  // float8 without RoPE: one native call, on 8-bit tensor cores where the planner serves it (Hopper, D 128,
  // some keys); a call with no query rows plans nothing.
  const eightBit = fp8 && !c.rope && device !== "cpu" && D === 128 && Skv > 0;
  if (fp8 && !c.rope && device !== "cpu" && Sq > 0) {
    const plan = lastPlan();
    assert.equal(plan?.path, eightBit ? "wgmma_persistent" : "dequantized", JSON.stringify(plan));
  }
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
      // The 8-bit kernel reads the e4m3 values themselves; elsewhere they are widened to the output dtype.
      rounded[i] = s && !eightBit ? round(Math.fround(x[i] * f)) : s ? Math.fround(x[i] * f) : x[i];
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
  const shape = {
    qStart: Array.from({ length: B + 1 }, (_, b) => b * Sq),
    kvStart: Array.from({ length: B + 1 }, (_, b) => b * Skv),
    heads: H,
    headsKv: Hkv,
    dim: D,
  };
  const problem = (w: "exact" | "rounded") => packedProblem(prepared, w, shape, c);
  const oracle = attentionReference(problem("exact"), FLOAT64).output;
  const precision = eightBit ? float8Precision(c.dtype) : samePrecision(c.dtype);
  const reference = attentionReference(problem("rounded"), precision).output;
  const got = Float64Array.from(out.toArray() as Float32Array);
  const gotBshd = c.layout === "bshd" ? got : bhsdToBshd(got, [B, Sq, H, D]);
  expectFlashRule(`output ${JSON.stringify(c)}`, gotBshd, oracle, reference, "forward", c.dtype);
}
