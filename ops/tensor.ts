/**
 * Tensor: a dense, row-major block of device memory (CPU or CUDA) with a dtype and a shape.
 *
 * @module
 */
import { contiguousStrides, encodeDescriptor, MAX_RANK } from "../ffi/descriptor.ts";
import { AttnkitError, invalidArgument } from "../ffi/errors.ts";
import { checkArgument, checkOptions, describeValue, numberIn, type OptionSpec } from "./args.ts";
import { native, unwrap } from "../ffi/library.ts";
import { type Device, type DeviceId, parseDevice } from "./device.ts";
import { countTensor, countTensorBytes, creationSite, reportLeak } from "./memory.ts";
import { binary, unary } from "./tensor_math/elementwise.ts";
import {
  at,
  broadcastTo,
  indexSelect,
  type IndexSpec,
  select,
  slice,
  squeeze,
  unsqueeze,
} from "./tensor_math/indexing.ts";
import { matmul } from "./tensor_math/matmul.ts";
import { type Dims, logsumexp, reduce, type ReduceOptions, softmax } from "./tensor_math/reduce.ts";
import {
  type AnyArray,
  type ArrayFor,
  type DType,
  dtypeCode,
  dtypeSize,
  isFloating,
  parseDType,
} from "./dtype.ts";

/** Nested arrays of numbers (or booleans), as `Tensor.from` accepts them. */
export type NestedNumbers = number | boolean | readonly NestedNumbers[];

/** Typed arrays `Tensor.from` accepts. */
export type SourceArray =
  | Float32Array
  | Float64Array
  | Int32Array
  | BigInt64Array
  | Uint8Array
  | Uint16Array;

/** Options for making a tensor. */
export interface TensorOptions {
  /** Element type (default float32, or the source array's own type). */
  dtype?: DType;
  /** Where the tensor lives (default `"cpu"`). */
  device?: Device | string;
}

/** Options for random tensors. */
export interface RandomOptions extends TensorOptions {
  /** Key of the counter-based generator; default: the next draw of the global generator. */
  seed?: number | bigint;
  /** First counter value (default 0 with an explicit seed). */
  offset?: number | bigint;
}

const DEVICE_KIND = (
  v: unknown,
) => (typeof v === "string" ? undefined : 'a device ("cpu", "cuda", "cuda:N")');
const TENSOR_OPTIONS: OptionSpec = { dtype: "string", device: DEVICE_KIND };
const SEED_KIND = (v: unknown) =>
  (typeof v === "bigint" || (Number.isSafeInteger(v) && (v as number) >= 0))
    ? undefined
    : "a non-negative integer";
const RANDN_OPTIONS: OptionSpec = {
  ...TENSOR_OPTIONS,
  seed: SEED_KIND,
  offset: SEED_KIND,
  mean: "number",
  std: "number",
};
const RAND_OPTIONS: OptionSpec = {
  ...TENSOR_OPTIONS,
  seed: SEED_KIND,
  offset: SEED_KIND,
  low: "number",
  high: "number",
};
const BITS16 = numberIn(0, 0xffff, true);
const FROM_OPTIONS: OptionSpec = { ...TENSOR_OPTIONS, shape: "any" };
// Values a host array may stage at once: 2^31 elements (16 GB of float64), so that a bad argument
// fails at once instead of after gigabytes.
const MAX_HOST_ELEMENTS = 2 ** 31;
// Nesting a nested array may have (a tensor has at most 8 dimensions).
const MAX_NESTING = MAX_RANK;

// A block of memory shared by a tensor and its reshaped views; freed when the last one lets go.
class Storage {
  refs = 1;
  constructor(
    readonly ptr: Deno.PointerValue,
    readonly bytes: number,
    readonly device: DeviceId,
  ) {
    countTensorBytes(device.name, bytes);
  }

  release(): void {
    if (--this.refs > 0) return;
    countTensorBytes(this.device.name, -this.bytes);
    if (this.ptr !== null) {
      unwrap(native().ak_free(this.device.type, this.device.index, this.ptr), "Tensor.dispose");
    }
  }
}

// What the backstop below needs of a tensor it outlives: its memory, and (with leak reports on) what
// it was and where it was made.
interface Remains {
  storage: Storage;
  what?: string;
  site?: string;
}

// The backstop for tensors that are dropped without dispose(): give their memory back when collected
// (safe: a collected tensor can no longer reach its memory, and CUDA frees are stream-ordered after
// any work still queued on it), reporting the leak when asked to.
const collector = new FinalizationRegistry<Remains>((remains) => {
  countTensor(remains.storage.device.name, -1);
  if (remains.site !== undefined) reportLeak(remains.what ?? "a tensor", remains.site);
  try {
    remains.storage.release();
  } catch {
    // The library may be unloading at exit; nothing useful can be done here.
  }
});

let globalSeed: bigint | undefined;
let globalOffset = 0n;

/**
 * Sets the global generator's seed: later random tensors made without an explicit `seed` are then
 * reproducible.
 *
 * @example
 * ```ts
 * import { manualSeed, Tensor } from "@attnkit/attnkit";
 * manualSeed(42);
 * using a = Tensor.randn([3]);
 * ```
 */
export function manualSeed(seed: number | bigint): void {
  checkArgument("manualSeed", "seed", seed, SEED_KIND);
  globalSeed = BigInt.asUintN(64, BigInt(seed));
  globalOffset = 0n;
}

function nextDraw(count: number): { seed: bigint; offset: bigint } {
  if (globalSeed === undefined) {
    const words = crypto.getRandomValues(new Uint32Array(2));
    globalSeed = (BigInt(words[0]) << 32n) | BigInt(words[1]);
  }
  const offset = globalOffset;
  // Keep offsets even: normals are drawn in pairs from one counter.
  globalOffset += BigInt(count + (count & 1));
  return { seed: globalSeed, offset };
}

