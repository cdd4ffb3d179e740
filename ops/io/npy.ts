/**
 * NumPy `.npy` files: load and save tensors of every attnkit dtype.
 *
 * Element types map to descrs `<f8`, `<f4`, `<f2`, `<i4`, `<i8` and `|b1`; big-endian (`>`) files
 * and `fortran_order` arrays load too. NumPy has no bfloat16 of its own, so:
 *
 * - saving a bfloat16 tensor writes the descr `'bfloat16'`, which `np.load` reads once `ml_dtypes`
 *   is imported (it registers that name with NumPy);
 * - loading accepts `'bfloat16'`, and the raw 2-byte descr `'<V2'` that `np.save` writes for an
 *   `ml_dtypes.bfloat16` array, when the caller says what those bytes are: `{ dtype: "bfloat16" }`.
 *
 * @example
 * ```ts
 * import { loadNpy, saveNpy, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([2, 3], { seed: 1 });
 * await saveNpy("/tmp/x.npy", x);
 * using y = await loadNpy("/tmp/x.npy");
 * ```
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions } from "../args.ts";
import type { Device } from "../device.ts";
import { type DType, dtypeSize, parseDType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";
import {
  type FileSource,
  numelOf,
  readFileChecked,
  swapBytes,
  tensorBytesInto,
  tensorFromBytes,
  writeFileChecked,
} from "./raw.ts";

/** Options of {@link loadNpy} and {@link decodeNpy}. */
export interface NpyLoadOptions {
  /** Where the tensor goes (default `"cpu"`). */
  device?: Device | string;
  /**
   * What the elements are when the header cannot say: required for `'<V2'` (raw 2-byte elements,
   * as `np.save` writes `ml_dtypes.bfloat16`), where it must be `"bfloat16"` or `"float16"`. When
   * the header names a type, this must agree with it.
   */
  dtype?: DType;
}

/** Options of {@link saveNpy} and {@link encodeNpy}. */
export interface NpySaveOptions {
  /**
   * The descr written for bfloat16: `"bfloat16"` (default; `np.load` reads it once `ml_dtypes` is
   * imported) or `"<V2"` (raw 2-byte elements that any NumPy loads, to be viewed as bfloat16).
   */
  bfloat16Descr?: "bfloat16" | "<V2";
}

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"

// descr (without its byte-order character) -> dtype
const DESCR_TYPES: Record<string, DType> = {
  f8: "float64",
  f4: "float32",
  f2: "float16",
  i4: "int32",
  i8: "int64",
  b1: "bool",
};

const DTYPE_DESCRS: Record<DType, string> = {
  float64: "<f8",
  float32: "<f4",
  float16: "<f2",
  bfloat16: "bfloat16",
  int32: "<i4",
  int64: "<i8",
  bool: "|b1",
  float8_e4m3: "float8_e4m3fn",
};

/**
 * Reads a `.npy` file (a path, a file URL, or its bytes) into a new tensor.
 *
 * @example
 * ```ts
 * import { defaultDevice, loadNpy, saveNpy, Tensor } from "@attnkit/attnkit";
 * // A file as np.save("q.npy", q.float().numpy()) writes it from Python; here saved by attnkit.
 * const path = `${await Deno.makeTempDir()}/q.npy`;
 * using saved = Tensor.randn([2, 16, 4, 32], { seed: 1 });
 * await saveNpy(path, saved);
 * using q = await loadNpy(path, { device: defaultDevice() }); // onto the GPU when there is one
 * console.log(q.shape, q.dtype); // [2, 16, 4, 32] float32
 * ```
 */
export async function loadNpy(source: FileSource, options: NpyLoadOptions = {}): Promise<Tensor> {
  checkOptions("loadNpy", options, { device: "any", dtype: "any" });
  const bytes = source instanceof Uint8Array ? source : await readFile(source, "loadNpy");
  return decode(bytes, options, "loadNpy");
}

