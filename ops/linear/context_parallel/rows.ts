// Row helpers of the context-parallel exchange: index lists point at an appended zero row for "nothing".
import { Tensor } from "../../tensor.ts";
import { where } from "../../tensor_math/elementwise.ts";

/** `t` `[R, C]` with a zero row appended, `[R + 1, C]` (the row that "nothing" indices point at). */
export function withZeroRow(t: Tensor): Tensor {
  const [R, C] = t.shape;
  if (R === 0) return Tensor.zeros([1, C], { dtype: t.dtype, device: t.device });
  // Formed on the device: rows 0..R-1 then R-1 again, and a mask that keeps all but the last.
  using index = Tensor.arange(0, R + 1, 1, { dtype: "int64", device: t.device });
  using rows = index.minimum(R - 1);
  using picked = t.indexSelect(0, rows);
  using last = index.lt(R);
  using keep = last.reshape([R + 1, 1]);
  return where(keep, picked, 0);
}
