/**
 * Reductions over dims (sum, mean, max, min), and the numerically stable softmax family built from
 * them: the maximum is subtracted before exponentiating, in float32 (float64 for float64 inputs).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { contiguousStrides } from "../../ffi/descriptor.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { REDUCE_CODES, type ReduceName } from "./codes.ts";
import { normalizeDim, normalizeDims, produce, shapeText, Temps } from "./common.ts";
import { expectTensor } from "../checks.ts";
import { computeOf, floatOf } from "./dtypes.ts";
import { binary, unary, where } from "./elementwise.ts";

/** Options of the reductions. */
export interface ReduceOptions {
  /** Keep each reduced dim as a dim of size 1, so the result broadcasts against the input (default false). */
  keepDim?: boolean;
}

const REDUCE_OPTIONS: OptionSpec = { keepDim: "boolean" };

/** A dim or a list of dims; leaving it out reduces over every dim. */
export type Dims = number | readonly number[];

function resultType(name: ReduceName, dtype: DType): DType {
  if (name === "mean") return floatOf(dtype);
  if (name === "sum" && (dtype === "bool" || dtype === "int32" || dtype === "int64")) return "int64";
  return dtype;
}

/** `x` reduced over `dims`. */
export function reduce(x: Tensor, name: ReduceName, dims?: Dims, options?: ReduceOptions): Tensor {
  const op = `Tensor.${name}`;
  expectTensor(op, "this", x);
  const keepDim = checkOptions<ReduceOptions>(op, options, REDUCE_OPTIONS).keepDim ?? false;
  const reduced = normalizeDims(op, dims, x.ndim);
  const kept = [...Array(x.ndim).keys()].filter((d) => !reduced.includes(d));
  const keptShape = kept.map((d) => x.shape[d]);
  const count = reduced.reduce((n, d) => n * x.shape[d], 1);
  if ((name === "max" || name === "min") && count === 0 && keptShape.every((s) => s > 0)) {
    throw invalidArgument(
      op,
      `dim: the reduced dims of ${shapeText(x.shape)} hold no elements (a ${name} needs one)`,
    );
  }
  const dtype = resultType(name, x.dtype);
  using temps = new Temps();
  // mean computes in its float result type; the others read x as it is.
  const src = name === "mean" ? temps.cast(x, dtype) : x;
  const order = [...kept, ...reduced];
  const strides = src.strides;
  const outShape = keepDim ? x.shape.map((s, d) => (reduced.includes(d) ? 1 : s)) : keptShape;
  return produce(outShape, dtype, x.device, (out) => {
    unwrap(
      native().ak_reduce(
        out.viewDescriptor(keptShape, contiguousStrides(keptShape), op),
        src.viewDescriptor(order.map((d) => x.shape[d]), order.map((d) => strides[d]), op),
        reduced.length,
        REDUCE_CODES[name],
      ),
      op,
    );
  });
}

/** log(sum(exp(x))) over `dims`, with the maximum taken out first. */
export function logsumexp(x: Tensor, dims: Dims, options?: ReduceOptions): Tensor {
  const op = "Tensor.logsumexp";
  expectTensor(op, "this", x);
  const keepDim = checkOptions<ReduceOptions>(op, options, REDUCE_OPTIONS).keepDim ?? false;
  if (dims === undefined) throw invalidArgument(op, "dim: expected a dim or a list of dims");
  const reduced = normalizeDims(op, dims, x.ndim);
  using temps = new Temps();
  const xc = temps.cast(x, computeOf(x.dtype));
  const count = reduced.reduce((n, d) => n * x.shape[d], 1);
  let result: Tensor;
  if (count === 0) {
    // The log of an empty sum.
    const shape = x.shape.map((s, d) => (reduced.includes(d) ? 1 : s));
    result = temps.keep(Tensor.full(shape, -Infinity, { dtype: xc.dtype, device: x.device }));
  } else {
    // An infinite or NaN maximum is not taken out (x - inf would make NaN of an infinite sum).
    const m = temps.keep(reduce(xc, "max", reduced, { keepDim: true }));
    const finite = temps.keep(unary(m, "isFinite"));
    const shift = temps.keep(where(finite, m, 0));
    const centred = temps.keep(binary(xc, shift, "sub"));
    const e = temps.keep(unary(centred, "exp"));
    const s = temps.keep(reduce(e, "sum", reduced, { keepDim: true }));
    const l = temps.keep(unary(s, "log"));
    result = temps.keep(binary(l, shift, "add"));
  }
  // A view without the reduced dims shares the result's memory, which outlives the temporaries.
  const shaped = keepDim
    ? result
    : temps.keep(result.reshape(result.shape.filter((_, d) => !reduced.includes(d))));
  return temps.result(shaped, floatOf(x.dtype));
}

/** exp(x) normalised to sum to 1 along `dim`. */
export function softmax(x: Tensor, dim: number, log = false): Tensor {
  const op = log ? "Tensor.logSoftmax" : "Tensor.softmax";
  expectTensor(op, "this", x);
  if (x.ndim === 0) throw invalidArgument(op, "this: a softmax needs a tensor of rank 1 or more");
  const d = normalizeDim(op, dim, x.ndim);
  const out = floatOf(x.dtype);
  if (x.numel === 0) return Tensor.empty(x.shape, { dtype: out, device: x.device });
  using temps = new Temps();
  const xc = temps.cast(x, computeOf(x.dtype));
  let result: Tensor;
  if (log) {
    const l = temps.keep(logsumexp(xc, d, { keepDim: true }));
    result = temps.keep(binary(xc, l, "sub"));
  } else {
    const m = temps.keep(reduce(xc, "max", d, { keepDim: true }));
    const centred = temps.keep(binary(xc, m, "sub"));
    const e = temps.keep(unary(centred, "exp"));
    const s = temps.keep(reduce(e, "sum", d, { keepDim: true }));
    result = temps.keep(binary(e, s, "div"));
  }
  return temps.result(result, out);
}
