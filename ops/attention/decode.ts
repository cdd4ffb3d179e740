/**
 * Decode over a KV cache: each sequence's new query tokens against the keys it has cached, held
 * contiguously (`[B, Skv, Hkv, D]`) or in pages (`[rows, Hkv, D]` with a block table), with
 * `realSeqlenKv` valid keys per sequence. MHA forms take `seqlenQ` query tokens per sequence
 * (`[B, Sq, H, D]`, causal optional, the last query at the last key); GQA forms take one (`[B, H, D]`)
 * with `smScale` and `softcap`.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { booleanOption } from "../args.ts";
import type { Tensor } from "../tensor.ts";
import { type CacheKind, type DecodeSizes, runDecode } from "./kv_cache.ts";
import type { KernelOptions } from "./gqa.ts";
import {
  checkDim,
  checkHeads,
  expectOptions,
  type KernelSettings,
  kernelSettings,
  withKernels,
} from "./op_support.ts";
import { expectSize, type ResolvedMask, type ResolvedScore, resolveMask, resolveScore } from "./options.ts";

/** How a decode op's calls run: index checks and kernel choice (every decode op takes these). */
export interface DecodeCallOptions extends KernelOptions {
  /**
   * Whether each call reads `realSeqlenKv` and `blockTable` back and checks every length and every page in
   * use, refusing bad ones (default true). False keeps the call on the device, with no host round trip (so
   * it can be captured in a CUDA graph): the kernel then reads a length outside 0 .. capacity as clamped
   * to it and a page outside the cache as masked keys.
   */
  checkIndices?: boolean;
}

/** Sizes of the MHA decode ops: q `[batch, seqlenQ, heads, dim]`, `seqlenKv` rows of cache. */
export interface MultiHeadAttentionDecodeOptions extends DecodeCallOptions {
  /** Sequences. */
  batch: number;
  /** Heads of q, k and v. */
  heads: number;
  /** Query tokens per sequence. */
  seqlenQ: number;
  /** Cache rows: per sequence (contiguous), or in all (paged: `pages * pageSize`). */
  seqlenKv: number;
  /** Head dimension: a multiple of 8, at most 256. */
  dim: number;
  /** Query i of a sequence with L keys sees keys `j <= L - seqlenQ + i` (default false: all L). */
  isCausal?: boolean;
}

/** Sizes and score options of the GQA decode ops: q `[batch, heads, dim]`, `seqlenKv` rows of cache. */
export interface GroupedQueryAttentionDecodeOptions extends DecodeCallOptions {
  /** Sequences. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Key/value heads (a divisor of heads). */
  headsKv: number;
  /** Cache rows: per sequence (contiguous), or in all (paged: `pages * pageSize`). */
  seqlenKv: number;
  /** Head dimension: a multiple of 8, at most 256. */
  dim: number;
  /** Score scale; default `1 / sqrt(dim)`. */
  smScale?: number;
  /** Cap c > 0 applied as `c * tanh(z / c)`; 0 or undefined for none. */
  softcap?: number;
}

/** The page size of the paged decode ops. */
export interface PagedOptions {
  /** Rows per page; `seqlenKv` must be a whole number of pages. */
  pageSize: number;
}

/** Options of {@link MultiHeadAttentionDecodeWithKVCacheFwdOp}. */
export type MultiHeadAttentionDecodeWithKVCacheFwdOptions = MultiHeadAttentionDecodeOptions;
/** Options of {@link MultiHeadAttentionDecodePagedWithKVCacheFwdOp}. */
export type MultiHeadAttentionDecodePagedWithKVCacheFwdOptions =
  & MultiHeadAttentionDecodeOptions
  & PagedOptions;
/** Options of {@link GroupedQueryAttentionDecodeWithKVCacheFwdOp}. */
export type GroupedQueryAttentionDecodeWithKVCacheFwdOptions = GroupedQueryAttentionDecodeOptions;
/** Options of {@link GroupedQueryAttentionDecodePagedWithKVCacheFwdOp}. */
export type GroupedQueryAttentionDecodePagedWithKVCacheFwdOptions =
  & GroupedQueryAttentionDecodeOptions
  & PagedOptions;

