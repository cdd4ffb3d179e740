/**
 * The command line's `attention-decode` case: one query token per sequence (q `[B, H, D]`) against a KV
 * cache of SKV rows per sequence, scale D^-0.5, on standard normal inputs, against the float64 attention
 * oracle over that one query, held to FlashAttention's rule as the decode tests hold it: the max abs error
 * at most 2x that of a same-precision reference, plus the rounding allowance and 1e-5 (attention.ts).
 *
 * The cache is contiguous (`GroupedQueryAttentionDecodeWithKVCacheFwdOp`, k, v `[B, SKV, HKV, D]`) or,
 * with `--page-size P`, paged (`GroupedQueryAttentionDecodePagedWithKVCacheFwdOp`: k, v `[B * ceil(SKV /
 * P) * P, HKV, D]` in pages of P rows, each sequence's pages drawn at random from the pool, its block
 * table padded with -1). With `--ragged` each sequence holds its own number of rows, drawn uniform in
 * [1, SKV] (`realSeqlenKv`); otherwise every sequence holds SKV. The oracle sees each sequence's valid
 * rows gathered in order. Forward only; timed in GB/s, the least bytes a step moves: the valid K and V
 * rows read once, q read and o written once (and the lengths and block table when given).
 *
 * Inputs: q seed, the k and v pools seed + 1 and seed + 2, lengths and pages seed + 3.
 *
 * @module
 */
import {
  GroupedQueryAttentionDecodePagedWithKVCacheFwdOp,
  GroupedQueryAttentionDecodeWithKVCacheFwdOp,
  Tensor,
} from "../mod.ts";
import { attentionForward as referenceForward, FLOAT64, samePrecision } from "../reference/attention.ts";
import { attentionProblem, flashRuleRow, type GatheredRows } from "./attention.ts";
import { type CaseSettings, type CheckRow, hostValues, type Mode, type OpCase, uniforms } from "./problem.ts";
import { type OpName, refuseForeignFlag, UsageError } from "./shape.ts";

/** How attention-decode lays out its cache: `pageSize` 0 for contiguous; `ragged` per-sequence lengths. */
export interface CacheFlags {
  /** Rows a page (0: a contiguous cache). */
  pageSize: number;
  /** Each sequence holds its own number of rows, drawn in [1, SKV]. */
  ragged: boolean;
}

/** Reads `--page-size` and `--ragged`; both are refused for an op other than attention-decode. */
export function parseCacheFlags(
  op: OpName,
  pageSize: string | undefined,
  ragged: boolean | undefined,
): CacheFlags {
  if (op !== "attention-decode") {
    refuseForeignFlag(op, "page-size", pageSize, "attention-decode");
    refuseForeignFlag(op, "ragged", ragged, "attention-decode");
    return { pageSize: 0, ragged: false };
  }
  if (pageSize !== undefined && !/^[1-9]\d*$/.test(pageSize)) {
    throw new UsageError(`--page-size: expected rows a page, a positive integer, got "${pageSize}"`);
  }
  return { pageSize: pageSize === undefined ? 0 : Number(pageSize), ragged: ragged ?? false };
}

/** The op class a cache layout runs, as result files name it (with its page size and lengths). */
export function cacheRecordName(flags: CacheFlags): string {
  const fn = flags.pageSize > 0
    ? "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp"
    : "GroupedQueryAttentionDecodeWithKVCacheFwdOp";
  const notes = [
    ...(flags.pageSize > 0 ? [`page ${flags.pageSize}`] : []),
    ...(flags.ragged ? ["ragged"] : []),
  ];
  return notes.length > 0 ? `${fn}(${notes.join(", ")})` : fn;
}

// The op takes no output buffer to poison. A NaN-filled block of the output's size, freed just before the
// call, may come back from the allocator as the op's output (on the CPU only a small block does, and not
// whole), so an element the op leaves unwritten may show as NaN: a best effort, not a guarantee.
function poisonPool(shape: readonly number[], like: Tensor): void {
  using block = Tensor.empty(shape, { dtype: like.dtype, device: like.device });
  block.fill(NaN);
}

