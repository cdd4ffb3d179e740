/**
 * Square training ops: `GroupedQueryAttentionFwdOp` / `GroupedQueryAttentionBwdOp` (Sq = Skv =
 * seqLen, layout `"bshd"` or `"bhsd"`). Built once with the sizes, then called with tensors.
 *
 * @module
 */
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
import {
  checkSquareSizes,
  denseLayout,
  DTypePin,
  expectBoolean,
  expectOptions,
  expectSquareCall,
  type SquareSizes,
} from "./op_support.ts";
import {
  type AttentionGradients,
  type AttentionOutput,
  type BackwardBuffers,
  type ForwardBuffers,
  forwardResult,
  runBackward,
} from "./run.ts";

/**
 * Options of {@link GroupedQueryAttentionFwdOp}: the sizes, the layout (required), the mask
 * (`isCausal` default false, windows default unlimited), `scale` (default `1 / sqrt(dim)`) and
 * `softcap`.
 */
export interface GroupedQueryAttentionFwdOptions extends SquareSizes, ScoreOptions, MaskOptions {
  /** Layout of q, k, v and the output: `"bshd"` or `"bhsd"` (required). */
  layout: Extract<Layout, "bshd" | "bhsd">;
}

/**
 * Options of {@link GroupedQueryAttentionBwdOp}: the forward's options (the same ones; a backward
 * handed an LSE from a forward with other options refuses it), plus `deterministic`.
 */
export interface GroupedQueryAttentionBwdOptions extends GroupedQueryAttentionFwdOptions {
  /** A fixed reduction order on the GPU (slower); the CPU backend is always deterministic. */
  deterministic?: boolean;
}

/**
 * Square GQA forward for training: q `[batch, seqLen, heads, dim]`, k and v
 * `[batch, seqLen, headsKv, dim]` (`"bshd"`; `"bhsd"` puts heads before seqLen), float16 or bfloat16
 * (dtype fixed by the first call); returns the output, the LSE (`[batch, heads, seqLen]`, float32) and
 * `backward(dO)`, which runs this op's backward on the same inputs.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionFwdOp({
 *   layout: "bshd", batch: 1, heads: 8, headsKv: 2, seqLen: 64, dim: 64, isCausal: true,
 * });
 * using q = Tensor.randn([1, 64, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using result = op.forward(q, kv, kv);
 * console.log(result.output.shape, result.lse.shape); // [1, 64, 8, 64] [1, 8, 64]
 * using grads = result.backward(result.output);
 * ```
 */
export class GroupedQueryAttentionFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** Layout of every call's tensors. */
  readonly layout: Extract<Layout, "bshd" | "bhsd">;
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale and softcap. */
  readonly score: ResolvedScore;
  readonly #name: string;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionFwdOptions) {
    const name = new.target.name; // subclasses (the MHA ops) report their own name
    this.#name = name;
    options = expectOptions(name, options);
    this.sizes = checkSquareSizes(name, options);
    this.layout = denseLayout(name, options.layout);
    this.mask = resolveMask(name, options);
    this.score = resolveScore(name, options);
  }

  /**
   * Runs the forward; `out` may supply the output and LSE buffers (kept by the caller: disposing the
   * result never disposes them).
   */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): AttentionOutput {
    const op = this.#name;
    expectSquareCall(op, this.sizes, this.layout, q, k, v);
    this.#pin.check(op, q);
    return forwardResult(
      {
        op,
        query: { kind: "dense", q, layout: this.layout },
        kv: { kind: "dense", k, v, layout: this.layout },
        mask: this.mask,
        score: this.score,
        out,
      },
      true,
      `${op}.forward(...).backward`,
    );
  }
}

/**
 * Square GQA backward: from the output gradient dO, q, k, v, the forward's output o and its LSE,
 * returns dq (`[batch, seqLen, heads, dim]`) and dk, dv (`[batch, seqLen, headsKv, dim]`, summed over
 * each KV group), in the op's layout. Recomputes the scores from the LSE.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionBwdOp, GroupedQueryAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const options = {
 *   layout: "bshd", batch: 1, heads: 4, headsKv: 1, seqLen: 32, dim: 64, isCausal: true,
 * } as const;
 * const fwd = new GroupedQueryAttentionFwdOp(options);
 * const bwd = new GroupedQueryAttentionBwdOp(options);
 * using q = Tensor.randn([1, 32, 4, 64], { dtype: "float16", seed: 1 });
 * using kv = Tensor.randn([1, 32, 1, 64], { dtype: "float16", seed: 2 });
 * using dO = Tensor.randn([1, 32, 4, 64], { dtype: "float16", seed: 3 });
 * using y = fwd.forward(q, kv, kv);
 * using grads = bwd.backward(dO, q, kv, kv, y.output, y.lse);
 * ```
 */
export class GroupedQueryAttentionBwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<SquareSizes>;
  /** Layout of every call's tensors. */
  readonly layout: Extract<Layout, "bshd" | "bhsd">;
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
    options = expectOptions(name, options);
    this.sizes = checkSquareSizes(name, options);
    this.layout = denseLayout(name, options.layout);
    this.mask = resolveMask(name, options);
    this.score = resolveScore(name, options);
    this.deterministic = expectBoolean(name, "deterministic", options.deterministic, false);
  }

  /**
   * Runs the backward, the output gradient first; `out` may supply the dq, dk, dv buffers (kept by the
   * caller).
   */
  backward(
    dO: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    out?: BackwardBuffers,
  ): AttentionGradients {
    const op = this.#name;
    expectSquareCall(op, this.sizes, this.layout, q, k, v);
    this.#pin.check(op, q);
    return runBackward({
      op,
      query: { kind: "dense", q, layout: this.layout },
      kv: { kind: "dense", k, v, layout: this.layout },
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
