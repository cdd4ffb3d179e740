/**
 * What a delta-rule forward keeps for its backward: on CUDA, the state before every chunk of 64 tokens,
 * the chunk-local `v - w S` and the WY factors `A` and `w` (16-bit, in the library's own layout),
 * which the backward would otherwise recompute (a sequential pass and most of its chunk-local
 * preparation). It costs `H * chunks * (K V + 64 V + 64 * 64 + 64 K)` elements of the input dtype (at
 * K = V = 128 one and a half times q, k and v together). The handle also records the forward's
 * sizes and options, so a backward given it refuses options that contradict them.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { Tensor } from "../tensor.ts";
import { contradiction, type DeltaCallOptions } from "./consistency.ts";

/** The forward a {@link DeltaSavedStates} handle was made by: its sizes, dtype, device and options. */
export interface DeltaSavedCall {
  /** `"B=.. T=.. H=.. HK=.. K=.. V=.. N=.."`, the sizes of the call. */
  sizes: string;
  /** The dtype of q. */
  dtype: string;
  /** The device of q. */
  device: string;
  /** Gated delta rule (else the delta rule). */
  gated: boolean;
  /** The options a backward must share with it. */
  options: DeltaCallOptions;
}

/**
 * Handle on what a forward stored for its backward (`saveForBackward: true`). Pass it to the backward
 * of the same call (same inputs and options), then dispose it; `using` does both ends, and the
 * forward's own `backward` uses it by itself. Only the CUDA forward on Hopper at K = V = 128 or 256
 * with bfloat16/float16 inputs stores states (`stored`); elsewhere the handle holds none and the
 * backward recomputes them, as it does without a handle. Either way the handle carries the forward's
 * options, and a backward whose options contradict them is refused.
 *
 * @example
 * ```ts
 * import { chunkGatedDeltaRule, chunkGatedDeltaRuleBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 1, 16]);
 * using k = Tensor.randn([1, 64, 1, 16]);
 * using v = Tensor.randn([1, 64, 1, 16]);
 * using g = Tensor.full([1, 64, 1], -0.1);
 * using beta = Tensor.rand([1, 64, 1]);
 * const options = { layout: "bshd", useQkL2norm: true } as const;
 * using r = chunkGatedDeltaRule(q, k, v, g, beta, { ...options, saveForBackward: true });
 * using dO = Tensor.randn([1, 64, 1, 16]);
 * using grads = chunkGatedDeltaRuleBackward(dO, q, k, v, g, beta, { ...options, saved: r.saved });
 * console.log(r.saved?.stored); // false on the CPU backend
 * ```
 */
export class DeltaSavedStates implements Disposable {
  readonly #buffer: Tensor | undefined;
  readonly #call: DeltaSavedCall;
  #disposed = false;

  /** Wraps what the forward described by `call` filled (`buffer`; undefined when it stored nothing). */
  constructor(buffer: Tensor | undefined, call: DeltaSavedCall) {
    this.#buffer = buffer;
    this.#call = { ...call, options: { ...call.options } };
  }

  /** True once disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** True when the forward stored states (the backward then skips recomputing them). */
  get stored(): boolean {
    return this.#buffer !== undefined;
  }

  /** Bytes of device memory held (0 when nothing was stored). */
  get nbytes(): number {
    return this.#buffer?.nbytes ?? 0;
  }

  /** The forward this handle was made by. */
  get call(): DeltaSavedCall {
    return { ...this.#call, options: { ...this.#call.options } };
  }

  /**
   * The stored buffer (undefined when none) for the backward of `call`; throws an `AttnkitError`
   * when the handle is disposed, from another problem, or from a forward whose options the
   * backward's contradict (naming the option).
   */
  bufferFor(op: string, call: DeltaSavedCall): Tensor | undefined {
    if (this.#disposed) throw invalidArgument(op, "saved: the saved states were disposed");
    const made = this.#call;
    if (made.gated !== call.gated) {
      const rule = (gated: boolean) => (gated ? "the gated delta rule" : "the delta rule");
      throw invalidArgument(
        op,
        `saved: from a forward of ${rule(made.gated)}, but this backward is of ${rule(call.gated)}`,
      );
    }
    // Options first: another layout also reads other sizes, and the option is the cause to name.
    const message = contradiction(made.options, call.options, "the forward that made `saved`");
    if (message !== undefined) throw invalidArgument(op, message);
    const problem = (c: DeltaSavedCall) => `${c.sizes}, ${c.dtype} on ${c.device}`;
    if (problem(made) !== problem(call)) {
      throw invalidArgument(
        op,
        `saved: from a forward of ${problem(made)}, but this backward is ${problem(call)}`,
      );
    }
    return this.#buffer;
  }

  /** Frees the device memory (safe to call twice). */
  dispose(): void {
    this.#disposed = true;
    this.#buffer?.dispose();
  }

  /** Same as {@link DeltaSavedStates.dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
