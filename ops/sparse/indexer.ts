/**
 * `FP8LightningIndexerFwdOp`: DeepSeek's lightning indexer, the scores from which DSA picks each query's
 * top-k cache rows.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native } from "../../ffi/library.ts";
import { booleanOption, checkOptions } from "../args.ts";
import type { Tensor } from "../tensor.ts";
import type { KernelOptions } from "../attention/gqa.ts";
import { type KernelSettings, kernelSettings } from "../attention/op_support.ts";
import { withChoice } from "../tune/choice.ts";
import { checked, FirstDType, input, singleRun, writeResult } from "./common.ts";

const CHECK_INDICES = 2, CLEAN_LOGITS = 4;

/** Options of {@link FP8LightningIndexerFwdOp}. */
export interface FP8LightningIndexerFwdOptions extends KernelOptions {
  /** -inf outside each query's key range (default true); false writes 0 there. */
  cleanLogits?: boolean;
  /** Tile settings: none are taken (the kernel is chosen with `kernelMap` or `tune`), so only undefined or null. */
  config?: Record<string, unknown> | null;
  /** Read the key ranges back and refuse one outside `0 <= ks <= ke <= Sk` (default true). */
  checkIndices?: boolean;
}

const KEYS = {
  cleanLogits: "any",
  config: "any",
  checkIndices: "any",
  tune: "any",
  kernelMap: "any",
} as const;

/**
 * The lightning indexer: indexQ `[Sq, H, D]` and indexK `[Sk, D]` (both bfloat16 or both float8_e4m3),
 * weights `[Sq, H]` float32, cuSeqlenKs / cuSeqlenKe `[Sq]` int32 (query i scores keys
 * `ks[i] <= j < ke[i]`), indexKScale `[Sk]` float32 (dequantisation scale per key; default ones).
 * Returns logits `[Sq, Sk]` float32, `sum_h weights[i, h] max(0, indexKScale[j] indexQ[i, h] . indexK[j])`
 * inside the range, computed in float32; outside, -inf with `cleanLogits`, else 0. At DeepSeek's 64 heads of
 * 128 dims the scores run on tensor cores (float8 products there are summed with fewer bits than float32);
 * other shapes take a per-item kernel.
 *
 * @example
 * ```ts
 * import { FP8LightningIndexerFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new FP8LightningIndexerFwdOp();
 * using qWide = Tensor.randn([4, 8, 64], { seed: 1 });
 * using q = qWide.cast("float8_e4m3");
 * using kWide = Tensor.randn([32, 64], { seed: 2 });
 * using k = kWide.cast("float8_e4m3");
 * using w = Tensor.rand([4, 8], { seed: 3 });
 * using ks = Tensor.from(new Int32Array([0, 0, 8, 8]));
 * using ke = Tensor.from(new Int32Array([16, 32, 24, 32]));
 * using logits = op.forward(q, k, w, ks, ke); // [4, 32] float32
 * ```
 */
export class FP8LightningIndexerFwdOp {
  /** Whether positions outside a query's range hold -inf (else 0). */
  readonly cleanLogits: boolean;
  readonly #check: boolean;
  readonly #pin = new FirstDType();
  readonly #kernels: KernelSettings;

  /** Checks the options once. */
  constructor(options: FP8LightningIndexerFwdOptions = {}) {
    const op = "FP8LightningIndexerFwdOp";
    const o = checkOptions<FP8LightningIndexerFwdOptions>(op, options, KEYS);
    if (o.config !== undefined && o.config !== null) {
      throw invalidArgument(
        op,
        'config: tile settings are not taken; pass undefined or null (choose the kernel with kernelMap: { "sparse.indexer": ... })',
      );
    }
    this.cleanLogits = booleanOption(op, "cleanLogits", o.cleanLogits, true);
    this.#check = booleanOption(op, "checkIndices", o.checkIndices, true);
    this.#kernels = kernelSettings(op, o, "sparse.indexer", booleanOption);
  }

  /** Scores every query against its key range; the returned logits are the caller's to dispose. */
  forward(
    indexQ: Tensor,
    indexK: Tensor,
    weights: Tensor,
    cuSeqlenKs: Tensor,
    cuSeqlenKe: Tensor,
    indexKScale?: Tensor,
    out?: Tensor,
  ): Tensor {
    const op = "FP8LightningIndexerFwdOp.forward";
    const q = input(op, "indexQ", indexQ, ["bfloat16", "float8_e4m3"], [null, null, null]);
    this.#pin.check(op, "indexQ", q);
    const [Sq, H, D] = q.shape;
    const like = { tensor: q, name: "indexQ" };
    const k = input(op, "indexK", indexK, [], [null, D], { ...like, sameDType: true });
    const Sk = k.shape[0];
    const w = input(op, "weights", weights, ["float32"], [Sq, H], like);
    const ks = input(op, "cuSeqlenKs", cuSeqlenKs, ["int32"], [Sq], like);
    const ke = input(op, "cuSeqlenKe", cuSeqlenKe, ["int32"], [Sq], like);
    const scale = indexKScale === undefined
      ? undefined
      : input(op, "indexKScale", indexKScale, ["float32"], [Sk], like);
    const clean = this.cleanLogits ? CLEAN_LOGITS : 0;
    const run = (buffer: Tensor | undefined, flags: number) =>
      writeResult(op, "out", buffer, [Sq, Sk], "float32", q.device, (logits) =>
        checked(
          op,
          {
            q: "indexQ",
            k: "indexK",
            k_scale: "indexKScale",
            ks: "cuSeqlenKs",
            ke: "cuSeqlenKe",
            logits: "out",
          },
          native().ak_lightning_indexer(
            q.descriptor(op),
            k.descriptor(op),
            scale?.descriptor(op) ?? null,
            w.descriptor(op),
            ks.descriptor(op),
            ke.descriptor(op),
            flags,
            logits.descriptor(op),
          ),
        ));
    return withChoice({
      op: "FP8LightningIndexerFwdOp",
      device: q.device,
      ...this.#kernels,
      shapeClass: JSON.stringify({ dtype: q.dtype, Sq, H, D, Sk, scale: scale !== undefined, clean }),
      relRms: 1e-3,
      // The timed calls skip the ranges' read-back: the kernels clamp them, and the user's call checks.
      run: singleRun(() => run(undefined, clean)),
    }, () => run(out, clean | (this.#check ? CHECK_INDICES : 0)));
  }
}
