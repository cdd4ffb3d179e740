/**
 * Dtype promotion of the tensor math: which dtype the result of an op on two operands has.
 *
 * Kinds rank bool < integer < floating. Two tensors give the higher kind; within a kind the wider
 * dtype (int32 + int64 -> int64; float16 + bfloat16 -> float32, as neither holds the other). A
 * number operand counts as an integer when it is a safe integer, else as a float; it changes the
 * result only when its kind is higher than the tensor's: integer -> int64 for a bool tensor, float
 * -> float32 for an integer or bool tensor.
 *
 * @module
 */
import type { DType } from "../dtype.ts";

// float8_e4m3 is a float narrower than the 16-bit ones (each holds every e4m3 value exactly).
const KIND: Record<DType, number> = {
  float8_e4m3: 2,
  bool: 0,
  int32: 1,
  int64: 1,
  float16: 2,
  bfloat16: 2,
  float32: 2,
  float64: 2,
};

const WIDTH: Record<DType, number> = {
  float8_e4m3: 0,
  bool: 0,
  int32: 1,
  int64: 2,
  float16: 1,
  bfloat16: 1,
  float32: 2,
  float64: 3,
};

/** The dtype of an op on tensors of dtypes a and b. */
export function promoteTypes(a: DType, b: DType): DType {
  if (a === b) return a;
  if (KIND[a] !== KIND[b]) return KIND[a] > KIND[b] ? a : b;
  if (WIDTH[a] === WIDTH[b]) return "float32"; // float16 with bfloat16
  return WIDTH[a] > WIDTH[b] ? a : b;
}

/** The dtype of an op on a tensor of `dtype` and the number `value`. */
export function promoteScalar(dtype: DType, value: number): DType {
  const kind = Number.isSafeInteger(value) ? 1 : 2;
  if (KIND[dtype] >= kind) return dtype;
  return kind === 2 ? "float32" : "int64";
}

/** The dtype of an op on two numbers (e.g. both branches of `where`). */
export function scalarsType(a: number, b: number): DType {
  return Number.isSafeInteger(a) && Number.isSafeInteger(b) ? "int64" : "float32";
}

/** The dtype itself when floating, else float32 (for ops whose result is a float). */
export function floatOf(dtype: DType): DType {
  return KIND[dtype] === 2 ? dtype : "float32";
}

/** The dtype itself unless bool, which arithmetic treats as int64. */
export function arithmeticOf(dtype: DType): DType {
  return dtype === "bool" ? "int64" : dtype;
}

/** The dtype a composite float op (softmax, logsumexp) computes in: float64 for float64, else float32. */
export function computeOf(dtype: DType): DType {
  return dtype === "float64" ? "float64" : "float32";
}
