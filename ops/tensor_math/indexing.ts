/**
 * Slicing and indexing with Python's rules (negative indices count from the end, slice bounds are
 * clamped, indices are not), and broadcasting to a shape. Each result is a new contiguous tensor,
 * copied through a strided view of the source in one native call.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { describeValue } from "../args.ts";
import { Tensor } from "../tensor.ts";
import { broadcastShapes, broadcastView } from "./broadcast.ts";
import { normalizeDim, produce, shapeText } from "./common.ts";
import { expectTensor } from "../checks.ts";
import { insideCapture } from "../graph.ts";

/**
 * One entry of `Tensor.at`: an integer picks one index of a dim (and drops the dim), a string
 * `"start:end:step"` (any part optional, e.g. `":"`, `"1:"`, `"::2"`, `"-3:"`) takes a slice, `"..."`
 * stands for as many whole dims as needed, and `null` inserts a new dim of size 1.
 */
export type IndexSpec = number | string | null;

// A strided view of a tensor's memory: what each step through the specs narrows.
interface View {
  shape: number[];
  strides: number[];
  offset: number;
}

function viewOf(x: Tensor): View {
  return { shape: [...x.shape], strides: [...x.strides], offset: 0 };
}

function copyOf(x: Tensor, v: View, op: string): Tensor {
  return produce(v.shape, x.dtype, x.device, (out) => {
    unwrap(native().ak_copy(out.descriptor(), x.viewDescriptor(v.shape, v.strides, op, v.offset)), op);
  });
}

function checkInteger(op: string, arg: string, value: unknown): number {
  if (!Number.isSafeInteger(value)) {
    throw invalidArgument(op, `${arg}: expected an integer, got ${describeValue(value)}`);
  }
  return value as number;
}

// Index `index` of dim d, which the view drops.
function selectIn(v: View, d: number, index: number, op: string, arg: string): void {
  const size = v.shape[d];
  if (index < -size || index >= size) {
    throw invalidArgument(op, `${arg}: index ${index} is out of range for dim ${d} of size ${size}`);
  }
  v.offset += (index < 0 ? index + size : index) * v.strides[d];
  v.shape.splice(d, 1);
  v.strides.splice(d, 1);
}

// Elements start, start + step, ... before end of dim d, bounds resolved as Python does.
function sliceIn(v: View, d: number, start: number | undefined, end: number | undefined, step: number): void {
  const size = v.shape[d];
  const clamp = (i: number) => Math.min(size, Math.max(0, i < 0 ? i + size : i));
  const first = start === undefined ? 0 : clamp(start);
  const stop = end === undefined ? size : clamp(end);
  v.offset += first * v.strides[d];
  v.shape[d] = Math.max(0, Math.ceil((stop - first) / step));
  v.strides[d] *= step;
}

function checkStep(op: string, arg: string, step: unknown): number {
  const s = checkInteger(op, arg, step);
  if (s < 1) throw invalidArgument(op, `${arg}: expected a step of 1 or more, got ${s}`);
  return s;
}

/** Elements [start, end) of dim `dim`, every `step`-th. */
export function slice(x: Tensor, dim: number, start?: number, end?: number, step = 1): Tensor {
  const op = "Tensor.slice";
  expectTensor(op, "this", x);
  const d = normalizeDim(op, dim, x.ndim);
  const v = viewOf(x);
  sliceIn(
    v,
    d,
    start === undefined ? undefined : checkInteger(op, "start", start),
    end === undefined ? undefined : checkInteger(op, "end", end),
    checkStep(op, "step", step),
  );
  return copyOf(x, v, op);
}

/** Index `index` of dim `dim`, which the result drops. */
export function select(x: Tensor, dim: number, index: number): Tensor {
  const op = "Tensor.select";
  expectTensor(op, "this", x);
  const d = normalizeDim(op, dim, x.ndim);
  const v = viewOf(x);
  selectIn(v, d, checkInteger(op, "index", index), op, "index");
  return copyOf(x, v, op);
}

const SLICE = /^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?$/;

/** The tensor indexed by `specs`, one per dim (NumPy's basic indexing). */
export function at(x: Tensor, specs: readonly IndexSpec[]): Tensor {
  const op = "Tensor.at";
  expectTensor(op, "this", x);
  const ellipses = specs.filter((s) => s === "...").length;
  if (ellipses > 1) throw invalidArgument(op, `specs: at most one "..." may appear`);
  const consuming = specs.filter((s) => s !== null && s !== "...").length;
  if (consuming > x.ndim) {
    throw invalidArgument(
      op,
      `specs: ${consuming} indices for a tensor of rank ${x.ndim} (${shapeText(x.shape)})`,
    );
  }
  const v = viewOf(x);
  let d = 0; // the dim of the view that the next spec applies to
  specs.forEach((spec, i) => {
    const arg = `specs[${i}]`;
    if (spec === null) {
      v.shape.splice(d, 0, 1);
      v.strides.splice(d, 0, 0);
      d += 1;
    } else if (spec === "...") {
      d += x.ndim - consuming;
    } else if (typeof spec === "number") {
      selectIn(v, d, checkInteger(op, arg, spec), op, arg);
    } else if (typeof spec === "string" && SLICE.test(spec)) {
      const [, start, end, step] = SLICE.exec(spec)!;
      const num = (t: string | undefined) => (t === undefined ? undefined : Number(t));
      sliceIn(v, d, num(start), num(end), checkStep(op, `${arg} step`, num(step) ?? 1));
      d += 1;
    } else {
      throw invalidArgument(
        op,
        `${arg}: expected an integer, a slice string like "1:5" or "::2", "..." or null, got ${
          describeValue(spec)
        }`,
      );
    }
  });
  if (v.shape.length > 8) {
    throw invalidArgument(op, `specs: the result would have ${v.shape.length} dims, more than 8`);
  }
  return copyOf(x, v, op);
}

