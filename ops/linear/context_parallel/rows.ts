// Row helpers of the context-parallel exchange: index lists point at an appended zero row for "nothing".
// The routing's index lists are built by the library, in range by construction: gathers with them (and with
// rows taken from them) run on the device with nothing read back, where a caller's own lists are checked.
import { Tensor } from "../../tensor.ts";
import { where } from "../../tensor_math/elementwise.ts";
import { selectRows } from "../../tensor_math/indexing.ts";

const OP = "contextParallel";
const TRUSTED = new WeakSet<Tensor>();

/** Marks index tensors a routing built: {@link pickRows} gathers with them unchecked. */
export function trustRows(...lists: Tensor[]): void {
  for (const t of lists) TRUSTED.add(t);
}

/** Rows `rows` of `t` along dim 0: a routing's list gathers on the device; a caller's is checked first. */
export function pickRows(t: Tensor, rows: readonly number[] | Tensor): Tensor {
  return rows instanceof Tensor && TRUSTED.has(rows) ? selectRows(OP, t, rows) : t.indexSelect(0, rows);
}

/** Rows of `t` at `rows`, a list derived from a routing's (in range): gathered with nothing read back. */
export function routedRows(t: Tensor, rows: Tensor): Tensor {
  return selectRows(OP, t, rows);
}

/** `t` `[R, C]` with a zero row appended, `[R + 1, C]` (the row that "nothing" indices point at). */
export function withZeroRow(t: Tensor): Tensor {
  const [R, C] = t.shape;
  if (R === 0) return Tensor.zeros([1, C], { dtype: t.dtype, device: t.device });
  // Formed on the device: rows 0..R-1 then R-1 again, and a mask that keeps all but the last.
  using index = Tensor.arange(0, R + 1, 1, { dtype: "int64", device: t.device });
  using rows = index.minimum(R - 1);
  using picked = routedRows(t, rows);
  using last = index.lt(R);
  using keep = last.reshape([R + 1, 1]);
  return where(keep, picked, 0);
}
