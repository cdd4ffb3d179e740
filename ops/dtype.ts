/**
 * Element types of attnkit tensors.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";

/** The element types a Tensor can hold. */
export type DType =
  | "float32"
  | "float64"
  | "float16"
  | "bfloat16"
  | "int32"
  | "int64"
  | "bool"
  | "float8_e4m3";

/** Every DType, in the order of their C codes. */
export const DTYPES: readonly DType[] = [
  "float32",
  "float64",
  "float16",
  "bfloat16",
  "int32",
  "int64",
  "bool",
  "float8_e4m3",
];

const codes: Record<DType, number> = {
  float32: 0,
  float64: 1,
  float16: 2,
  bfloat16: 3,
  int32: 4,
  int64: 5,
  bool: 6,
  float8_e4m3: 7,
};

const sizes: Record<DType, number> = {
  float32: 4,
  float64: 8,
  float16: 2,
  bfloat16: 2,
  int32: 4,
  int64: 8,
  bool: 1,
  float8_e4m3: 1,
};

/** The C code of a dtype (`ak_dtype`). */
export function dtypeCode(dtype: DType): number {
  return codes[dtype];
}

/** Bytes per element. */
export function dtypeSize(dtype: DType): number {
  return sizes[parseDType(dtype, "dtypeSize")];
}

/**
 * True for float16, bfloat16, float32 and float64: the dtypes with arithmetic. float8_e4m3 (PyTorch's
 * float8_e4m3fn: no infinities, largest finite 448) is a storage type: cast, copied, filled and drawn at
 * random, and widened to float32 by `toArray()`.
 */
export function isFloating(dtype: DType): boolean {
  return dtype === "float32" || dtype === "float64" || dtype === "float16" || dtype === "bfloat16";
}

/** Checks that a value names a dtype; throws an AttnkitError naming `arg` otherwise. */
export function parseDType(value: unknown, op: string, arg = "dtype"): DType {
  if (typeof value === "string" && value in codes) return value as DType;
  throw invalidArgument(
    op,
    `${arg}: expected one of ${DTYPES.join(", ")}, got ${
      typeof value === "string" ? JSON.stringify(value) : String(value)
    }`,
  );
}

/** The typed array `Tensor.toArray()` returns for each dtype (16-bit floats widen to float32). */
export type ArrayFor<D extends DType> = D extends "float64" ? Float64Array
  : D extends "int32" ? Int32Array
  : D extends "int64" ? BigInt64Array
  : D extends "bool" ? Uint8Array
  : Float32Array;

/** Any typed array `Tensor.toArray()` can return. */
export type AnyArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;
