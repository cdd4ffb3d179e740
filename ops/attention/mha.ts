/**
 * Multi-head attention ops: the `headsKv = heads` case of the GQA ops.
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
  const checked = checkOptions<T>(op, options, Object.fromEntries(keys.map((k) => [k, "any" as const])));
  return { ...checked, headsKv: checked.heads };
}

/**
 * MHA forward for training (square): q, k, v `[batch, seqLen, heads, dim]` (`"bshd"`) or
 * `[batch, heads, seqLen, dim]` (`"bhsd"`); returns the output, the LSE and `backward(dO)`.
 * `isCausal` defaults to false.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new MultiHeadAttentionFwdOp({
 *   layout: "bhsd", batch: 2, heads: 4, seqLen: 128, dim: 64, isCausal: true,
 * });
 * using q = Tensor.randn([2, 4, 128, 64], { dtype: "bfloat16", seed: 1 });
 * using result = op.forward(q, q, q);
 * console.log(result.lse.shape); // [2, 4, 128]
 * ```
 */
export class MultiHeadAttentionFwdOp extends GroupedQueryAttentionFwdOp {
  /** Checks the sizes and options once. */
  constructor(options: MultiHeadAttentionFwdOptions) {
    super(mhaOptions("MultiHeadAttentionFwdOp", options));
  }
}

/**
 * MHA backward (square): `backward(dO, q, k, v, o, lse)` returns dq, dk, dv, each shaped like q.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionBwdOp, MultiHeadAttentionFwdOp, Tensor } from "@attnkit/attnkit";
 * const options = { layout: "bshd", batch: 1, heads: 2, seqLen: 64, dim: 64, isCausal: true } as const;
 * const fwd = new MultiHeadAttentionFwdOp(options);
 * const bwd = new MultiHeadAttentionBwdOp({ ...options, deterministic: true });
 * using q = Tensor.randn([1, 64, 2, 64], { dtype: "float16", seed: 1 });
 * using dO = Tensor.randn([1, 64, 2, 64], { dtype: "float16", seed: 2 });
 * using y = fwd.forward(q, q, q);
 * using grads = bwd.backward(dO, q, q, q, y.output, y.lse);
 * ```
 */
export class MultiHeadAttentionBwdOp extends GroupedQueryAttentionBwdOp {
  /** Checks the sizes and options once. */
  constructor(options: MultiHeadAttentionBwdOptions) {
    super(mhaOptions("MultiHeadAttentionBwdOp", options));
  }
}
