/**
 * Native sparse attention (NSA) over packed sequences, its three branches as the seed's op classes:
 * `NSACmpFwdVarlenOp` (attention over the compressed keys, with its log-sum-exp), `NSATopkVarlenOp`
 * (the blocks each query selects from the compressed scores) and `NSAFwdVarlenOp` (attention over the
 * selected blocks). Tokens are packed as `[T, heads, dim]` with `offsets` (`[seqNum + 1]`); the compressed
 * keys of sequence n start at row `chunkOffsets[n]`; `tokenIndices` (`[T, 2]`: sequence, position) must
 * agree with the offsets. Query heads come in groups of `group` per key head.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native } from "../../ffi/library.ts";
import { booleanOption, checkOptions } from "../args.ts";
import { Tensor } from "../tensor.ts";
import { expectSize } from "../attention/options.ts";
import type { KernelOptions } from "../attention/gqa.ts";
import { type KernelSettings, kernelSettings } from "../attention/op_support.ts";
import { checkKernelMap, type KernelMap, withChoice, withKernelMap, withPlanner } from "../tune/choice.ts";
import {
  accumDtype,
  checked,
  checkTokenIndices,
  FirstDType,
  input,
  offsetsOn,
  OutputWithLse,
  resultBuffer,
  scaleOption,
  singleRun,
  SPARSE_FLOATS,
  sparseChoice,
  writeResult,
} from "./common.ts";

const CAUSAL = 1, CHECK_INDICES = 2;
/** The most blocks a query may select. */
export const MAX_SELECTED_BLOCKS = 128;

function heads(op: string, heads: unknown, group: unknown, groupName: string): { H: number; Hkv: number } {
  const H = expectSize(op, "heads", heads), G = expectSize(op, groupName, group);
  if (H % G !== 0) throw invalidArgument(op, `${groupName}: expected a divisor of heads=${H}, got ${G}`);
  return { H, Hkv: H / G };
}

/** Options of {@link NSACmpFwdVarlenOp}. */
export interface NSACmpFwdVarlenOptions extends KernelOptions {
  /** Packed sequences (offsets have seqNum + 1 entries). */
  seqNum: number;
  /** Packed tokens T. */
  cSeqLen: number;
  /** Query heads. */
  heads: number;
  /** Head dim of q and the compressed keys. */
  dimK: number;
  /** Head dim of the compressed values (and the output). */
  dimV: number;
  /** Compressed rows of kCmp / vCmp, all sequences together. */
  chunkNum: number;
  /** Query heads per key head. */
  group: number;
  /** Score scale (default `1 / sqrt(dimK)`). */
  scale?: number;
  /** Compression stride: row c of a sequence covers its tokens `[c bc, c bc + bs)` (default bs). */
  bc?: number;
  /** Compression block size. */
  bs: number;
  /** Accumulation dtype: "float32" (the only one). */
  accumDtype?: "float32";
  /** Read the token indices back and check them against the offsets (default true). */
  checkIndices?: boolean;
}

const CMP_KEYS = {
  seqNum: "any",
  cSeqLen: "any",
  heads: "any",
  dimK: "any",
  dimV: "any",
  chunkNum: "any",
  group: "any",
  scale: "any",
  bc: "any",
  bs: "any",
  accumDtype: "any",
  checkIndices: "any",
  tune: "any",
  kernelMap: "any",
} as const;

/**
 * NSA's compressed branch: each query attends the compressed rows of its sequence whose blocks lie wholly
 * in its past (`nc = floor((i + 1 - bs) / bc) + 1` rows at position i, none before `i + 1 = bs`), and
 * returns the output `[T, heads, dimV]` (q's dtype) and the log-sum-exp `[T, heads]` (float32; 0, with a
 * zero output, where nothing is visible yet). float16, bfloat16 or float32.
 *
 * @example
 * ```ts
 * import { NSACmpFwdVarlenOp, nsaTokenIndices, Tensor } from "@attnkit/attnkit";
 * const op = new NSACmpFwdVarlenOp({
 *   seqNum: 1, cSeqLen: 64, heads: 16, dimK: 64, dimV: 64, chunkNum: 4, group: 16, bs: 16,
 * });
 * using q = Tensor.randn([64, 16, 64], { dtype: "bfloat16", seed: 1 });
 * using kCmp = Tensor.randn([4, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using vCmp = Tensor.randn([4, 1, 64], { dtype: "bfloat16", seed: 3 });
 * using tokens = nsaTokenIndices([0, 64]);
 * using r = op.forward(q, kCmp, vCmp, [0, 64], [0, 4], tokens);
 * console.log(r.output.shape, r.lse.shape); // [64, 16, 64] [64, 16]
 * ```
 */
export class NSACmpFwdVarlenOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<{
    seqNum: number;
    cSeqLen: number;
    heads: number;
    headsKv: number;
    dimK: number;
    dimV: number;
    chunkNum: number;
    bs: number;
    bc: number;
    scale: number;
  }>;
  readonly #check: boolean;
  readonly #pin = new FirstDType();
  readonly #kernels: KernelSettings;

  /** Checks the sizes once. */
  constructor(options: NSACmpFwdVarlenOptions) {
    const op = "NSACmpFwdVarlenOp";
    const o = checkOptions<NSACmpFwdVarlenOptions>(op, options, CMP_KEYS);
    const { H, Hkv } = heads(op, o.heads, o.group, "group");
    const dimK = expectSize(op, "dimK", o.dimK), bs = expectSize(op, "bs", o.bs);
    const bc = o.bc === undefined ? bs : expectSize(op, "bc", o.bc);
    if (bc > bs) {
      throw invalidArgument(op, `bc: a stride above bs=${bs} leaves tokens out of every row, got ${bc}`);
    }
    accumDtype(op, o.accumDtype);
    this.sizes = Object.freeze({
      seqNum: expectSize(op, "seqNum", o.seqNum),
      cSeqLen: expectSize(op, "cSeqLen", o.cSeqLen, 0),
      heads: H,
      headsKv: Hkv,
      dimK,
      dimV: expectSize(op, "dimV", o.dimV),
      chunkNum: expectSize(op, "chunkNum", o.chunkNum, 0),
      bs,
      bc,
      scale: scaleOption(op, "scale", o.scale, dimK ** -0.5),
    });
    this.#check = booleanOption(op, "checkIndices", o.checkIndices, true);
    this.#kernels = kernelSettings(op, o, "sparse.nsa.compression", booleanOption);
  }

  /** Runs the branch; the result (output and lse) is the caller's to dispose. */
  forward(
    q: Tensor,
    kCmp: Tensor,
    vCmp: Tensor,
    offsets: Tensor | readonly number[],
    chunkOffsets: Tensor | readonly number[],
    tokenIndices: Tensor,
    out?: { output?: Tensor; lse?: Tensor },
  ): OutputWithLse {
    const op = "NSACmpFwdVarlenOp.forward";
    const s = this.sizes;
    const first = input(op, "q", q, SPARSE_FLOATS, [s.cSeqLen, s.heads, s.dimK]);
    this.#pin.check(op, "q", first);
    const like = { tensor: first, name: "q", sameDType: true };
    const kc = input(op, "kCmp", kCmp, [], [s.chunkNum, s.headsKv, s.dimK], like);
    const vc = input(op, "vCmp", vCmp, [], [s.chunkNum, s.headsKv, s.dimV], like);
    using off = offsetsOn(op, "offsets", offsets, first.device, s.seqNum + 1);
    using chunks = offsetsOn(op, "chunkOffsets", chunkOffsets, first.device, s.seqNum + 1);
    checkTokenIndices(op, tokenIndices, off, s.cSeqLen, this.#check);
    const given = checkOptions<{ output?: Tensor; lse?: Tensor }>(
      op,
      out,
      { output: "any", lse: "any" },
      "out",
    );
    const run = (buffers: { output?: Tensor; lse?: Tensor }) => {
      const o = resultBuffer(
        op,
        "out.output",
        buffers.output,
        [s.cSeqLen, s.heads, s.dimV],
        first.dtype,
        first.device,
      );
      let l;
      try {
        l = resultBuffer(op, "out.lse", buffers.lse, [s.cSeqLen, s.heads], "float32", first.device);
      } catch (e) {
        if (o.owned) o.tensor.dispose();
        throw e;
      }
      const owned = [o, l].filter((b) => b.owned).map((b) => b.tensor);
      const output = o.tensor, lse = l.tensor;
      try {
        checked(
          op,
          {
            k_cmp: "kCmp",
            v_cmp: "vCmp",
            chunk_offsets: "chunkOffsets",
            output: "out.output",
            lse: "out.lse",
          },
          native().ak_nsa_compression_fwd(
            first.descriptor(op),
            kc.descriptor(op),
            vc.descriptor(op),
            off.tensor.descriptor(op),
            chunks.tensor.descriptor(op),
            BigInt(s.bs),
            BigInt(s.bc),
            s.scale,
            output.descriptor(op),
            lse.descriptor(op),
          ),
        );
      } catch (e) {
        for (const t of owned) t.dispose();
        throw e;
      }
      return new OutputWithLse(output, lse, owned);
    };
    return withChoice({
      op: "NSACmpFwdVarlenOp",
      ...this.#kernels,
      ...sparseChoice(first, s),
      run: () => {
        const r = run({});
        return { tensors: [r.output, r.lse], [Symbol.dispose]: () => r[Symbol.dispose]() };
      },
    }, () => run(given));
  }
}

