/**
 * The keys and values a decode step reads from a KV cache: contiguous (`[B, Skv, Hkv, D]`, sequence b
 * holding `realSeqlenKv[b]` valid rows) or paged (`[rows, Hkv, D]` in pages of `pageSize` rows, with a
 * `blockTable` `[B, maxPages]` naming each sequence's pages in order). The checks of a call, and the
 * general evaluation: each sequence's valid rows gathered into packed keys, then the packed forward
 * (bottom-right causal alignment per sequence, GQA, softcap) over one query block per sequence.
 *
 * @module
 */
import { invalidArgument, Status } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { AttentionFlags } from "../../ffi/symbols_attention.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import { LAYOUTS } from "../layout.ts";
import { Tensor } from "../tensor.ts";
import { selectRows } from "../tensor_math/indexing.ts";
import type { ResolvedMask, ResolvedScore } from "./options.ts";
import { runForward } from "./run.ts";

/** Where a decode call's keys live. */
export type CacheKind =
  | { readonly kind: "contiguous"; readonly seqlenKv: number }
  | { readonly kind: "paged"; readonly rows: number; readonly pageSize: number };

/** Sizes fixed by a decode op's constructor. */
export interface DecodeSizes {
  /** Sequences. */
  readonly batch: number;
  /** Query heads. */
  readonly heads: number;
  /** Key/value heads. */
  readonly headsKv: number;
  /** Query tokens per sequence (1 for the GQA decode ops, whose q is `[B, H, D]`). */
  readonly seqlenQ: number;
  /** Head dimension. */
  readonly dim: number;
}

/** One decode call, as an op hands it over. */
export interface DecodeCall {
  readonly op: string;
  readonly sizes: DecodeSizes;
  readonly cache: CacheKind;
  /** `[B, Sq, H, D]`, or `[B, H, D]` when `rankThree` (one query token per sequence). */
  readonly q: unknown;
  readonly rankThree: boolean;
  readonly k: unknown;
  readonly v: unknown;
  /** int32 `[B]` on q's device; undefined: every sequence holds the whole contiguous cache. */
  readonly realSeqlenKv: unknown;
  /** int32 `[B, maxPages]` on q's device (paged caches only). */
  readonly blockTable?: unknown;
  readonly mask: ResolvedMask;
  readonly score: ResolvedScore;
  /** Whether the lengths and the pages in use are read back and checked (else the kernel clamps them). */
  readonly checkIndices: boolean;
}

/** Checks an int32 tensor argument of a given shape on q's device. */
function int32Argument(
  op: string,
  name: string,
  value: unknown,
  shape: readonly number[],
  q: Tensor,
): Tensor {
  const t = expectTensor(op, name, value);
  expectDType(op, name, t, ["int32"]);
  expectShape(op, name, t, shape);
  expectSameDevice(op, name, t, q, "q");
  return t;
}

/** Reads an int32 tensor argument of a given shape on q's device to the host. */
export function hostInt32(
  op: string,
  name: string,
  value: unknown,
  shape: readonly number[],
  q: Tensor,
): Int32Array {
  return int32Argument(op, name, value, shape, q).toArray() as Int32Array;
}

/** A call's `realSeqlenKv` (when given) and `blockTable` (paged caches), checked as tensors, not read. */
interface IndexTensors {
  readonly lengths?: Tensor;
  readonly table?: Tensor;
}

function checkIndexTensors(call: DecodeCall, q: Tensor): IndexTensors {
  const { op, sizes, cache } = call;
  let table: Tensor | undefined;
  if (cache.kind === "paged") {
    const t = expectTensor(op, "blockTable", call.blockTable);
    if (t.ndim !== 2 || t.shape[0] !== sizes.batch) {
      throw invalidArgument(
        op,
        `blockTable: expected [batch = ${sizes.batch}, maxPages], got [${t.shape.join(", ")}]`,
      );
    }
    table = int32Argument(op, "blockTable", t, t.shape, q);
  }
  const lengths = call.realSeqlenKv === undefined
    ? undefined
    : int32Argument(op, "realSeqlenKv", call.realSeqlenKv, [sizes.batch], q);
  return { lengths, table };
}

/** A call's packed key offsets and page table, read back, every length and every page in use checked. */
interface CheckedCache {
  readonly offsets: Int32Array;
  readonly table?: PageTable;
}