interface Resolved {
  sizes: DecodeSizes;
  seqlenKv: number;
  mask: ResolvedMask;
  score: ResolvedScore;
  call: CallOptions;
}

/** How every call of a decode op runs: its index checks and its kernel choice. */
interface CallOptions {
  checkIndices: boolean;
  kernels: KernelSettings;
}

function callOptions(op: string, o: DecodeCallOptions): CallOptions {
  return {
    checkIndices: booleanOption(op, "options.checkIndices", o.checkIndices, true),
    kernels: kernelSettings(op, o, "attention.decode"),
  };
}

function resolveMha(op: string, o: MultiHeadAttentionDecodeOptions): Resolved {
  o = expectOptions(op, o);
  const heads = expectSize(op, "heads", o.heads);
  return {
    sizes: Object.freeze({
      batch: expectSize(op, "batch", o.batch),
      heads,
      headsKv: heads,
      seqlenQ: expectSize(op, "seqlenQ", o.seqlenQ),
      dim: checkDim(op, o.dim),
    }),
    seqlenKv: expectSize(op, "seqlenKv", o.seqlenKv),
    mask: resolveMask(op, { isCausal: o.isCausal }),
    score: resolveScore(op, {}),
    call: callOptions(op, o),
  };
}

function resolveGqa(op: string, o: GroupedQueryAttentionDecodeOptions): Resolved {
  o = expectOptions(op, o);
  const { heads, headsKv } = checkHeads(op, o.heads, o.headsKv);
  const score = resolveScore(op, { scale: o.smScale, softcap: o.softcap }, "smScale");
  return {
    sizes: Object.freeze({
      batch: expectSize(op, "batch", o.batch),
      heads,
      headsKv,
      seqlenQ: 1,
      dim: checkDim(op, o.dim),
    }),
    seqlenKv: expectSize(op, "seqlenKv", o.seqlenKv),
    mask: resolveMask(op, {}),
    score,
    call: callOptions(op, o),
  };
}

function pagedCache(op: string, seqlenKv: number, pageSize: unknown): Extract<CacheKind, { kind: "paged" }> {
  const size = expectSize(op, "pageSize", pageSize);
  if (seqlenKv % size !== 0) {
    throw invalidArgument(op, `seqlenKv: ${seqlenKv} cache rows are not a whole number of pages of ${size}`);
  }
  return Object.freeze({ kind: "paged", rows: seqlenKv, pageSize: size });
}

/** What an op holds: its sizes, cache, mask and score; `rankThree` for the GQA ops' `[B, H, D]` q. */
interface Held extends CallOptions {
  sizes: DecodeSizes;
  cache: CacheKind;
  rankThree: boolean;
  mask: ResolvedMask;
  score: ResolvedScore;
}

/** What every call of an op over `cache` needs of its resolved options (all four ops hold one). */
function held(r: Resolved, cache: CacheKind, rankThree: boolean): Held {
  return { sizes: r.sizes, cache, rankThree, mask: r.mask, score: r.score, ...r.call };
}

/** One decode call of an op; a paged cache needs the lengths and the block table. */
function decode(
  op: string,
  held: Held,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  realSeqlenKv?: Tensor,
  blockTable?: Tensor,
) {
  if (held.cache.kind === "paged" && realSeqlenKv === undefined) {
    throw invalidArgument(op, "realSeqlenKv: required for a paged cache");
  }
  const run = () => runDecode({ op, ...held, q, k, v, realSeqlenKv, blockTable });
  const { sizes, cache, mask, score, checkIndices: checked } = held;
  const shapeClass = JSON.stringify({ dtype: q?.dtype, ...sizes, cache, mask, score, checked });
  const candidate = () => {
    const o = run();
    return { tensors: [o], [Symbol.dispose]: () => o.dispose() };
  };
  return withKernels(op, held.kernels, q, shapeClass, candidate, run);
}

