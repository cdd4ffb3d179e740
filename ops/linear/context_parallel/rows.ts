// Row helpers of the context-parallel exchange: index lists point at an appended zero row for "nothing".
import { Tensor } from "../../tensor.ts";
import { where } from "../../tensor_math/elementwise.ts";

/** `t` `[R, C]` with a zero row appended, `[R + 1, C]` (the row that "nothing" indices point at). */
export function withZeroRow(t: Tensor): Tensor {
  const [R, C] = t.shape;
  if (R === 0) return Tensor.zeros([1, C], { dtype: t.dtype, device: t.device });
  using picked = t.indexSelect(0, Array.from({ length: R + 1 }, (_, i) => Math.min(i, R - 1)));
  using mask = Tensor.from(Array.from({ length: R + 1 }, (_, i) => (i < R ? 1 : 0)), {
    shape: [R + 1, 1],
    device: t.device,
  });
  using keep = mask.gt(0);
  return where(keep, picked, 0);
}
