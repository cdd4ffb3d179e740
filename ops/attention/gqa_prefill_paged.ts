/**
 * `GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp`: a packed prefill chunk appended to a paged KV cache,
 * then attention of the chunk's queries over each request's cache and chunk. Evaluated as a composition:
 * the optional RoPE on q and the new keys, the new rows written into their pages (rounded to the cache's
 * dtype, FP8 through the per-(request, KV head) scales), each request's rows gathered and the packed forward
 * run over them (bottom-right causal alignment: the chunk sits at the end of its request's keys).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { scatterRows, selectRows } from "../tensor_math/indexing.ts";
import { hostInt32, pagedRows, type PageTable } from "./kv_cache.ts";
import { checkHeads, DTypePin, expectBoolean, expectOptions } from "./op_support.ts";
import { expectSize, type ResolvedMask, type ResolvedScore, resolveScore } from "./options.ts";
import { runForward } from "./run.ts";
import { dequantizeRows, type RopeLayout, rotate, tokenSequences } from "./transforms.ts";

const OP = "GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp";
const CACHE_DTYPES: readonly DType[] = ["float16", "bfloat16", "float8_e4m3"];

/** Options of {@link GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp}. */
export interface GroupedQueryAttentionPrefillPagedWithKVCacheFwdOptions {
  /** Requests in a call. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Key/value heads (a divisor of heads). */
  headsKv: number;
  /** Entries of each request's block table: it holds at most `maxPagesPerReq * pageSize` keys. */
  maxPagesPerReq: number;
  /** Rows per page. */
  pageSize: number;
  /** Head dimension. */
  dim: number;
  /** Each query sees the keys up to its own position (default true). */
  isCausal?: boolean;
  /** The pages' dtype: float16, bfloat16 or float8_e4m3 (default: q's dtype). */
  cacheDtype?: DType | null;
  /** Score scale (default `1 / sqrt(dim)`). */
  smScale?: number | null;
  /** Cap c > 0 applied as `c * tanh(z / c)`; 0, null or undefined for none. */
  softcap?: number | null;
  /** Rotate q and the new keys by RoPE at their positions before anything else (default false). */
  fuseRope?: boolean;
  /** RoPE's base: pair i turns by `position * ropeBase^(-2i / rotaryDim)` (default 10000). */
  ropeBase?: number;
  /** Positions must stay below this (default `maxPagesPerReq * pageSize`). */
  maxPosition?: number | null;
  /** Leading dims rotated, even (default dim). */
  rotaryDim?: number | null;
  /** Which dims pair up: `"neox"` (i with i + rotaryDim / 2, the default) or `"interleaved"`. */
  ropeLayout?: RopeLayout;
}

/** A request's chunk and where its new rows go. */
interface Plan {
  /** Query offsets `[B + 1]` (the chunk of request b is rows `q[o[b] .. o[b + 1])`). */
  readonly qOffsets: Int32Array;
  /** Keys before the chunk, per request. */
  readonly cached: Int32Array;
  /** Key offsets after the append `[B + 1]`, and each packed key's physical row. */
  readonly kOffsets: Int32Array;
  readonly rows: Int32Array;
}

/**
 * Paged prefill with append: q `[totalQ, heads, dim]` (float16 / bfloat16), kNew / vNew
 * `[totalQ, headsKv, dim]` (q's dtype), kPages / vPages `[pages * pageSize, headsKv, dim]` or
 * `[pages, pageSize, headsKv, dim]` in `cacheDtype`, kScale / vScale float32 `[batch, headsKv]` (an FP8
 * cache stores `round(k / kScale)` and reads back `stored * kScale`; 16-bit caches do not use them and
 * take undefined or null too), cuSeqlensQ `[batch + 1]` (the chunk of each request), cacheSeqlens
 * `[batch]` int32 (keys each request held before the chunk), blockTable `[batch, maxPagesPerReq]` int32,
 * maxSeqlenQ (the longest chunk allowed). Token j of request b sits at position `cacheSeqlens[b] + j`:
 * its new key and value are written there (through the block table; the pages are updated in place), and
 * its query attends the request's keys up to that position (all of them when not causal). With
 * `fuseRope`, q and the new keys are rotated at those positions first (rounded to q's dtype). Returns
 * `[totalQ, heads, dim]` in q's dtype. The lengths and the block table are read back and checked: a page
 * past the cache, a request longer than its table, or a page the call writes that another entry also
 * names is refused before anything is written.
 *
 * @example
 * ```ts
 * import { GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp({
 *   batch: 2, heads: 8, headsKv: 2, maxPagesPerReq: 4, pageSize: 16, dim: 64, fuseRope: true,
 * });
 * using kPages = Tensor.zeros([8 * 16, 2, 64], { dtype: "bfloat16" });
 * using vPages = Tensor.zeros([8 * 16, 2, 64], { dtype: "bfloat16" });
 * using q = Tensor.randn([24, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using kNew = Tensor.randn([24, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using vNew = Tensor.randn([24, 2, 64], { dtype: "bfloat16", seed: 3 });
 * using cached = Tensor.from(new Int32Array([0, 20]));
 * using table = Tensor.from(new Int32Array([0, 1, 2, 3, 4, 5, 6, 7]), { shape: [2, 4] });
 * // Request 0: a fresh 8-token prompt; request 1: 16 more tokens after 20 cached ones.
 * using o = op.forward(q, kNew, vNew, kPages, vPages, null, null, [0, 8, 24], cached, table, 16);
 * ```
 */