/**
 * MHA decode over a contiguous KV cache: q `[batch, seqlenQ, heads, dim]` against k and v
 * `[batch, seqlenKv, heads, dim]` (float16 or bfloat16), sequence b reading its first
 * `realSeqlenKv[b]` rows (int32 `[batch]` on q's device; all `seqlenKv` when omitted). A sequence with
 * no keys gives zeros. Returns the output shaped like q.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionDecodeWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new MultiHeadAttentionDecodeWithKVCacheFwdOp({
 *   batch: 2, heads: 4, seqlenQ: 1, seqlenKv: 128, dim: 64,
 * });
 * using q = Tensor.randn([2, 1, 4, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([2, 128, 4, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([2, 128, 4, 64], { dtype: "bfloat16", seed: 3 });
 * using lengths = Tensor.from([100, 7], { dtype: "int32" });
 * using o = op.forward(q, k, v, lengths);
 * ```
 */
export class MultiHeadAttentionDecodeWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<DecodeSizes>;
  /** Rows of cache per sequence. */
  readonly seqlenKv: number;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #held: Held;

  /** Checks the sizes once. */
  constructor(options: MultiHeadAttentionDecodeWithKVCacheFwdOptions) {
    const r = resolveMha("MultiHeadAttentionDecodeWithKVCacheFwdOp", options);
    this.sizes = r.sizes;
    this.seqlenKv = r.seqlenKv;
    this.mask = r.mask;
    this.#held = held(r, { kind: "contiguous", seqlenKv: r.seqlenKv }, false);
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, k: Tensor, v: Tensor, realSeqlenKv?: Tensor): Tensor {
    return decode("MultiHeadAttentionDecodeWithKVCacheFwdOp", this.#held, q, k, v, realSeqlenKv);
  }
}

/**
 * MHA decode over a paged KV cache: q `[batch, seqlenQ, heads, dim]` against the physical caches k and
 * v `[seqlenKv, heads, dim]`, read as `seqlenKv / pageSize` pages. Sequence b holds `realSeqlenKv[b]`
 * keys (int32 `[batch]`), its key j in row `blockTable[b][j / pageSize] * pageSize + j % pageSize`
 * (`blockTable` int32 `[batch, maxPages]`; entries past a sequence's last page are not read). Every
 * length and every page in use is checked. Returns the output shaped like q.
 *
 * @example
 * ```ts
 * import { MultiHeadAttentionDecodePagedWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new MultiHeadAttentionDecodePagedWithKVCacheFwdOp({
 *   batch: 2, heads: 4, seqlenQ: 1, seqlenKv: 256, dim: 64, pageSize: 64,
 * });
 * using q = Tensor.randn([2, 1, 4, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([256, 4, 64], { dtype: "bfloat16", seed: 2 }); // 4 pages of 64
 * using v = Tensor.randn([256, 4, 64], { dtype: "bfloat16", seed: 3 });
 * using lengths = Tensor.from([100, 7], { dtype: "int32" });
 * using table = Tensor.from([[3, 0], [1, -1]], { dtype: "int32" });
 * using o = op.forward(q, k, v, lengths, table);
 * ```
 */
export class MultiHeadAttentionDecodePagedWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<DecodeSizes>;
  /** The physical cache. */
  readonly cache: Extract<CacheKind, { kind: "paged" }>;
  /** The mask. */
  readonly mask: ResolvedMask;
  readonly #held: Held;

  /** Checks the sizes and the page size once. */
  constructor(options: MultiHeadAttentionDecodePagedWithKVCacheFwdOptions) {
    const op = "MultiHeadAttentionDecodePagedWithKVCacheFwdOp";
    const r = resolveMha(op, options);
    this.sizes = r.sizes;
    this.cache = pagedCache(op, r.seqlenKv, options.pageSize);
    this.mask = r.mask;
    this.#held = held(r, this.cache, false);
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, k: Tensor, v: Tensor, realSeqlenKv: Tensor, blockTable: Tensor): Tensor {
    const op = "MultiHeadAttentionDecodePagedWithKVCacheFwdOp";
    return decode(op, this.#held, q, k, v, realSeqlenKv, blockTable);
  }
}

