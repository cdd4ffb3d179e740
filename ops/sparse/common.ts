/**
 * What the sparse-attention ops share: their input checks (contiguous tensors of one device, the dtype
 * of the first call kept), packed-sequence offsets and the token indices that must agree with them, and
 * the output pair of the branches that return a log-sum-exp.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../../ffi/errors.ts";
import { unwrap } from "../../ffi/library.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { type Int32Seqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import type { ChoiceRequest, TuneRun } from "../tune/choice.ts";

/** The float dtypes of the NSA and DSA ops. */
export const SPARSE_FLOATS: readonly DType[] = ["float16", "bfloat16", "float32"];

/** An output tensor with its log-sum-exp per (token, head); disposing it frees what the op allocated. */
export class OutputWithLse {
  /** The attention output. */
  readonly output: Tensor;
  /** log sum exp of the scaled scores per (token, head), float32. */
  readonly lse: Tensor;
  readonly #owned: Tensor[];

  /** Holds both; `owned` are the ones the op allocated (the caller's buffers stay the caller's). */
  constructor(output: Tensor, lse: Tensor, owned: Tensor[]) {
    this.output = output;
    this.lse = lse;
    this.#owned = owned;
  }

  /** Disposes the tensors the op allocated. */
  [Symbol.dispose](): void {
    for (const t of this.#owned) t.dispose();
  }
}

/** A result buffer: the caller's (checked: dtype, device, shape), else a new tensor the op owns. */
export function resultBuffer(
  op: string,
  name: string,
  given: unknown,
  shape: number[],
  dtype: DType,
  device: string,
): { tensor: Tensor; owned: boolean } {
  if (given === undefined || given === null) {
    return { tensor: Tensor.empty(shape, { dtype, device }), owned: true };
  }
  const t = expectTensor(op, name, given);
  expectDType(op, name, t, [dtype]);
  if (t.device !== device) throw invalidArgument(op, `${name}: expected device ${device}, got ${t.device}`);
  expectShape(op, name, t, shape);
  return { tensor: t, owned: false };
}

/**
 * One result written by `write`: into the caller's buffer (checked as {@link resultBuffer} does), else into a
 * new tensor, which is disposed when `write` throws.
 */
export function writeResult(
  op: string,
  name: string,
  given: unknown,
  shape: number[],
  dtype: DType,
  device: string,
  write: (out: Tensor) => void,
): Tensor {
  const result = resultBuffer(op, name, given, shape, dtype, device);
  try {
    write(result.tensor);
  } catch (e) {
    if (result.owned) result.tensor.dispose();
    throw e;
  }
  return result.tensor;
}

/** A call of one result as a tuning candidate's run (its output compared, then disposed). */
export function singleRun(call: () => Tensor): TuneRun {
  return () => {
    const o = call();
    return { tensors: [o], [Symbol.dispose]: () => o.dispose() };
  };
}

/**
 * What q (`first`) fixes of a tuned sparse call's kernel choice: its device, its shape class (q's dtype
 * and `sizes`) and the agreement a candidate must reach (float32 to 1e-4, 16 bits to 1e-2).
 */
export function sparseChoice(
  first: Tensor,
  sizes: object,
): Pick<ChoiceRequest, "device" | "shapeClass" | "relRms"> {
  return {
    device: first.device,
    shapeClass: JSON.stringify({ dtype: first.dtype, ...sizes }),
    relRms: first.dtype === "float32" ? 1e-4 : 1e-2,
  };
}

/** The dtype an op takes from its first call; later calls must use the same one. */
export class FirstDType {
  #dtype: DType | undefined;

