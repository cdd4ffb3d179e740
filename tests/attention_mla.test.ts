// MLA decode (MultiHeadLatentAttentionDecodeWithKVCacheFwdOp) against a float64 oracle written here: per
// query head, scores (q . k_j + qPe . kPe_j) / sqrt(dim + peDim) over its KV head's latents, softmax, the
// weighted latents. Tolerance rule (FlashAttention's, tests/attention_cases.ts): the max abs error at most
// twice that of the plain reference in the output's precision (float32 sums, the softmax weights and the
// output rounded to the dtype), plus the rounding allowance and 1e-5. DeepSeek-V3's dims (512 + 64: the
// tensor-core block, partial head groups, tiles of 64 rows; at 128 heads Hopper's wgmma kernel and the
// mma.sync block pinned) and small ones with several latent heads (the per-item kernel); refusals.
import assert from "node:assert/strict";
import {
  type Device,
  lastPlan,
  MultiHeadLatentAttentionDecodeWithKVCacheFwdOp,
  Tensor,
  withTuning,
} from "../mod.ts";
import { roundBf16, roundF16 } from "../reference/mod.ts";
import { expectFlashRule } from "./attention_cases.ts";
import { deviceTest, expectNoLeak, isHopper, refuses, withSeed } from "./helpers.ts";

interface MlaCase {
  B: number;
  H: number;
  Hkv: number;
  S: number;
  D: number;
  P: number;
  dtype: "bfloat16" | "float16";
}

/**
 * The oracle in float64 (no rounding), or with `round` the plain reference in the output's precision that the
 * rule compares against: scores and sums in float32, the softmax weights and the output rounded by `round`.
 */
function oracle(
  c: MlaCase,
  q: Float32Array,
  qPe: Float32Array,
  k: Float32Array,
  kPe: Float32Array,
  round?: (x: number) => number,
): Float64Array {
  const acc = round ? Math.fround : (x: number) => x, operand = round ?? ((x: number) => x);
  const { B, H, Hkv, S, D, P } = c;
  const out = new Float64Array(B * H * D), G = H / Hkv, scale = (D + P) ** -0.5;
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const r = Math.floor(h / G), scores = new Float64Array(S);
      for (let j = 0; j < S; j++) {
        let s = 0;
        for (let d = 0; d < D; d++) s = acc(s + q[(b * H + h) * D + d] * k[((b * S + j) * Hkv + r) * D + d]);
        for (let d = 0; d < P; d++) {
          s = acc(s + qPe[(b * H + h) * P + d] * kPe[((b * S + j) * Hkv + r) * P + d]);
        }
        scores[j] = acc(s * scale);
      }
      const max = Math.max(...scores);
      const w = scores.map((s) => acc(Math.exp(s - max))), total = w.reduce((a, x) => acc(a + x), 0);
      for (let j = 0; j < S; j++) {
        const p = operand(acc(w[j] / total));
        for (let d = 0; d < D; d++) {
          const at = (b * H + h) * D + d;
          out[at] = acc(out[at] + p * k[((b * S + j) * Hkv + r) * D + d]);
        }
      }
    }
  }
  return out;
}

function checkMla(device: Device, c: MlaCase, seed: number, kernel?: string): void {
  const { B, H, Hkv, S, D, P, dtype } = c;
  using q = Tensor.randn([B, H, D], { dtype, device, seed, std: 0.2 });
  using qPe = Tensor.randn([B, H, P], { dtype, device, seed: seed + 1 });
  using k = Tensor.randn([B, S, Hkv, D], { dtype, device, seed: seed + 2 });
  using kPe = Tensor.randn([B, S, Hkv, P], { dtype, device, seed: seed + 3 });
  const op = new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
    batch: B,
    heads: H,
    headsKv: Hkv,
    seqlenKv: S,
    dim: D,
    peDim: P,
  });
  using out = op.forward(q, qPe, k, kPe);
  if (device !== "cpu") {
    const variant = kernel ?? (D === 512 && P === 64 ? "mma" : "item");
    const name = variant === "item" ? `item<${dtype}>` : `${variant}<${dtype}, D576>`;
    assert.deepEqual(lastPlan()?.kernels.map((k) => k.name), [`sparse.dsa.decode.${name}`]);
  }
  assert.equal(out.dtype, dtype);
  assert.deepEqual(out.shape, [B, H, D]);
  const host = (t: Tensor) => t.toArray() as Float32Array;
  const exact = oracle(c, host(q), host(qPe), host(k), host(kPe));
  const round = dtype === "bfloat16" ? roundBf16 : roundF16;
  const plain = oracle(c, host(q), host(qPe), host(k), host(kPe), round).map(round);
  expectFlashRule(`output ${JSON.stringify(c)}`, host(out), exact, plain, "forward", dtype);
}