/**
 * GQA decode over a contiguous KV cache: q `[batch, heads, dim]` (one new token per sequence) against k
 * and v `[batch, seqlenKv, headsKv, dim]` (float16 or bfloat16), sequence b reading its first
 * `realSeqlenKv[b]` rows (all when omitted), with `smScale` and `softcap`. Returns `[batch, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDecodeWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({
 *   batch: 2, heads: 8, headsKv: 2, seqlenKv: 128, dim: 64, softcap: 30,
 * });
 * using q = Tensor.randn([2, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 3 });
 * using o = op.forward(q, k, v);
 * ```
 */
export class GroupedQueryAttentionDecodeWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<DecodeSizes>;
  /** Rows of cache per sequence. */
  readonly seqlenKv: number;
  /** Scale (undefined: 1 / sqrt(dim)) and softcap. */
  readonly score: ResolvedScore;
  readonly #held: Held;

  /** Checks the sizes and score options once. */
  constructor(options: GroupedQueryAttentionDecodeWithKVCacheFwdOptions) {
    const r = resolveGqa("GroupedQueryAttentionDecodeWithKVCacheFwdOp", options);
    this.sizes = r.sizes;
    this.seqlenKv = r.seqlenKv;
    this.score = r.score;
    this.#held = held(r, { kind: "contiguous", seqlenKv: r.seqlenKv }, true);
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, k: Tensor, v: Tensor, realSeqlenKv?: Tensor): Tensor {
    return decode("GroupedQueryAttentionDecodeWithKVCacheFwdOp", this.#held, q, k, v, realSeqlenKv);
  }
}

/**
 * GQA decode over a paged KV cache: q `[batch, heads, dim]` against the physical caches k and v
 * `[seqlenKv, headsKv, dim]` in pages of `pageSize` rows, `realSeqlenKv` (int32 `[batch]`) keys per
 * sequence, found through `blockTable` (int32 `[batch, maxPages]`), with `smScale` and `softcap`.
 * Returns `[batch, heads, dim]`.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionDecodePagedWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({
 *   batch: 2, heads: 8, headsKv: 2, seqlenKv: 256, dim: 64, pageSize: 64,
 * });
 * using q = Tensor.randn([2, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([256, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([256, 2, 64], { dtype: "bfloat16", seed: 3 });
 * using lengths = Tensor.from([70, 64], { dtype: "int32" });
 * using table = Tensor.from([[2, 0], [3, -1]], { dtype: "int32" });
 * using o = op.forward(q, k, v, lengths, table);
 * ```
 */
export class GroupedQueryAttentionDecodePagedWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<DecodeSizes>;
  /** The physical cache. */
  readonly cache: Extract<CacheKind, { kind: "paged" }>;
  /** Scale (undefined: 1 / sqrt(dim)) and softcap. */
  readonly score: ResolvedScore;
  readonly #held: Held;

  /** Checks the sizes, the page size and the score options once. */
  constructor(options: GroupedQueryAttentionDecodePagedWithKVCacheFwdOptions) {
    const op = "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp";
    const r = resolveGqa(op, options);
    this.sizes = r.sizes;
    this.cache = pagedCache(op, r.seqlenKv, options.pageSize);
    this.score = r.score;
    this.#held = held(r, this.cache, true);
  }

  /** Runs the decode step; the returned output is the caller's to dispose. */
  forward(q: Tensor, k: Tensor, v: Tensor, realSeqlenKv: Tensor, blockTable: Tensor): Tensor {
    const op = "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp";
    return decode(op, this.#held, q, k, v, realSeqlenKv, blockTable);
  }
}
