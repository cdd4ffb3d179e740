/**
 * The op codes of the tensor-math C entries (`ak_map_op`, `ak_reduce_op` in attnkit_math.h).
 *
 * @module
 */

/** Element-wise ops with one operand. */
export const UNARY_CODES = {
  neg: 0,
  abs: 1,
  square: 2,
  sqrt: 3,
  exp: 4,
  log: 5,
  sigmoid: 6,
  tanh: 7,
  logicalNot: 8,
  isNan: 9,
  isFinite: 10,
} as const;

/** Element-wise ops with two operands. */
export const BINARY_CODES = {
  add: 32,
  sub: 33,
  mul: 34,
  div: 35,
  pow: 36,
  maximum: 37,
  minimum: 38,
  eq: 48,
  ne: 49,
  lt: 50,
  le: 51,
  gt: 52,
  ge: 53,
  logicalAnd: 54,
  logicalOr: 55,
} as const;

/** Reductions. */
export const REDUCE_CODES = { sum: 0, mean: 1, max: 2, min: 3 } as const;

/** The name of a unary op. */
export type UnaryName = keyof typeof UNARY_CODES;
/** The name of a binary op. */
export type BinaryName = keyof typeof BINARY_CODES;
/** The name of a reduction. */
export type ReduceName = keyof typeof REDUCE_CODES;
