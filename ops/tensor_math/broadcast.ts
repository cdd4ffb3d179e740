/**
 * Broadcasting, as NumPy and PyTorch define it: shapes are aligned at their last dims, and each dim
 * pair must be equal or have a 1 (a missing leading dim counts as 1). An operand is read as a view
 * of the result's shape with stride 0 along the dims it is broadcast over, so nothing is copied.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { Tensor } from "../tensor.ts";
import { shapeText } from "./common.ts";

/** The shape that operands of the given shapes broadcast to; `names` name them in the message. */
export function broadcastShapes(
  op: string,
  shapes: readonly (readonly number[])[],
  names: readonly string[],
): number[] {
  const rank = Math.max(0, ...shapes.map((s) => s.length));
  const out = new Array<number>(rank).fill(1);
  for (let i = 1; i <= rank; i++) {
    for (let k = 0; k < shapes.length; k++) {
      const s = shapes[k];
      const size = i <= s.length ? s[s.length - i] : 1;
      if (size === out[rank - i] || size === 1) continue;
      if (out[rank - i] !== 1) {
        const first = shapes.findIndex((t) => i <= t.length && t[t.length - i] === out[rank - i]);
        throw invalidArgument(
          op,
          `${names[k]}: shape ${shapeText(s)} does not broadcast with ${names[first]}'s ${
            shapeText(shapes[first])
          } (sizes ${size} and ${out[rank - i]} at dim ${-i})`,
        );
      }
      out[rank - i] = size;
    }
  }
  return out;
}

/** The strides that read `t` as a tensor of `shape` (which it broadcasts to): 0 along broadcast dims. */
export function broadcastStrides(t: Tensor, shape: readonly number[]): number[] {
  const lead = shape.length - t.ndim;
  const own = t.strides;
  return shape.map((_, i) => (i < lead || t.shape[i - lead] === 1 ? 0 : own[i - lead]));
}

/** The descriptor of `t` read as a tensor of `shape` (which it broadcasts to). */
export function broadcastView(t: Tensor, shape: readonly number[], op: string): Uint8Array<ArrayBuffer> {
  return t.viewDescriptor(shape, broadcastStrides(t, shape), op);
}
