/**
 * What the attention op classes share: their constructor sizes and layout, their kernel choice, the
 * dtype taken from the first call, and the shape checks of square (Sq = Skv) and packed calls.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { LAYOUTS, requireLayout } from "../layout.ts";
import { type Int32Seqlens, int32Seqlens, seqlensOffsets } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import { checkKernelMap, type ChoiceRequest, type TuneRun, withChoice } from "../tune/choice.ts";
import type { KernelOptions } from "./gqa.ts";
import { expectSize } from "./options.ts";
import { type DenseLayout, MAX_HEAD_DIM, sequenceLengths } from "./sources.ts";

/**
 * Sizes of a square op: q `[batch, seqLen, heads, dim]`, k and v `[batch, seqLen, headsKv, dim]` (in
 * the order of the op's layout).
 */
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

/** The layouts dense op classes take. */
export const DENSE_LAYOUTS: readonly DenseLayout[] = ["bshd", "bhsd"];

/** Checks the (required) layout of a dense op's constructor. */
export function denseLayout(op: string, layout: unknown): DenseLayout {
  return requireLayout(op, layout, DENSE_LAYOUTS);
}

/** Checks the (required) layout of a packed op's constructor: `"thd"`, so every call names its layout. */
export function packedLayout(op: string, layout: unknown): "thd" {
  return requireLayout(op, layout, ["thd"]);
}

/** Checks the sizes of a square op's constructor. */
export function checkSquareSizes(op: string, sizes: SquareSizes): Readonly<SquareSizes> {
  sizes = expectOptions(op, sizes);
  const { heads, headsKv } = checkHeads(op, sizes.heads, sizes.headsKv);
  return Object.freeze({
    batch: expectSize(op, "batch", sizes.batch),
    heads,
    headsKv,
    seqLen: expectSize(op, "seqLen", sizes.seqLen),
    dim: checkDim(op, sizes.dim),
  });
}

