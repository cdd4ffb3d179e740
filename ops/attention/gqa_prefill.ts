/**
 * `GroupedQueryAttentionPrefillFwdOp`: the canonical packed GQA prefill. Dense and square prefill are
 * packed calls with uniform offsets, ragged prefill the same call with ragged ones; one tensor list for
 * all, float8_e4m3 inputs included (with per-(sequence, KV head) scales).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { type CuSeqlens, seqlensOffsets } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import {
  checkPackedSizes,
  expectBoolean,
  expectMaxSeqlen,
  expectOptions,
  expectPackedCall,
  type PackedSizes,
} from "./op_support.ts";
import {
  expectSize,
  type MaskOptions,
  type ResolvedMask,
  type ResolvedScore,
  resolveMask,
  resolveScore,
} from "./options.ts";
import { runForward } from "./run.ts";
import { packedSources } from "./sources.ts";
import { dequantizeRows, tokenSequences } from "./transforms.ts";

const OP = "GroupedQueryAttentionPrefillFwdOp";

/** Options of {@link GroupedQueryAttentionPrefillFwdOp}. */
export interface GroupedQueryAttentionPrefillFwdOptions extends PackedSizes, MaskOptions {
  /** Longest query sequence a call may hold. */
  maxSeqlenQ: number;
  /** Longest key sequence a call may hold. */
  maxSeqlenKv: number;
  /**
   * Output dtype (default float16): for float16 / bfloat16 inputs it must be theirs; float8_e4m3 inputs
   * may give either.
   */
  dtype?: DType;
  /** Score scale; default `1 / sqrt(dim)`. */
  smScale?: number;
  /** Cap c > 0 applied as `c * tanh(z / c)`; 0 or undefined for none. */
  softcap?: number;
  /** `"auto"` (the default): the planner's kernel. */
  backend?: "auto";
  /**
   * Read the offsets back and check every length against `maxSeqlenQ` / `maxSeqlenKv` (default true).
   * Then offsets that the token counts make uniform (`batch * maxSeqlen` tokens) are uniform too.
   */
  validateUniformCuSeqlens?: boolean;
}

/**
 * Packed GQA prefill: q `[totalQ, heads, dim]`, k and v `[totalKv, headsKv, dim]`, int32 `cuSeqlensQ` /
 * `cuSeqlensKv` (`[batch + 1]`, host numbers or tensors), causal by default (bottom-right aligned per
 * sequence), windows and softcap. `qScale`, `kScale`, `vScale` (float32 `[batch, headsKv]`) are always
 * passed: float8_e4m3 inputs are multiplied by them (q's query heads take their KV head's scale), other
 * inputs ignore them. Returns `[totalQ, heads, dim]` in `dtype`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionPrefillFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionPrefillFwdOp({
 *   batch: 2, heads: 4, headsKv: 2, dim: 64, maxSeqlenQ: 32, maxSeqlenKv: 32, dtype: "bfloat16",
 * });
 * using q = Tensor.randn([48, 4, 64], { dtype: "float8_e4m3", seed: 1 });
 * using kv = Tensor.randn([48, 2, 64], { dtype: "float8_e4m3", seed: 2 });
 * using scale = Tensor.full([2, 2], 0.5);
 * using o = op.forward(q, kv, kv, [0, 16, 48], [0, 16, 48], scale, scale, scale); // [48, 4, 64] bfloat16
 * ```
 */
export class GroupedQueryAttentionPrefillFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<PackedSizes>;
  /** Longest query sequence. */
  readonly maxSeqlenQ: number;
  /** Longest key sequence. */
  readonly maxSeqlenKv: number;
  /** The output dtype. */
  readonly dtype: "float16" | "bfloat16";
  /** The mask. */
  readonly mask: ResolvedMask;
  /** Scale (undefined: 1 / sqrt(dim)) and softcap. */
  readonly score: ResolvedScore;
  /** Whether calls read the offsets back and check the lengths. */
  readonly validateUniformCuSeqlens: boolean;

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionPrefillFwdOptions) {
    options = expectOptions(OP, options);
    this.sizes = checkPackedSizes(OP, options);
    this.maxSeqlenQ = expectSize(OP, "maxSeqlenQ", options.maxSeqlenQ, 0);
    this.maxSeqlenKv = expectSize(OP, "maxSeqlenKv", options.maxSeqlenKv, 0);
    const dtype = options.dtype ?? "float16";
    if (dtype !== "float16" && dtype !== "bfloat16") {
      throw invalidArgument(OP, `dtype: expected float16 or bfloat16 (the output's), got ${String(dtype)}`);
    }
    this.dtype = dtype;
    if (options.backend !== undefined && options.backend !== "auto") {
      throw invalidArgument(OP, `backend: expected "auto", got ${JSON.stringify(options.backend)}`);
    }
    this.mask = resolveMask(OP, {
      ...options,
      isCausal: expectBoolean(OP, "isCausal", options.isCausal, true),
    });
    this.score = resolveScore(OP, { scale: options.smScale, softcap: options.softcap }, "smScale");
    this.validateUniformCuSeqlens = expectBoolean(
      OP,
      "validateUniformCuSeqlens",
      options.validateUniformCuSeqlens,
      true,
    );
  }

  /** Runs the forward; the returned output (`[totalQ, heads, dim]`, `dtype`) is the caller's to dispose. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cuSeqlensQ: CuSeqlens,
    cuSeqlensKv: CuSeqlens,
    qScale: Tensor,
    kScale: Tensor,
    vScale: Tensor,
  ): Tensor {
    using cu = expectPackedCall(OP, this.sizes, { q, k, v, cuSeqlensQ, cuSeqlensK: cuSeqlensKv });
    const { batch, headsKv } = this.sizes;
    for (const [name, s] of [["qScale", qScale], ["kScale", kScale], ["vScale", vScale]] as const) {
      const t = expectTensor(OP, name, s);
      expectDType(OP, name, t, ["float32"]);
      expectShape(OP, name, t, [batch, headsKv]);
      expectSameDevice(OP, name, t, q, "q");
    }
    expectDType(OP, "q", q, ["float16", "bfloat16", "float8_e4m3"]);
    for (const [name, t] of [["k", k], ["v", v]] as const) {
      if (t.dtype !== q.dtype) {
        throw invalidArgument(OP, `${name}: expected ${q.dtype} like q, got ${t.dtype}`);
      }
    }
    const fp8 = q.dtype === "float8_e4m3";
    if (!fp8 && q.dtype !== this.dtype) {
      throw invalidArgument(
        OP,
        `dtype: the output dtype ${this.dtype} must equal the input dtype ${q.dtype}`,
      );
    }
    if (this.validateUniformCuSeqlens) {
      expectMaxSeqlen(OP, "cuSeqlensQ", cu.q, "maxSeqlenQ", this.maxSeqlenQ);
      expectMaxSeqlen(OP, "cuSeqlensKv", cu.k, "maxSeqlenKv", this.maxSeqlenKv);
    }
    const call = (qq: Tensor, kk: Tensor, vv: Tensor) =>
      runForward({
        op: OP,
        ...packedSources(qq, kk, vv, cu),
        mask: this.mask,
        score: this.score,
      }, false).output;
    if (!fp8) return call(q, k, v);
    const qRows = tokenSequences(seqlensOffsets(cu.q)), kRows = tokenSequences(seqlensOffsets(cu.k));
    using qd = dequantizeRows(OP, q, qScale, qRows, this.dtype);
    using kd = dequantizeRows(OP, k, kScale, kRows, this.dtype);
    using vd = dequantizeRows(OP, v, vScale, kRows, this.dtype);
    return call(qd, kd, vd);
  }
}
