/**
 * The layouts of the delta-rule family: `"bshd"` (`[batch, seq, heads, dim]`, flash-linear-attention's
 * order) and `"bhsd"` (`[batch, heads, seq, dim]`, PyTorch's). g and beta follow their tensors:
 * `[batch, seq, heads]` and `[batch, heads, seq]`. States are `[N, H, K, V]` in both.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { type Layout, LAYOUTS, requireLayout, warnLayoutLooksSwapped } from "../layout.ts";

/**
 * The layouts the delta-rule functions and op classes take: `"bshd"` or `"bhsd"`.
 *
 * @example
 * ```ts
 * import type { LinearLayout } from "@attnkit/attnkit";
 * const fla: LinearLayout = "bshd"; // q [B, T, H, K], g and beta [B, T, H]
 * ```
 */
export type LinearLayout = Extract<Layout, "bshd" | "bhsd">;

/** Every layout the delta-rule family takes. */
export const LINEAR_LAYOUTS: readonly LinearLayout[] = ["bshd", "bhsd"];

/** Checks the `layout` of a call or constructor: required, one of {@link LINEAR_LAYOUTS}. */
export function linearLayout(op: string, value: unknown): LinearLayout {
  return requireLayout(op, value, LINEAR_LAYOUTS);
}

/**
 * The layout of an op class whose name states it (`...BTHDFwdOp` reads `"bshd"`, `...BHTDFwdOp`
 * reads `"bhsd"`): `layout` may be left out, and when given it must be that one.
 */
export function namedLayout(op: string, value: unknown, named: LinearLayout): LinearLayout {
  if (value === undefined || value === null) return named;
  const layout = linearLayout(op, value);
  if (layout !== named) {
    throw invalidArgument(
      op,
      `layout: this op reads "${named}" ${LAYOUTS[named]} (its name says so), got "${layout}"`,
    );
  }
  return layout;
}

/** The shape pattern of a `[batch, seq, heads, dim]` tensor (dim omitted for g and beta) in a layout. */
export function sequencePattern(layout: LinearLayout, heads: string, dim?: string): string[] {
  const dims = layout === "bshd" ? ["B", "T", heads] : ["B", heads, "T"];
  return dim === undefined ? dims : [...dims, dim];
}

/** Warns once (see warnLayoutLooksSwapped) when q has fewer tokens than heads in the layout given. */
export function warnIfLayoutLooksSwapped(op: string, layout: LinearLayout, T: number, heads: number): void {
  if (T <= 0 || T >= heads) return;
  warnLayoutLooksSwapped(op, layout, `q has ${T} tokens and ${heads} heads`);
}