function product(shape: readonly number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

function checkShape(shape: readonly number[], op: string, arg = "shape"): number[] {
  if (!Array.isArray(shape)) {
    throw invalidArgument(op, `${arg}: expected an array of sizes, got ${String(shape)}`);
  }
  if (shape.length > MAX_RANK) throw invalidArgument(op, `${arg}: rank ${shape.length} exceeds ${MAX_RANK}`);
  let count = 1n;
  for (const s of shape) {
    if (!Number.isSafeInteger(s) || s < 0) {
      throw invalidArgument(op, `${arg}: sizes must be non-negative integers, got [${shape.join(", ")}]`);
    }
    count *= BigInt(s);
  }
  // Counted exactly: a product past 2^53 would round, and its byte count could wrap in the C ABI.
  if (count > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw invalidArgument(
      op,
      `${arg}: [${
        shape.join(", ")
      }] holds ${count} elements, more than 2^53 - 1 (the most a tensor may hold)`,
    );
  }
  return [...shape];
}

function shapeText(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

/**
 * A dense row-major tensor in CPU or CUDA memory.
 *
 * Tensors own device memory: release it with `dispose()` or a `using` declaration (a finalizer
 * is only a backstop). Reshaped views share memory with their source; every other method returns
 * a new tensor.
 *
 * Math for writing references runs on the tensor's device (CPU or CUDA) without a trip through the host:
 * indexing (`slice`, `select`, `at`, `indexSelect`), element-wise ops, reductions (`sum`, `mean`,
 * `max`, `min`, `logsumexp`, `softmax`) and `matmul`. Element-wise ops broadcast as NumPy and
 * PyTorch do (shapes aligned at their last dims; sizes equal or 1) and take a tensor on the same
 * device or a number. The result's dtype is promoted: bool < integers < floats, and within a kind the
 * wider (int32 + int64 -> int64, float16 + bfloat16 -> float32); a number changes it only when its
 * kind is higher (a non-integer with an integer tensor -> float32, an integer with a bool tensor ->
 * int64). Comparisons give bool; `div`, `pow`, `sqrt`, `exp`, `log`, `sigmoid`, `tanh` give floats
 * (float32 for integer inputs); arithmetic on bools counts them as int64. Floats compute in float64
 * on the CPU and in float32 (float64 for float64) on CUDA, rounded once to the result's dtype;
 * integers wrap around. The intermediates of a chain such as `a.sub(b).abs().max()` are left to the
 * garbage collector (the finalizer frees them); name them with `using` where memory is tight.
 *
 * @example
 * ```ts
 * import { Tensor } from "@attnkit/attnkit";
 * using x = Tensor.from([[1, 2, 3], [4, 5, 6]], { dtype: "float32" });
 * using y = x.transpose(0, 1);
 * console.log(y.shape, y.toArray()); // [3, 2] Float32Array [1, 4, 2, 5, 3, 6]
 * ```
 */
export class Tensor {
  /** Element type. */
  readonly dtype: DType;
  /** Sizes, outermost first. */
  readonly shape: readonly number[];
  /** `"cpu"` or `"cuda:N"`. */
  readonly device: "cpu" | `cuda:${number}`;
  #storage: Storage | null;
  #deviceId: DeviceId;
  #descriptor: Uint8Array<ArrayBuffer> | undefined;

  private constructor(storage: Storage, dtype: DType, shape: readonly number[]) {
    this.#storage = storage;
    this.#deviceId = storage.device;
    this.dtype = dtype;
    this.shape = Object.freeze([...shape]);
    this.device = storage.device.name;
    countTensor(this.device, 1);
    const site = creationSite();
    const what = site === undefined
      ? undefined
      : `a Tensor ${shapeText(this.shape)} ${dtype} on ${this.device}`;
    collector.register(this, { storage, what, site }, this);
  }

  // ---- making tensors ----

  /**
   * An uninitialised tensor (its contents are whatever the memory held).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using out = Tensor.empty([2, 64], { dtype: "bfloat16" });
   * ```
   */
  static empty(shape: readonly number[], options: TensorOptions = {}): Tensor {
    return Tensor.#empty(shape, checkOptions("Tensor.empty", options, TENSOR_OPTIONS), "Tensor.empty");
  }

  static #empty(shape: readonly number[], options: TensorOptions, op: string): Tensor {
    const dims = checkShape(shape, op);
    const dtype = parseDType(options.dtype ?? "float32", op);
    const device = parseDevice(options.device, op);
    const bytes = product(dims) * dtypeSize(dtype);
    const out = new BigUint64Array(1);
    unwrap(native().ak_alloc(device.type, device.index, BigInt(bytes), out), op);
    const ptr = out[0] === 0n ? null : Deno.UnsafePointer.create(out[0]);
    return new Tensor(new Storage(ptr, bytes, device), dtype, dims);
  }

  /**
   * A tensor of zeros.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using state = Tensor.zeros([1, 4, 64, 64]);
   * ```
   */
  static zeros(shape: readonly number[], options: TensorOptions = {}): Tensor {
    return Tensor.#full(shape, 0, checkOptions("Tensor.zeros", options, TENSOR_OPTIONS), "Tensor.zeros");
  }

  /**
   * A tensor of ones.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using beta = Tensor.ones([1, 16, 2]);
   * ```
   */
  static ones(shape: readonly number[], options: TensorOptions = {}): Tensor {
    return Tensor.#full(shape, 1, checkOptions("Tensor.ones", options, TENSOR_OPTIONS), "Tensor.ones");
  }

  /**
   * A tensor with every element set to `value` (rounded to the dtype).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using poisoned = Tensor.full([8], NaN, { dtype: "bfloat16" });
   * ```
   */
  static full(shape: readonly number[], value: number, options: TensorOptions = {}): Tensor {
    return Tensor.#full(shape, value, checkOptions("Tensor.full", options, TENSOR_OPTIONS), "Tensor.full");
  }

  static #full(shape: readonly number[], value: number, options: TensorOptions, op: string): Tensor {
    checkArgument(
      op,
      "value",
      value,
      (v) => (typeof v === "number" ? undefined : "a number (NaN and infinities too)"),
    );
    const t = Tensor.#empty(shape, options, op);
    try {
      t.fill(value);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /**
   * Standard-normal random numbers (or `mean`/`std`), from the counter-based generator: the same
   * seed gives the same values on every device.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using q = Tensor.randn([1, 128, 4, 64], { dtype: "bfloat16", seed: 7 });
   * ```
   */
  static randn(
    shape: readonly number[],
    options: RandomOptions & { mean?: number; std?: number } = {},
  ): Tensor {
    const o = checkOptions<RandomOptions & { mean?: number; std?: number }>(
      "Tensor.randn",
      options,
      RANDN_OPTIONS,
    );
    return Tensor.#random(shape, o, 1, o.mean ?? 0, o.std ?? 1, "Tensor.randn");
  }

  /**
   * Uniform random numbers in `[low, high)` (default `[0, 1)`).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using beta = Tensor.rand([1, 128, 4], { seed: 1 });
   * ```
   */
  static rand(
    shape: readonly number[],
    options: RandomOptions & { low?: number; high?: number } = {},
  ): Tensor {
    const o = checkOptions<RandomOptions & { low?: number; high?: number }>(
      "Tensor.rand",
      options,
      RAND_OPTIONS,
    );
    return Tensor.#random(shape, o, 0, o.low ?? 0, o.high ?? 1, "Tensor.rand");
  }

  static #random(
    shape: readonly number[],
    options: RandomOptions,
    kind: number,
    a: number,
    b: number,
    op: string,
  ): Tensor {
    const dtype = parseDType(options.dtype ?? "float32", op);
    if (!isFloating(dtype) && dtype !== "float8_e4m3") {
      throw invalidArgument(op, `dtype: random numbers need a floating dtype, got ${dtype}`);
    }
    if (!Number.isFinite(a) || !Number.isFinite(b)) {
      throw invalidArgument(op, `the distribution's parameters must be finite, got ${a} and ${b}`);
    }
    const t = Tensor.#empty(shape, { ...options, dtype }, op);
    try {
      const n = t.numel;
      const draw = options.seed === undefined
        ? nextDraw(n)
        : { seed: BigInt.asUintN(64, BigInt(options.seed)), offset: BigInt(options.offset ?? 0) };
      unwrap(native().ak_random(t.descriptor(), draw.seed, draw.offset, kind, a, b), op);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /**
   * Evenly spaced values in `[start, end)`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using offsets = Tensor.arange(0, 40, 10, { dtype: "int32" }); // [0, 10, 20, 30]
   * ```
   */
  static arange(start: number, end?: number, step = 1, options: TensorOptions = {}): Tensor {
    const op = "Tensor.arange";
    checkOptions(op, options, TENSOR_OPTIONS);
    if (end === undefined) [start, end] = [0, start];
    if (
      typeof start !== "number" || typeof end !== "number" || !Number.isFinite(start) || !Number.isFinite(end)
    ) {
      throw invalidArgument(
        op,
        `start, end: expected finite numbers, got ${describeValue(start)}, ${describeValue(end)}`,
      );
    }
    if (typeof step !== "number" || step === 0 || !Number.isFinite(step)) {
      throw invalidArgument(op, `step: expected a finite non-zero number, got ${describeValue(step)}`);
    }
    const n = Math.max(0, Math.ceil((end - start) / step));
    if (n > MAX_HOST_ELEMENTS) {
      throw invalidArgument(
        op,
        `[start, end) with step ${step} holds ${n} values, more than ${MAX_HOST_ELEMENTS}`,
      );
    }
    const integral = Number.isInteger(start) && Number.isInteger(step);
    const dtype = options.dtype ?? (integral ? "int64" : "float32");
    if (dtype !== "bool" && (isFloating(dtype) || integral)) {
      // Formed where it lives: no host copy to a device (so it can be captured in a graph).
      const t = Tensor.empty([n], { dtype, device: options.device });
      try {
        unwrap(native().ak_arange(t.descriptor(op), start, step), op);
      } catch (e) {
        t.dispose();
        throw e;
      }
      return t;
    }
    const values = new Float64Array(n);
    for (let i = 0; i < n; i++) values[i] = start + i * step;
    return Tensor.from(values, { dtype, device: options.device, shape: [n] });
  }

  /**
   * Copies host data into a new tensor. Accepts typed arrays (with `shape`; default 1-D) or nested
   * number arrays (shape inferred). Values are rounded to the dtype (to nearest even).
   * A Uint16Array is read as raw float16/bfloat16 bits and needs `dtype`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.from(new Float32Array([1, 2, 3, 4]), { shape: [2, 2] });
   * using b = Tensor.from([[1, 2], [3, 4]], { dtype: "bfloat16" });
   * ```
   */
  static from(
    data: SourceArray | NestedNumbers,
    options: TensorOptions & { shape?: readonly number[] } = {},
  ): Tensor {
    const op = "Tensor.from";
    checkOptions(op, options, FROM_OPTIONS);
    let flat: SourceArray;
    let shape: number[];
    if (ArrayBuffer.isView(data)) {
      flat = data as SourceArray;
      shape = options.shape ? checkShape(options.shape, op) : [flat.length];
    } else {
      const nested = flatten(data as NestedNumbers, op);
      flat = nested.values;
      shape = options.shape ? checkShape(options.shape, op) : nested.shape;
    }
    if (product(shape) !== flat.length) {
      throw invalidArgument(
        op,
        `shape: ${shapeText(shape)} holds ${product(shape)} elements, data has ${flat.length}`,
      );
    }
    const [sourceDType, bytes] = hostSource(flat, options.dtype, op);
    // Typed arrays keep their own type by default; nested numbers default to float32.
    const dtype = parseDType(options.dtype ?? (ArrayBuffer.isView(data) ? sourceDType : "float32"), op);
    // Upload in the source's own dtype, then convert on the target device.
    const staged = Tensor.empty(shape, { dtype: sourceDType, device: options.device });
    try {
      unwrap(native().ak_copy_from_host(staged.descriptor(), bytes, BigInt(bytes.byteLength)), op);
      if (dtype === sourceDType) return staged;
      const cast = staged.cast(dtype);
      staged.dispose();
      return cast;
    } catch (e) {
      staged.dispose();
      throw e;
    }
  }

  // ---- properties ----

  /** Number of dimensions. */
  get ndim(): number {
    return this.shape.length;
  }

  /** Number of elements. */
  get numel(): number {
    return product(this.shape);
  }

  /** Size in bytes. */
  get nbytes(): number {
    return this.numel * dtypeSize(this.dtype);
  }

  /** Row-major strides, in elements. */
  get strides(): readonly number[] {
    return contiguousStrides(this.shape);
  }

  /** True once `dispose()` has run. */
  get disposed(): boolean {
    return this.#storage === null;
  }

  /** The parsed device (C type and index). */
  get deviceId(): DeviceId {
    return this.#deviceId;
  }

  /** The data pointer; throws for a disposed tensor. For op implementations. */
  get pointer(): Deno.PointerValue {
    return this.#live("Tensor.pointer").ptr;
  }

  #live(op: string): Storage {
    if (this.#storage === null) {
      throw invalidArgument(op, `tensor ${shapeText(this.shape)} ${this.dtype} was disposed`);
    }
    return this.#storage;
  }

  /**
   * The tensor's descriptor (pointer, dtype, shape, strides, device) as the C ABI takes it; throws for a
   * disposed tensor. For op implementations.
   */
  descriptor(op = "Tensor.descriptor"): Uint8Array<ArrayBuffer> {
    const storage = this.#live(op);
    this.#descriptor ??= encodeDescriptor({
      ptr: storage.ptr,
      dtype: dtypeCode(this.dtype),
      deviceType: storage.device.type,
      deviceIndex: storage.device.index,
      shape: this.shape,
      strides: this.strides,
    });
    return this.#descriptor;
  }

  /**
   * A descriptor of a strided view of this tensor's memory (same dtype and device), e.g. a
   * permuted layout read in place, starting `offset` elements in. The caller keeps the view inside
   * the tensor's bounds.
   */
  viewDescriptor(
    shape: readonly number[],
    strides: readonly number[],
    op = "Tensor.viewDescriptor",
    offset = 0,
  ): Uint8Array<ArrayBuffer> {
    const storage = this.#live(op);
    return encodeDescriptor({
      // An empty tensor has no memory (a null pointer): no view of it reads any.
      ptr: offset === 0 || storage.ptr === null
        ? storage.ptr
        : Deno.UnsafePointer.offset(storage.ptr, offset * dtypeSize(this.dtype)),
      dtype: dtypeCode(this.dtype),
      deviceType: storage.device.type,
      deviceIndex: storage.device.index,
      shape,
      strides,
    });
  }

  // ---- conversions ----

  /**
   * Copies to another device (a new tensor; the same device gives a copy).
   *
   * @example
   * ```ts
   * import { defaultDevice, Tensor } from "@attnkit/attnkit";
   * using a = Tensor.ones([4]);
   * using b = a.to(defaultDevice());
   * ```
   */
  to(device: Device | string): Tensor {
    const op = "Tensor.to";
    this.#live(op);
    const out = Tensor.empty(this.shape, { dtype: this.dtype, device });
    try {
      unwrap(native().ak_copy(out.descriptor(), this.descriptor()), op);
    } catch (e) {
      out.dispose();
      throw e;
    }
    return out;
  }

  /**
   * Converts to another dtype on the same device (floats round to nearest even; integers truncate
   * toward zero and saturate; NaN becomes 0; bool is value != 0).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.randn([8]);
   * using b = a.cast("bfloat16");
   * ```
   */
  cast(dtype: DType): Tensor {
    const op = "Tensor.cast";
    this.#live(op);
    const target = parseDType(dtype, op);
    const out = Tensor.empty(this.shape, { dtype: target, device: this.device });
    try {
      unwrap(native().ak_copy(out.descriptor(), this.descriptor()), op);
    } catch (e) {
      out.dispose();
      throw e;
    }
    return out;
  }

  /**
   * A copy on the same device with the same dtype.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.ones([2]);
   * using b = a.clone();
   * ```
   */
  clone(): Tensor {
    return this.cast(this.dtype);
  }

  /**
   * A view with another shape over the same memory (one size may be -1). Disposing either does not
   * free the memory while the other is alive.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.arange(6, undefined, 1, { dtype: "float32" });
   * using b = a.reshape([2, -1]); // [2, 3]
   * ```
   */
  reshape(shape: readonly number[]): Tensor {
    const op = "Tensor.reshape";
    const storage = this.#live(op);
    const n = this.numel;
    if (!Array.isArray(shape)) {
      throw invalidArgument(op, `shape: expected an array of sizes, got ${describeValue(shape)}`);
    }
    const dims = [...shape];
    const free = dims.indexOf(-1);
    if (free >= 0) {
      if (dims.indexOf(-1, free + 1) >= 0) throw invalidArgument(op, `shape: at most one size may be -1`);
      const rest = product(dims.filter((_, i) => i !== free));
      if (rest === 0 || n % rest !== 0) {
        throw invalidArgument(op, `shape: ${shapeText(shape)} cannot hold ${n} elements`);
      }
      dims[free] = n / rest;
    }
    checkShape(dims, op);
    if (product(dims) !== n) {
      throw invalidArgument(
        op,
        `shape: ${shapeText(shape)} holds ${product(dims)} elements, the tensor ${
          shapeText(this.shape)
        } has ${n}`,
      );
    }
    storage.refs++;
    return new Tensor(storage, this.dtype, dims);
  }

  /**
   * A new contiguous tensor with the dimensions reordered: `dims[i]` is the source dimension that
   * becomes dimension i (on the device, no host round trip).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using bthd = Tensor.randn([2, 16, 4, 64]);
   * using bhtd = bthd.permute([0, 2, 1, 3]); // [2, 4, 16, 64]
   * ```
   */
  permute(dims: readonly number[]): Tensor {
    const op = "Tensor.permute";
    this.#live(op);
    const rank = this.ndim;
    if (!Array.isArray(dims)) {
      throw invalidArgument(op, `dims: expected an array of dims, got ${describeValue(dims)}`);
    }
    if (dims.length !== rank || [...dims].sort((a, b) => a - b).some((d, i) => d !== i)) {
      throw invalidArgument(op, `dims: expected a permutation of 0..${rank - 1}, got [${dims.join(", ")}]`);
    }
    const strides = this.strides;
    const shape = dims.map((d) => this.shape[d]);
    const srcView = this.viewDescriptor(shape, dims.map((d) => strides[d]), op);
    const out = Tensor.empty(shape, { dtype: this.dtype, device: this.device });
    try {
      unwrap(native().ak_copy(out.descriptor(), srcView), op);
    } catch (e) {
      out.dispose();
      throw e;
    }
    return out;
  }

  /**
   * A new contiguous tensor with two dimensions swapped.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.randn([3, 5]);
   * using b = a.transpose(0, 1); // [5, 3]
   * ```
   */
  transpose(a: number, b: number): Tensor {
    checkArgument("Tensor.transpose", "a", a, "integer");
    checkArgument("Tensor.transpose", "b", b, "integer");
    const rank = this.ndim;
    const norm = (d: number) => (d < 0 ? d + rank : d);
    const [x, y] = [norm(a), norm(b)];
    if (!(x >= 0 && x < rank && y >= 0 && y < rank)) {
      throw invalidArgument("Tensor.transpose", `dims: ${a}, ${b} out of range for rank ${rank}`);
    }
    const dims = [...Array(rank).keys()];
    [dims[x], dims[y]] = [dims[y], dims[x]];
    return this.permute(dims);
  }

  /**
   * Fills every element in place with `value` (rounded to the dtype); returns this tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using out = Tensor.empty([4]);
   * out.fill(NaN); // poison before a kernel writes it
   * ```
   */
  fill(value: number): this {
    const op = "Tensor.fill";
    this.#live(op);
    if (typeof value !== "number") throw invalidArgument(op, `value: expected a number, got ${typeof value}`);
    unwrap(native().ak_fill(this.descriptor(), value), op);
    return this;
  }

  /**
   * Copies another tensor's values into this one in place (same shape; casts across dtypes, and
   * moves across devices when the dtypes match).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.zeros([3]);
   * using b = Tensor.ones([3]);
   * a.copyFrom(b);
   * ```
   */
  copyFrom(source: Tensor): this {
    const op = "Tensor.copyFrom";
    this.#live(op);
    if (!(source instanceof Tensor)) throw invalidArgument(op, `source: expected a Tensor`);
    if (source.disposed) throw invalidArgument(op, `source: the tensor was disposed`);
    unwrap(native().ak_copy(this.descriptor(), source.descriptor(op)), op);
    return this;
  }

  // ---- indexing (each result is a new contiguous tensor, copied on the device) ----

  /**
   * Elements `start, start + step, ...` before `end` of dim `dim`, as Python's `x[start:end:step]`
   * does it: negative bounds count from the end, bounds past the ends are clamped, `step` >= 1.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.arange(10, undefined, 1, { dtype: "float32" });
   * using tail = x.slice(0, -3); // [7, 8, 9]
   * using even = x.slice(0, 0, undefined, 2); // [0, 2, 4, 6, 8]
   * ```
   */
  slice(dim: number, start?: number, end?: number, step = 1): Tensor {
    return slice(this, dim, start, end, step);
  }

  /**
   * Index `index` of dim `dim` (negative counts from the end; out of range is an error); the
   * result drops that dim, like `x[:, index]`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 2, 3], [4, 5, 6]]);
   * using last = x.select(1, -1); // [3, 6]
   * ```
   */
  select(dim: number, index: number): Tensor {
    return select(this, dim, index);
  }

  /**
   * NumPy-style indexing, one spec per dim: an integer picks an index (dropping the dim), a string
   * `"start:end:step"` takes a slice (`":"`, `"1:"`, `"::2"`, `"-4:"`), `"..."` stands for the
   * remaining dims, `null` inserts a dim of size 1. Dims left without a spec are taken whole.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using q = Tensor.randn([2, 16, 4, 64]); // [B, T, H, D]
   * using head0 = q.at(":", ":", 0); // [2, 16, 64], like q[:, :, 0]
   * using firstTokens = q.at("...", "0:8", ":", ":"); // [2, 8, 4, 64]
   * using lastToken = q.at(0, -1, null); // [1, 4, 64]
   * ```
   */
  at(...specs: IndexSpec[]): Tensor {
    return at(this, specs);
  }

  /**
   * The entries at `indices` along dim `dim` (a gather, like `torch.index_select`); indices may
   * repeat and count from the end when negative. A tensor of indices (1-D int32 or int64) is read
   * back to the host to check its bounds, except inside a graph capture: there nothing is read back
   * and an index out of range (a negative one too) gives zeros.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 2], [3, 4], [5, 6]]);
   * using rows = x.indexSelect(0, [2, 0, -1]); // [[5, 6], [1, 2], [5, 6]]
   * ```
   */
  indexSelect(dim: number, indices: readonly number[] | Tensor): Tensor {
    return indexSelect(this, dim, indices);
  }

  /**
   * A copy broadcast to `shape` (sizes of 1 and missing leading dims repeat).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using row = Tensor.from([1, 2, 3]);
   * using grid = row.broadcastTo([2, 3]); // [[1, 2, 3], [1, 2, 3]]
   * ```
   */
  broadcastTo(shape: readonly number[]): Tensor {
    return broadcastTo(this, shape);
  }

  /**
   * A view with a dim of size 1 inserted at `dim` (in [-rank - 1, rank]), sharing memory like
   * `reshape`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.ones([4, 8]);
   * using col = x.unsqueeze(-1); // [4, 8, 1]
   * ```
   */
  unsqueeze(dim: number): Tensor {
    return unsqueeze(this, dim);
  }

  /**
   * A view without the dims of size 1: all of them, or the ones named (each must have size 1).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.ones([4, 1, 8]);
   * using y = x.squeeze(1); // [4, 8]
   * ```
   */
  squeeze(dim?: number | readonly number[]): Tensor {
    return squeeze(this, dim);
  }

  // ---- element-wise math (new tensors; see the class doc for broadcasting and dtypes) ----

  /**
   * `this + other`, broadcasting.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 2], [3, 4]]);
   * using bias = Tensor.from([10, 20]);
   * using y = x.add(bias); // [[11, 22], [13, 24]]
   * using z = x.add(1); // [[2, 3], [4, 5]]
   * ```
   */
  add(other: Tensor | number): Tensor {
    return binary(this, other, "add");
  }

  /**
   * `this - other`, broadcasting.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([3, 4]);
   * using y = x.sub(1); // [2, 3]
   * ```
   */
  sub(other: Tensor | number): Tensor {
    return binary(this, other, "sub");
  }

  /**
   * `this * other`, broadcasting.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([3, 4]);
   * using y = x.mul(x); // [9, 16]
   * ```
   */
  mul(other: Tensor | number): Tensor {
    return binary(this, other, "mul");
  }

  /**
   * `this / other`, broadcasting; true division (integers give float32).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([1, 2], { dtype: "int32" });
   * using y = x.div(4); // float32 [0.25, 0.5]
   * ```
   */
  div(other: Tensor | number): Tensor {
    return binary(this, other, "div");
  }

  /**
   * `this ** exponent`, broadcasting (a float result; integers give float32).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([4, 9]);
   * using y = x.pow(0.5); // [2, 3]
   * ```
   */
  pow(exponent: Tensor | number): Tensor {
    return binary(this, exponent, "pow");
  }

  /**
   * The larger of `this` and `other` element by element; NaN if either is NaN.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([-1, 2]);
   * using relu = x.maximum(0); // [0, 2]
   * ```
   */
  maximum(other: Tensor | number): Tensor {
    return binary(this, other, "maximum");
  }

  /**
   * The smaller of `this` and `other` element by element; NaN if either is NaN.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([-1, 2]);
   * using y = x.minimum(1); // [-1, 1]
   * ```
   */
  minimum(other: Tensor | number): Tensor {
    return binary(this, other, "minimum");
  }

  /**
   * `this == other` as a bool tensor (compared in the promoted dtype), broadcasting.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([1, 2]);
   * using y = x.eq(2); // bool [0, 1]
   * ```
   */
  eq(other: Tensor | number): Tensor {
    return binary(this, other, "eq");
  }

  /**
   * `this != other` as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([1, NaN]);
   * using y = x.ne(x); // bool [0, 1]
   * ```
   */
  ne(other: Tensor | number): Tensor {
    return binary(this, other, "ne");
  }

  /**
   * `this < other` as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, 2]).lt(2); // bool [1, 0]
   * ```
   */
  lt(other: Tensor | number): Tensor {
    return binary(this, other, "lt");
  }

  /**
   * `this <= other` as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, 2]).le(1); // bool [1, 0]
   * ```
   */
  le(other: Tensor | number): Tensor {
    return binary(this, other, "le");
  }

  /**
   * `this > other` as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, 2]).gt(1); // bool [0, 1]
   * ```
   */
  gt(other: Tensor | number): Tensor {
    return binary(this, other, "gt");
  }

  /**
   * `this >= other` as a bool tensor; with `arange` it builds masks such as a causal one.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using i = Tensor.arange(4).reshape([4, 1]);
   * using j = Tensor.arange(4);
   * using causal = i.ge(j); // [4, 4], true on and below the diagonal
   * ```
   */
  ge(other: Tensor | number): Tensor {
    return binary(this, other, "ge");
  }

  /**
   * `this && other` (non-zero is true) as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using i = Tensor.arange(4).reshape([4, 1]);
   * using j = Tensor.arange(4);
   * using band = i.ge(j).logicalAnd(i.sub(j).lt(2)); // causal, window of 2
   * ```
   */
  logicalAnd(other: Tensor | number): Tensor {
    return binary(this, other, "logicalAnd");
  }

  /**
   * `this || other` (non-zero is true) as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([0, 1, 0]);
   * using y = x.logicalOr(Tensor.from([0, 0, 2])); // bool [0, 1, 1]
   * ```
   */
  logicalOr(other: Tensor | number): Tensor {
    return binary(this, other, "logicalOr");
  }

  /**
   * `!this` (zero is false) as a bool tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([0, 3]).logicalNot(); // bool [1, 0]
   * ```
   */
  logicalNot(): Tensor {
    return unary(this, "logicalNot");
  }

  /**
   * True where an element is NaN.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, NaN]).isNan(); // bool [0, 1]
   * ```
   */
  isNan(): Tensor {
    return unary(this, "isNan");
  }

  /**
   * True where an element is neither NaN nor infinite.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, Infinity, NaN]).isFinite(); // bool [1, 0, 0]
   * ```
   */
  isFinite(): Tensor {
    return unary(this, "isFinite");
  }

  /**
   * `-this`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, -2]).neg(); // [-1, 2]
   * ```
   */
  neg(): Tensor {
    return unary(this, "neg");
  }

  /**
   * `|this|`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, -2]).abs(); // [1, 2]
   * ```
   */
  abs(): Tensor {
    return unary(this, "abs");
  }

  /**
   * `this * this`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([3, -2]).square(); // [9, 4]
   * ```
   */
  square(): Tensor {
    return unary(this, "square");
  }

  /**
   * The square root (a float result; integers give float32).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([4, 9]).sqrt(); // [2, 3]
   * ```
   */
  sqrt(): Tensor {
    return unary(this, "sqrt");
  }

  /**
   * `e ** this` (a float result).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([0, 1]).exp(); // [1, 2.7183]
   * ```
   */
  exp(): Tensor {
    return unary(this, "exp");
  }

  /**
   * The natural logarithm (a float result).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([1, Math.E]).log(); // [0, 1]
   * ```
   */
  log(): Tensor {
    return unary(this, "log");
  }

  /**
   * `1 / (1 + e ** -this)` (a float result).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using beta = Tensor.randn([2, 16, 4]).sigmoid(); // in (0, 1), as gates are
   * ```
   */
  sigmoid(): Tensor {
    return unary(this, "sigmoid");
  }

  /**
   * The hyperbolic tangent (a float result).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using y = Tensor.from([0, 100]).tanh(); // [0, 1]
   * ```
   */
  tanh(): Tensor {
    return unary(this, "tanh");
  }

  // ---- reductions (accumulated in float64 for floats, int64 for integers) ----

  /**
   * The sum over `dim` (a dim or a list; every dim when left out). Floats keep their dtype;
   * integers and bools sum to int64. `{ keepDim: true }` keeps the reduced dims with size 1.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 2], [3, 4]]);
   * using rows = x.sum(-1); // [3, 7]
   * using total = x.sum(); // 0-d: 10
   * using kept = x.sum(0, { keepDim: true }); // [[4, 6]]
   * ```
   */
  sum(dim?: Dims, options?: ReduceOptions): Tensor {
    return reduce(this, "sum", dim, options);
  }

  /**
   * The mean over `dim` (every dim when left out); integers give float32; NaN over no elements.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 2], [3, 4]]);
   * using m = x.mean(0); // [2, 3]
   * ```
   */
  mean(dim?: Dims, options?: ReduceOptions): Tensor {
    return reduce(this, "mean", dim, options);
  }

  /**
   * The largest value over `dim` (every dim when left out; values only, where `torch.max(dim)` also
   * gives indices); NaN if any is NaN. An error over no elements.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 5], [3, 4]]);
   * using m = x.max(-1); // [5, 4]
   * ```
   */
  max(dim?: Dims, options?: ReduceOptions): Tensor {
    return reduce(this, "max", dim, options);
  }

  /**
   * The smallest value over `dim` (every dim when left out; values only); NaN if any is NaN. An
   * error over no elements.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using x = Tensor.from([[1, 5], [3, 4]]);
   * using m = x.min(); // 0-d: 1
   * ```
   */
  min(dim?: Dims, options?: ReduceOptions): Tensor {
    return reduce(this, "min", dim, options);
  }

  /**
   * `log(sum(exp(this)))` over `dim`, with the maximum taken out first so that it neither overflows
   * nor underflows; computed in float32 (float64 for float64) and returned in the input's float
   * dtype (integers give float32). -Infinity over no elements.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using scores = Tensor.from([[1000, 1000], [0, Math.log(3)]]);
   * using lse = scores.logsumexp(-1); // [1000.6931, 1.3863]
   * ```
   */
  logsumexp(dim: Dims, options?: ReduceOptions): Tensor {
    return logsumexp(this, dim, options);
  }

  /**
   * `exp(this)` normalised to sum to 1 along `dim`, numerically stable (the maximum is subtracted
   * first); computed in float32 (float64 for float64), returned in the input's float dtype.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using scores = Tensor.randn([2, 4, 16, 16]);
   * using p = scores.softmax(-1); // each row sums to 1
   * ```
   */
  softmax(dim: number): Tensor {
    return softmax(this, dim);
  }

  /**
   * `log(softmax(this, dim))`, computed as `this - logsumexp(this, dim)`.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using logits = Tensor.randn([4, 10]);
   * using logp = logits.logSoftmax(-1);
   * ```
   */
  logSoftmax(dim: number): Tensor {
    return softmax(this, dim, true);
  }

  // ---- matrix products ----

  /**
   * The matrix product, as `torch.matmul`: 2-D times 2-D is a matrix product; dims before the last
   * two are batch dims and broadcast; a 1-D operand is a row (left) or column (right) vector whose
   * dim the result drops. Accumulates in float64 on the CPU, float32 on CUDA (float64 for float64),
   * int64 for integers.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using q = Tensor.randn([2, 4, 16, 64]); // [B, H, T, D]
   * using k = Tensor.randn([2, 4, 16, 64]);
   * using kt = k.transpose(-2, -1);
   * using scores = q.matmul(kt); // [2, 4, 16, 16]
   * ```
   */
  matmul(other: Tensor): Tensor {
    return matmul(this, other);
  }

  // ---- reading ----

  /**
   * Copies the values to the host: Float32Array for float32, float16 and bfloat16 (exact
   * widening), Float64Array, Int32Array, BigInt64Array (int64) or Uint8Array (bool).
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.from([1.5, 2.5], { dtype: "bfloat16" });
   * console.log(a.toArray()); // Float32Array [1.5, 2.5]
   * ```
   */
  toArray(): AnyArray {
    const op = "Tensor.toArray";
    this.#live(op);
    if (this.dtype === "float16" || this.dtype === "bfloat16" || this.dtype === "float8_e4m3") {
      using wide = this.cast("float32");
      return wide.toArray();
    }
    const out = allocateHost(this.dtype, this.numel);
    const bytes = new Uint8Array(out.buffer);
    unwrap(native().ak_copy_to_host(this.descriptor(), bytes, BigInt(bytes.byteLength)), op);
    return out;
  }

  /**
   * `toArray()` typed by the dtype, for callers that know it statically.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.arange(3, undefined, 1, { dtype: "int32" });
   * const values: Int32Array = a.values("int32");
   * ```
   */
  values<D extends DType>(dtype: D): ArrayFor<D> {
    if (dtype !== this.dtype) {
      throw invalidArgument("Tensor.values", `dtype: the tensor holds ${this.dtype}, not ${dtype}`);
    }
    return this.toArray() as ArrayFor<D>;
  }

  /**
   * The raw bits of a float16 or bfloat16 tensor.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.from([1], { dtype: "bfloat16" });
   * console.log(a.toRawBits()[0].toString(16)); // "3f80"
   * ```
   */
  toRawBits(): Uint16Array {
    const op = "Tensor.toRawBits";
    this.#live(op);
    if (this.dtype !== "float16" && this.dtype !== "bfloat16") {
      throw invalidArgument(op, `tensor: expected float16 or bfloat16, got ${this.dtype}`);
    }
    const out = new Uint16Array(this.numel);
    const bytes = new Uint8Array(out.buffer);
    unwrap(native().ak_copy_to_host(this.descriptor(), bytes, BigInt(bytes.byteLength)), op);
    return out;
  }

  /**
   * The single value of a one-element tensor, as a number.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.full([1], 3);
   * console.log(a.item()); // 3
   * ```
   */
  item(): number {
    this.#live("Tensor.item");
    if (this.numel !== 1) {
      throw invalidArgument(
        "Tensor.item",
        `tensor: expected one element, got shape ${shapeText(this.shape)}`,
      );
    }
    return Number(this.toArray()[0]);
  }

  /**
   * Shape, dtype, device and the first few values.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * using a = Tensor.ones([2, 2]);
   * console.log(`${a}`); // Tensor([2, 2], float32, cpu, [1, 1, 1, 1])
   * ```
   */
  toString(): string {
    const head = `Tensor(${shapeText(this.shape)}, ${this.dtype}, ${this.device}`;
    if (this.disposed) return `${head}, disposed)`;
    const shown = Math.min(this.numel, 6);
    const values = this.#prefix(shown);
    const text: string[] = [];
    for (const v of values as Iterable<number | bigint>) {
      text.push(typeof v === "bigint" ? v.toString() : formatNumber(v));
    }
    return `${head}, [${text.join(", ")}${this.numel > shown ? ", ..." : ""}])`;
  }

  // The first n values, copying only those.
  #prefix(n: number): AnyArray {
    if (n === 0) return new Float32Array(0);
    const storage = this.#live("Tensor.toString");
    const view = encodeDescriptor({
      ptr: storage.ptr,
      dtype: dtypeCode(this.dtype),
      deviceType: storage.device.type,
      deviceIndex: storage.device.index,
      shape: [n],
      strides: [1],
    });
    const raw = allocateHost(this.dtype === "float16" || this.dtype === "bfloat16" ? "int32" : this.dtype, n);
    if (this.dtype === "float16" || this.dtype === "bfloat16") {
      const bits = new Uint16Array(n);
      unwrap(native().ak_copy_to_host(view, new Uint8Array(bits.buffer), BigInt(2 * n)));
      return Float32Array.from(
        bits,
        (b) => (this.dtype === "bfloat16" ? bf16BitsToNumber(b) : f16BitsToNumber(b)),
      );
    }
    unwrap(native().ak_copy_to_host(view, new Uint8Array(raw.buffer), BigInt(raw.byteLength)));
    return raw;
  }

  /** Prints like `toString()` in `console.log` / Deno.inspect. */
  [Symbol.for("Deno.customInspect")](): string {
    return this.toString();
  }

  // ---- lifetime ----

  /**
   * Releases the memory (safe to call twice). Using the tensor afterwards throws.
   *
   * @example
   * ```ts
   * import { Tensor } from "@attnkit/attnkit";
   * const a = Tensor.zeros([1024]);
   * a.dispose();
   * a.dispose(); // no-op
   * ```
   */
  dispose(): void {
    const storage = this.#storage;
    if (storage === null) return;
    this.#storage = null;
    this.#descriptor = undefined;
    collector.unregister(this);
    countTensor(this.device, -1);
    storage.release();
  }

  /** For `using t = ...`: disposes at the end of the scope. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

function formatNumber(v: number): string {
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
  return Number(v.toPrecision(5)).toString();
}

/** Decodes a bfloat16 bit pattern. */
export function bf16BitsToNumber(bits: number): number {
  checkArgument("bf16BitsToNumber", "bits", bits, BITS16);
  const buf = new DataView(new ArrayBuffer(4));
  buf.setUint32(0, bits << 16, true);
  return buf.getFloat32(0, true);
}

