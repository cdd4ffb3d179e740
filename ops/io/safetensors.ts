/**
 * `.safetensors` files: load and save named tensors of every attnkit dtype (dtype names F64, F32,
 * F16, BF16, I32, I64, BOOL), with the file's `__metadata__`.
 *
 * Loading from a path reads the header, then one tensor at a time, so a large file never needs a
 * second full copy in host memory; `names` loads only some of the tensors.
 *
 * @example
 * ```ts
 * import { loadSafetensors, saveSafetensors, Tensor } from "@attnkit/attnkit";
 * const path = `${await Deno.makeTempDir()}/inputs.safetensors`;
 * using q = Tensor.randn([1, 64, 4, 32], { dtype: "bfloat16", seed: 1 });
 * await saveSafetensors(path, { q }, { metadata: { note: "random inputs" } });
 * using file = await loadSafetensors(path);
 * console.log(file.tensors.q.shape, file.metadata.note); // [1, 64, 4, 32] random inputs
 * ```
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions } from "../args.ts";
import type { Device } from "../device.ts";
import { type DType, dtypeSize } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import {
  type FileSource,
  numelOf,
  openForReading,
  openForWriting,
  readExactly,
  tensorBytesInto,
  tensorFromBytes,
} from "./raw.ts";

const LOAD_OPTIONS = { device: "any", names: "any" } as const;

/** Options of {@link loadSafetensors} and {@link decodeSafetensors}. */
export interface SafetensorsLoadOptions {
  /** Where the tensors go (default `"cpu"`). */
  device?: Device | string;
  /** Load only these tensors (default: all). Naming one the file lacks throws. */
  names?: readonly string[];
}

/** Options of {@link saveSafetensors} and {@link encodeSafetensors}. */
export interface SafetensorsSaveOptions {
  /** Free-form string pairs stored as the header's `__metadata__`. */
  metadata?: Record<string, string>;
}

/** What {@link loadSafetensors} returns: the tensors by name and the metadata. Dispose it to free them all. */
export interface SafetensorsContents {
  /** The loaded tensors, by name. */
  readonly tensors: Record<string, Tensor>;
  /** The header's `__metadata__` (empty when the file has none). */
  readonly metadata: Record<string, string>;
  /** Disposes every tensor in `tensors`. */
  dispose(): void;
  /** For `using`: disposes every tensor. */
  [Symbol.dispose](): void;
}

const HEADER_LIMIT = 100_000_000; // the format's own bound on the header size

const NAMES_TO_DTYPES: Record<string, DType> = {
  F64: "float64",
  F32: "float32",
  F16: "float16",
  BF16: "bfloat16",
  I32: "int32",
  I64: "int64",
  BOOL: "bool",
  F8_E4M3: "float8_e4m3",
};

const DTYPES_TO_NAMES: Record<DType, string> = {
  float64: "F64",
  float32: "F32",
  float16: "F16",
  bfloat16: "BF16",
  int32: "I32",
  int64: "I64",
  bool: "BOOL",
  float8_e4m3: "F8_E4M3",
};

interface Entry {
  name: string;
  dtype: DType;
  shape: number[];
  begin: number;
  end: number;
}

interface Header {
  entries: Entry[];
  metadata: Record<string, string>;
  dataStart: number;
}

/**
 * Reads a `.safetensors` file (a path, a file URL, or its bytes) into new tensors.
 *
 * @example
 * ```ts
 * import { defaultDevice, loadSafetensors, saveSafetensors, Tensor } from "@attnkit/attnkit";
 * // A file as safetensors.torch.save_file({"q": q, "k": k}, "qk.safetensors") writes it from Python;
 * // here saved by attnkit.
 * const path = `${await Deno.makeTempDir()}/qk.safetensors`;
 * using q0 = Tensor.randn([1, 64, 4, 32], { dtype: "bfloat16", seed: 1 });
 * using k0 = Tensor.randn([1, 64, 4, 32], { dtype: "bfloat16", seed: 2 });
 * await saveSafetensors(path, { q: q0, k: k0 });
 * using file = await loadSafetensors(path, { device: defaultDevice(), names: ["q"] }); // q only
 * console.log(Object.keys(file.tensors), file.tensors.q.dtype); // ["q"] bfloat16
 * ```
 */
