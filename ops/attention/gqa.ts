/**
 * Square training ops: `GroupedQueryAttentionFwdOp` / `GroupedQueryAttentionBwdOp` (Sq = Skv =
 * seqLen, layout `"bshd"` or `"bhsd"`). Built once with the sizes, then called with tensors.
 *
 * @module
 */
import type { Layout } from "../layout.ts";
import type { Tensor } from "../tensor.ts";
import type { KernelMap } from "../tune/choice.ts";
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
  type KernelSettings,
  kernelSettings,
  type SquareSizes,
  withKernels,
} from "./op_support.ts";
import { denseSources } from "./sources.ts";
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
export interface GroupedQueryAttentionFwdOptions
  extends SquareSizes, ScoreOptions, MaskOptions, KernelOptions {
  /** Layout of q, k, v and the output: `"bshd"` or `"bhsd"` (required). */
  layout: Extract<Layout, "bshd" | "bhsd">;
}

/** How an op class picks its kernels: the planner (default), a fixed map, or a tuning run per shape. */
export interface KernelOptions {
  /**
   * On the first call of each shape class (dtype, sizes, layout, mask, score), time every kernel that can
   * serve it against the planner's choice (outputs compared; one that disagrees is never chosen), keep the
   * fastest in the on-disk tuning cache and use it from then on (default false). Never inside a graph
   * capture.
   */
  tune?: boolean;
  /**
   * Tuning keys and values for this op's calls, over the table in force (e.g. `{ "attention.fwd":
   * "general" }`; each op takes its own stages' keys: the forwards `attention.fwd`, the backwards
   * `attention.bwd`, the decode ops `attention.decode`, NSA's branches `sparse.nsa.compression` /
   * `sparse.nsa.selection`, DSA decode `sparse.dsa.decode`, the indexer `sparse.indexer`). Wins over
   * `tune`; a setting that cannot serve a call makes the call throw, naming why.
   */
  kernelMap?: KernelMap;
}

/** A square call's shape class for the tuning cache. */
function shapeClass(
  q: Tensor,
  layout: string,
  sizes: SquareSizes,
  mask: ResolvedMask,
  score: ResolvedScore,
): string {
  return JSON.stringify({ dtype: q.dtype, layout, ...sizes, mask, score });
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
  readonly #kernels: KernelSettings;

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionFwdOptions) {
    const name = new.target.name; // subclasses (the MHA ops) report their own name
    this.#name = name;
    options = expectOptions(name, options);
    this.sizes = checkSquareSizes(name, options);
    this.layout = denseLayout(name, options.layout);
    this.mask = resolveMask(name, options);
    this.score = resolveScore(name, options);
    this.#kernels = kernelSettings(name, options, "attention.fwd");
  }

  /**
   * Runs the forward; `out` may supply the output and LSE buffers (kept by the caller: disposing the
   * result never disposes them).
   */
  forward(q: Tensor, k: Tensor, v: Tensor, out?: ForwardBuffers): AttentionOutput {
    const op = this.#name;
    expectSquareCall(op, this.sizes, this.layout, q, k, v);
    this.#pin.check(op, q);
    const call = (buffers?: ForwardBuffers) =>
      forwardResult(
        {
          op,
          ...denseSources(q, k, v, this.layout),
          mask: this.mask,
          score: this.score,
          out: buffers,
        },
        true,
        `${op}.forward(...).backward`,
      );
    const candidate = () => {
      const r = call();
      return { tensors: [r.output, r.lse], [Symbol.dispose]: () => r[Symbol.dispose]() };
    };
    const shape = shapeClass(q, this.layout, this.sizes, this.mask, this.score);
    return withKernels(op, this.#kernels, q, shape, candidate, () => call(out));
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
  readonly #kernels: KernelSettings;

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
    this.#kernels = kernelSettings(name, options, "attention.bwd");
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
    const call = (buffers?: BackwardBuffers) =>
      runBackward({
        op,
        ...denseSources(q, k, v, this.layout),
        mask: this.mask,
        score: this.score,
        output: o,
        dOutput: dO,
        lse,
        deterministic: this.deterministic,
        out: buffers,
      });
    const candidate = () => {
      const g = call();
      return { tensors: [g.dq, g.dk, g.dv], [Symbol.dispose]: () => g[Symbol.dispose]() };
    };
    const shape = shapeClass(q, this.layout, this.sizes, this.mask, this.score) +
      ` deterministic ${this.deterministic}`;
    return withKernels(op, this.#kernels, q, shape, candidate, () => call(out));
  }
}
