/**
 * What the attention op classes share: their constructor sizes, the dtype taken from the first call,
 * and the shape checks of square (Sq = Skv) BSHD calls.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectDType, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import type { Tensor } from "../tensor.ts";
import { expectSize } from "./options.ts";
import { MAX_HEAD_DIM, sequenceLengths } from "./sources.ts";

/** Sizes of a square BSHD op: q `[batch, seqLen, heads, dim]`, k and v `[batch, seqLen, headsKv, dim]`. */
export interface SquareSizes {
  /** Batch size. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Key/value heads (a divisor of heads). */
  headsKv: number;
  /** Sequence length of queries and keys. */
  seqLen: number;
  /** Head dimension: a multiple of 8, at most 256. */
  dim: number;
}

/** Checks heads and headsKv of a constructor: GQA needs heads to be a multiple of headsKv. */
export function checkHeads(op: string, heads: unknown, headsKv: unknown): { heads: number; headsKv: number } {
  const h = expectSize(op, "heads", heads);
  const hkv = expectSize(op, "headsKv", headsKv);
  if (h % hkv !== 0) {
    throw invalidArgument(
      op,
      `heads: ${h} query heads are not a multiple of headsKv (${hkv}); each KV head must serve a whole group`,
    );
  }
  return { heads: h, headsKv: hkv };
}

/** Checks a head dimension given to a constructor. */
export function checkDim(op: string, dim: unknown): number {
  const d = expectSize(op, "dim", dim);
  if (d % 8 !== 0 || d > MAX_HEAD_DIM) {
    throw invalidArgument(op, `dim: expected a multiple of 8 between 8 and ${MAX_HEAD_DIM}, got ${d}`);
  }
  return d;
}

/** Checks the sizes of a square op's constructor. */
export function checkSquareSizes(op: string, sizes: SquareSizes): Readonly<SquareSizes> {
  expectOptions(op, sizes);
  const { heads, headsKv } = checkHeads(op, sizes.heads, sizes.headsKv);
  return Object.freeze({
    batch: expectSize(op, "batch", sizes.batch),
    heads,
    headsKv,
    seqLen: expectSize(op, "seqLen", sizes.seqLen),
    dim: checkDim(op, sizes.dim),
  });
}

/** Checks q, k, v of a call against a square op's sizes. */
export function expectSquareCall(op: string, sizes: SquareSizes, q: unknown, k: unknown, v: unknown): void {
  const { batch, seqLen, heads, headsKv, dim } = sizes;
  expectShape(op, "q", expectTensor(op, "q", q), [batch, seqLen, heads, dim]);
  expectShape(op, "k", expectTensor(op, "k", k), [batch, seqLen, headsKv, dim]);
  expectShape(op, "v", expectTensor(op, "v", v), [batch, seqLen, headsKv, dim]);
}

/** The dtype an op takes from its first call; later calls must use the same one. */
export class DTypePin {
  #dtype: DType | undefined;

  /** Checks `q`'s dtype against the first call's (and records it on the first call). */
  check(op: string, q: Tensor): void {
    if (this.#dtype === undefined) {
      if (q.dtype === "float16" || q.dtype === "bfloat16") this.#dtype = q.dtype;
      return; // other dtypes are refused by the call's own checks
    }
    if (q.dtype !== this.#dtype) {
      throw invalidArgument(op, `q: this op was first called with ${this.#dtype}; got ${q.dtype}`);
    }
  }

  /** The pinned dtype, once a call has run. */
  get dtype(): DType | undefined {
    return this.#dtype;
  }
}

/** Checks that a constructor got an options object. */
export function expectOptions(op: string, options: unknown): void {
  checkOptions(op, options, OP_OPTION_KEYS[op]);
}

// The keys of the op classes' options (values are checked where they are resolved).
const SQUARE_KEYS = ["batch", "heads", "headsKv", "seqLen", "dim"];
const PACKED_KEYS = ["batch", "heads", "headsKv", "dim"];
const MASK_KEYS = ["isCausal", "windowSizeLeft", "windowSizeRight"];
const SCORE_KEYS = ["smScale", "softcap"];

