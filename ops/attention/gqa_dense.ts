/**
 * `GroupedQueryAttentionDenseFwdOp`: shape-agnostic dense GQA for prefill and contiguous decode
 * (Sq != Skv allowed, bottom-right aligned), with causal, windows, softcap and scale. Shapes arrive
 * with each call; the layout is fixed at construction.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { DType } from "../dtype.ts";
import type { Layout } from "../layout.ts";
import type { Tensor } from "../tensor.ts";
import {
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import { denseLayout, expectOptions } from "./op_support.ts";
import { type ForwardBuffers, runForward } from "./run.ts";

/** Options of {@link GroupedQueryAttentionDenseFwdOp}: the layout (required), mask and score options. */
export interface GroupedQueryAttentionDenseFwdOptions extends MaskOptions, ScoreOptions {
  /** Layout of q, k, v and the output: `"bshd"` or `"bhsd"` (required). */
  layout: Extract<Layout, "bshd" | "bhsd">;
  /**
   * Output dtype: for float16 / bfloat16 inputs it must equal theirs (the default).
   */
  dtype?: DType;
}

/**
 * Dense GQA forward: q `[B, Sq, H, D]`, k and v `[B, Skv, Hkv, D]` (`"bshd"`; `"bhsd"` puts heads
 * before the sequence), float16 or bfloat16, any Sq and Skv. `isCausal` defaults to false. Query row i
 * sits at key position `i + Skv - Sq`; causal admits keys `j <= i + Skv - Sq`, so with Sq > Skv the
 * first `Sq - Skv` rows admit none and return 0. Returns the output, shaped like q (an inference op:
 * no LSE unless `out.lse` is given, no backward).
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDenseFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDenseFwdOp({ layout: "bshd", isCausal: true, softcap: 30 });
 * using q = Tensor.randn([1, 16, 8, 128], { dtype: "bfloat16", seed: 1 }); // 16 new tokens
 * using k = Tensor.randn([1, 200, 2, 128], { dtype: "bfloat16", seed: 2 }); // 200 in context
 * using v = Tensor.randn([1, 200, 2, 128], { dtype: "bfloat16", seed: 3 });
 * using o = op.forward(q, k, v);
 * ```
 */
export class GroupedQueryAttentionDenseFwdOp {
  /** Layout of every call's tensors. */
  readonly layout: Extract<Layout, "bshd" | "bhsd">;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale (undefined: 1 / sqrt(D) of each call) and softcap. */
  readonly score: ResolvedScore;
  /** The requested output dtype, if any. */
  readonly dtype: DType | undefined;

  /** Checks the options once. */
  constructor(options: GroupedQueryAttentionDenseFwdOptions) {
    const op = "GroupedQueryAttentionDenseFwdOp";
    options = expectOptions(op, options);
    this.layout = denseLayout(op, options.layout);
    this.mask = resolveMask(op, options);
    this.score = resolveScore(op, options);
    if (options.dtype !== undefined && options.dtype !== "float16" && options.dtype !== "bfloat16") {
      throw invalidArgument(
        op,
        `dtype: expected float16 or bfloat16 (FP8 outputs come later), got ${options.dtype}`,
      );
    }
    this.dtype = options.dtype;
  }

  /**
   * Runs the forward; `out.output` (and `out.lse`, which is then written too) may supply buffers. The
   * returned output is the caller's to dispose (it is `out.output` when that was given).
   */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): Tensor {
    const op = "GroupedQueryAttentionDenseFwdOp";
    if (this.dtype !== undefined && q?.dtype !== undefined && q.dtype !== this.dtype) {
      throw invalidArgument(
        op,
        `dtype: the output dtype ${this.dtype} must equal the input dtype ${q.dtype}`,
      );
    }
    return runForward({
      op,
      query: { kind: "dense", q, layout: this.layout },
      kv: { kind: "dense", k, v, layout: this.layout },
      mask: this.mask,
      score: this.score,
      out,
    }, false).output;
  }
}
