/**
 * Element-wise math with broadcasting: one native call per op, operands cast to the promoted dtype
 * first (see dtypes.ts), numbers passed as scalars.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import { broadcastShapes, broadcastView } from "./broadcast.ts";
import { BINARY_CODES, type BinaryName, UNARY_CODES, type UnaryName } from "./codes.ts";
import { checkOperand, produce, Temps } from "./common.ts";
import { expectSameDevice, expectTensor } from "../checks.ts";
import { arithmeticOf, floatOf, promoteScalar, promoteTypes, scalarsType } from "./dtypes.ts";

// What each op computes in, given its operands' promoted dtype, and whether it answers with a bool.
const FLOAT_OPS = new Set<string>(["sqrt", "exp", "log", "sigmoid", "tanh", "div", "pow"]);
const ARITHMETIC_OPS = new Set<string>(["neg", "abs", "square", "add", "sub", "mul"]);
// Ops with a bool result: codes 8 to 10 and from 48 (attnkit_math.h).
const isPredicate = (name: UnaryName | BinaryName) => {
  const code = name in UNARY_CODES ? UNARY_CODES[name as UnaryName] : BINARY_CODES[name as BinaryName];
  return (code >= 8 && code <= 10) || code >= 48;
};

function computeType(name: string, promoted: DType): DType {
  if (FLOAT_OPS.has(name)) return floatOf(promoted);
  if (ARITHMETIC_OPS.has(name)) return arithmeticOf(promoted);
  return promoted;
}

/** `x` mapped by a one-operand op. */
export function unary(x: Tensor, name: UnaryName): Tensor {
  const op = `Tensor.${name}`;
  expectTensor(op, "this", x);
  const dtype = computeType(name, x.dtype);
  using temps = new Temps();
  const src = temps.cast(x, dtype);
  return produce(x.shape, isPredicate(name) ? "bool" : dtype, x.device, (out) => {
    unwrap(native().ak_map_unary(out.descriptor(), src.descriptor(op), UNARY_CODES[name]), op);
  });
}

/** `op(a, b)` element by element, broadcasting `b` against `a`. */
export function binary(a: Tensor, b: Tensor | number, name: BinaryName): Tensor {
  const op = `Tensor.${name}`;
  expectTensor(op, "this", a);
  const other = checkOperand(op, "other", b);
  using temps = new Temps();
  if (typeof other === "number") {
    const dtype = computeType(name, promoteScalar(a.dtype, other));
    const src = temps.cast(a, dtype);
    return produce(a.shape, isPredicate(name) ? "bool" : dtype, a.device, (out) => {
      unwrap(
        native().ak_map_binary(out.descriptor(), src.descriptor(op), null, other, BINARY_CODES[name]),
        op,
      );
    });
  }
  expectSameDevice(op, "other", other, a, "this tensor");
  const dtype = computeType(name, promoteTypes(a.dtype, other.dtype));
  const shape = broadcastShapes(op, [a.shape, other.shape], ["this tensor", "other"]);
  const [x, y] = [temps.cast(a, dtype), temps.cast(other, dtype)];
  return produce(shape, isPredicate(name) ? "bool" : dtype, a.device, (out) => {
    unwrap(
      native().ak_map_binary(
        out.descriptor(),
        broadcastView(x, shape, op),
        broadcastView(y, shape, op),
        0,
        BINARY_CODES[name],
      ),
      op,
    );
  });
}

/**
 * Picks element by element: `a` where `cond` is true, else `b`, broadcasting all three. `cond` is a
 * bool tensor; `a` and `b` are tensors on its device or numbers. The result's dtype is `a`'s and
 * `b`'s promoted together (two numbers: int64 when both are integers, else float32).
 *
 * @example
 * ```ts
 * import { Tensor, where } from "@attnkit/attnkit";
 * using scores = Tensor.from([[1, 2], [3, 4]]);
 * using i = Tensor.arange(2).reshape([2, 1]);
 * using j = Tensor.arange(2);
 * using causal = i.ge(j); // [[true, false], [true, true]]
 * using masked = where(causal, scores, -Infinity);
 * console.log(masked.toArray()); // Float32Array [1, -Infinity, 3, 4]
 * ```
 */
export function where(cond: Tensor, a: Tensor | number, b: Tensor | number): Tensor {
  const op = "where";
  expectTensor(op, "cond", cond);
  if (cond.dtype !== "bool") {
    throw invalidArgument(
      op,
      `cond: expected a bool tensor, got ${cond.dtype} (compare first, e.g. x.gt(0))`,
    );
  }
  const [x, y] = [checkOperand(op, "a", a), checkOperand(op, "b", b)];
  if (x instanceof Tensor) expectSameDevice(op, "a", x, cond, "cond");
  if (y instanceof Tensor) expectSameDevice(op, "b", y, cond, "cond");
  const dtype = x instanceof Tensor
    ? (y instanceof Tensor ? promoteTypes(x.dtype, y.dtype) : promoteScalar(x.dtype, y))
    : (y instanceof Tensor ? promoteScalar(y.dtype, x) : scalarsType(x, y));
  using temps = new Temps();
  const stage = (v: Tensor | number) =>
    v instanceof Tensor
      ? temps.cast(v, dtype)
      : temps.keep(Tensor.full([], v, { dtype, device: cond.device }));
  const [ta, tb] = [stage(x), stage(y)];
  const shape = broadcastShapes(op, [cond.shape, ta.shape, tb.shape], ["cond", "a", "b"]);
  return produce(shape, dtype, cond.device, (out) => {
    unwrap(
      native().ak_where(
        out.descriptor(),
        broadcastView(cond, shape, op),
        broadcastView(ta, shape, op),
        broadcastView(tb, shape, op),
      ),
      op,
    );
  });
}
