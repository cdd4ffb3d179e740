/**
 * Matrix products as PyTorch's `matmul` defines them: 1-D operands are a row (left) or a column
 * (right) vector whose dim is dropped from the result; dims before the last two are batch dims and
 * broadcast.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { contiguousStrides } from "../../ffi/descriptor.ts";
import type { Tensor } from "../tensor.ts";
import { broadcastShapes } from "./broadcast.ts";
import { produce, shapeText, Temps } from "./common.ts";
import { expectSameDevice, expectTensor } from "../checks.ts";
import { promoteTypes } from "./dtypes.ts";

/** The descriptor of a matrix operand read as [...batch, rows, cols]. */
function operandView(
  t: Tensor,
  side: "left" | "right",
  batch: readonly number[],
  rows: number,
  cols: number,
  op: string,
) {
  // A 1-D operand is a row (left) or a column (right): the added dim has size 1 and stride 0.
  const own = t.ndim > 1 ? t.strides.slice(-2) : side === "left" ? [0, 1] : [1, 0];
  const lead = t.shape.slice(0, -2);
  const leadStrides = t.strides.slice(0, -2);
  const batchStrides = batch.map((_, i) => {
    const j = i - (batch.length - lead.length);
    return j < 0 || lead[j] === 1 ? 0 : leadStrides[j];
  });
  return t.viewDescriptor([...batch, rows, cols], [...batchStrides, ...own], op);
}

/** The matrix product of `a` and `b`. */
export function matmul(a: Tensor, b: Tensor): Tensor {
  const op = "Tensor.matmul";
  expectTensor(op, "this", a);
  expectTensor(op, "other", b);
  expectSameDevice(op, "other", b, a, "this tensor");
  if (a.ndim === 0 || b.ndim === 0) {
    throw invalidArgument(
      op,
      `${
        a.ndim === 0 ? "this" : "other"
      }: expected a tensor of rank 1 or more, got a 0-d tensor (use mul for scalars)`,
    );
  }
  const dtype = promoteTypes(a.dtype, b.dtype);
  if (dtype === "bool") throw invalidArgument(op, "this, other: matrix products take no bool tensors");
  const m = a.ndim === 1 ? 1 : a.shape[a.ndim - 2];
  const k = a.shape[a.ndim - 1];
  const kb = b.ndim === 1 ? b.shape[0] : b.shape[b.ndim - 2];
  const n = b.ndim === 1 ? 1 : b.shape[b.ndim - 1];
  if (k !== kb) {
    throw invalidArgument(
      op,
      `other: shape ${shapeText(b.shape)} does not fit this tensor's ${
        shapeText(a.shape)
      }: ${k} columns against ${kb} rows`,
    );
  }
  const batch = broadcastShapes(op, [a.shape.slice(0, -2), b.shape.slice(0, -2)], [
    "this tensor's batch dims",
    "other's batch dims",
  ]);
  const shape = [...batch, ...(a.ndim > 1 ? [m] : []), ...(b.ndim > 1 ? [n] : [])];
  const full = [...batch, m, n];
  using temps = new Temps();
  const [x, y] = [temps.cast(a, dtype), temps.cast(b, dtype)];
  return produce(shape, dtype, a.device, (out) => {
    unwrap(
      native().ak_matmul(
        out.viewDescriptor(full, contiguousStrides(full), op),
        operandView(x, "left", batch, m, k, op),
        operandView(y, "right", batch, k, n, op),
      ),
      op,
    );
  });
}
