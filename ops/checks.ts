/**
 * Argument checks for op implementations: each failure throws an AttnkitError (INVALID_ARGUMENT)
 * whose message names the op, the argument and what was expected.
 *
 * @module
 */
import { invalidArgument } from "../ffi/errors.ts";
import { describeValue } from "./args.ts";
import type { DType } from "./dtype.ts";
import { Tensor } from "./tensor.ts";

/** A named expected size: a number must match exactly, a name binds on first sight. */
export type Dim = number | string | null;

/** Checks that `t` is a live Tensor. */
export function expectTensor(op: string, name: string, t: unknown): Tensor {
  if (!(t instanceof Tensor)) {
    throw invalidArgument(op, `${name}: expected a Tensor, got ${describeValue(t)}`);
  }
  if (t.disposed) throw invalidArgument(op, `${name}: the tensor was disposed`);
  return t;
}

/** Checks that `t` is absent or a live Tensor. */
export function optionalTensor(op: string, name: string, t: unknown): Tensor | undefined {
  return t === undefined || t === null ? undefined : expectTensor(op, name, t);
}

/** Checks the dtype. */
export function expectDType(op: string, name: string, t: Tensor, allowed: readonly DType[]): void {
  if (!allowed.includes(t.dtype)) {
    throw invalidArgument(op, `${name}: expected dtype ${allowed.join(" | ")}, got ${t.dtype}`);
  }
}

/** Checks that `t` has the same dtype as `ref`. */
export function expectSameDType(op: string, name: string, t: Tensor, ref: Tensor, refName: string): void {
  if (t.dtype !== ref.dtype) {
    throw invalidArgument(op, `${name}: expected dtype ${ref.dtype} (same as ${refName}), got ${t.dtype}`);
  }
}

/** Checks that `t` lives on the same device as `ref`. */
export function expectSameDevice(op: string, name: string, t: Tensor, ref: Tensor, refName: string): void {
  if (t.device !== ref.device) {
    throw invalidArgument(op, `${name}: expected device ${ref.device} (same as ${refName}), got ${t.device}`);
  }
}

/**
 * Checks a shape against a pattern. Numbers must match; strings are size names that bind on first
 * sight in `sizes` and must match afterwards (so `["B", "T", "H", "K"]` across q, k and v checks
 * that they agree); null matches anything. Returns `sizes`.
 */
export function expectShape(
  op: string,
  name: string,
  t: Tensor,
  pattern: readonly Dim[],
  sizes: Record<string, number> = {},
): Record<string, number> {
  const show = () =>
    `[${
      pattern.map((
        p,
      ) => (p === null ? "*" : typeof p === "number" ? p : sizes[p] !== undefined ? `${p}=${sizes[p]}` : p))
        .join(", ")
    }]`;
  if (t.shape.length !== pattern.length) {
    throw invalidArgument(
      op,
      `${name}: expected shape ${show()} (rank ${pattern.length}), got [${t.shape.join(", ")}]`,
    );
  }
  pattern.forEach((p, i) => {
    const got = t.shape[i];
    if (p === null) return;
    if (typeof p === "number") {
      if (got !== p) {
        throw invalidArgument(op, `${name}: expected shape ${show()}, got [${t.shape.join(", ")}]`);
      }
      return;
    }
    if (sizes[p] === undefined) sizes[p] = got;
    else if (sizes[p] !== got) {
      throw invalidArgument(
        op,
        `${name}: expected shape ${show()}, got [${t.shape.join(", ")}] (${p} is ${sizes[p]})`,
      );
    }
  });
  return sizes;
}

/**
 * Refuses a result's backward when a tensor of its forward was disposed since: results refer to the
 * forward's inputs (and outputs), they do not copy them. Names the tensor.
 */
export function expectForwardTensorsLive(op: string, tensors: Record<string, unknown>): void {
  for (const [name, t] of Object.entries(tensors)) {
    if (t instanceof Tensor && t.disposed) {
      throw invalidArgument(
        op,
        `${name}: disposed after the forward; backward() reads the forward's tensors (the result does not ` +
          "copy them), so keep them until it has run",
      );
    }
  }
}