/** Decodes a float16 bit pattern. */
export function f16BitsToNumber(bits: number): number {
  checkArgument("f16BitsToNumber", "bits", bits, BITS16);
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const man = bits & 0x3ff;
  if (exp === 0x1f) return man ? NaN : sign * Infinity;
  if (exp === 0) return sign * man * 2 ** -24;
  return sign * (1 + man / 1024) * 2 ** (exp - 15);
}

function allocateHost(dtype: DType, n: number): AnyArray {
  switch (dtype) {
    case "float64":
      return new Float64Array(n);
    case "int32":
      return new Int32Array(n);
    case "int64":
      return new BigInt64Array(n);
    case "bool":
      return new Uint8Array(n);
    default:
      return new Float32Array(n);
  }
}

// The dtype a host array uploads as, and its bytes.
function hostSource(flat: SourceArray, wanted: DType | undefined, op: string): [DType, Uint8Array] {
  const bytes = new Uint8Array(flat.buffer, flat.byteOffset, flat.byteLength);
  if (flat instanceof Float32Array) return ["float32", bytes];
  if (flat instanceof Float64Array) return ["float64", bytes];
  if (flat instanceof Int32Array) return ["int32", bytes];
  if (flat instanceof BigInt64Array) return ["int64", bytes];
  if (flat instanceof Uint16Array) {
    if (wanted !== "float16" && wanted !== "bfloat16") {
      throw invalidArgument(
        op,
        `dtype: a Uint16Array holds raw float16 or bfloat16 bits; say which with dtype`,
      );
    }
    return [wanted, bytes];
  }
  if (flat instanceof Uint8Array) {
    // Bytes are booleans unless asked otherwise; normalise to 0/1.
    return ["bool", Uint8Array.from(flat, (v) => (v ? 1 : 0))];
  }
  throw invalidArgument(op, `data: unsupported array type ${(flat as object).constructor.name}`);
}