deviceTest(
  "MLA decode matches the float64 oracle (DeepSeek-V3 dims and grouped latent heads)",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        const cases: MlaCase[] = [
          // DeepSeek-V3's dims: the tensor-core block (groups of 16 heads, 64 rows a tile).
          { B: 2, H: 8, Hkv: 1, S: 37, D: 512, P: 64, dtype: "bfloat16" },
          { B: 1, H: 20, Hkv: 1, S: 100, D: 512, P: 64, dtype: "float16" },
          { B: 2, H: 32, Hkv: 2, S: 65, D: 512, P: 64, dtype: "bfloat16" },
          // One block's worth of heads over 600 rows: two splits of 320, merged.
          { B: 1, H: 16, Hkv: 1, S: 600, D: 512, P: 64, dtype: "bfloat16" },
          // Other dims: the per-item kernel.
          { B: 1, H: 6, Hkv: 3, S: 9, D: 64, P: 16, dtype: "float16" },
          { B: 3, H: 2, Hkv: 2, S: 1, D: 32, P: 0, dtype: "bfloat16" },
        ];
        for (const [i, c] of cases.entries()) checkMla(device, c, seed + 10 * i);
      })),
);

deviceTest(
  "MLA decode at 128 heads: Hopper's wgmma kernel under the planner, the mma.sync block pinned",
  (device) =>
    expectNoLeak(device, () =>
      withSeed((seed) => {
        // Two blocks of 64 heads over a full tile and a partial one; two latent heads of 64 query heads over
        // 700 rows (the lists split and merge), float16.
        const cases: MlaCase[] = [
          { B: 2, H: 128, Hkv: 1, S: 100, D: 512, P: 64, dtype: "bfloat16" },
          { B: 1, H: 128, Hkv: 2, S: 700, D: 512, P: 64, dtype: "float16" },
        ];
        const pin = { "sparse.dsa.decode": "wgmma" };
        if (device === "cpu") {
          refuses(() => withTuning(pin, () => checkMla(device, cases[0], seed)), /needs a Hopper GPU/);
          checkMla(device, cases[0], seed);
          return;
        }
        const hopper = isHopper(device);
        for (const [i, c] of cases.entries()) checkMla(device, c, seed + 10 * i, hopper ? "wgmma" : "mma");
        if (!hopper) return;
        withTuning({ "sparse.dsa.decode": "mma" }, () => checkMla(device, cases[0], seed, "mma"));
      })),
);

deviceTest(
  "MLA decode refuses bad shapes, dtypes and sizes, naming them",
  (device) =>
    expectNoLeak(device, () => {
      const op = new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
        batch: 1,
        heads: 2,
        headsKv: 1,
        seqlenKv: 4,
        dim: 32,
        peDim: 8,
      });
      using q = Tensor.randn([1, 2, 32], { dtype: "bfloat16", device });
      using qPe = Tensor.randn([1, 2, 8], { dtype: "bfloat16", device });
      using k = Tensor.randn([1, 4, 1, 32], { dtype: "bfloat16", device });
      using kPe = Tensor.randn([1, 4, 1, 8], { dtype: "bfloat16", device });
      using kPe16 = Tensor.randn([1, 4, 1, 8], { dtype: "float16", device });
      using q32 = Tensor.randn([1, 2, 32], { device });
      refuses(() => op.forward(q, qPe, k, kPe16), /kPe: expected bfloat16 like q/);
      refuses(() => op.forward(q32, qPe, k, kPe), /q: expected dtype float16 \| bfloat16/);
      refuses(() => op.forward(q, kPe, k, kPe), /qPe: expected shape \[1, 2, 8\]/);
      refuses(() => op.forward(q, qPe, qPe, kPe), /k: expected shape \[1, 4, 1, 32\]/);
      refuses(
        () =>
          new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
            batch: 1,
            heads: 3,
            headsKv: 2,
            seqlenKv: 4,
            dim: 32,
            peDim: 8,
          }),
        /heads: 3 query heads are not a multiple of headsKv/,
      );
      refuses(
        () =>
          new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp(
            { batch: 1, heads: 2, headsKv: 1, seqlenKv: 4, dim: 32, peDim: 8, scale: 1 } as never,
          ),
        /scale/,
      );
    }),
);