export async function loadSafetensors(
  source: FileSource,
  options: SafetensorsLoadOptions = {},
): Promise<SafetensorsContents> {
  const op = "loadSafetensors";
  if (source instanceof Uint8Array) return decode(source, options, op);
  checkOptions(op, options, LOAD_OPTIONS);
  const file = await openForReading(source, op);
  try {
    const size = (await file.stat()).size;
    if (size < 8) throw invalidArgument(op, `file: ${size} bytes is too short for a .safetensors file`);
    const prefix = await readExactly(file, 0, 8, "the header size", op);
    const headerLength = readHeaderLength(prefix, size, op);
    const text = await readExactly(file, 8, headerLength, "the header", op);
    const header = parseHeader(text, size, op);
    const wanted = select(header.entries, options.names, op);
    return await collect(wanted, header.metadata, async (e) => {
      const bytes = await readExactly(
        file,
        header.dataStart + e.begin,
        e.end - e.begin,
        `tensor '${e.name}'`,
        op,
      );
      return tensorFromBytes(bytes, e.shape, e.dtype, options.device, op);
    });
  } finally {
    file.close();
  }
}

/**
 * Decodes the bytes of a `.safetensors` file into new tensors (synchronous {@link loadSafetensors}).
 *
 * @example
 * ```ts
 * import { decodeSafetensors, encodeSafetensors, Tensor } from "@attnkit/attnkit";
 * using a = Tensor.ones([2, 2]);
 * using file = decodeSafetensors(encodeSafetensors({ a }));
 * ```
 */
export function decodeSafetensors(
  bytes: Uint8Array,
  options: SafetensorsLoadOptions = {},
): SafetensorsContents {
  return decode(bytes, options, "decodeSafetensors");
}

function decode(bytes: Uint8Array, options: SafetensorsLoadOptions, op: string): SafetensorsContents {
  checkOptions(op, options, LOAD_OPTIONS);
  if (bytes.length < 8) {
    throw invalidArgument(op, `file: ${bytes.length} bytes is too short for a .safetensors file`);
  }
  const headerLength = readHeaderLength(bytes, bytes.length, op);
  const header = parseHeader(bytes.subarray(8, 8 + headerLength), bytes.length, op);
  const wanted = select(header.entries, options.names, op);
  const tensors: Record<string, Tensor> = {};
  try {
    for (const e of wanted) {
      const data = bytes.subarray(header.dataStart + e.begin, header.dataStart + e.end);
      tensors[e.name] = tensorFromBytes(data, e.shape, e.dtype, options.device, op);
    }
  } catch (err) {
    for (const t of Object.values(tensors)) t.dispose();
    throw err;
  }
  return contents(tensors, header.metadata);
}

/**
 * Writes named tensors to a `.safetensors` file, one tensor at a time.
 *
 * @example
 * ```ts
 * import { saveSafetensors, Tensor } from "@attnkit/attnkit";
 * using out = Tensor.randn([2, 8], { seed: 2 });
 * await saveSafetensors("/tmp/out.safetensors", { out });
 * // Python: safetensors.torch.load_file("/tmp/out.safetensors")["out"]
 * ```
 */
export async function saveSafetensors(
  path: string | URL,
  tensors: Record<string, Tensor>,
  options: SafetensorsSaveOptions = {},
): Promise<void> {
  const op = "saveSafetensors";
  const layout = plan(tensors, options, op);
  const file = await openForWriting(path, op);
  try {
    await writeAll(file, layout.prefix);
    for (const e of layout.entries) {
      const bytes = new Uint8Array(e.end - e.begin);
      tensorBytesInto(tensors[e.name], bytes, op);
      await writeAll(file, bytes);
    }
  } finally {
    file.close();
  }
}

