/**
 * `MultiHeadLatentAttentionDecodeWithKVCacheFwdOp`: DeepSeek's multi-head latent attention, one decode
 * step. The cache holds a latent vector per token (`k`, `[B, Skv, Hkv, dim]`, which is also the value) and
 * its rotary part (`kPe`, `[B, Skv, Hkv, peDim]`); each query head h scores
 * `scale (q_h . k_j + qPe_h . kPe_j)` against the latent of its KV head and returns the weighted latents.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native } from "../../ffi/library.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import { checked, writeResult } from "../sparse/common.ts";
import type { Tensor } from "../tensor.ts";
import { checkHeads, expectOptions } from "./op_support.ts";
import { expectSize } from "./options.ts";

const OP = "MultiHeadLatentAttentionDecodeWithKVCacheFwdOp";

/** Options of {@link MultiHeadLatentAttentionDecodeWithKVCacheFwdOp}. */
export interface MultiHeadLatentAttentionDecodeWithKVCacheFwdOptions {
  /** Sequences. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Latent heads of the cache (1 in DeepSeek-V3; a divisor of heads). */
  headsKv: number;
  /** Cache rows per sequence. */
  seqlenKv: number;
  /** Latent dim (512 in DeepSeek-V3): of q, k and the output. */
  dim: number;
  /** Rotary dim (64 in DeepSeek-V3): of qPe and kPe. */
  peDim: number;
}

/**
 * MLA decode: q `[batch, heads, dim]`, qPe `[batch, heads, peDim]`, k `[batch, seqlenKv, headsKv, dim]`,
 * kPe `[batch, seqlenKv, headsKv, peDim]` (float16 or bfloat16), scale `1 / sqrt(dim + peDim)`. Returns
 * `[batch, heads, dim]`. Computed in float32 from the 16-bit inputs and rounded once to q's dtype; at
 * DeepSeek-V3's 512 + 64 the heads run on tensor cores, 16 a block, with the probabilities rounded to the
 * inputs' 16 bits before the product with the latents (as FlashAttention does); other dims take a per-item
 * kernel.
 *
 * @example
 * ```ts
 * import { MultiHeadLatentAttentionDecodeWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new MultiHeadLatentAttentionDecodeWithKVCacheFwdOp({
 *   batch: 2, heads: 16, headsKv: 1, seqlenKv: 64, dim: 512, peDim: 64,
 * });
 * using q = Tensor.randn([2, 16, 512], { dtype: "bfloat16", seed: 1 });
 * using qPe = Tensor.randn([2, 16, 64], { dtype: "bfloat16", seed: 2 });
 * using k = Tensor.randn([2, 64, 1, 512], { dtype: "bfloat16", seed: 3 });
 * using kPe = Tensor.randn([2, 64, 1, 64], { dtype: "bfloat16", seed: 4 });
 * using o = op.forward(q, qPe, k, kPe); // [2, 16, 512]
 * ```
 */
export class MultiHeadLatentAttentionDecodeWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<Required<MultiHeadLatentAttentionDecodeWithKVCacheFwdOptions>>;

  /** Checks the sizes once. */
  constructor(options: MultiHeadLatentAttentionDecodeWithKVCacheFwdOptions) {
    options = expectOptions(OP, options);
    const { heads, headsKv } = checkHeads(OP, options.heads, options.headsKv);
    this.sizes = Object.freeze({
      batch: expectSize(OP, "batch", options.batch),
      heads,
      headsKv,
      seqlenKv: expectSize(OP, "seqlenKv", options.seqlenKv),
      dim: expectSize(OP, "dim", options.dim),
      peDim: expectSize(OP, "peDim", options.peDim, 0),
    });
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, qPe: Tensor, k: Tensor, kPe: Tensor): Tensor {
    const { batch: B, heads: H, headsKv: Hkv, seqlenKv: S, dim: D, peDim: P } = this.sizes;
    const shapes: [string, unknown, number[]][] = [
      ["q", q, [B, H, D]],
      ["qPe", qPe, [B, H, P]],
      ["k", k, [B, S, Hkv, D]],
      ["kPe", kPe, [B, S, Hkv, P]],
    ];
    const first = expectTensor(OP, "q", q);
    expectDType(OP, "q", first, ["float16", "bfloat16"]);
    for (const [name, value, shape] of shapes) {
      const t = expectTensor(OP, name, value);
      expectShape(OP, name, t, shape);
      if (t.dtype !== first.dtype) {
        throw invalidArgument(OP, `${name}: expected ${first.dtype} like q, got ${t.dtype}`);
      }
      expectSameDevice(OP, name, t, first, "q");
    }
    return writeResult(OP, "output", undefined, [B, H, D], first.dtype, first.device, (output) =>
      checked(
        OP,
        { q_pe: "qPe", k_pe: "kPe" },
        native().ak_mla_decode(
          first.descriptor(OP),
          (qPe as Tensor).descriptor(OP),
          (k as Tensor).descriptor(OP),
          (kPe as Tensor).descriptor(OP),
          (D + P) ** -0.5,
          output.descriptor(OP),
        ),
      ));
  }
}
