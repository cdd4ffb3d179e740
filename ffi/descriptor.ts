/**
 * Encodes `ak_tensor` descriptors (see csrc/include/attnkit.h): 152 bytes holding the data pointer,
 * dtype, rank, device, shape and strides (in elements).
 *
 * @module
 */

/** Size of an `ak_tensor` in bytes. */
export const DESCRIPTOR_BYTES = 152;
/** The C side's maximum rank. */
export const MAX_RANK = 8;

/** The fields of a descriptor. */
export interface DescriptorFields {
  /** Data pointer (null for an empty tensor). */
  ptr: Deno.PointerValue;
  /** `ak_dtype` code. */
  dtype: number;
  /** 0 CPU, 1 CUDA. */
  deviceType: number;
  /** Device index. */
  deviceIndex: number;
  /** Sizes. */
  shape: readonly number[];
  /** Strides in elements. */
  strides: readonly number[];
}

/** Builds a descriptor buffer to pass where the C ABI takes `const ak_tensor*`. */
export function encodeDescriptor(f: DescriptorFields): Uint8Array<ArrayBuffer> {
  const buf = new Uint8Array(DESCRIPTOR_BYTES);
  const view = new DataView(buf.buffer);
  view.setBigUint64(0, BigInt(Deno.UnsafePointer.value(f.ptr)), true);
  view.setInt32(8, f.dtype, true);
  view.setInt32(12, f.shape.length, true);
  view.setInt32(16, f.deviceType, true);
  view.setInt32(20, f.deviceIndex, true);
  for (let i = 0; i < f.shape.length; i++) {
    view.setBigInt64(24 + 8 * i, BigInt(f.shape[i]), true);
    view.setBigInt64(88 + 8 * i, BigInt(f.strides[i]), true);
  }
  return buf;
}

/** Row-major strides (in elements) of a shape. */
export function contiguousStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}
