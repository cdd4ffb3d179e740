/**
 * Multi-head attention ops of seed 001: the `headsKv = heads` case of the GQA ops, as the seed
 * routes them.
 *
 * @module
 */
import { checkOptions } from "../args.ts";
import { OP_OPTION_KEYS } from "./op_support.ts";
import {
  GroupedQueryAttentionBwdOp,
  type GroupedQueryAttentionBwdOptions,
  GroupedQueryAttentionFwdOp,
  type GroupedQueryAttentionFwdOptions,
} from "./gqa.ts";

/** Options of {@link MultiHeadAttentionFwdOp}: the GQA forward's, without `headsKv`. */
export type MultiHeadAttentionFwdOptions = Omit<GroupedQueryAttentionFwdOptions, "headsKv">;

/** Options of {@link MultiHeadAttentionBwdOp}: the GQA backward's, without `headsKv`. */
export type MultiHeadAttentionBwdOptions = Omit<GroupedQueryAttentionBwdOptions, "headsKv">;

// The MHA options as the GQA op takes them (headsKv = heads), once checked without headsKv.
function mhaOptions<T extends { heads: number }>(op: string, options: T): T & { headsKv: number } {
  const keys = Object.keys(OP_OPTION_KEYS[op]).filter((k) => k !== "headsKv");
  checkOptions(op, options, Object.fromEntries(keys.map((k) => [k, "any" as const])));
  return { ...options, headsKv: options.heads };
}

/**
 * MHA forward for training (BSHD, square): q, k, v `[batch, seqLen, heads, dim]`; returns the output
 * and the LSE. `isCausal` defaults to true, as in the seed.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new MultiHeadAttentionFwdOp({ batch: 2, heads: 4, seqLen: 128, dim: 64 });
 * using q = Tensor.randn([2, 128, 4, 64], { dtype: "bfloat16", seed: 1 });
 * using result = op.forward(q, q, q);
 * ```
 */
export class MultiHeadAttentionFwdOp extends GroupedQueryAttentionFwdOp {
  /** Checks the sizes and options once. */
  constructor(options: MultiHeadAttentionFwdOptions) {
    super(mhaOptions("MultiHeadAttentionFwdOp", options));
  }
}

/**
 * MHA backward (BSHD, square): returns dq, dk, dv, each `[batch, seqLen, heads, dim]`.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionBwdOp, MultiHeadAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const sizes = { batch: 1, heads: 2, seqLen: 64, dim: 64 };
 * const fwd = new MultiHeadAttentionFwdOp(sizes);
 * const bwd = new MultiHeadAttentionBwdOp({ ...sizes, deterministic: true });
 * using q = Tensor.randn([1, 64, 2, 64], { dtype: "float16", seed: 1 });
 * using y = fwd.forward(q, q, q);
 * using grads = bwd.forward(q, q, q, y.output, y.output, y.lse);
 * ```
 */
export class MultiHeadAttentionBwdOp extends GroupedQueryAttentionBwdOp {
  /** Checks the sizes and options once. */
  constructor(options: MultiHeadAttentionBwdOptions) {
    super(mhaOptions("MultiHeadAttentionBwdOp", options));
  }
}
