/**
 * Raw bytes in and out of tensors, shared by the file formats: one copy between a host buffer and
 * device memory, with no per-element work in JavaScript.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import type { Device } from "../device.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";

/** A file path, a file URL or the file's bytes. */
export type FileSource = string | URL | Uint8Array;

/**
 * A new tensor holding `bytes` (little-endian elements of `dtype`, row-major) on `device`.
 * Bool bytes other than 0 and 1 are normalised to 1.
 */
export function tensorFromBytes(
  bytes: Uint8Array,
  shape: readonly number[],
  dtype: DType,
  device: Device | string | undefined,
  op: string,
): Tensor {
  const t = Tensor.empty(shape, { dtype, device });
  try {
    if (t.nbytes !== bytes.byteLength) {
      throw invalidArgument(
        op,
        `data: ${shape.length ? `[${shape.join(", ")}]` : "a scalar"} ${dtype} needs ${t.nbytes} bytes, ` +
          `the file holds ${bytes.byteLength}`,
      );
    }
    const data = dtype === "bool" ? normaliseBools(bytes) : bytes;
    unwrap(native().ak_copy_from_host(t.descriptor(op), data, BigInt(data.byteLength)), op);
  } catch (e) {
    t.dispose();
    throw e;
  }
  return t;
}

/** Copies a tensor's elements (little-endian, row-major) into `out`, which must be exactly its size. */
export function tensorBytesInto(tensor: Tensor, out: Uint8Array, op: string): void {
  if (out.byteLength !== tensor.nbytes) {
    throw invalidArgument(op, `out: expected ${tensor.nbytes} bytes, got ${out.byteLength}`);
  }
  unwrap(native().ak_copy_to_host(tensor.descriptor(op), out, BigInt(out.byteLength)), op);
}

// numpy and safetensors write bools as 0/1 bytes; anything else is normalised rather than trusted.
function normaliseBools(bytes: Uint8Array): Uint8Array {
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] > 1) return Uint8Array.from(bytes, (b) => (b ? 1 : 0));
  }
  return bytes;
}

/** Reverses the byte order of every `size`-byte element (for big-endian .npy files). */
export function swapBytes(bytes: Uint8Array, size: number): Uint8Array {
  if (size === 1) return bytes;
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) {
    for (let k = 0; k < size; k++) out[i + k] = bytes[i + size - 1 - k];
  }
  return out;
}

/** The number of elements of a shape. */
export function numelOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Reads `length` bytes at `offset` of an open file, failing clearly if the file is shorter. */
export async function readExactly(
  file: Deno.FsFile,
  offset: number,
  length: number,
  what: string,
  op: string,
): Promise<Uint8Array<ArrayBuffer>> {
  const out = new Uint8Array(length);
  await file.seek(offset, Deno.SeekMode.Start);
  let filled = 0;
  while (filled < length) {
    const n = await file.read(out.subarray(filled));
    if (n === null) {
      throw invalidArgument(
        op,
        `file: ends inside ${what} (${filled} of ${length} bytes at offset ${offset})`,
      );
    }
    filled += n;
  }
  return out;
}

/** Opens a path or file URL for reading, turning "not found" into an error that names the path. */
export async function openForReading(path: string | URL, op: string): Promise<Deno.FsFile> {
  try {
    return await Deno.open(path, { read: true });
  } catch (e) {
    throw invalidArgument(op, `path: cannot open ${String(path)}: ${(e as Error).message}`);
  }
}
