/**
 * What a delta-rule forward keeps for its backward: on CUDA, the state before every chunk of 64 tokens,
 * the chunk-local `v - w S` and the WY factors `A` and `w` (16-bit, in the library's own layout),
 * which the backward would otherwise recompute (a sequential pass and most of its chunk-local
 * preparation). It costs `H * chunks * (K V + 64 V + 64 * 64 + 64 K)` elements of the input dtype (at
 * K = V = 128 one and a half times q, k and v together).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { Tensor } from "../tensor.ts";

/**
 * Handle on the per-chunk states a forward stored for its backward (`saveForBackward: true`). Pass it
 * to the backward of the same call (same inputs and options), then dispose it; `using` does both ends.
 * Only the CUDA forward on Hopper at K = V = 128 or 256 with bfloat16/float16 inputs stores them;
 * elsewhere the forward returns no handle and the backward recomputes everything, as it does without
 * one.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, chunkGatedDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 1, 16]);
 * using k = Tensor.randn([1, 64, 1, 16]);
 * using v = Tensor.randn([1, 64, 1, 16]);
 * using g = Tensor.full([1, 64, 1], -0.1);
 * using beta = Tensor.rand([1, 64, 1]);
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { useQkL2norm: true, saveForBackward: true });
 * using dO = Tensor.randn([1, 64, 1, 16]);
 * using grads = chunkGatedDeltaRuleBackward(q, k, v, g, beta, dO, { useQkL2norm: true, saved: r.saved });
 * console.log(r.saved === undefined); // true on the CPU backend
 * ```
 */
export class DeltaSavedStates implements Disposable {
  readonly #buffer: Tensor;
  readonly #call: string;

  /** Wraps a buffer the forward filled; `call` names the sizes and options it was filled for. */
  constructor(buffer: Tensor, call: string) {
    this.#buffer = buffer;
    this.#call = call;
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#buffer.disposed;
  }

  /** Bytes of device memory held. */
  get nbytes(): number {
    return this.#buffer.nbytes;
  }

  /**
   * The buffer, for the backward of `call` (the same description the forward gave); throws an
   * `AttnkitError` naming `saved` when it is disposed or from another call.
   */
  bufferFor(op: string, call: string): Tensor {
    if (this.disposed) throw invalidArgument(op, "saved: the saved states were disposed");
    if (call !== this.#call) {
      throw invalidArgument(op, `saved: from a forward of ${this.#call}, but this backward is ${call}`);
    }
    return this.#buffer;
  }

  /** Frees the device memory. */
  dispose(): void {
    this.#buffer.dispose();
  }

  /** Same as {@link DeltaSavedStates.dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