/**
 * The bytes of a `.safetensors` file holding the named tensors.
 *
 * @example
 * ```ts
 * import { encodeSafetensors, Tensor } from "@attnkit/attnkit";
 * using w = Tensor.ones([4, 4], { dtype: "bfloat16" });
 * const bytes = encodeSafetensors({ w }, { metadata: { format: "pt" } });
 * ```
 */
export function encodeSafetensors(
  tensors: Record<string, Tensor>,
  options: SafetensorsSaveOptions = {},
): Uint8Array {
  const op = "encodeSafetensors";
  const layout = plan(tensors, options, op);
  const out = new Uint8Array(layout.prefix.length + layout.dataBytes);
  out.set(layout.prefix, 0);
  for (const e of layout.entries) {
    tensorBytesInto(
      tensors[e.name],
      out.subarray(layout.prefix.length + e.begin, layout.prefix.length + e.end),
      op,
    );
  }
  return out;
}

// ---- reading ----

function readHeaderLength(prefix: Uint8Array, fileSize: number, op: string): number {
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n > BigInt(HEADER_LIMIT)) {
    throw invalidArgument(op, `file: header size ${n} exceeds the format's limit of ${HEADER_LIMIT} bytes`);
  }
  if (Number(n) + 8 > fileSize) {
    throw invalidArgument(op, `file: header size ${n} runs past the end of the file (${fileSize} bytes)`);
  }
  return Number(n);
}