function flatten(data: NestedNumbers, op: string): { values: Float64Array; shape: number[] } {
  const shape: number[] = [];
  let probe: NestedNumbers = data;
  while (Array.isArray(probe)) {
    if (shape.length === MAX_NESTING) {
      throw invalidArgument(
        op,
        `data: nested more than ${MAX_NESTING} deep (a tensor has at most ${MAX_RANK} dimensions)`,
      );
    }
    shape.push(probe.length);
    probe = probe.length > 0 ? probe[0] : 0;
  }
  const count = shape.reduce((a, b) => a * b, 1);
  if (count > MAX_HOST_ELEMENTS) {
    throw invalidArgument(op, `data: ${count} values, more than ${MAX_HOST_ELEMENTS} can be staged at once`);
  }
  const values = new Float64Array(count);
  let k = 0;
  const walk = (node: NestedNumbers, depth: number) => {
    if (depth === shape.length) {
      if (Array.isArray(node)) throw invalidArgument(op, `data: ragged nested arrays`);
      if (typeof node !== "number" && typeof node !== "boolean") {
        throw invalidArgument(op, `data: expected numbers or booleans, got ${typeof node}`);
      }
      values[k++] = typeof node === "boolean" ? (node ? 1 : 0) : Number(node);
      return;
    }
    if (!Array.isArray(node) || node.length !== shape[depth]) {
      throw invalidArgument(
        op,
        `data: ragged nested arrays (expected ${shape[depth]} items at depth ${depth})`,
      );
    }
    for (const child of node) walk(child, depth + 1);
  };
  walk(data, 0);
  if (k !== values.length) throw new AttnkitError("INTERNAL", op, "flatten miscounted");
  return { values, shape };
}