/** The option keys of each attention op class, by class name. */
export const OP_OPTION_KEYS: Readonly<Record<string, OptionSpec>> = Object.fromEntries(
  Object.entries({
    GroupedQueryAttentionFwdOp: [...SQUARE_KEYS, ...SCORE_KEYS, "isCausal"],
    GroupedQueryAttentionBwdOp: [...SQUARE_KEYS, ...SCORE_KEYS, ...MASK_KEYS, "deterministic"],
    // The MHA ops check their users' options without headsKv (mha.ts), then pass headsKv = heads.
    MultiHeadAttentionFwdOp: [...SQUARE_KEYS, ...SCORE_KEYS, "isCausal"],
    MultiHeadAttentionBwdOp: [...SQUARE_KEYS, ...SCORE_KEYS, ...MASK_KEYS, "deterministic"],
    GroupedQueryAttentionDenseFwdOp: [...MASK_KEYS, ...SCORE_KEYS, "dtype"],
    GroupedQueryAttentionSlidingWindowFwdOp: [...SQUARE_KEYS, ...MASK_KEYS],
    GroupedQueryAttentionSlidingWindowVarlenFwdOp: [...PACKED_KEYS, ...MASK_KEYS],
    GroupedQueryAttentionPrefillVarlenFwdOp: [
      ...PACKED_KEYS,
      ...SCORE_KEYS,
      "maxSeqlenQ",
      "maxSeqlenKv",
      "isCausal",
      "validateInputs",
    ],
  }).map(([op, keys]) => [op, Object.fromEntries(keys.map((k) => [k, "any"]))]),
);

/** Sizes of a packed (varlen) op: q `[Tq, heads, dim]`, k and v `[Tkv, headsKv, dim]`, `batch` sequences. */
export interface PackedSizes {
  /** Number of sequences (cu_seqlens have batch + 1 entries). */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Key/value heads (a divisor of heads). */
  headsKv: number;
  /** Head dimension: a multiple of 8, at most 256. */
  dim: number;
}

/** Checks the sizes of a packed op's constructor. */
export function checkPackedSizes(op: string, sizes: PackedSizes): Readonly<PackedSizes> {
  expectOptions(op, sizes);
  const { heads, headsKv } = checkHeads(op, sizes.heads, sizes.headsKv);
  return Object.freeze({
    batch: expectSize(op, "batch", sizes.batch, 0),
    heads,
    headsKv,
    dim: checkDim(op, sizes.dim),
  });
}

/** Checks q, k, v and the cu_seqlens of a packed call against a packed op's sizes. */
export function expectPackedCall(
  op: string,
  sizes: PackedSizes,
  tensors: { q: unknown; k: unknown; v: unknown; cuSeqlensQ: unknown; cuSeqlensKv: unknown },
  kvName = "cuSeqlensKv",
): void {
  const { batch, heads, headsKv, dim } = sizes;
  expectShape(op, "q", expectTensor(op, "q", tensors.q), [null, heads, dim]);
  const k = expectShape(op, "k", expectTensor(op, "k", tensors.k), ["Tkv", headsKv, dim]);
  expectShape(op, "v", expectTensor(op, "v", tensors.v), ["Tkv", headsKv, dim], k);
  for (const [name, cu] of [["cuSeqlensQ", tensors.cuSeqlensQ], [kvName, tensors.cuSeqlensKv]] as const) {
    const t = expectTensor(op, name, cu);
    expectDType(op, name, t, ["int32"]);
    expectShape(op, name, t, [batch + 1]);
  }
}

/** Checks that no sequence of `cu` is longer than `max` (reads cu_seqlens to the host). */
export function expectMaxSeqlen(op: string, name: string, cu: Tensor, maxName: string, max: number): void {
  const lengths = sequenceLengths(cu);
  const n = lengths.findIndex((len) => len > max);
  if (n >= 0) {
    throw invalidArgument(
      op,
      `${name}: sequence ${n} has ${lengths[n]} tokens, more than ${maxName} (${max})`,
    );
  }
}

/** Checks a boolean option. */
export function expectBoolean(op: string, name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") {
    throw invalidArgument(op, `${name}: expected a boolean, got ${String(value)}`);
  }
  return value;
}