function checkCache(call: DecodeCall, given: IndexTensors): CheckedCache {
  const { op, sizes, cache } = call;
  const B = sizes.batch;
  let table: PageTable | undefined;
  if (cache.kind === "paged") {
    const t = given.table!;
    table = {
      table: t.toArray() as Int32Array,
      maxPages: t.shape[1],
      pageSize: cache.pageSize,
      rows: cache.rows,
    };
  }
  const limit = cache.kind === "contiguous" ? cache.seqlenKv : table!.maxPages * cache.pageSize;
  // Without lengths (contiguous caches only: the paged ops require them) every row is a key.
  const lengths = given.lengths === undefined
    ? new Int32Array(B).fill(limit)
    : given.lengths.toArray() as Int32Array;
  const offsets = new Int32Array(B + 1);
  for (let b = 0; b < B; b++) {
    const len = lengths[b];
    if (!(len >= 0 && len <= limit)) {
      const room = cache.kind === "contiguous"
        ? `the cache's ${limit} rows`
        : `${table!.maxPages} pages of ${cache.pageSize} (blockTable's width)`;
      throw invalidArgument(op, `realSeqlenKv: entry ${b} is ${len}, expected 0 to ${limit} (${room})`);
    }
    if (table) pagedRows(op, table, b, len);
    offsets[b + 1] = offsets[b] + len;
  }
  if (offsets[B] > 2 ** 31 - 1) throw invalidArgument(op, "realSeqlenKv: more than 2^31 - 1 keys in all");
  return { offsets, table };
}

/** The cache rows each sequence reads, in order (the gather's index). */
function cacheRows(call: DecodeCall, c: CheckedCache): Int32Array {
  const { op, cache } = call;
  const rows = new Int32Array(c.offsets[c.offsets.length - 1]);
  for (let b = 0; b + 1 < c.offsets.length; b++) {
    const len = c.offsets[b + 1] - c.offsets[b];
    if (c.table) {
      pagedRows(op, c.table, b, len, rows, c.offsets[b]);
    } else if (cache.kind === "contiguous") {
      for (let j = 0; j < len; j++) rows[c.offsets[b] + j] = b * cache.seqlenKv + j;
    }
  }
  return rows;
}

/** A paged cache as the host sees it: the block table read back, and the cache's physical rows. */
export interface PageTable {
  readonly table: Int32Array;
  readonly maxPages: number;
  readonly pageSize: number;
  readonly rows: number;
}

/**
 * Checks every page sequence b's first `len` logical rows name (a page past the cache is refused, naming
 * the block-table entry) and, given `out`, writes their physical rows into it from `at`.
 */
export function pagedRows(
  op: string,
  t: PageTable,
  b: number,
  len: number,
  out?: Int32Array,
  at = 0,
): void {
  const pages = t.rows / t.pageSize;
  for (let p = 0; p * t.pageSize < len; p++) {
    const page = t.table[b * t.maxPages + p];
    if (!(page >= 0 && page < pages)) {
      throw invalidArgument(
        op,
        `blockTable: entry [${b}, ${p}] is ${page}, expected a page in 0 .. ${pages - 1} (sequence ${b} ` +
          `holds ${len} keys, so its first ${Math.ceil(len / t.pageSize)} entries name pages)`,
      );
    }
    if (!out) continue;
    const end = Math.min(t.pageSize, len - p * t.pageSize);
    for (let j = 0; j < end; j++) out[at + p * t.pageSize + j] = page * t.pageSize + j;
  }
}

/** Checks q, k, v against the op's sizes and returns q. */
function checkTensors(call: DecodeCall): Tensor {
  const { op, sizes, cache } = call;
  const { batch, heads, headsKv, seqlenQ, dim } = sizes;
  const kvShape = cache.kind === "contiguous"
    ? [batch, cache.seqlenKv, headsKv, dim]
    : [cache.rows, headsKv, dim];
  const what = cache.kind === "contiguous" ? LAYOUTS.bshd : "[rows, heads, dim]: the physical cache";
  try {
    const q = expectTensor(op, "q", call.q);
    expectShape(op, "q", q, call.rankThree ? [batch, heads, dim] : [batch, seqlenQ, heads, dim]);
    expectDType(op, "q", q, ["float16", "bfloat16"]);
    for (const name of ["k", "v"] as const) {
      const t = expectTensor(op, name, call[name]);
      expectShape(op, name, t, kvShape);
      if (t.dtype !== q.dtype) {
        throw invalidArgument(op, `${name}: expected ${q.dtype} like q, got ${t.dtype}`);
      }
      expectSameDevice(op, name, t, q, "q");
    }
    return q;
  } catch (e) {
    if (!(e instanceof Error) || !/expected shape/.test(e.message)) throw e;
    throw invalidArgument(op, `${e.message.slice(op.length + 2)} (k and v read ${what})`);
  }
}