/** Options of {@link NSATopkVarlenOp}. */
export interface NSATopkVarlenOptions {
  /** Packed sequences. */
  seqNum: number;
  /** Packed tokens T. */
  cSeqLen: number;
  /** Query heads. */
  heads: number;
  /** Head dim of q and the compressed keys. */
  dim: number;
  /** Compressed rows of kCmp, all sequences together. */
  chunkNum: number;
  /** Query heads per key head. */
  group: number;
  /** Score scale, the compressed branch's (default `1 / sqrt(dim)`). */
  scale?: number;
  /** Blocks each query selects (at most 128). */
  selectedBlockNum: number;
  /** Compression stride: must equal bs (compressed row c scores selection block c). */
  bc?: number;
  /** Block size of compression and selection. */
  bs: number;
  /** Accumulation dtype: "float32" (the only one). */
  accumDtype?: "float32";
  /** Read the token indices back and check them against the offsets (default true). */
  checkIndices?: boolean;
  /**
   * The kernel for this op's calls, over the tuning table in force: `{ "sparse.nsa.topk": "mma" | "item" }`
   * (tensor cores where they serve, else a thread per item). A setting that cannot serve a call makes the
   * call throw, naming why.
   */
  kernelMap?: KernelMap;
}

const TOPK_KEYS = {
  seqNum: "any",
  cSeqLen: "any",
  heads: "any",
  dim: "any",
  chunkNum: "any",
  group: "any",
  scale: "any",
  selectedBlockNum: "any",
  bc: "any",
  bs: "any",
  accumDtype: "any",
  checkIndices: "any",
  kernelMap: "any",
} as const;

/**
 * NSA's block selection: for the query at position i (current block `b = floor(i / bs)`) and each key
 * head, block `c <= b` scores the group's summed probability of compressed row c,
 * `sum_g exp(scale q_g . kCmp[c] - lseIn_g)`; blocks 0, b - 1 and b are always kept (score `group`).
 * Returns `[T, heads / group, selectedBlockNum]` int32: the highest-scoring blocks in decreasing score
 * (ties: the smaller index first), then -1 where a query has fewer blocks.
 *
 * @example
 * ```ts
 * import { NSACmpFwdVarlenOp, nsaTokenIndices, NSATopkVarlenOp, Tensor } from "@attnkit/attnkit";
 * const sizes = { seqNum: 1, cSeqLen: 64, heads: 16, chunkNum: 4, group: 16, bs: 16 };
 * const cmp = new NSACmpFwdVarlenOp({ ...sizes, dimK: 64, dimV: 64 });
 * const topk = new NSATopkVarlenOp({ ...sizes, dim: 64, selectedBlockNum: 2 });
 * using q = Tensor.randn([64, 16, 64], { dtype: "bfloat16", seed: 1 });
 * using kCmp = Tensor.randn([4, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using tokens = nsaTokenIndices([0, 64]);
 * using r = cmp.forward(q, kCmp, kCmp, [0, 64], [0, 4], tokens);
 * using blocks = topk.forward(q, kCmp, r.lse, [0, 64], [0, 4], tokens); // [64, 1, 2] int32
 * ```
 */