/**
 * Decodes the bytes of a `.npy` file into a new tensor (synchronous {@link loadNpy}).
 *
 * @example
 * ```ts
 * import { decodeNpy, encodeNpy, Tensor } from "@attnkit/attnkit";
 * using a = Tensor.arange(6, undefined, 1, { dtype: "int32" });
 * using b = decodeNpy(encodeNpy(a));
 * ```
 */
export function decodeNpy(bytes: Uint8Array, options: NpyLoadOptions = {}): Tensor {
  return decode(bytes, options, "decodeNpy");
}

function decode(bytes: Uint8Array, options: NpyLoadOptions, op: string): Tensor {
  checkOptions(op, options, { device: "any", dtype: "any" });
  if (bytes.length < 10 || MAGIC.some((m, i) => bytes[i] !== m)) {
    throw invalidArgument(op, `file: not a .npy file (it does not start with "\\x93NUMPY")`);
  }
  const major = bytes[6];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let headerStart: number, headerLength: number;
  if (major === 1) {
    headerLength = view.getUint16(8, true);
    headerStart = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) throw invalidArgument(op, `file: truncated header`);
    headerLength = view.getUint32(8, true);
    headerStart = 12;
  } else {
    throw invalidArgument(op, `file: unsupported .npy format version ${major}.${bytes[7]}`);
  }
  const dataStart = headerStart + headerLength;
  if (dataStart > bytes.length) throw invalidArgument(op, `file: truncated header`);
  const text = new TextDecoder(major === 3 ? "utf-8" : "latin1").decode(
    bytes.subarray(headerStart, dataStart),
  );
  const header = parseHeader(text, op);
  const { dtype, bigEndian } = resolveDType(header.descr, options.dtype, op);
  const data = bytes.subarray(dataStart);
  const expected = numelOf(header.shape) * dtypeSize(dtype);
  if (data.byteLength !== expected) {
    throw invalidArgument(
      op,
      `data: shape [${header.shape.join(", ")}] of ${header.descr} needs ${expected} bytes, the file holds ` +
        `${data.byteLength}`,
    );
  }
  const ordered = bigEndian ? swapBytes(data, dtypeSize(dtype)) : data;
  if (!header.fortranOrder || header.shape.length < 2) {
    return tensorFromBytes(ordered, header.shape, dtype, options.device, op);
  }
  // Column-major data is the row-major layout of the reversed shape: load that, then permute back.
  const reversed = [...header.shape].reverse();
  using staged = tensorFromBytes(ordered, reversed, dtype, options.device, op);
  return staged.permute(reversed.map((_, i) => reversed.length - 1 - i));
}

/**
 * Writes a tensor to a `.npy` file (format 1.0, or 2.0 for very long headers).
 *
 * @example
 * ```ts
 * import { saveNpy, Tensor } from "@attnkit/attnkit";
 * using out = Tensor.randn([4, 8], { seed: 3 });
 * await saveNpy("/tmp/out.npy", out); // np.load("/tmp/out.npy") in Python
 * ```
 */
export async function saveNpy(
  path: string | URL,
  tensor: Tensor,
  options: NpySaveOptions = {},
): Promise<void> {
  await writeFileChecked(path, encode(tensor, options, "saveNpy"), "saveNpy");
}

/**
 * The bytes of a `.npy` file holding the tensor.
 *
 * @example
 * ```ts
 * import { encodeNpy, Tensor } from "@attnkit/attnkit";
 * using a = Tensor.ones([2, 2], { dtype: "bfloat16" });
 * const bytes = encodeNpy(a); // header descr 'bfloat16'
 * ```
 */
export function encodeNpy(tensor: Tensor, options: NpySaveOptions = {}): Uint8Array {
  return encode(tensor, options, "encodeNpy");
}