/**
 * The split-key decode kernel's run of a checked call (keys read in place through the lengths and the
 * block table), or undefined where it does not serve the call (its head dims, its rows per KV head, a
 * window): the caller then takes the gather and the packed forward.
 */
function splitDecode(call: DecodeCall, q: Tensor, k: Tensor, v: Tensor): Tensor | undefined {
  const { op, sizes, cache, mask, score } = call;
  if (mask.windowLeft !== -1 || (mask.windowRight !== -1 && !mask.causal)) return undefined;
  const { batch: B, heads: H, seqlenQ: Sq, dim: D } = sizes;
  using qView = q.reshape([B, Sq, H, D]);
  using fill = call.realSeqlenKv === undefined && cache.kind === "contiguous"
    ? Tensor.full([B], cache.seqlenKv, { dtype: "int32", device: q.device })
    : undefined;
  const lengths = (fill ?? call.realSeqlenKv) as Tensor;
  const output = Tensor.empty([B, Sq, H, D], { dtype: q.dtype, device: q.device });
  const status = native().ak_attention_decode(
    qView.descriptor(op),
    k.descriptor(op),
    v.descriptor(op),
    lengths.descriptor(op),
    cache.kind === "paged" ? (call.blockTable as Tensor).descriptor(op) : null,
    BigInt(cache.kind === "paged" ? cache.pageSize : 0),
    score.scale ?? D ** -0.5,
    score.softcap,
    mask.causal ? AttentionFlags.CAUSAL : 0,
    output.descriptor(op),
  );
  if (status === Status.UNSUPPORTED) {
    output.dispose();
    return undefined;
  }
  try {
    unwrap(status, op);
  } catch (e) {
    output.dispose();
    throw e;
  }
  if (!call.rankThree) return output;
  try {
    return output.reshape([B, H, D]);
  } finally {
    output.dispose();
  }
}

/**
 * Runs a decode call: the output shaped like q. With `checkIndices`, reads `realSeqlenKv` and `blockTable`
 * to the host (so the call cannot be captured in a graph) and checks every length and every page a
 * sequence uses; then the split-key decode kernel reads the keys in place, or, for calls it does not
 * serve, the keys and values of each sequence are gathered (the index always read back) and the packed
 * forward runs on them.
 */
export function runDecode(call: DecodeCall): Tensor {
  const { op, sizes } = call;
  const q = checkTensors(call);
  const k = call.k as Tensor, v = call.v as Tensor;
  const given = checkIndexTensors(call, q);
  const checked = call.checkIndices ? checkCache(call, given) : undefined;
  const split = splitDecode(call, q, k, v);
  if (split) return split;
  const c = checked ?? checkCache(call, given);
  const rows = cacheRows(call, c), offsets = c.offsets;
  const { batch: B, heads: H, headsKv: Hkv, seqlenQ: Sq, dim: D } = sizes;
  using index = Tensor.from(rows, { device: q.device });
  const flat = (t: Tensor) =>
    t.reshape([t.shape.length === 4 ? t.shape[0] * t.shape[1] : t.shape[0], Hkv, D]);
  using kRows = flat(k), vRows = flat(v);
  using kPacked = selectRows(op, kRows, index), vPacked = selectRows(op, vRows, index);
  using qPacked = q.reshape([B * Sq, H, D]);
  const qOffsets = Int32Array.from({ length: B + 1 }, (_, b) => b * Sq);
  using cuQ = Tensor.from(qOffsets, { device: q.device });
  using cuK = Tensor.from(offsets, { device: q.device });
  using output = runForward({
    op,
    query: { kind: "packed", q: qPacked, cuSeqlens: cuQ, offsets: qOffsets },
    kv: { kind: "packed", k: kPacked, v: vPacked, cuSeqlens: cuK, offsets },
    mask: call.mask,
    score: call.score,
  }, false).output;
  return output.reshape(call.rankThree ? [B, H, D] : [B, Sq, H, D]);
}
