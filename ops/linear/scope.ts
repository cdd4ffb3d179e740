/**
 * Ownership of the tensors an op allocates: temporaries are disposed when the scope ends, results are
 * handed to the caller only once everything succeeded (so a thrown error leaks nothing).
 *
 * @module
 */
import type { Tensor } from "../tensor.ts";

/**
 * Collects tensors made during one op call. `temp` tensors die with the scope; `result` tensors die
 * with it too unless `release()` hands them to the caller.
 *
 * @example
 * ```ts
 * import { Tensor } from "../tensor.ts";
 * import { TensorScope } from "./scope.ts";
 * using scope = new TensorScope();
 * const scratch = scope.temp(Tensor.zeros([4]));
 * const out = scope.result(Tensor.zeros([4]));
 * scope.release();
 * ```
 */
export class TensorScope implements Disposable {
  #temps: Tensor[] = [];
  #results: Tensor[] = [];
  #released = false;

  /** Registers a temporary: disposed when the scope ends. */
  temp<T extends Tensor>(t: T): T {
    this.#temps.push(t);
    return t;
  }

  /** Registers a result: disposed when the scope ends, unless `release()` ran first. */
  result<T extends Tensor>(t: T): T {
    this.#results.push(t);
    return t;
  }

  /** Takes a temporary out of the scope: the caller owns it from now on. */
  keep<T extends Tensor>(t: T): T {
    this.#temps = this.#temps.filter((x) => x !== t);
    return t;
  }

  /** Hands the results to the caller (call once all work succeeded). */
  release(): void {
    this.#released = true;
  }

  /** Disposes the temporaries, and the results unless released. */
  [Symbol.dispose](): void {
    for (const t of this.#temps) t.dispose();
    if (!this.#released) { for (const t of this.#results) t.dispose(); }
    this.#temps = [];
    this.#results = [];
  }
}