function encode(tensor: Tensor, options: NpySaveOptions, op: string): Uint8Array {
  checkOptions(op, options, { bfloat16Descr: "any" });
  if (!(tensor instanceof Tensor)) throw invalidArgument(op, `tensor: expected a Tensor`);
  if (tensor.disposed) throw invalidArgument(op, `tensor: the tensor was disposed`);
  const bf16 = options.bfloat16Descr ?? "bfloat16";
  if (bf16 !== "bfloat16" && bf16 !== "<V2") {
    throw invalidArgument(op, `bfloat16Descr: expected "bfloat16" or "<V2", got ${JSON.stringify(bf16)}`);
  }
  const descr = tensor.dtype === "bfloat16" ? bf16 : DTYPE_DESCRS[tensor.dtype];
  const dims = tensor.shape.length === 1 ? `(${tensor.shape[0]},)` : `(${tensor.shape.join(", ")})`;
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${dims}, }`;
  // As NumPy writes it: room for the first size to grow to 21 digits, then spaces so the data starts
  // on a 64-byte boundary, then a newline. Format 2.0 only when the header outgrows 16 bits.
  const growth = tensor.shape.length > 0 ? " ".repeat(Math.max(0, 21 - String(tensor.shape[0]).length)) : "";
  const body = dict + growth;
  let prefix = 10;
  let total = prefix + body.length + 1 + (64 - ((prefix + body.length + 1) % 64));
  if (total - prefix > 0xffff) {
    prefix = 12;
    total = prefix + body.length + 1 + (64 - ((prefix + body.length + 1) % 64));
  }
  const headerLength = total - prefix;
  const header = body + " ".repeat(headerLength - body.length - 1) + "\n";
  const out = new Uint8Array(total + tensor.nbytes);
  out.set(MAGIC, 0);
  const view = new DataView(out.buffer);
  if (prefix === 10) {
    out[6] = 1;
    view.setUint16(8, headerLength, true);
  } else {
    out[6] = 2;
    view.setUint32(8, headerLength, true);
  }
  for (let i = 0; i < header.length; i++) out[prefix + i] = header.charCodeAt(i);
  tensorBytesInto(tensor, out.subarray(total), op);
  return out;
}

interface NpyHeader {
  descr: string;
  fortranOrder: boolean;
  shape: number[];
}

function resolveDType(
  descr: string,
  wanted: DType | undefined,
  op: string,
): { dtype: DType; bigEndian: boolean } {
  const override = wanted === undefined ? undefined : parseDType(wanted, op);
  let dtype: DType | undefined;
  let bigEndian = false;
  if (descr === "bfloat16" || descr === "<bfloat16") {
    dtype = "bfloat16";
  } else if (descr === "float8_e4m3fn" || descr === "<float8_e4m3fn") {
    dtype = "float8_e4m3"; // ml_dtypes' name, as np.save writes it
  } else if (/^[<>|=]?V2$/.test(descr)) {
    if (override !== "bfloat16" && override !== "float16") {
      throw invalidArgument(
        op,
        `dtype: the file holds raw 2-byte elements (descr '${descr}', as np.save writes ml_dtypes.bfloat16); ` +
          `pass { dtype: "bfloat16" } (or "float16") to say what they are`,
      );
    }
    return { dtype: override, bigEndian: false };
  } else {
    const m = /^([<>|=]?)([a-zA-Z]\d+)$/.exec(descr);
    dtype = m ? DESCR_TYPES[m[2]] : undefined;
    bigEndian = m !== null && m[1] === ">";
  }
  if (dtype === undefined) {
    throw invalidArgument(
      op,
      `descr: '${descr}' is not supported; expected one of <f8, <f4, <f2, bfloat16, float8_e4m3fn, <i4, <i8, |b1 ` +
        `(cast the array in NumPy first)`,
    );
  }
  if (override !== undefined && override !== dtype) {
    throw invalidArgument(op, `dtype: the file holds ${dtype} (descr '${descr}'), not ${override}`);
  }
  return { dtype, bigEndian };
}

// ---- the header: a Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } ----

type PyValue = string | number | boolean | null | PyValue[] | Map<string, PyValue>;

function parseHeader(text: string, op: string): NpyHeader {
  let value: PyValue;
  try {
    value = new PyLiteralParser(text).parseAll();
  } catch (e) {
    throw invalidArgument(op, `header: cannot parse ${JSON.stringify(text.trim())}: ${(e as Error).message}`);
  }
  if (!(value instanceof Map)) {
    throw invalidArgument(op, `header: expected a dict, got ${JSON.stringify(text)}`);
  }
  const descr = value.get("descr");
  const fortran = value.get("fortran_order");
  const shape = value.get("shape");
  if (Array.isArray(descr)) {
    throw invalidArgument(op, `descr: structured dtypes (${JSON.stringify(descr)}) are not supported`);
  }
  if (typeof descr !== "string") throw invalidArgument(op, `header: 'descr' is missing or not a string`);
  if (typeof fortran !== "boolean") {
    throw invalidArgument(op, `header: 'fortran_order' is missing or not a bool`);
  }
  if (
    !Array.isArray(shape) || !shape.every((s) => typeof s === "number" && Number.isSafeInteger(s) && s >= 0)
  ) {
    throw invalidArgument(op, `header: 'shape' is missing or not a tuple of sizes`);
  }
  return { descr, fortranOrder: fortran, shape: shape as number[] };
}

class PyLiteralParser {
  #pos = 0;
  constructor(readonly text: string) {}

  parseAll(): PyValue {
    const v = this.#value();
    this.#skip();
    if (this.#pos !== this.text.length) throw new Error(`unexpected text at ${this.#pos}`);
    return v;
  }

  #skip(): void {
    while (this.#pos < this.text.length && /\s/.test(this.text[this.#pos])) this.#pos++;
  }

  #value(): PyValue {
    this.#skip();
    const c = this.text[this.#pos];
    if (c === "{") return this.#dict();
    if (c === "(" || c === "[") return this.#sequence(c === "(" ? ")" : "]");
    if (c === "'" || c === '"') return this.#string();
    const word = /^(True|False|None|-?\d+L?)/.exec(this.text.slice(this.#pos));
    if (!word) throw new Error(`unexpected ${JSON.stringify(c ?? "end")} at ${this.#pos}`);
    this.#pos += word[0].length;
    if (word[0] === "True") return true;
    if (word[0] === "False") return false;
    if (word[0] === "None") return null;
    return Number(word[0].replace("L", ""));
  }

  #expect(c: string): void {
    this.#skip();
    if (this.text[this.#pos] !== c) throw new Error(`expected '${c}' at ${this.#pos}`);
    this.#pos++;
  }

  #peek(): string | undefined {
    this.#skip();
    return this.text[this.#pos];
  }

  #dict(): Map<string, PyValue> {
    this.#expect("{");
    const out = new Map<string, PyValue>();
    while (this.#peek() !== "}") {
      const key = this.#value();
      if (typeof key !== "string") throw new Error(`dict keys must be strings`);
      this.#expect(":");
      out.set(key, this.#value());
      if (this.#peek() === ",") this.#pos++;
      else if (this.#peek() !== "}") throw new Error(`expected ',' or '}' at ${this.#pos}`);
    }
    this.#pos++;
    return out;
  }

  #sequence(close: string): PyValue[] {
    this.#pos++;
    const out: PyValue[] = [];
    while (this.#peek() !== close) {
      out.push(this.#value());
      if (this.#peek() === ",") this.#pos++;
      else if (this.#peek() !== close) throw new Error(`expected ',' or '${close}' at ${this.#pos}`);
    }
    this.#pos++;
    return out;
  }

  #string(): string {
    const quote = this.text[this.#pos++];
    const end = this.text.indexOf(quote, this.#pos);
    if (end < 0) throw new Error(`unterminated string`);
    const s = this.text.slice(this.#pos, end);
    this.#pos = end + 1;
    return s;
  }
}

function readFile(path: string | URL, op: string): Promise<Uint8Array> {
  return readFileChecked(path, op);
}
