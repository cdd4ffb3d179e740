/**
 * Cumulative sequence offsets (`cuSeqlens`) of packed inputs, as every family takes them: host numbers
 * (`number[]`, `Int32Array`, `BigInt64Array`) or a device tensor (int32 or int64). The kernels read
 * int32 offsets on the inputs' device; {@link int32Seqlens} turns any accepted form into that.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { describeValue } from "./args.ts";
import { expectDType, expectTensor } from "./checks.ts";
import { Tensor } from "./tensor.ts";

/**
 * Offsets `[0, len0, len0 + len1, ...]` (N + 1 entries for N sequences) of sequences packed back to
 * back: host numbers or a tensor (int32 or int64, 1-D) on the inputs' device.
 *
 * @example
 * ```ts
 * import type { CuSeqlens } from "@attnkit/attnkit";
 * const threeSequences: CuSeqlens = [0, 5, 5, 12]; // lengths 5, 0 and 7
 * ```
 */
export type CuSeqlens = Tensor | readonly number[] | Int32Array | BigInt64Array;

/** Offsets as the kernels read them: int32 on the inputs' device. */
export interface Int32Seqlens extends Disposable {
  /** int32 `[N + 1]` on the requested device. */
  readonly tensor: Tensor;
  /** Whether `tensor` was made here (uploaded or narrowed); disposing releases only those. */
  readonly owned: boolean;
  /** The offsets when they were given on the host (no device read needed), else undefined. */
  readonly host: Int32Array | undefined;
  /** Disposes `tensor` when it is `owned`. */
  [Symbol.dispose](): void;
}

const INT32_MAX = 2 ** 31 - 1;

function hostOffsets(
  op: string,
  name: string,
  value: readonly number[] | Int32Array | BigInt64Array,
): Int32Array {
  // N + 1 offsets of int32 sequences: more entries than int32 counts cannot be valid.
  if (value.length > 2 ** 31) {
    throw invalidArgument(op, `${name}: expected at most 2^31 offsets, got ${value.length}`);
  }
  const out = new Int32Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const raw = value[i];
    const x = typeof raw === "bigint" ? Number(raw) : raw;
    if (!Number.isInteger(x) || x < 0 || x > INT32_MAX) {
      const all = Array.from(value as ArrayLike<number | bigint>, String);
      const shown = all.length > 8 ? `[${all.slice(0, 8).join(", ")}, ...]` : `[${all.join(", ")}]`;
      throw invalidArgument(
        op,
        `${name}: expected non-negative int32 offsets, got ${shown} (entry ${i} is ${describeValue(raw)})`,
      );
    }
    out[i] = x;
  }
  return out;
}

/**
 * Checks `cuSeqlens` and returns int32 offsets on `device`: host numbers are checked (integers in
 * [0, 2^31 - 1]) and uploaded, an int64 tensor is narrowed on its device, an int32 tensor is used as
 * is. A tensor must be 1-D with at least one entry and live on `device`. Dispose the result (`using`)
 * to release what was made here. Ordering (starts at 0, nondecreasing, last = token count) is left to
 * the native entries, which check it for every form.
 */
export function int32Seqlens(op: string, name: string, value: unknown, device: string): Int32Seqlens {
  if (value instanceof Tensor) {
    const t = expectTensor(op, name, value);
    expectDType(op, name, t, ["int32", "int64"]);
    if (t.ndim !== 1 || t.shape[0] < 1) {
      throw invalidArgument(op, `${name}: expected shape [N + 1] with N >= 0, got [${t.shape.join(", ")}]`);
    }
    if (t.device !== device) {
      throw invalidArgument(op, `${name}: expected device ${device} (that of the inputs), got ${t.device}`);
    }
    return t.dtype === "int32" ? seqlens(t, false, undefined) : seqlens(t.cast("int32"), true, undefined);
  }
  if (Array.isArray(value) || value instanceof Int32Array || value instanceof BigInt64Array) {
    if (value.length < 1) throw invalidArgument(op, `${name}: expected N + 1 >= 1 offsets, got none`);
    const host = hostOffsets(op, name, value as readonly number[] | Int32Array | BigInt64Array);
    return seqlens(Tensor.from(host, { dtype: "int32", device }), true, host);
  }
  throw invalidArgument(
    op,
    `${name}: expected offsets as a number[], Int32Array, BigInt64Array or an int32/int64 Tensor, got ${
      describeValue(value)
    }`,
  );
}

function seqlens(tensor: Tensor, owned: boolean, host: Int32Array | undefined): Int32Seqlens {
  return {
    tensor,
    owned,
    host,
    [Symbol.dispose]() {
      if (owned) tensor.dispose();
    },
  };
}

/** The offsets of `cu` on the host: its host copy, or a read of its tensor. */
export function seqlensOffsets(cu: Int32Seqlens): Int32Array {
  return cu.host ?? cu.tensor.values("int32");
}
