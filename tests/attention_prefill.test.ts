// The canonical packed prefill (GroupedQueryAttentionPrefillFwdOp) against the float64 oracle, under
// FlashAttention's rule (tests/attention_cases.ts): uniform and ragged offsets (an empty sequence, one
// token), causal and windows, softcap, GQA; float8_e4m3 inputs with per-(sequence, KV head) scales, the
// oracle taking the exact dequantised values and the same-precision reference the op's rounding (the
// float32 product rounded once to the output dtype); 16-bit inputs ignore the scales; refusals.
import assert from "node:assert/strict";
import { type Device, GroupedQueryAttentionPrefillFwdOp, Tensor } from "../mod.ts";
import { attentionReference, FLOAT64, roundBf16, roundF16, samePrecision } from "../reference/mod.ts";
import { expectFlashRule, packedProblem } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, refuses, withSeed } from "./helpers.ts";

interface PrefillCase {
  input: "float8_e4m3" | "bfloat16" | "float16";
  dtype: "bfloat16" | "float16";
  heads: number;
  headsKv: number;
  dim: number;
  lengthsQ: number[];
  lengthsKv: number[];
  causal?: boolean;
  windowLeft?: number;
  softcap?: number;
}

const offsetsOf = (lengths: number[]) => lengths.reduce((a, l) => [...a, a[a.length - 1] + l], [0]);

function checkPrefill(device: Device, c: PrefillCase, seed: number): void {
  const B = c.lengthsQ.length, { heads: H, headsKv: Hkv, dim: D } = c;
  const cuQ = offsetsOf(c.lengthsQ), cuK = offsetsOf(c.lengthsKv);
  const [Tq, Tkv] = [cuQ[B], cuK[B]];
  using q = Tensor.randn([Tq, H, D], { dtype: c.input, device, seed });
  using k = Tensor.randn([Tkv, Hkv, D], { dtype: c.input, device, seed: seed + 1 });
  using v = Tensor.randn([Tkv, Hkv, D], { dtype: c.input, device, seed: seed + 2 });
  const scales = [3, 4, 5].map((s) => Tensor.rand([B, Hkv], { device, seed: seed + s, low: 0.25, high: 2 }));
  using _scales = { [Symbol.dispose]: () => scales.forEach((s) => s.dispose()) };
  const op = new GroupedQueryAttentionPrefillFwdOp({
    batch: B,
    heads: H,
    headsKv: Hkv,
    dim: D,
    maxSeqlenQ: Math.max(...c.lengthsQ),
    maxSeqlenKv: Math.max(...c.lengthsKv),
    dtype: c.dtype,
    isCausal: c.causal ?? false,
    windowSizeLeft: c.windowLeft,
    softcap: c.softcap,
  });
  using out = op.forward(q, k, v, cuQ, cuK, scales[0], scales[1], scales[2]);
  assert.equal(out.dtype, c.dtype);
  assert.deepEqual(out.shape, [Tq, H, D]);
  // The inputs as the oracle takes them: float8 values times their sequence's KV-head scale, exactly.
  const fp8 = c.input === "float8_e4m3";
  const round = c.dtype === "bfloat16" ? roundBf16 : roundF16;
  const inputs = [q, k, v].map((t, i) => {
    const x = t.toArray() as Float32Array, s = scales[i].toArray() as Float32Array;
    const offsets = i === 0 ? cuQ : cuK, heads = i === 0 ? H : Hkv;
    const exact = new Float64Array(x.length), rounded = new Float64Array(x.length);
    for (let b = 0; b < B; b++) {
      for (let t0 = offsets[b]; t0 < offsets[b + 1]; t0++) {
        for (let h = 0; h < heads; h++) {
          const factor = fp8 ? s[b * Hkv + Math.floor(h / (heads / Hkv))] : 1;
          for (let d = 0; d < D; d++) {
            const at = (t0 * heads + h) * D + d;
            exact[at] = x[at] * factor;
            rounded[at] = fp8 ? round(Math.fround(x[at] * factor)) : x[at];
          }
        }
      }
    }
    return { exact, rounded };
  });
  const problem = (which: "exact" | "rounded") =>
    packedProblem(inputs, which, { qStart: cuQ, kvStart: cuK, heads: H, headsKv: Hkv, dim: D }, c);
  const oracle = attentionReference(problem("exact"), FLOAT64).output;
  const reference = attentionReference(problem("rounded"), samePrecision(c.dtype)).output;
  expectFlashRule(
    `output ${JSON.stringify(c)}`,
    out.toArray() as Float32Array,
    oracle,
    reference,
    "forward",
    c.dtype,
  );
}