/** The entries at `indices` along dim `dim` (a gather; indices may repeat and count from the end when negative). */
export function indexSelect(x: Tensor, dim: number, indices: readonly number[] | Tensor): Tensor {
  const op = "Tensor.indexSelect";
  expectTensor(op, "this", x);
  const d = normalizeDim(op, dim, x.ndim);
  let values: ArrayLike<number | bigint>;
  if (indices instanceof Tensor) {
    expectTensor(op, "indices", indices);
    if ((indices.dtype !== "int32" && indices.dtype !== "int64") || indices.ndim !== 1) {
      throw invalidArgument(
        op,
        `indices: expected a 1-D int32 or int64 tensor, got ${shapeText(indices.shape)} ${indices.dtype}`,
      );
    }
    // Nothing is read back in a capture: the gather itself gives zeros for an index out of range.
    if (insideCapture() && indices.device === x.device) return gather(op, x, d, indices);
    values = indices.toArray() as Int32Array | BigInt64Array; // read back to check the bounds
  } else if (Array.isArray(indices)) {
    values = indices;
  } else {
    throw invalidArgument(
      op,
      `indices: expected an array of integers or a 1-D integer tensor, got ${describeValue(indices)}`,
    );
  }
  const size = x.shape[d];
  const checked = new BigInt64Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const raw = values[i];
    const index = typeof raw === "bigint" ? Number(raw) : checkInteger(op, `indices[${i}]`, raw);
    if (!(index >= -size && index < size)) {
      throw invalidArgument(op, `indices[${i}]: ${raw} is out of range for dim ${d} of size ${size}`);
    }
    checked[i] = BigInt(index < 0 ? index + size : index);
  }
  using index = Tensor.from(checked, { device: x.device });
  return gather(op, x, d, index);
}

/** The gather itself: entries `index` (1-D int32 or int64 on x's device, unchecked) along dim `d`. */
function gather(op: string, x: Tensor, d: number, index: Tensor): Tensor {
  const shape = x.shape.map((s, i) => (i === d ? index.shape[0] : s));
  return produce(shape, x.dtype, x.device, (out) => {
    unwrap(native().ak_index_select(out.descriptor(op), x.descriptor(op), d, index.descriptor(op)), op);
  });
}

/**
 * Rows `index` of x along dim 0, for a caller that made the indices and knows each is in range: `index`
 * is 1-D int32 on x's device, and unlike {@link indexSelect} it is not read back to check its bounds.
 */
export function selectRows(op: string, x: Tensor, index: Tensor): Tensor {
  return gather(op, x, 0, index);
}

/**
 * Row m of `src` into row `index[m]` of `dst` (dim 0), in place, for a caller that made the indices and knows
 * each is in range and named once: `index` is 1-D int32 on dst's device, `src` has dst's dtype and row shape
 * (the CPU refuses an index out of range; CUDA skips it).
 */
export function scatterRows(op: string, dst: Tensor, src: Tensor, index: Tensor): void {
  unwrap(native().ak_scatter_rows(dst.descriptor(op), src.descriptor(op), index.descriptor(op)), op);
}

/** A copy of `x` broadcast to `shape`. */
export function broadcastTo(x: Tensor, shape: readonly number[]): Tensor {
  const op = "Tensor.broadcastTo";
  expectTensor(op, "this", x);
  if (!Array.isArray(shape) || !shape.every((s) => Number.isSafeInteger(s) && s >= 0)) {
    throw invalidArgument(
      op,
      `shape: expected an array of non-negative integers, got ${describeValue(shape)}`,
    );
  }
  const target = broadcastShapes(op, [x.shape, shape], ["this tensor", "shape"]);
  if (target.length !== shape.length || target.some((s, i) => s !== shape[i])) {
    throw invalidArgument(op, `shape: ${shapeText(x.shape)} cannot be broadcast to ${shapeText(shape)}`);
  }
  return produce(shape, x.dtype, x.device, (out) => {
    unwrap(native().ak_copy(out.descriptor(), broadcastView(x, shape, op)), op);
  });
}

/** A view of `x` with a dim of size 1 inserted at `dim` (in [-rank - 1, rank]). */
export function unsqueeze(x: Tensor, dim: number): Tensor {
  const op = "Tensor.unsqueeze";
  expectTensor(op, "this", x);
  const d = normalizeDim(op, dim, x.ndim + 1);
  const shape = [...x.shape];
  shape.splice(d, 0, 1);
  return x.reshape(shape);
}

/** A view of `x` without the dims of size 1 (all of them, or the ones named, each of which must have size 1). */
export function squeeze(x: Tensor, dims?: number | readonly number[]): Tensor {
  const op = "Tensor.squeeze";
  expectTensor(op, "this", x);
  let drop: number[];
  if (dims === undefined) {
    drop = x.shape.flatMap((s, d) => (s === 1 ? [d] : []));
  } else {
    drop = (Array.isArray(dims) ? dims : [dims]).map((d, i) => normalizeDim(op, d, x.ndim, `dim[${i}]`));
    for (const d of drop) {
      if (x.shape[d] !== 1) throw invalidArgument(op, `dim: dim ${d} has size ${x.shape[d]}, not 1`);
    }
  }
  return x.reshape(x.shape.filter((_, d) => !drop.includes(d)));
}
