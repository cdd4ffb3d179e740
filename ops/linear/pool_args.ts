/**
 * The per-sequence arguments of the pool ops (paged decode, paged conv1d, paged chunked prefill):
 * `stateIndices` (int32) and `hasInitialState` (bool), one entry per sequence on the inputs' device.
 *
 * @module
 */
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import type { Tensor } from "../tensor.ts";

/**
 * A per-sequence argument: a live tensor of `dtype`, shape `[dim]` (bound in, or checked against,
 * `sizes`), on `ref`'s device.
 */
export function perSequence(
  op: string,
  name: string,
  value: unknown,
  dtype: DType,
  ref: Tensor,
  refName: string,
  sizes: Record<string, number> = {},
  dim = "N",
): Tensor {
  const t = expectTensor(op, name, value);
  expectDType(op, name, t, [dtype]);
  expectSameDevice(op, name, t, ref, refName);
  expectShape(op, name, t, [dim], sizes);
  return t;
}

/** The same for an optional one (undefined or null: absent). */
export function optionalPerSequence(
  op: string,
  name: string,
  value: unknown,
  dtype: DType,
  ref: Tensor,
  refName: string,
  sizes: Record<string, number> = {},
  dim = "N",
): Tensor | undefined {
  return value === undefined || value === null
    ? undefined
    : perSequence(op, name, value, dtype, ref, refName, sizes, dim);
}
