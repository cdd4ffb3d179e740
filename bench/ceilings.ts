/**
 * The H200's ceilings (`../shared/ANCHORS.md`: cuBLAS's bf16 8192-cube product and a device-to-device copy)
 * that records are held against, and the fraction of the floor a record reaches: a kernel's time cannot go
 * below max(FLOPs / peak, bytes / copy rate), so that fraction is max(TFLOP/s / peak, GB/s / copy rate).
 *
 * @example
 * ```ts
 * import { floorFraction } from "./ceilings.ts";
 * console.log(floorFraction(604, null)); // 0.864...: 604 of 699 TFLOP/s
 * ```
 *
 * @module
 */

/** Dense bf16 matrix products, TFLOP/s. */
export const BF16_CEILING_TFLOPS = 699;

/** Device-to-device copy, bytes read + written, GB/s. */
export const COPY_CEILING_GBPS = 4252;

/**
 * The fraction of the floor a record's rates reach (null when it has neither): the larger of its TFLOP/s
 * over the bf16 peak and its GB/s (fewest bytes) over the copy ceiling.
 *
 * @example
 * ```ts
 * import { floorFraction } from "./ceilings.ts";
 * console.log(floorFraction(150, 2100)); // 0.49...: the bytes bound it more than the products
 * ```
 */
export function floorFraction(tflops: number | null, gbps: number | null): number | null {
  if (tflops === null && gbps === null) return null;
  return Math.max((tflops ?? 0) / BF16_CEILING_TFLOPS, (gbps ?? 0) / COPY_CEILING_GBPS);
}
