/**
 * Raw bytes in and out of tensors, shared by the file formats: one copy between a host buffer and
 * device memory, with no per-element work in JavaScript.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { describeValue } from "../args.ts";
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

/** Checks a path argument: a non-empty string or a file URL. */
export function checkPath(path: unknown, op: string): string | URL {
  if (path instanceof URL ? path.protocol === "file:" : typeof path === "string" && path !== "") {
    return path as string | URL;
  }
  throw invalidArgument(op, `path: expected a file path or a file: URL, got ${describeValue(path)}`);
}

// A file-system failure as an AttnkitError that names the path, and the flag a missing permission needs.
function fileError(path: string | URL, op: string, doing: string, e: unknown): Error {
  const denied = e instanceof Deno.errors.PermissionDenied || (e as Error)?.name === "NotCapable";
  const hint = denied ? ` (run with ${doing === "write" ? "--allow-write" : "--allow-read"})` : "";
  return invalidArgument(op, `path: cannot ${doing} ${String(path)}: ${(e as Error).message}${hint}`);
}

/** Opens a path or file URL for reading, turning failures into an error that names the path. */
export async function openForReading(path: string | URL, op: string, doing = "open"): Promise<Deno.FsFile> {
  checkPath(path, op);
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (e) {
    throw fileError(path, op, doing, e);
  }
  let isFile = false;
  try {
    isFile = (await file.stat()).isFile;
  } catch (e) {
    file.close();
    throw fileError(path, op, "open", e);
  }
  if (!isFile) {
    file.close();
    throw invalidArgument(op, `path: ${String(path)} is not a file`);
  }
  return file;
}

/** Opens (creating or truncating) a path for writing, turning failures into an error that names it. */
export async function openForWriting(path: string | URL, op: string): Promise<Deno.FsFile> {
  checkPath(path, op);
  try {
    return await Deno.open(path, { write: true, create: true, truncate: true });
  } catch (e) {
    throw fileError(path, op, "write", e);
  }
}

/** Writes a whole file, turning failures into an error that names the path. */
export async function writeFileChecked(path: string | URL, bytes: Uint8Array, op: string): Promise<void> {
  checkPath(path, op);
  try {
    await Deno.writeFile(path, bytes);
  } catch (e) {
    throw fileError(path, op, "write", e);
  }
}

/** Reads a whole file, turning failures into an error that names the path. */
export async function readFileChecked(path: string | URL, op: string): Promise<Uint8Array> {
  const file = await openForReading(path, op, "read");
  file.close();
  try {
    return await Deno.readFile(path);
  } catch (e) {
    throw fileError(path, op, "read", e);
  }
}