  /** Records the first call's dtype of `name`; refuses a different one later. */
  check(op: string, name: string, t: Tensor): void {
    if (this.#dtype === undefined) this.#dtype = t.dtype;
    else if (t.dtype !== this.#dtype) {
      throw invalidArgument(op, `${name}: this op was first called with ${this.#dtype}; got ${t.dtype}`);
    }
  }
}

/** Checks one input: a tensor of one of `dtypes` (or `like`'s dtype) on `like`'s device, of the shape. */
export function input(
  op: string,
  name: string,
  value: unknown,
  dtypes: readonly DType[],
  shape: readonly (number | null)[],
  like?: { tensor: Tensor; name: string; sameDType?: boolean },
): Tensor {
  const t = expectTensor(op, name, value);
  if (like?.sameDType) {
    if (t.dtype !== like.tensor.dtype) {
      throw invalidArgument(op, `${name}: expected ${like.tensor.dtype} like ${like.name}, got ${t.dtype}`);
    }
  } else {
    expectDType(op, name, t, dtypes);
  }
  if (like) expectSameDevice(op, name, t, like.tensor, like.name);
  expectShape(op, name, t, shape);
  return t;
}

/** Offsets given as an int32/int64 tensor or an array, as int32 on `device` (disposable). */
export function offsetsOn(
  op: string,
  name: string,
  value: unknown,
  device: string,
  count: number,
): Int32Seqlens {
  const o = int32Seqlens(op, name, value, device);
  if (o.tensor.shape[0] !== count) {
    o[Symbol.dispose]();
    throw invalidArgument(op, `${name}: expected ${count} offsets (seqNum + 1), got ${o.tensor.shape[0]}`);
  }
  return o;
}

/**
 * Checks `tokenIndices` ([T, 2] int32 or int64: each token's sequence and position in it) against the
 * offsets: its shape always, its values when `read` (one read-back of both).
 */
export function checkTokenIndices(
  op: string,
  value: unknown,
  offsets: Int32Seqlens,
  T: number,
  read: boolean,
): void {
  const t = expectTensor(op, "tokenIndices", value);
  expectDType(op, "tokenIndices", t, ["int32", "int64"]);
  expectShape(op, "tokenIndices", t, [T, 2]);
  if (offsets.tensor.device !== t.device) {
    throw invalidArgument(op, `tokenIndices: expected device ${offsets.tensor.device}, got ${t.device}`);
  }
  if (!read) return;
  const o = offsets.host ?? (offsets.tensor.toArray() as Int32Array);
  const got = t.toArray();
  for (let n = 0; n + 1 < o.length; n++) {
    for (let i = o[n]; i < o[n + 1] && i < T; i++) {
      const seq = Number(got[2 * i]), pos = Number(got[2 * i + 1]);
      if (seq !== n || pos !== i - o[n]) {
        throw invalidArgument(
          op,
          `tokenIndices[${i}]: expected [${n}, ${i - o[n]}] from the offsets, got [${seq}, ${pos}]`,
        );
      }
    }
  }
}

/** An optional positive finite scale, else `fallback`. */
export function scaleOption(op: string, name: string, value: unknown, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw invalidArgument(op, `${name}: expected a positive finite number, got ${String(value)}`);
  }
  return value;
}

/** `accumDtype`: only float32 accumulation exists. */
export function accumDtype(op: string, value: unknown): void {
  if (value !== undefined && value !== "float32") {
    throw invalidArgument(op, `accumDtype: every sparse op accumulates in "float32", got ${String(value)}`);
  }
}

/**
 * Checks a native entry's status; a message that names the entry's C parameters (`block_indices`) names the
 * caller's arguments (`blockIndices`) instead, as `names` maps them.
 */
export function checked(op: string, names: Readonly<Record<string, string>>, status: number): void {
  try {
    unwrap(status, op);
  } catch (e) {
    if (!(e instanceof AttnkitError) || e.op !== op) throw e;
    let text = e.message.slice(op.length + 2);
    for (const [c, name] of Object.entries(names)) text = text.replace(new RegExp(`\\b${c}\\b`, "g"), name);
    throw new AttnkitError(e.code, op, text);
  }
}