/** Checks q, k, v of a call against a square op's sizes, in the op's layout. */
export function expectSquareCall(
  op: string,
  sizes: SquareSizes,
  layout: DenseLayout,
  q: unknown,
  k: unknown,
  v: unknown,
): void {
  const { batch, seqLen, heads, headsKv, dim } = sizes;
  const shape = (h: number) => layout === "bshd" ? [batch, seqLen, h, dim] : [batch, h, seqLen, dim];
  try {
    expectShape(op, "q", expectTensor(op, "q", q), shape(heads));
    expectShape(op, "k", expectTensor(op, "k", k), shape(headsKv));
    expectShape(op, "v", expectTensor(op, "v", v), shape(headsKv));
  } catch (e) {
    if (!(e instanceof Error) || !/expected shape/.test(e.message)) throw e;
    throw invalidArgument(
      op,
      `${e.message.slice(op.length + 2)} (layout "${layout}" reads ${LAYOUTS[layout]})`,
    );
  }
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

/** Checks a constructor's options object (known keys only) and returns it ({} for undefined). */
export function expectOptions<T extends object>(op: string, options: T | undefined): T {
  return checkOptions<T>(op, options, OP_OPTION_KEYS[op]);
}

// The keys of the op classes' options (values are checked where they are resolved).
const SQUARE_KEYS = ["batch", "heads", "headsKv", "seqLen", "dim"];
const PACKED_KEYS = ["batch", "heads", "headsKv", "dim"];
const MASK_KEYS = ["isCausal", "windowSizeLeft", "windowSizeRight"];
const SCORE_KEYS = ["scale", "softcap"];
const CHOICE_KEYS = ["tune", "kernelMap"];
const SQUARE_FWD_KEYS = ["layout", ...SQUARE_KEYS, ...SCORE_KEYS, ...MASK_KEYS, ...CHOICE_KEYS];
const DECODE_CALL_KEYS = ["checkIndices", ...CHOICE_KEYS];
const DECODE_MHA_KEYS = ["batch", "heads", "seqlenQ", "seqlenKv", "dim", "isCausal", ...DECODE_CALL_KEYS];
const DECODE_GQA_KEYS = [
  "batch",
  "heads",
  "headsKv",
  "seqlenKv",
  "dim",
  "smScale",
  "softcap",
  ...DECODE_CALL_KEYS,
];

/** The option keys of each attention op class, by class name. */
export const OP_OPTION_KEYS: Readonly<Record<string, OptionSpec>> = Object.fromEntries(
  Object.entries({
    GroupedQueryAttentionFwdOp: SQUARE_FWD_KEYS,
    GroupedQueryAttentionBwdOp: [...SQUARE_FWD_KEYS, "deterministic"],
    // The MHA ops check their users' options without headsKv (mha.ts), then pass headsKv = heads.
    MultiHeadAttentionFwdOp: SQUARE_FWD_KEYS,
    MultiHeadAttentionBwdOp: [...SQUARE_FWD_KEYS, "deterministic"],
    GroupedQueryAttentionDenseFwdOp: [
      "layout",
      ...MASK_KEYS,
      ...SCORE_KEYS,
      "dtype",
      "posEncodingMode",
      "rotaryDim",
      "ropeLayout",
    ],
    GroupedQueryAttentionSlidingWindowFwdOp: ["layout", ...SQUARE_KEYS, ...MASK_KEYS],
    GroupedQueryAttentionSlidingWindowVarlenFwdOp: ["layout", ...PACKED_KEYS, ...MASK_KEYS],
    MultiHeadAttentionDecodeWithKVCacheFwdOp: DECODE_MHA_KEYS,
    MultiHeadAttentionDecodePagedWithKVCacheFwdOp: [...DECODE_MHA_KEYS, "pageSize"],
    GroupedQueryAttentionDecodeWithKVCacheFwdOp: DECODE_GQA_KEYS,
    GroupedQueryAttentionDecodePagedWithKVCacheFwdOp: [...DECODE_GQA_KEYS, "pageSize"],
    MultiHeadLatentAttentionDecodeWithKVCacheFwdOp: ["batch", "heads", "headsKv", "seqlenKv", "dim", "peDim"],
    GroupedQueryAttentionPrefillFwdOp: [
      ...PACKED_KEYS,
      "maxSeqlenQ",
      "maxSeqlenKv",
      "dtype",
      "isCausal",
      "smScale",
      "softcap",
      "windowSizeLeft",
      "windowSizeRight",
      "backend",
      "validateUniformCuSeqlens",
    ],
    GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp: [
      "batch",
      "heads",
      "headsKv",
      "maxPagesPerReq",
      "pageSize",
      "dim",
      "isCausal",
      "cacheDtype",
      "smScale",
      "softcap",
      "fuseRope",
      "ropeBase",
      "maxPosition",
      "rotaryDim",
      "ropeLayout",
    ],
    GroupedQueryAttentionPrefillVarlenFwdOp: [
      "layout",
      ...PACKED_KEYS,
      ...SCORE_KEYS,
      "maxSeqlenQ",
      "maxSeqlenK",
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
  sizes = expectOptions(op, sizes);
  const { heads, headsKv } = checkHeads(op, sizes.heads, sizes.headsKv);
  return Object.freeze({
    batch: expectSize(op, "batch", sizes.batch, 0),
    heads,
    headsKv,
    dim: checkDim(op, sizes.dim),
  });
}

/** The int32 offsets of a packed call, uploaded or narrowed as needed; dispose them after the call. */
export interface PackedOffsets extends Disposable {
  /** Query offsets. */
  readonly q: Int32Seqlens;
  /** Key offsets. */
  readonly k: Int32Seqlens;
}

/**
 * Checks q, k, v and the offsets of a packed call against a packed op's sizes, and returns the offsets
 * as int32 tensors on q's device (host arrays and int64 tensors accepted).
 */
export function expectPackedCall(
  op: string,
  sizes: PackedSizes,
  tensors: { q: unknown; k: unknown; v: unknown; cuSeqlensQ: unknown; cuSeqlensK: unknown },
): PackedOffsets {
  const { batch, heads, headsKv, dim } = sizes;
  try {
    expectShape(op, "q", expectTensor(op, "q", tensors.q), [null, heads, dim]);
    const k = expectShape(op, "k", expectTensor(op, "k", tensors.k), ["Tkv", headsKv, dim]);
    expectShape(op, "v", expectTensor(op, "v", tensors.v), ["Tkv", headsKv, dim], k);
  } catch (e) {
    if (!(e instanceof Error) || !/expected shape/.test(e.message)) throw e;
    throw invalidArgument(op, `${e.message.slice(op.length + 2)} (layout "thd" reads ${LAYOUTS.thd})`);
  }
  const device = (tensors.q as Tensor).device;
  const cuQ = int32Seqlens(op, "cuSeqlensQ", tensors.cuSeqlensQ, device);
  let cuK: Int32Seqlens | undefined;
  try {
    cuK = int32Seqlens(op, "cuSeqlensK", tensors.cuSeqlensK, device);
    for (const [name, cu] of [["cuSeqlensQ", cuQ], ["cuSeqlensK", cuK]] as const) {
      expectShape(op, name, cu.tensor, [batch + 1]);
    }
  } catch (e) {
    cuQ[Symbol.dispose]();
    cuK?.[Symbol.dispose]();
    throw e;
  }
  const k = cuK;
  return {
    q: cuQ,
    k,
    [Symbol.dispose]() {
      cuQ[Symbol.dispose]();
      k[Symbol.dispose]();
    },
  };
}

/** Checks that no sequence of `cu` is longer than `max` (reads device offsets to the host). */
export function expectMaxSeqlen(
  op: string,
  name: string,
  cu: Int32Seqlens,
  maxName: string,
  max: number,
): void {
  const lengths = sequenceLengths(seqlensOffsets(cu));
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

/** An op's kernel choice, checked once; spread into each call's {@link ChoiceRequest}. */
export type KernelSettings = Pick<ChoiceRequest, "tune" | "kernelMap" | "keys">;

/**
 * Checks an op's `tune` (with `checkBoolean`: an op family checks it as it checks its other booleans) and
 * its `kernelMap` over the op's tuning key `key`.
 */
export function kernelSettings(
  op: string,
  options: KernelOptions,
  key: string,
  checkBoolean: typeof expectBoolean = expectBoolean,
): KernelSettings {
  return {
    tune: checkBoolean(op, "tune", options.tune, false),
    kernelMap: checkKernelMap(op, options.kernelMap, [key]),
    keys: [key],
  };
}

/**
 * Runs `call`, the user's call of `op`, on the kernel that `kernels` choose for q's dtype and
 * `shapeClass`; `candidate` (one call without the user's buffers) is what a tuning pass times and compares.
 */
export function withKernels<T>(
  op: string,
  kernels: KernelSettings,
  q: Tensor,
  shapeClass: string,
  candidate: TuneRun,
  call: () => T,
): T {
  return withChoice({
    op,
    device: q?.device ?? "cpu", // a bad q is refused by the call itself
    ...kernels,
    shapeClass,
    relRms: q?.dtype === "bfloat16" ? 1e-2 : 2e-3,
    run: candidate,
  }, call);
}