export class GroupedQueryAttentionPrefillPagedWithKVCacheFwdOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<{
    batch: number;
    heads: number;
    headsKv: number;
    maxPagesPerReq: number;
    pageSize: number;
    dim: number;
  }>;
  /** The mask (causal or none). */
  readonly mask: ResolvedMask;
  /** Scale (undefined: 1 / sqrt(dim)) and softcap. */
  readonly score: ResolvedScore;
  /** The pages' dtype, when fixed by the options (else q's). */
  readonly cacheDtype: DType | undefined;
  /** RoPE, when fused. */
  readonly rope:
    | Readonly<{ base: number; maxPosition: number; rotaryDim: number; layout: RopeLayout }>
    | undefined;
  readonly #pin = new DTypePin();

  /** Checks the sizes and options once. */
  constructor(options: GroupedQueryAttentionPrefillPagedWithKVCacheFwdOptions) {
    const o = expectOptions(OP, options);
    const { heads, headsKv } = checkHeads(OP, o.heads, o.headsKv);
    const dim = expectSize(OP, "dim", o.dim);
    this.sizes = Object.freeze({
      batch: expectSize(OP, "batch", o.batch),
      heads,
      headsKv,
      maxPagesPerReq: expectSize(OP, "maxPagesPerReq", o.maxPagesPerReq),
      pageSize: expectSize(OP, "pageSize", o.pageSize),
      dim,
    });
    const causal = expectBoolean(OP, "isCausal", o.isCausal, true);
    this.mask = Object.freeze({ causal, windowLeft: -1, windowRight: causal ? 0 : -1 });
    this.score = resolveScore(
      OP,
      { scale: o.smScale ?? undefined, softcap: o.softcap ?? undefined },
      "smScale",
    );
    if (o.cacheDtype !== undefined && o.cacheDtype !== null && !CACHE_DTYPES.includes(o.cacheDtype)) {
      throw invalidArgument(
        OP,
        `cacheDtype: expected one of ${CACHE_DTYPES.join(", ")}, got ${String(o.cacheDtype)}`,
      );
    }
    this.cacheDtype = o.cacheDtype ?? undefined;
    const fuse = expectBoolean(OP, "fuseRope", o.fuseRope, false);
    const ropeKeys = ["ropeBase", "maxPosition", "rotaryDim", "ropeLayout"] as const;
    if (!fuse) {
      const stray = ropeKeys.find((k) => o[k] !== undefined && o[k] !== null);
      if (stray) throw invalidArgument(OP, `${stray}: only meaningful with fuseRope: true`);
      this.rope = undefined;
      return;
    }
    const base = o.ropeBase ?? 10000;
    if (typeof base !== "number" || !Number.isFinite(base) || base <= 1) {
      throw invalidArgument(OP, `ropeBase: expected a finite number > 1, got ${String(base)}`);
    }
    const rotaryDim = o.rotaryDim === undefined || o.rotaryDim === null
      ? dim
      : expectSize(OP, "rotaryDim", o.rotaryDim, 2);
    if (rotaryDim % 2 !== 0 || rotaryDim > dim) {
      throw invalidArgument(OP, `rotaryDim: expected an even number up to dim=${dim}, got ${rotaryDim}`);
    }
    const layout = o.ropeLayout ?? "neox";
    if (layout !== "neox" && layout !== "interleaved") {
      throw invalidArgument(OP, `ropeLayout: expected "neox" or "interleaved", got ${String(layout)}`);
    }
    const maxPosition = o.maxPosition === undefined || o.maxPosition === null
      ? this.sizes.maxPagesPerReq * this.sizes.pageSize
      : expectSize(OP, "maxPosition", o.maxPosition);
    this.rope = Object.freeze({ base, maxPosition, rotaryDim, layout });
  }

  /** Appends the chunk and runs the attention; the returned output is the caller's to dispose. */
  forward(
    q: Tensor,
    kNew: Tensor,
    vNew: Tensor,
    kPages: Tensor,
    vPages: Tensor,
    kScale: Tensor | null | undefined,
    vScale: Tensor | null | undefined,
    cuSeqlensQ: Tensor | readonly number[],
    cacheSeqlens: Tensor,
    blockTable: Tensor,
    maxSeqlenQ: number,
  ): Tensor {
    const { batch: B, heads: H, headsKv: Hkv, pageSize, dim: D } = this.sizes;
    const query = expectTensor(OP, "q", q);
    expectDType(OP, "q", query, ["float16", "bfloat16"]);
    this.#pin.check(OP, query);
    expectShape(OP, "q", query, [null, H, D]);
    const T = query.shape[0];
    for (const [name, t] of [["kNew", kNew], ["vNew", vNew]] as const) {
      const x = expectTensor(OP, name, t);
      if (x.dtype !== query.dtype) {
        throw invalidArgument(OP, `${name}: expected ${query.dtype} like q, got ${x.dtype}`);
      }
      expectSameDevice(OP, name, x, query, "q");
      expectShape(OP, name, x, [T, Hkv, D]);
    }
    const cacheDtype = this.cacheDtype ?? query.dtype;
    const rowsOf = (name: string, t: unknown) => {
      const x = expectTensor(OP, name, t);
      if (x.dtype !== cacheDtype) {
        throw invalidArgument(OP, `${name}: expected ${cacheDtype} (the cache dtype), got ${x.dtype}`);
      }
      expectSameDevice(OP, name, x, query, "q");
      if (x.ndim === 4) expectShape(OP, name, x, [null, pageSize, Hkv, D]);
      else expectShape(OP, name, x, [null, Hkv, D]);
      const rows = x.ndim === 4 ? x.shape[0] * pageSize : x.shape[0];
      if (rows % pageSize !== 0) {
        throw invalidArgument(OP, `${name}: ${rows} rows are not whole pages of ${pageSize}`);
      }
      return rows;
    };
    const cacheRows = rowsOf("kPages", kPages);
    if (rowsOf("vPages", vPages) !== cacheRows || vPages.ndim !== kPages.ndim) {
      throw invalidArgument(OP, `vPages: expected the shape of kPages [${kPages.shape.join(", ")}]`);
    }
    const fp8 = cacheDtype === "float8_e4m3";
    const scales = [["kScale", kScale], ["vScale", vScale]] as const;
    for (const [name, s] of scales) {
      if (s === undefined || s === null) {
        if (fp8) {
          throw invalidArgument(OP, `${name}: a float8_e4m3 cache needs float32 [batch, headsKv] scales`);
        }
        continue;
      }
      const t = expectTensor(OP, name, s);
      expectDType(OP, name, t, ["float32"]);
      expectShape(OP, name, t, [B, Hkv]);
      expectSameDevice(OP, name, t, query, "q");
    }
    expectSize(OP, "maxSeqlenQ", maxSeqlenQ, 0);
    const plan = this.#plan(query, cuSeqlensQ, cacheSeqlens, blockTable, maxSeqlenQ, cacheRows);
    // Everything checked: from here on the pages change.
    using qIn = this.#rotated(query, plan, query);
    using kIn = this.#rotated(kNew, plan, query);
    // Each new token's page row and request, uploaded together.
    const dest = new Int32Array(2 * T);
    for (let b = 0; b < B; b++) {
      const first = plan.kOffsets[b] + plan.cached[b];
      for (let t = plan.qOffsets[b]; t < plan.qOffsets[b + 1]; t++) {
        dest[t] = plan.rows[first + t - plan.qOffsets[b]];
        dest[T + t] = b;
      }
    }
    using both = Tensor.from(dest, { device: query.device });
    using rowsOut = both.slice(0, 0, T), request = both.slice(0, T, 2 * T);
    if (T > 0) {
      for (const [pages, fresh, scale] of [[kPages, kIn, kScale], [vPages, vNew, vScale]] as const) {
        this.#append(pages, fresh, rowsOut, fp8 ? scale! : undefined, request, cacheDtype);
      }
    }
    using index = Tensor.from(plan.rows, { device: query.device });
    const gather = (pages: Tensor, scale: Tensor | null | undefined) => {
      using flat = pages.reshape([cacheRows, Hkv, D]);
      const packed = selectRows(OP, flat, index);
      if (!fp8 && packed.dtype === query.dtype) return packed; // already q's dtype: no copy
      using _packed = packed;
      if (fp8) return dequantizeRows(OP, packed, scale!, tokenSequences(plan.kOffsets), query.dtype);
      return packed.cast(query.dtype);
    };
    using k = gather(kPages, kScale), v = gather(vPages, vScale);
    using cuQ = Tensor.from(plan.qOffsets, { device: query.device });
    using cuK = Tensor.from(plan.kOffsets, { device: query.device });
    return runForward({
      op: OP,
      query: { kind: "packed", q: qIn, cuSeqlens: cuQ, offsets: plan.qOffsets },
      kv: { kind: "packed", k, v, cuSeqlens: cuK, offsets: plan.kOffsets },
      mask: this.mask,
      score: this.score,
    }, false).output;
  }

  /** Reads the offsets, lengths and block table back and checks them; where every key lives. */
  #plan(
    q: Tensor,
    cuSeqlensQ: unknown,
    cacheSeqlens: unknown,
    blockTable: unknown,
    maxSeqlenQ: number,
    cacheRows: number,
  ): Plan {
    const { batch: B, maxPagesPerReq, pageSize } = this.sizes;
    using cu = int32Seqlens(OP, "cuSeqlensQ", cuSeqlensQ, q.device);
    if (cu.tensor.shape[0] !== B + 1) {
      throw invalidArgument(
        OP,
        `cuSeqlensQ: expected ${B + 1} offsets (batch + 1), got ${cu.tensor.shape[0]}`,
      );
    }
    const qOffsets = Int32Array.from(cu.host ?? (cu.tensor.toArray() as Int32Array));
    if (qOffsets[0] !== 0 || qOffsets[B] !== q.shape[0]) {
      throw invalidArgument(OP, `cuSeqlensQ: expected offsets from 0 to the ${q.shape[0]} rows of q`);
    }
    const cached = hostInt32(OP, "cacheSeqlens", cacheSeqlens, [B], q);
    const table: PageTable = {
      table: hostInt32(OP, "blockTable", blockTable, [B, maxPagesPerReq], q),
      maxPages: maxPagesPerReq,
      pageSize,
      rows: cacheRows,
    };
    const kOffsets = new Int32Array(B + 1);
    for (let b = 0; b < B; b++) {
      const len = qOffsets[b + 1] - qOffsets[b];
      if (!(len >= 0 && len <= maxSeqlenQ)) {
        throw invalidArgument(
          OP,
          `cuSeqlensQ: request ${b} has ${len} tokens, expected 0 to maxSeqlenQ=${maxSeqlenQ}`,
        );
      }
      const total = cached[b] + len;
      if (!(cached[b] >= 0 && total <= maxPagesPerReq * pageSize)) {
        throw invalidArgument(
          OP,
          `cacheSeqlens: request ${b} holds ${cached[b]} keys and appends ${len}, expected 0 <= keys and ` +
            `keys + new <= ${maxPagesPerReq * pageSize} (maxPagesPerReq * pageSize)`,
        );
      }
      if (this.rope && total > this.rope.maxPosition) {
        throw invalidArgument(
          OP,
          `maxPosition: request ${b} reaches position ${
            total - 1
          }, past maxPosition=${this.rope.maxPosition}`,
        );
      }
      kOffsets[b + 1] = kOffsets[b] + total;
    }
    const rows = new Int32Array(kOffsets[B]);
    for (let b = 0; b < B; b++) pagedRows(OP, table, b, kOffsets[b + 1] - kOffsets[b], rows, kOffsets[b]);
    refuseAliasedWrites(table, cached, kOffsets);
    return { qOffsets, cached, kOffsets, rows };
  }

  /** x (`[T, heads, dim]`) with RoPE at each token's position when fused; else x itself (a new handle). */
  #rotated(x: Tensor, plan: Plan, q: Tensor): Tensor {
    const T = x.shape[0];
    if (!this.rope || T === 0) return x.reshape(x.shape);
    const { rotaryDim, base, layout } = this.rope;
    // One table row per token, at its position in its request (one rotation for the whole chunk).
    const positions = new Float64Array(T);
    for (let b = 0; b < this.sizes.batch; b++) {
      for (let t = plan.qOffsets[b]; t < plan.qOffsets[b + 1]; t++) {
        positions[t] = plan.cached[b] + t - plan.qOffsets[b];
      }
    }
    const { cos, sin } = ropeTables(positions, rotaryDim, base, q.device);
    using tc = cos, ts = sin;
    using grouped = x.reshape([1, ...x.shape]);
    using turned = rotate(OP, grouped, tc, ts, 0, rotaryDim, layout);
    return turned.reshape(x.shape);
  }

  /**
   * Writes the chunk's rows (`[T, headsKv, dim]`) at their pages' rows (`dest`, int32 `[T]`), in the cache's
   * dtype: float8 divided by its request's scales (`request[t]`: token t's request), as one scatter.
   */
  #append(
    pages: Tensor,
    fresh: Tensor,
    dest: Tensor,
    scale: Tensor | undefined,
    request: Tensor,
    cacheDtype: DType,
  ) {
    const { headsKv: Hkv, dim: D } = this.sizes;
    using rows = pages.reshape([pages.numel / (Hkv * D), Hkv, D]);
    if (!scale && fresh.dtype === cacheDtype) return scatterRows(OP, rows, fresh, dest); // no copy
    using stored = scale ? quantize(fresh, scale, request) : fresh.cast(cacheDtype);
    scatterRows(OP, rows, stored, dest);
  }
}

