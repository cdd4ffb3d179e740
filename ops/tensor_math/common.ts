/**
 * What the tensor-math files share: argument checks (dims, operands), temporaries that are disposed
 * at the end of a call, and making a result that is disposed when filling it fails.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { describeValue } from "../args.ts";
import { expectTensor } from "../checks.ts";
import type { DType } from "../dtype.ts";
import { Tensor } from "../tensor.ts";

/** The shape as messages show it. */
export function shapeText(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

/** Checks one dim of a tensor of rank `rank` (negative counts from the end) and returns it in [0, rank). */
export function normalizeDim(op: string, dim: unknown, rank: number, arg = "dim"): number {
  if (!Number.isSafeInteger(dim)) {
    throw invalidArgument(op, `${arg}: expected an integer, got ${describeValue(dim)}`);
  }
  const d = dim as number;
  if (d < -rank || d >= rank) {
    throw invalidArgument(
      op,
      rank === 0
        ? `${arg}: ${d} is out of range: the tensor has no dimensions`
        : `${arg}: ${d} is out of range for a tensor of rank ${rank} (expected ${-rank}..${rank - 1})`,
    );
  }
  return d < 0 ? d + rank : d;
}

/**
 * Checks a dim or a list of dims (undefined: every dim) and returns them sorted, each in [0, rank).
 */
export function normalizeDims(op: string, dims: unknown, rank: number): number[] {
  if (dims === undefined || dims === null) return [...Array(rank).keys()];
  if (!Array.isArray(dims)) return [normalizeDim(op, dims, rank)];
  if (dims.length === 0) {
    throw invalidArgument(op, "dim: expected at least one dim (leave dim out to reduce over every dim)");
  }
  const out = dims.map((d, i) => normalizeDim(op, d, rank, `dim[${i}]`));
  const unique = new Set(out);
  if (unique.size !== out.length) throw invalidArgument(op, `dim: [${dims.join(", ")}] names a dim twice`);
  return out.sort((a, b) => a - b);
}

/** Checks that an operand is a live tensor or a number. */
export function checkOperand(op: string, arg: string, value: unknown): Tensor | number {
  if (typeof value === "number") return value;
  if (!(value instanceof Tensor)) {
    throw invalidArgument(op, `${arg}: expected a Tensor or a number, got ${describeValue(value)}`);
  }
  return expectTensor(op, arg, value);
}

/** Tensors made inside a call (casts, staged scalars), disposed when the call ends. */
export class Temps {
  readonly #made: Tensor[] = [];

  /** `t` in `dtype`: itself when it has it already, else a cast that this scope owns. */
  cast(t: Tensor, dtype: DType): Tensor {
    return t.dtype === dtype ? t : this.keep(t.cast(dtype));
  }

  /** Keeps `t` until the scope ends. */
  keep(t: Tensor): Tensor {
    this.#made.push(t);
    return t;
  }

  /** `t` (made in this scope) in `dtype`, handed to the caller instead of disposed with the scope. */
  result(t: Tensor, dtype: DType): Tensor {
    if (t.dtype !== dtype) return t.cast(dtype);
    const i = this.#made.indexOf(t);
    if (i >= 0) this.#made.splice(i, 1);
    return t;
  }

  [Symbol.dispose](): void {
    for (const t of this.#made) t.dispose();
    this.#made.length = 0;
  }
}

/** A new tensor filled by `write`; disposed again when `write` throws. */
export function produce(
  shape: readonly number[],
  dtype: DType,
  device: Tensor["device"],
  write: (out: Tensor) => void,
): Tensor {
  const out = Tensor.empty(shape, { dtype, device });
  try {
    write(out);
  } catch (e) {
    out.dispose();
    throw e;
  }
  return out;
}
