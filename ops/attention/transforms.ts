/**
 * What an attention op does to q, k, v before the forward, as a general path: float8_e4m3 inputs
 * dequantised with per-(sequence, KV head) scales, and the rotary position embedding (RoPE) from cos / sin
 * tables in the neox (split halves) or interleaved (adjacent pairs) layout. Both compute in float32 and
 * round once to the result's dtype.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { selectRows } from "../tensor_math/indexing.ts";

/** How RoPE pairs a head's rotated dims: `"neox"` (i with i + r/2) or `"interleaved"` (2i with 2i + 1). */
export type RopeLayout = "neox" | "interleaved";

/**
 * x `[rows, heads, dim]` (float8_e4m3) times `scale` `[batch, headsKv]` of each row's sequence (`sequenceOf`,
 * one entry per row) and KV head (the query heads of a group share their KV head's), as `dtype`.
 */
export function dequantizeRows(
  op: string,
  x: Tensor,
  scale: Tensor,
  sequenceOf: Int32Array,
  dtype: DType,
): Tensor {
  const [rows, heads, dim] = x.shape, headsKv = scale.shape[1], group = heads / headsKv;
  using index = Tensor.from(sequenceOf, { device: x.device });
  using perRow = selectRows(op, scale, index); // [rows, headsKv]
  using factor = perRow.reshape([rows, headsKv, 1, 1]);
  using wide = x.cast("float32");
  using grouped = wide.reshape([rows, headsKv, group, dim]);
  using scaled = grouped.mul(factor);
  using flat = scaled.reshape([rows, heads, dim]);
  return flat.cast(dtype);
}

/** The sequence of each token of packed offsets. */
export function tokenSequences(offsets: Int32Array): Int32Array {
  const out = new Int32Array(offsets[offsets.length - 1]);
  for (let b = 0; b + 1 < offsets.length; b++) out.fill(b, offsets[b], offsets[b + 1]);
  return out;
}

/** Row r of a dense `[B, S, ...]` batch belongs to sequence floor(r / S). */
export function batchRows(B: number, S: number): Int32Array {
  return Int32Array.from({ length: B * S }, (_, r) => Math.floor(r / S));
}

/**
 * x `[B, S, H, D]` (bshd, any float dtype) with RoPE applied to its first `rotaryDim` dims, row s at
 * position `first + s`: with c, s the tables' entries `[first + s][i]` (`cos`, `sin` `[P, rotaryDim / 2]`),
 * the pair (a, b) becomes (a c - b s, b c + a s). The other dims are copied. Returns a new tensor in x's
 * dtype.
 */
export function rotate(
  op: string,
  x: Tensor,
  cos: Tensor,
  sin: Tensor,
  first: number,
  rotaryDim: number,
  layout: RopeLayout,
): Tensor {
  const [B, S, H, D] = x.shape, half = rotaryDim / 2;
  const out = Tensor.empty(x.shape, { dtype: x.dtype, device: x.device });
  try {
    const table = (t: Tensor) => {
      using rows = t.slice(0, first, first + S);
      using wide = rows.cast("float32");
      return wide.reshape([1, S, 1, half]);
    };
    using c = table(cos), s = table(sin);
    // The two members of each pair, and where each result goes (a view of `out`: offset, last stride).
    const [aAt, bAt, step] = layout === "neox" ? [0, half, 1] : [0, 1, 2];
    const member = (at: number) => {
      using part = x.slice(-1, at, at + step * (half - 1) + 1, step);
      return part.cast("float32");
    };
    using a = member(aAt), b = member(bAt);
    using ac = a.mul(c), bs = b.mul(s), bc = b.mul(c), as = a.mul(s);
    using ra = ac.sub(bs), rb = bc.add(as);
    const strides = out.strides;
    const view = (at: number, width: number, stride: number) =>
      out.viewDescriptor([B, S, H, width], [strides[0], strides[1], strides[2], stride], op, at);
    unwrap(native().ak_copy(view(aAt, half, step), ra.descriptor(op)), op);
    unwrap(native().ak_copy(view(bAt, half, step), rb.descriptor(op)), op);
    if (rotaryDim < D) {
      const rest = x.viewDescriptor([B, S, H, D - rotaryDim], x.strides, op, rotaryDim);
      unwrap(native().ak_copy(view(rotaryDim, D - rotaryDim, 1), rest), op);
    }
    return out;
  } catch (e) {
    out.dispose();
    throw e;
  }
}