const CASES: PrefillCase[] = [
  {
    input: "bfloat16",
    dtype: "bfloat16",
    heads: 4,
    headsKv: 2,
    dim: 64,
    lengthsQ: [32, 32],
    lengthsKv: [32, 32],
    causal: true,
  },
  {
    input: "float16",
    dtype: "float16",
    heads: 3,
    headsKv: 1,
    dim: 128,
    lengthsQ: [0, 1, 40],
    lengthsKv: [5, 1, 70],
    causal: true,
    windowLeft: 16,
  },
  {
    input: "float8_e4m3",
    dtype: "bfloat16",
    heads: 8,
    headsKv: 2,
    dim: 64,
    lengthsQ: [24, 24],
    lengthsKv: [24, 24],
    causal: true,
  },
  {
    input: "float8_e4m3",
    dtype: "float16",
    heads: 4,
    headsKv: 4,
    dim: 128,
    lengthsQ: [1, 33, 0],
    lengthsKv: [20, 65, 3],
    softcap: 8,
  },
];

deviceTest(
  "canonical prefill (16-bit and float8 inputs) matches the float64 oracle",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        for (const [i, c] of CASES.entries()) checkPrefill(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "canonical prefill refuses bad dtypes, scales, lengths and options, naming them",
  (device) =>
    expectNoLeak(device, () => {
      const sizes = { batch: 2, heads: 4, headsKv: 2, dim: 64, maxSeqlenQ: 16, maxSeqlenKv: 16 };
      const op = new GroupedQueryAttentionPrefillFwdOp({ ...sizes, dtype: "bfloat16" });
      using q = Tensor.randn([24, 4, 64], { dtype: "bfloat16", device });
      using kv = Tensor.randn([24, 2, 64], { dtype: "bfloat16", device });
      using q8 = Tensor.randn([24, 4, 64], { dtype: "float8_e4m3", device });
      using s = Tensor.ones([2, 2], { device });
      using wrongShape = Tensor.ones([2, 4], { device });
      using wrongDtype = Tensor.ones([2, 2], { dtype: "bfloat16", device });
      const cu = [0, 8, 24];
      refuses(
        () => op.forward(q, kv, kv, [0, 4, 24], cu, s, s, s),
        /cuSeqlensQ: sequence 1 has 20 tokens, more than maxSeqlenQ \(16\)/,
      );
      refuses(() => op.forward(q, kv, kv, cu, cu, wrongShape, s, s), /qScale: expected shape \[2, 2\]/);
      refuses(() => op.forward(q, kv, kv, cu, cu, s, wrongDtype, s), /kScale: expected dtype float32/);
      refuses(() => op.forward(q8, kv, kv, cu, cu, s, s, s), /k: expected float8_e4m3 like q/);
      refuses(
        () =>
          new GroupedQueryAttentionPrefillFwdOp({ ...sizes, dtype: "float16" }).forward(
            q,
            kv,
            kv,
            cu,
            cu,
            s,
            s,
            s,
          ),
        /dtype: the output dtype float16 must equal the input dtype bfloat16/,
      );
      refuses(
        () => new GroupedQueryAttentionPrefillFwdOp({ ...sizes, dtype: "float32" as never }),
        /dtype: expected float16 or bfloat16/,
      );
      refuses(
        () => new GroupedQueryAttentionPrefillFwdOp({ ...sizes, backend: "fa3" as never }),
        /backend: expected "auto"/,
      );
      refuses(() => new GroupedQueryAttentionPrefillFwdOp({ ...sizes, smScale: 0 }), /smScale/);
      refuses(() => new GroupedQueryAttentionPrefillFwdOp({ ...sizes, scale: 0.1 } as never), /scale/);
      // Without validation the lengths are not read back; the offsets themselves are still checked.
      const trusting = new GroupedQueryAttentionPrefillFwdOp({
        ...sizes,
        dtype: "bfloat16",
        validateUniformCuSeqlens: false,
      });
      using o = trusting.forward(q, kv, kv, [0, 4, 24], [0, 4, 24], s, s, s);
      assert.deepEqual(o.shape, [24, 4, 64]);
      refuses(
        () => trusting.forward(q, kv, kv, [0, 30, 24], cu, s, s, s),
        /cu_seqlens_q: must be nondecreasing/,
      );
    }),
);
