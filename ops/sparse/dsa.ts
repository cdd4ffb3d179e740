/**
 * `DeepSeekSparseAttentionDecodeWithKVCacheFwdOp`: DeepSeek sparse attention (DSA) over a latent cache,
 * each query attending only the cache rows its top-k list names.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native } from "../../ffi/library.ts";
import { booleanOption, checkOptions } from "../args.ts";
import type { Tensor } from "../tensor.ts";
import type { KernelOptions } from "../attention/gqa.ts";
import { expectSize } from "../attention/options.ts";
import { type KernelSettings, kernelSettings } from "../attention/op_support.ts";
import { withChoice } from "../tune/choice.ts";
import {
  checked,
  FirstDType,
  input,
  scaleOption,
  singleRun,
  SPARSE_FLOATS,
  sparseChoice,
  writeResult,
} from "./common.ts";

const CAUSAL = 1, CHECK_INDICES = 2;

/** Options of {@link DeepSeekSparseAttentionDecodeWithKVCacheFwdOp}. */
export interface DeepSeekSparseAttentionDecodeWithKVCacheFwdOptions extends KernelOptions {
  /** Sequences. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Queries per sequence. */
  seqLen: number;
  /** Cache rows per sequence. */
  seqLenKv: number;
  /** Latent dim: the value is the first `dim` of a cache row, and the output has `dim`. */
  dim: number;
  /** Rotary dim after the latent (scored, not returned). */
  dimTail: number;
  /** Entries of each query's list. */
  topk: number;
  /** Tokens per cache row: row j stands for tokens up to `j strideKv + strideKv - 1` (default 1). */
  strideKv?: number;
  /** Cache heads (a divisor of heads; default 1). */
  headsKv?: number;
  /** Position of the first query (query s sits at `qStartIndexS + s`). */
  qStartIndexS: number;
  /** Score scale (default `1 / sqrt(dim + dimTail)`). */
  smScale?: number;
  /** Skip rows past each query's position (default true). */
  isCausal?: boolean;
  /**
   * Read the index lists back and refuse a cache row listed twice for one query (default true). Unchecked,
   * each listing counts.
   */
  checkIndices?: boolean;
}

const KEYS = {
  batch: "any",
  heads: "any",
  seqLen: "any",
  seqLenKv: "any",
  dim: "any",
  dimTail: "any",
  topk: "any",
  strideKv: "any",
  headsKv: "any",
  qStartIndexS: "any",
  smScale: "any",
  isCausal: "any",
  checkIndices: "any",
  tune: "any",
  kernelMap: "any",
} as const;

/**
 * DSA decode: q `[batch, seqLen, heads, dim + dimTail]`, kv `[batch, seqLenKv, headsKv, dim + dimTail]`,
 * indices `[batch, seqLen, headsKv, topk]` int32. Query s attends the listed rows j with
 * `0 <= j < seqLenKv` (anything else, -1 or seqLenKv say, pads the list) and, when causal,
 * `j strideKv + strideKv - 1 <= qStartIndexS + s`; scores `smScale q . kv_j` over all `dim + dimTail`,
 * values the first `dim` of each row. Returns `[batch, seqLen, heads, dim]` in q's dtype (zero for a query
 * that sees no row). float16, bfloat16 or float32, computed in float32. At DeepSeek's 512 + 64 columns in
 * 16 bits the heads run on tensor cores (probabilities rounded to the inputs' 16 bits before the product
 * with the values, as FlashAttention does); other shapes take a per-item kernel.
 *
 * @example
 * ```ts
 * import { DeepSeekSparseAttentionDecodeWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new DeepSeekSparseAttentionDecodeWithKVCacheFwdOp({
 *   batch: 1, heads: 16, seqLen: 1, seqLenKv: 256, dim: 512, dimTail: 64, topk: 64, qStartIndexS: 255,
 * });
 * using q = Tensor.randn([1, 1, 16, 576], { dtype: "bfloat16", seed: 1 });
 * using kv = Tensor.randn([1, 256, 1, 576], { dtype: "bfloat16", seed: 2 });
 * using indices = Tensor.from(Int32Array.from({ length: 64 }, (_, i) => 4 * i), { shape: [1, 1, 1, 64] });
 * using o = op.forward(q, kv, indices); // [1, 1, 16, 512]
 * ```
 */
export class DeepSeekSparseAttentionDecodeWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<
    Required<Omit<DeepSeekSparseAttentionDecodeWithKVCacheFwdOptions, "checkIndices" | "tune" | "kernelMap">>
  >;
  readonly #check: boolean;
  readonly #pin = new FirstDType();
  readonly #kernels: KernelSettings;

  /** Checks the sizes once. */
  constructor(options: DeepSeekSparseAttentionDecodeWithKVCacheFwdOptions) {
    const op = "DeepSeekSparseAttentionDecodeWithKVCacheFwdOp";
    const o = checkOptions<DeepSeekSparseAttentionDecodeWithKVCacheFwdOptions>(op, options, KEYS);
    const heads = expectSize(op, "heads", o.heads);
    const headsKv = o.headsKv === undefined ? 1 : expectSize(op, "headsKv", o.headsKv);
    if (heads % headsKv !== 0) {
      throw invalidArgument(op, `headsKv: expected a divisor of heads=${heads}, got ${headsKv}`);
    }
    const dim = expectSize(op, "dim", o.dim), dimTail = expectSize(op, "dimTail", o.dimTail, 0);
    this.sizes = Object.freeze({
      batch: expectSize(op, "batch", o.batch, 0),
      heads,
      seqLen: expectSize(op, "seqLen", o.seqLen, 0),
      seqLenKv: expectSize(op, "seqLenKv", o.seqLenKv, 0),
      dim,
      dimTail,
      topk: expectSize(op, "topk", o.topk),
      strideKv: o.strideKv === undefined ? 1 : expectSize(op, "strideKv", o.strideKv),
      headsKv,
      qStartIndexS: expectSize(op, "qStartIndexS", o.qStartIndexS, 0),
      smScale: scaleOption(op, "smScale", o.smScale, (dim + dimTail) ** -0.5),
      isCausal: booleanOption(op, "isCausal", o.isCausal, true),
    });
    this.#check = booleanOption(op, "checkIndices", o.checkIndices, true);
    this.#kernels = kernelSettings(op, o, "sparse.dsa.decode", booleanOption);
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, kv: Tensor, indices: Tensor, out?: Tensor): Tensor {
    const op = "DeepSeekSparseAttentionDecodeWithKVCacheFwdOp.forward";
    const s = this.sizes;
    const width = s.dim + s.dimTail;
    const first = input(op, "q", q, SPARSE_FLOATS, [s.batch, s.seqLen, s.heads, width]);
    this.#pin.check(op, "q", first);
    const cache = input(op, "kv", kv, [], [s.batch, s.seqLenKv, s.headsKv, width], {
      tensor: first,
      name: "q",
      sameDType: true,
    });
    const list = input(op, "indices", indices, ["int32"], [s.batch, s.seqLen, s.headsKv, s.topk], {
      tensor: first,
      name: "q",
    });
    const shape = [s.batch, s.seqLen, s.heads, s.dim];
    const run = (buffer: Tensor | undefined, flags: number) =>
      writeResult(op, "out", buffer, shape, first.dtype, first.device, (output) =>
        checked(
          op,
          { q_start: "qStartIndexS", stride_kv: "strideKv", output: "out" },
          native().ak_dsa_decode(
            first.descriptor(op),
            cache.descriptor(op),
            list.descriptor(op),
            BigInt(s.qStartIndexS),
            BigInt(s.strideKv),
            s.smScale,
            flags,
            output.descriptor(op),
          ),
        ));
    const causal = s.isCausal ? CAUSAL : 0;
    return withChoice({
      op: "DeepSeekSparseAttentionDecodeWithKVCacheFwdOp",
      ...this.#kernels,
      ...sparseChoice(first, s),
      // The timed calls skip the lists' read-back: the kernels stay in bounds on any list, and the user's
      // call still checks them.
      run: singleRun(() => run(undefined, causal)),
    }, () => run(out, causal | (this.#check ? CHECK_INDICES : 0)));
  }
}