/** x `[T, headsKv, dim]` divided by each token's request's scales (`scale [batch, headsKv]`), as float8_e4m3. */
function quantize(x: Tensor, scale: Tensor, request: Tensor): Tensor {
  using mine = selectRows(OP, scale, request);
  using perHead = mine.reshape([x.shape[0], scale.shape[1], 1]);
  using wide = x.cast("float32");
  using scaled = wide.div(perHead);
  return scaled.cast("float8_e4m3");
}

/** cos / sin `[T, rotaryDim / 2]` at each token's position, computed in float64, stored as float32. */
function ropeTables(positions: Float64Array, rotaryDim: number, base: number, device: string) {
  const half = rotaryDim / 2, T = positions.length;
  const c = new Float32Array(T * half), s = new Float32Array(T * half);
  for (let p = 0; p < T; p++) {
    for (let i = 0; i < half; i++) {
      const angle = positions[p] * base ** (-2 * i / rotaryDim);
      c[p * half + i] = Math.cos(angle), s[p * half + i] = Math.sin(angle);
    }
  }
  const cos = Tensor.from(c, { shape: [T, half], device });
  try {
    return { cos, sin: Tensor.from(s, { shape: [T, half], device }) };
  } catch (e) {
    cos.dispose();
    throw e;
  }
}

