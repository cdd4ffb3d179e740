/**
 * Square training ops of seed 001: `GroupedQueryAttentionFwdOp` / `GroupedQueryAttentionBwdOp`
 * (BSHD, Sq = Skv = seqLen). Built once with the sizes, then called with tensors.
 *
 * @module
 */
import type { Tensor } from "../tensor.ts";
import {
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import {
  checkSquareSizes,
  DTypePin,
  expectBoolean,
  expectSquareCall,
  type SquareSizes,
} from "./op_support.ts";
import {
  type AttentionGradients,
  type AttentionOutput,
  type BackwardBuffers,
  type ForwardBuffers,
  forwardWithLse,
  runBackward,
} from "./run.ts";

/**
 * Options of {@link GroupedQueryAttentionFwdOp}: the sizes, `isCausal` (default true, as in the seed),
 * `smScale` (default `1 / sqrt(dim)`) and `softcap`.
 */
export interface GroupedQueryAttentionFwdOptions extends SquareSizes, ScoreOptions {
  /** Causal mask (default true). */
  isCausal?: boolean;
}

/**
 * Options of {@link GroupedQueryAttentionBwdOp}: the forward's options (pass the same ones), plus
 * windows (beyond the seed, so a sliding-window forward has a backward) and `deterministic`.
 */
export interface GroupedQueryAttentionBwdOptions extends SquareSizes, ScoreOptions, MaskOptions {
  /** A fixed reduction order on the GPU (slower); the CPU backend is always deterministic. */
  deterministic?: boolean;
}

/**
 * Square GQA forward for training: q `[batch, seqLen, heads, dim]`, k and v
 * `[batch, seqLen, headsKv, dim]` (float16 or bfloat16, dtype fixed by the first call); returns the
 * output and the LSE (`[batch, heads, seqLen]`, float32) that the backward needs.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionFwdOp({ batch: 1, heads: 8, headsKv: 2, seqLen: 64, dim: 64 });
 * using q = Tensor.randn([1, 64, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using result = op.forward(q, kv, kv);
 * console.log(result.output.shape, result.lse.shape); // [1, 64, 8, 64] [1, 8, 64]
 * ```
 */
export class GroupedQueryAttentionFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** The mask (causal or not). */
  readonly mask: ResolvedMask;
  /** Scale and softcap. */
  readonly score: ResolvedScore;
  readonly #name: string;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionFwdOptions) {
    const name = new.target.name; // subclasses (the MHA ops) report their own name
    this.#name = name;
    this.sizes = checkSquareSizes(name, options);
    this.mask = resolveMask(
      name,
      { isCausal: expectBoolean(name, "isCausal", options.isCausal, true) },
      true,
    );
    this.score = resolveScore(name, options);
  }

  /** Runs the forward; `out` may supply the output and LSE buffers. */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): AttentionOutput {
    const op = this.#name;
    expectSquareCall(op, this.sizes, q, k, v);
    this.#pin.check(op, q);
    return forwardWithLse({
      op,
      query: { kind: "dense", q, layout: "bshd" },
      kv: { kind: "dense", k, v, layout: "bshd" },
      mask: this.mask,
      score: this.score,
      out,
    });
  }
}

/**
 * Square GQA backward: from q, k, v, the forward's output o and LSE, and dO, returns dq
 * (`[batch, seqLen, heads, dim]`) and dk, dv (`[batch, seqLen, headsKv, dim]`, summed over each KV
 * group). Recomputes the scores from the LSE.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionBwdOp, GroupedQueryAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const sizes = { batch: 1, heads: 4, headsKv: 1, seqLen: 32, dim: 64 };
 * const fwd = new GroupedQueryAttentionFwdOp(sizes);
 * const bwd = new GroupedQueryAttentionBwdOp(sizes);
 * using q = Tensor.randn([1, 32, 4, 64], { dtype: "float16", seed: 1 });
 * using kv = Tensor.randn([1, 32, 1, 64], { dtype: "float16", seed: 2 });
 * using y = fwd.forward(q, kv, kv);
 * using grads = bwd.forward(q, kv, kv, y.output, y.output, y.lse);
 * ```
 */
export class GroupedQueryAttentionBwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale and softcap. */
  readonly score: ResolvedScore;
  /** Fixed reduction order on the GPU. */
  readonly deterministic: boolean;
  readonly #name: string;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionBwdOptions) {
    const name = new.target.name; // subclasses (the MHA ops) report their own name
    this.#name = name;
    this.sizes = checkSquareSizes(name, options);
    this.mask = resolveMask(name, options, true);
    this.score = resolveScore(name, options);
    this.deterministic = expectBoolean(name, "deterministic", options.deterministic, false);
  }

  /** Runs the backward; `out` may supply the dq, dk, dv buffers. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    dO: Tensor,
    lse: Tensor,
    out?: BackwardBuffers,
  ): AttentionGradients {
    const op = this.#name;
    expectSquareCall(op, this.sizes, q, k, v);
    this.#pin.check(op, q);
    return runBackward({
      op,
      query: { kind: "dense", q, layout: "bshd" },
      kv: { kind: "dense", k, v, layout: "bshd" },
      mask: this.mask,
      score: this.score,
      output: o,
      dOutput: dO,
      lse,
      deterministic: this.deterministic,
      out,
    });
  }
}