function parseHeader(text: Uint8Array, fileSize: number, op: string): Header {
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(text));
  } catch (e) {
    throw invalidArgument(op, `header: not valid JSON (${(e as Error).message})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw invalidArgument(op, `header: expected a JSON object`);
  }
  const dataStart = 8 + text.length;
  const dataBytes = fileSize - dataStart;
  const metadata: Record<string, string> = {};
  const entries: Entry[] = [];
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        throw invalidArgument(op, `header: __metadata__ must be an object of strings`);
      }
      for (const [k, v] of Object.entries(value)) {
        if (typeof v !== "string") throw invalidArgument(op, `header: __metadata__.${k} must be a string`);
        metadata[k] = v;
      }
      continue;
    }
    entries.push(parseEntry(name, value, op));
  }
  // The data section must be covered exactly: no gaps, no overlaps, nothing past the end.
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = 0;
  for (const e of sorted) {
    if (e.begin !== cursor) {
      throw invalidArgument(
        op,
        `tensor '${e.name}': data_offsets [${e.begin}, ${e.end}] ` +
          (e.begin < cursor ? `overlap another tensor` : `leave a gap after byte ${cursor}`),
      );
    }
    cursor = e.end;
  }
  if (cursor !== dataBytes) {
    throw invalidArgument(
      op,
      `file: the tensors cover ${cursor} bytes of data, the file holds ${dataBytes} after its header`,
    );
  }
  return { entries, metadata, dataStart };
}

function parseEntry(name: string, value: unknown, op: string): Entry {
  const where = `tensor '${name}'`;
  if (typeof value !== "object" || value === null) throw invalidArgument(op, `${where}: expected an object`);
  const v = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  const dtype = typeof v.dtype === "string" ? NAMES_TO_DTYPES[v.dtype] : undefined;
  if (dtype === undefined) {
    throw invalidArgument(
      op,
      `${where}: dtype ${JSON.stringify(v.dtype)} is not supported; expected one of ` +
        `${Object.keys(NAMES_TO_DTYPES).join(", ")}`,
    );
  }
  const shape = v.shape;
  if (!Array.isArray(shape) || !shape.every((s) => Number.isSafeInteger(s) && s >= 0)) {
    throw invalidArgument(op, `${where}: shape must be a list of non-negative integers`);
  }
  const offsets = v.data_offsets;
  if (
    !Array.isArray(offsets) || offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) || offsets[0] > offsets[1]
  ) {
    throw invalidArgument(op, `${where}: data_offsets must be [begin, end] with 0 <= begin <= end`);
  }
  const [begin, end] = offsets as number[];
  const needed = numelOf(shape) * dtypeSize(dtype);
  if (end - begin !== needed) {
    throw invalidArgument(
      op,
      `${where}: shape [${shape.join(", ")}] of ${v.dtype} needs ${needed} bytes, data_offsets span ${
        end - begin
      }`,
    );
  }
  return { name, dtype, shape: shape as number[], begin, end };
}

function select(entries: Entry[], names: readonly string[] | undefined, op: string): Entry[] {
  if (names === undefined) return entries;
  const byName = new Map(entries.map((e) => [e.name, e]));
  return names.map((n) => {
    const e = byName.get(n);
    if (!e) {
      const known = entries.map((x) => x.name);
      throw invalidArgument(
        op,
        `names: the file has no tensor '${n}' (it has ${known.slice(0, 10).join(", ")}` +
          `${known.length > 10 ? `, ... ${known.length} in all` : ""})`,
      );
    }
    return e;
  });
}

async function collect(
  entries: Entry[],
  metadata: Record<string, string>,
  load: (e: Entry) => Promise<Tensor>,
): Promise<SafetensorsContents> {
  const tensors: Record<string, Tensor> = {};
  try {
    for (const e of entries) tensors[e.name] = await load(e);
  } catch (err) {
    for (const t of Object.values(tensors)) t.dispose();
    throw err;
  }
  return contents(tensors, metadata);
}

function contents(tensors: Record<string, Tensor>, metadata: Record<string, string>): SafetensorsContents {
  const dispose = () => {
    for (const t of Object.values(tensors)) t.dispose();
  };
  return { tensors, metadata, dispose, [Symbol.dispose]: dispose };
}

// ---- writing ----

interface Layout {
  prefix: Uint8Array; // the 8-byte size and the padded JSON header
  entries: Entry[];
  dataBytes: number;
}

function plan(tensors: Record<string, Tensor>, options: SafetensorsSaveOptions, op: string): Layout {
  checkOptions(op, options, { metadata: "object" });
  if (typeof tensors !== "object" || tensors === null || tensors instanceof Tensor) {
    throw invalidArgument(op, `tensors: expected an object of named tensors, e.g. { q, k }`);
  }
  const named = Object.entries(tensors);
  for (const [name, t] of named) {
    if (name === "" || name === "__metadata__") {
      throw invalidArgument(op, `tensors: '${name}' cannot name a tensor`);
    }
    if (!(t instanceof Tensor)) throw invalidArgument(op, `tensors.${name}: expected a Tensor`);
    if (t.disposed) throw invalidArgument(op, `tensors.${name}: the tensor was disposed`);
  }
  // Widest elements first, then by name: every tensor stays aligned to its element size.
  named.sort(([a, x], [b, y]) => dtypeSize(y.dtype) - dtypeSize(x.dtype) || (a < b ? -1 : a > b ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (options.metadata !== undefined) {
    for (const [k, v] of Object.entries(options.metadata)) {
      if (typeof v !== "string") {
        throw invalidArgument(op, `metadata.${k}: expected a string, got ${typeof v}`);
      }
    }
    header.__metadata__ = options.metadata;
  }
  const entries: Entry[] = [];
  let offset = 0;
  for (const [name, t] of named) {
    const entry = { name, dtype: t.dtype, shape: [...t.shape], begin: offset, end: offset + t.nbytes };
    header[name] = {
      dtype: DTYPES_TO_NAMES[t.dtype],
      shape: entry.shape,
      data_offsets: [entry.begin, entry.end],
    };
    entries.push(entry);
    offset = entry.end;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.length / 8) * 8; // keeps the data section 8-byte aligned
  const prefix = new Uint8Array(8 + padded).fill(0x20, 8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(padded), true);
  prefix.set(json, 8);
  return { prefix, entries, dataBytes: offset };
}

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let done = 0; done < bytes.length;) done += await file.write(bytes.subarray(done));
}