export class NSATopkVarlenOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<{
    seqNum: number;
    cSeqLen: number;
    heads: number;
    headsKv: number;
    dim: number;
    chunkNum: number;
    selectedBlockNum: number;
    bs: number;
    scale: number;
  }>;
  readonly #check: boolean;
  readonly #kernelMap: KernelMap | undefined;
  readonly #pin = new FirstDType();

  /** Checks the sizes once. */
  constructor(options: NSATopkVarlenOptions) {
    const op = "NSATopkVarlenOp";
    const o = checkOptions<NSATopkVarlenOptions>(op, options, TOPK_KEYS);
    const { H, Hkv } = heads(op, o.heads, o.group, "group");
    const dim = expectSize(op, "dim", o.dim), bs = expectSize(op, "bs", o.bs);
    if (o.bc !== undefined && expectSize(op, "bc", o.bc) !== bs) {
      throw invalidArgument(
        op,
        `bc: selection scores compressed row c for block c, so bc must equal bs=${bs}`,
      );
    }
    const S = expectSize(op, "selectedBlockNum", o.selectedBlockNum);
    if (S > MAX_SELECTED_BLOCKS) {
      throw invalidArgument(op, `selectedBlockNum: at most ${MAX_SELECTED_BLOCKS}, got ${S}`);
    }
    accumDtype(op, o.accumDtype);
    this.sizes = Object.freeze({
      seqNum: expectSize(op, "seqNum", o.seqNum),
      cSeqLen: expectSize(op, "cSeqLen", o.cSeqLen, 0),
      heads: H,
      headsKv: Hkv,
      dim,
      chunkNum: expectSize(op, "chunkNum", o.chunkNum, 0),
      selectedBlockNum: S,
      bs,
      scale: scaleOption(op, "scale", o.scale, dim ** -0.5),
    });
    this.#check = booleanOption(op, "checkIndices", o.checkIndices, true);
    this.#kernelMap = checkKernelMap(op, o.kernelMap, ["sparse.nsa.topk"]);
  }

  /** Selects the blocks; the returned int32 tensor is the caller's to dispose. */
  forward(
    q: Tensor,
    kCmp: Tensor,
    lseIn: Tensor,
    offsets: Tensor | readonly number[],
    chunkOffsets: Tensor | readonly number[],
    tokenIndices: Tensor,
    out?: Tensor,
  ): Tensor {
    const op = "NSATopkVarlenOp.forward";
    const s = this.sizes;
    const first = input(op, "q", q, SPARSE_FLOATS, [s.cSeqLen, s.heads, s.dim]);
    this.#pin.check(op, "q", first);
    const kc = input(op, "kCmp", kCmp, [], [s.chunkNum, s.headsKv, s.dim], {
      tensor: first,
      name: "q",
      sameDType: true,
    });
    const lse = input(op, "lseIn", lseIn, ["float32"], [s.cSeqLen, s.heads], { tensor: first, name: "q" });
    using off = offsetsOn(op, "offsets", offsets, first.device, s.seqNum + 1);
    using chunks = offsetsOn(op, "chunkOffsets", chunkOffsets, first.device, s.seqNum + 1);
    checkTokenIndices(op, tokenIndices, off, s.cSeqLen, this.#check);
    const shape = [s.cSeqLen, s.headsKv, s.selectedBlockNum];
    const call = () =>
      writeResult(op, "out", out, shape, "int32", first.device, (indices) =>
        checked(
          op,
          { k_cmp: "kCmp", chunk_offsets: "chunkOffsets", lse: "lseIn", block_indices: "out" },
          native().ak_nsa_topk(
            first.descriptor(op),
            kc.descriptor(op),
            lse.descriptor(op),
            off.tensor.descriptor(op),
            chunks.tensor.descriptor(op),
            BigInt(s.bs),
            s.scale,
            indices.descriptor(op),
          ),
        ));
    // Block lists are not tuned (a candidate's lists differ from the planner's on near ties): the map only.
    if (this.#kernelMap) return withKernelMap("NSATopkVarlenOp", this.#kernelMap, call);
    return withPlanner("NSATopkVarlenOp", call);
  }
}

/** Options of {@link NSAFwdVarlenOp}. */
export interface NSAFwdVarlenOptions extends KernelOptions {
  /** Packed sequences. */
  batch: number;
  /** Query heads. */
  heads: number;
  /** Packed tokens T. */
  cSeqLen: number;
  /** Head dim of q and k (v may differ). */
  dim: number;
  /** Keys past the query's own position are skipped (default true). */
  isCausal?: boolean;
  /** Score scale (default `1 / sqrt(dim)`). */
  scale?: number;
  /** Tokens per selection block. */
  blockSize: number;
  /** Query heads per key head. */
  groups: number;
  /** Entries per query and key head in blockIndices. */
  selectedBlocks: number;
  /** Accumulation dtype: "float32" (the only one). */
  accumDtype?: "float32";
  /**
   * Read the token indices and block lists back and refuse a bad entry (default true): a block below -1
   * or past the sequence, a block listed twice, a count outside [0, selectedBlocks]. Unchecked, such
   * entries are skipped (a repeated block counts once, counts are clamped).
   */
  checkIndices?: boolean;
}

const SELECTION_KEYS = {
  batch: "any",
  heads: "any",
  cSeqLen: "any",
  dim: "any",
  isCausal: "any",
  scale: "any",
  blockSize: "any",
  groups: "any",
  selectedBlocks: "any",
  accumDtype: "any",
  checkIndices: "any",
  tune: "any",
  kernelMap: "any",
} as const;

/**
 * NSA's selected branch: each query attends the keys of the blocks its list names (the first
 * `blockCounts` entries; -1 pads), block b being positions `[b blockSize, (b + 1) blockSize)` of its own
 * sequence, up to its own position when causal. q `[T, heads, dim]`, k `[T, heads / groups, dim]`,
 * v `[T, heads / groups, dimV]`, blockIndices `[T, heads / groups, selectedBlocks]` int32, blockCounts
 * `[T, heads / groups]` int32, a number for every query, or undefined (all entries). Returns
 * `[T, heads, dimV]` in q's dtype (zero where a query sees no key).
 *
 * @example
 * ```ts
 * import { NSAFwdVarlenOp, nsaTokenIndices, Tensor } from "@attnkit/attnkit";
 * const op = new NSAFwdVarlenOp({
 *   batch: 1, heads: 16, cSeqLen: 64, dim: 64, blockSize: 16, groups: 16, selectedBlocks: 2,
 * });
 * using q = Tensor.randn([64, 16, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([64, 1, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([64, 1, 64], { dtype: "bfloat16", seed: 3 });
 * // Token t lists block 0, then its own block t >> 4 (-1, padding, where that is block 0).
 * const list = Int32Array.from({ length: 128 }, (_, i) => i % 2 === 0 ? 0 : (i >> 5) || -1);
 * using blocks = Tensor.from(list, { shape: [64, 1, 2] });
 * using tokens = nsaTokenIndices([0, 64]);
 * using o = op.forward(q, k, v, blocks, undefined, [0, 64], tokens); // [64, 16, 64]
 * ```
 */
export class NSAFwdVarlenOp {
  /** The sizes every call must match. */
  readonly sizes: Readonly<{
    batch: number;
    heads: number;
    headsKv: number;
    cSeqLen: number;
    dim: number;
    blockSize: number;
    selectedBlocks: number;
    isCausal: boolean;
    scale: number;
  }>;
  readonly #check: boolean;
  readonly #pin = new FirstDType();
  readonly #kernels: KernelSettings;

  /** Checks the sizes once. */
  constructor(options: NSAFwdVarlenOptions) {
    const op = "NSAFwdVarlenOp";
    const o = checkOptions<NSAFwdVarlenOptions>(op, options, SELECTION_KEYS);
    const { H, Hkv } = heads(op, o.heads, o.groups, "groups");
    const dim = expectSize(op, "dim", o.dim);
    accumDtype(op, o.accumDtype);
    this.sizes = Object.freeze({
      batch: expectSize(op, "batch", o.batch),
      heads: H,
      headsKv: Hkv,
      cSeqLen: expectSize(op, "cSeqLen", o.cSeqLen, 0),
      dim,
      blockSize: expectSize(op, "blockSize", o.blockSize),
      selectedBlocks: expectSize(op, "selectedBlocks", o.selectedBlocks),
      isCausal: booleanOption(op, "isCausal", o.isCausal, true),
      scale: scaleOption(op, "scale", o.scale, dim ** -0.5),
    });
    this.#check = booleanOption(op, "checkIndices", o.checkIndices, true);
    this.#kernels = kernelSettings(op, o, "sparse.nsa.selection", booleanOption);
  }

  /** Runs the branch; the returned output is the caller's to dispose. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blockIndices: Tensor,
    blockCounts: Tensor | number | undefined,
    offsets: Tensor | readonly number[],
    tokenIndices: Tensor,
    out?: Tensor,
  ): Tensor {
    const op = "NSAFwdVarlenOp.forward";
    const s = this.sizes;
    const first = input(op, "q", q, SPARSE_FLOATS, [s.cSeqLen, s.heads, s.dim]);
    this.#pin.check(op, "q", first);
    const like = { tensor: first, name: "q", sameDType: true };
    const kt = input(op, "k", k, [], [s.cSeqLen, s.headsKv, s.dim], like);
    const vt = input(op, "v", v, [], [s.cSeqLen, s.headsKv, null], like);
    const device = { tensor: first, name: "q" };
    const list = input(
      op,
      "blockIndices",
      blockIndices,
      ["int32"],
      [s.cSeqLen, s.headsKv, s.selectedBlocks],
      device,
    );
    let counts: Tensor | undefined;
    let ownCounts = false;
    if (typeof blockCounts === "number") {
      if (!Number.isSafeInteger(blockCounts) || blockCounts < 0 || blockCounts > s.selectedBlocks) {
        throw invalidArgument(
          op,
          `blockCounts: expected an integer in [0, ${s.selectedBlocks}], got ${blockCounts}`,
        );
      }
      counts = Tensor.full([s.cSeqLen, s.headsKv], blockCounts, { dtype: "int32", device: first.device });
      ownCounts = true;
    } else if (blockCounts !== undefined && blockCounts !== null) {
      counts = input(op, "blockCounts", blockCounts, ["int32"], [s.cSeqLen, s.headsKv], device);
    }
    try {
      using off = offsetsOn(op, "offsets", offsets, first.device, s.batch + 1);
      checkTokenIndices(op, tokenIndices, off, s.cSeqLen, this.#check);
      const dimV = vt.shape[2];
      const run = (buffer?: Tensor) =>
        writeResult(
          op,
          "out",
          buffer,
          [s.cSeqLen, s.heads, dimV],
          first.dtype,
          first.device,
          (output) =>
            checked(
              op,
              { block_indices: "blockIndices", block_counts: "blockCounts", output: "out" },
              native().ak_nsa_selection_fwd(
                first.descriptor(op),
                kt.descriptor(op),
                vt.descriptor(op),
                list.descriptor(op),
                counts?.descriptor(op) ?? null,
                off.tensor.descriptor(op),
                BigInt(s.blockSize),
                s.scale,
                (s.isCausal ? CAUSAL : 0) | (this.#check ? CHECK_INDICES : 0),
                output.descriptor(op),
                null,
              ),
            ),
        );
      return withChoice({
        op: "NSAFwdVarlenOp",
        ...this.#kernels,
        ...sparseChoice(first, { ...s, dimV }),
        run: singleRun(() => run()),
      }, () => run(out));
    } finally {
      if (ownCounts) counts?.dispose();
    }
  }
}
