/**
 * The per-token and per-sequence tables NSA's packed calls take besides the offsets, made from the
 * offsets on the host (as FLA's `prepare_token_indices` and `prepare_chunk_offsets` make them).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions } from "../args.ts";
import type { Device } from "../device.ts";
import { Tensor } from "../tensor.ts";

/** Options of {@link nsaTokenIndices}. */
export interface NsaTokenIndicesOptions {
  /** Where the table goes (default "cpu"). */
  device?: Device;
}

/** Options of {@link nsaChunkOffsets}. */
export interface NsaChunkOffsetsOptions extends NsaTokenIndicesOptions {
  /** Tokens between the starts of two compressed rows (default blockSize). */
  stride?: number;
}

function hostOffsets(op: string, offsets: readonly number[] | Int32Array): number[] {
  const o = Array.from(offsets);
  if (o.length < 2 || o[0] !== 0 || o.some((v, i) => !Number.isSafeInteger(v) || (i > 0 && v < o[i - 1]))) {
    throw invalidArgument(op, "offsets: expected N + 1 >= 2 nondecreasing integers from 0");
  }
  return o;
}

/**
 * `[T, 2]` int32: each packed token's sequence and its position in it.
 *
 * @example
 * ```ts
 * import { nsaTokenIndices } from "@attnkit/attnkit";
 * using t = nsaTokenIndices([0, 2, 5]); // [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]]
 * ```
 */
export function nsaTokenIndices(
  offsets: readonly number[] | Int32Array,
  options?: NsaTokenIndicesOptions,
): Tensor {
  const op = "nsaTokenIndices";
  const { device } = checkOptions<NsaTokenIndicesOptions>(op, options, { device: "any" });
  const o = hostOffsets(op, offsets);
  const T = o[o.length - 1];
  const pairs = new Int32Array(2 * T);
  for (let n = 0; n + 1 < o.length; n++) {
    for (let t = o[n]; t < o[n + 1]; t++) pairs[2 * t] = n, pairs[2 * t + 1] = t - o[n];
  }
  return Tensor.from(pairs, { shape: [T, 2], device: device ?? "cpu" });
}

/**
 * `[N + 1]` int32: where each sequence's compressed rows start when a sequence of `len` tokens has
 * `ceil(len / stride)` of them, one per start before its end (with the default stride, `blockSize`, the
 * last one partial and never visible to the sequence's own tokens).
 *
 * @example
 * ```ts
 * import { nsaChunkOffsets } from "@attnkit/attnkit";
 * using c = nsaChunkOffsets([0, 100, 164], 64); // [0, 2, 3]
 * ```
 */
export function nsaChunkOffsets(
  offsets: readonly number[] | Int32Array,
  blockSize: number,
  options?: NsaChunkOffsetsOptions,
): Tensor {
  const op = "nsaChunkOffsets";
  const { device, stride } = checkOptions<NsaChunkOffsetsOptions>(op, options, {
    device: "any",
    stride: "any",
  });
  const o = hostOffsets(op, offsets);
  if (!Number.isSafeInteger(blockSize) || blockSize < 1) {
    throw invalidArgument(op, `blockSize: expected an integer >= 1, got ${String(blockSize)}`);
  }
  const step = stride ?? blockSize;
  if (!Number.isSafeInteger(step) || step < 1 || step > blockSize) {
    throw invalidArgument(
      op,
      `stride: expected an integer in [1, blockSize=${blockSize}], got ${String(stride)}`,
    );
  }
  const c = new Int32Array(o.length);
  for (let n = 0; n + 1 < o.length; n++) c[n + 1] = c[n] + Math.ceil((o[n + 1] - o[n]) / step);
  return Tensor.from(c, { device: device ?? "cpu" });
}