/** A random GQA decode step over a contiguous or paged KV cache, full or ragged. */
export function attentionDecodeCase(settings: CaseSettings): OpCase {
  const { shape, dtype, device, seed } = settings;
  const { pageSize, ragged } = settings.cache ?? { pageSize: 0, ragged: false };
  const B = shape.batch, L = shape.seqKv, H = shape.heads, HKV = shape.headsKv, D = shape.dim;
  const pagesEach = pageSize > 0 ? Math.ceil(L / pageSize) : 0;
  const poolRows = pageSize > 0 ? B * pagesEach * pageSize : L;
  const sizes = { batch: B, heads: H, headsKv: HKV, dim: D };
  // Made first: it refuses sizes no kernel serves (D a multiple of 8 up to 256, the page size) before
  // any tensor exists.
  const op = pageSize > 0
    ? new GroupedQueryAttentionDecodePagedWithKVCacheFwdOp({ ...sizes, seqlenKv: poolRows, pageSize })
    : new GroupedQueryAttentionDecodeWithKVCacheFwdOp({ ...sizes, seqlenKv: L });

  const draw = uniforms(seed + 3);
  const lengths = Array.from({ length: B }, () => ragged ? 1 + Math.floor(draw() * L) : L);
  // Sequence b's i-th page: a random permutation of the pool's pages, in slices of pagesEach.
  const pages = Array.from({ length: B * pagesEach }, (_, i) => i);
  for (let i = pages.length - 1; i > 0; i--) {
    const j = Math.floor(draw() * (i + 1));
    [pages[i], pages[j]] = [pages[j], pages[i]];
  }
  // The pool row of sequence b's key i.
  const rowOf = (b: number, i: number) =>
    pageSize > 0 ? pages[b * pagesEach + Math.floor(i / pageSize)] * pageSize + (i % pageSize) : b * L + i;

  const owned: Tensor[] = [];
  const own = (t: Tensor) => (owned.push(t), t);
  const dispose = () => owned.reverse().forEach((t) => t.dispose());
  let q: Tensor, k: Tensor, v: Tensor, lengthsT: Tensor | undefined, table: Tensor | undefined;
  try {
    const cacheShape = pageSize > 0 ? [poolRows, HKV, D] : [B, L, HKV, D];
    q = own(Tensor.randn([B, H, D], { dtype, device, seed }));
    k = own(Tensor.randn(cacheShape, { dtype, device, seed: seed + 1 }));
    v = own(Tensor.randn(cacheShape, { dtype, device, seed: seed + 2 }));
    if (ragged || pageSize > 0) lengthsT = own(Tensor.from(lengths, { dtype: "int32", device }));
    if (pageSize > 0) {
      const rows = lengths.map((len, b) =>
        Array.from({ length: pagesEach }, (_, p) => p * pageSize < len ? pages[b * pagesEach + p] : -1)
      );
      table = own(Tensor.from(rows.flat(), { dtype: "int32", device, shape: [B, pagesEach] }));
    }
  } catch (e) {
    dispose();
    throw e;
  }
  const run = () =>
    op instanceof GroupedQueryAttentionDecodePagedWithKVCacheFwdOp
      ? op.forward(q, k, v, lengthsT!, table!)
      : op.forward(q, k, v, lengthsT);

  // The first `batches` sequences' valid key and value rows, gathered in order, for the oracle.
  const gathered = (batches: number): GatheredRows => {
    const kAll = hostValues(k, k.numel), vAll = hostValues(v, v.numel);
    const kvStart = [0];
    for (let b = 0; b < batches; b++) kvStart.push(kvStart[b] + lengths[b]);
    const width = HKV * D;
    const kRows = new Float64Array(kvStart[batches] * width), vRows = new Float64Array(kRows.length);
    for (let b = 0; b < batches; b++) {
      for (let i = 0; i < lengths[b]; i++) {
        const from = rowOf(b, i) * width, to = (kvStart[b] + i) * width;
        kRows.set(kAll.subarray(from, from + width), to);
        vRows.set(vAll.subarray(from, from + width), to);
      }
    }
    return { k: kRows, v: vRows, kvStart };
  };

  const layout = pageSize > 0
    ? `k, v paged cache [${poolRows}, ${HKV}, ${D}] ${dtype} in pages of ${pageSize} rows (random pages)`
    : `k, v cache [${B}, ${L}, ${HKV}, ${D}] ${dtype}`;
  const validRows = lengths.reduce((a, b) => a + b, 0);
  return {
    description: `q [${B}, ${H}, ${D}] ${dtype}; ${layout}, ` +
      (ragged ? `rows per sequence uniform in [1, ${L}] (${validRows} in all)` : "every row valid") +
      "; scale D^-0.5",
    modes: ["fwd"],

    check(batches, _backward, progress): CheckRow[] {
      poisonPool([B, H, D], q);
      using output = run();
      const rows = gathered(batches);
      const { problem, nextPass } = attentionProblem({ q, k, v }, shape, false, batches, 2, progress, rows);
      const oracle = referenceForward(problem, FLOAT64);
      nextPass();
      const plain = referenceForward(problem, samePrecision(dtype as "bfloat16"));
      const actual = hostValues(output, batches * H * D);
      return [flashRuleRow("output", actual, oracle.output, plain.output, "forward", dtype)];
    },

    call(mode: Mode): () => void {
      if (mode !== "fwd") throw new Error(`attention-decode times fwd only, not ${mode}`);
      return () => run().dispose();
    },

    // The valid K and V rows once, q and o once, the lengths and table once.
    bytes: (mode: Mode) =>
      mode === "fwd"
        ? 2 * validRows * HKV * D * (k.nbytes / k.numel) + 2 * q.nbytes + (lengthsT?.nbytes ?? 0) +
          (table?.nbytes ?? 0)
        : undefined,

    [Symbol.dispose]: dispose,
  };
}