/**
 * Refuses a page the call writes (it holds a request's positions from cacheSeqlens on) when another
 * block-table entry of the call also names it: the write would change what that entry reads, or race
 * with its own write.
 */
function refuseAliasedWrites(t: PageTable, cached: Int32Array, kOffsets: Int32Array): void {
  // Per page: how many entries of the call name it, and whether the call writes it.
  const pages = t.rows / t.pageSize;
  const uses = new Int32Array(pages), written = new Uint8Array(pages);
  for (let b = 0; b + 1 < kOffsets.length; b++) {
    const total = kOffsets[b + 1] - kOffsets[b];
    for (let p = 0; p * t.pageSize < total; p++) {
      const page = t.table[b * t.maxPages + p]; // in range: pagedRows checked every entry in use
      uses[page]++;
      if ((p + 1) * t.pageSize > cached[b]) written[page] = 1;
    }
  }
  for (let page = 0; page < pages; page++) {
    if (!written[page] || uses[page] < 2) continue;
    const names: string[] = [];
    for (let b = 0; b + 1 < kOffsets.length; b++) {
      const total = kOffsets[b + 1] - kOffsets[b];
      for (let p = 0; p * t.pageSize < total; p++) {
        if (t.table[b * t.maxPages + p] === page) names.push(`[${b}, ${p}]`);
      }
    }
    throw invalidArgument(
      OP,
      `blockTable: page ${page} is written by this call and named by entries ${names.join(" and ")}`,
    );
  }
}
