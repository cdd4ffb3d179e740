/**
 * What the delta-rule results share: disposal that frees only what the library allocated (a buffer
 * the caller passed in `out` stays the caller's), and a copy of host offsets for their backward.
 *
 * @module
 */
import { Tensor } from "../tensor.ts";

/** The tensors of an `out` object (the caller's buffers). */
export function callerBuffers(out: unknown): ReadonlySet<Tensor> {
  if (typeof out !== "object" || out === null) return new Set();
  return new Set(Object.values(out).filter((t): t is Tensor => t instanceof Tensor));
}

/**
 * Adds `Symbol.dispose` to a result: it disposes every tensor field except the caller's buffers
 * (`caller`, from the call's `out`), and calls `also` (e.g. to release saved states).
 */
export function disposable<T extends object>(
  fields: T,
  caller: ReadonlySet<Tensor> = new Set(),
  also?: () => void,
): T & Disposable {
  return {
    ...fields,
    [Symbol.dispose]() {
      for (const t of Object.values(fields)) {
        if (t instanceof Tensor && !caller.has(t)) t.dispose();
      }
      also?.();
    },
  };
}

/** A copy of host offsets (a later change to the caller's array must not reach the backward). */
export function keepOffsets<T>(cu: T): T {
  if (Array.isArray(cu)) return [...cu] as T;
  if (cu instanceof Int32Array || cu instanceof BigInt64Array) return cu.slice() as T;
  return cu;
}
