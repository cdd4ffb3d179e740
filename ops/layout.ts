/**
 * The names of tensor layouts, one set for the whole library. Libraries disagree on the order of
 * sequence and heads (FlashAttention and flash-linear-attention put the sequence first, PyTorch's
 * SDPA puts the heads first), and a tensor of one order read as the other runs and returns garbage,
 * so every call names its layout; none is assumed.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { describeValue } from "./args.ts";

/**
 * How a tensor of q, k, v or output is laid out:
 * - `"bshd"`: `[batch, seq, heads, dim]` (FlashAttention, flash-linear-attention);
 * - `"bhsd"`: `[batch, heads, seq, dim]` (PyTorch `scaled_dot_product_attention`);
 * - `"thd"`: `[totalTokens, heads, dim]`, sequences packed back to back and delimited by
 *   `cuSeqlens` (FlashAttention's varlen functions).
 *
 * @example
 * ```ts
 * import type { Layout } from "@attnkit/attnkit";
 * const torchOrder: Layout = "bhsd";
 * ```
 */
export type Layout = "bshd" | "bhsd" | "thd";

/** Every layout name with its dimension order, as error messages list them. */
export const LAYOUTS: Readonly<Record<Layout, string>> = {
  bshd: "[batch, seq, heads, dim]",
  bhsd: "[batch, heads, seq, dim]",
  thd: "[totalTokens, heads, dim] with cuSeqlens",
};

/**
 * Checks the `layout` a call names against the layouts it accepts; a missing layout is refused with
 * the list, since no default is right for everyone.
 */
export function requireLayout<L extends Layout>(op: string, value: unknown, accepted: readonly L[]): L {
  if ((accepted as readonly unknown[]).includes(value)) return value as L;
  const list = accepted.map((l) => `"${l}" ${LAYOUTS[l]}`).join(", ");
  const what = value === undefined || value === null
    ? "is required (no layout is assumed)"
    : `got ${describeValue(value)}`;
  throw invalidArgument(op, `layout ${what}; expected one of ${list}`);
}

/** The dimension count of a layout's tensors. */
export function layoutRank(layout: Layout): number {
  return layout === "thd" ? 3 : 4;
}

let swapWarned = false;

/** Lets the next suspicious call warn again (for tests). */
export function resetLayoutWarning(): void {
  swapWarned = false;
}

/**
 * Warns once per process, as flash-linear-attention does, that the sizes a call reads (`sizes`, e.g.
 * "q has 8 tokens and 64 heads") suggest tensors of the other dense layout, which would run and return
 * garbage. Never refuses: short sequences with many heads are valid. The caller decides when sizes look
 * swapped.
 */
export function warnLayoutLooksSwapped(op: string, layout: "bshd" | "bhsd", sizes: string): void {
  if (swapWarned) return;
  swapWarned = true;
  const other = layout === "bshd" ? "bhsd" : "bshd";
  console.warn(
    `attnkit: ${op}: ${sizes} as layout "${layout}" ${LAYOUTS[layout]} reads them; if they are ` +
      `${LAYOUTS[other]}, pass layout: "${other}" (this warning is shown once)`,
  );
}
