/**
 * DeltaNet op classes (the ungated delta rule), TileOPs' DeltaNet* with camelCase options and an
 * explicit layout: `"bhsd"` (q, k `[B, HK, S, K]`, v `[B, H, S, V]`, beta `[B, H, S]`, TileOPs' order)
 * or `"bshd"` (q, k `[B, S, HK, K]`, v `[B, S, H, V]`, beta `[B, S, H]`). Tensors are read in place
 * through strided views, never copied through the host. Construct once, call many times: each call
 * is checked on its own, so shapes and dtype may change between calls. The output reads the state
 * with `scale` (default `K ** -0.5`), also in decode.
 *
 * @module
 */
import {
  type BackwardOutputs,
  type DecodeSettings,
  type DeltaBackwardBuffers,
  deltaDecode,
  type DeltaForwardBuffers,
} from "./delta_native.ts";
import {
  backwardFromChunkStates,
  CHUNKED_BWD_OP_OPTIONS,
  CHUNKED_FWD_OP_OPTIONS,
  CombinedDeltaRun,
  type DecodeOpOptions,
  decodeSettings,
  type DeltaCombinedOpOptions,
  type DeltaTunedOpOptions,
  forwardWithFactors,
  type OpResultBackwardOptions,
  opSettings,
  type ResolvedOptions,
  resolveOptions,
} from "./op_support.ts";
import { callerBuffers, disposable } from "./results.ts";
import type { Tensor } from "../tensor.ts";

/**
 * What {@link DeltaNetFwdOp} returns (TileOPs' `(o, S, Aw, Au)`) and its own backward; `using`
 * disposes the four tensors (except buffers the caller passed in `out`).
 */
export interface DeltaNetFwdResult extends Disposable {
  /** o, shaped like v (in the op's layout), dtype of q. */
  output: Tensor;
  /** S: the state before each chunk and the final state, `[B, H, NC + 1, K, V]` float32. */
  chunkStates: Tensor;
  /** Aw: chunk-local WY factor of the keys, `[B, H, S, chunkSize]` float32 (w = Aw k per chunk). */
  aw: Tensor;
  /** Au: chunk-local WY factor of the values, `[B, H, S, chunkSize]` float32 (u = Au v per chunk). */
  au: Tensor;
  /**
   * Gradients of this forward from the output's gradient, with its inputs (referenced, not copied:
   * keep them until this runs) and options.
   */
  backward(dOutput: Tensor, options?: OpResultBackwardOptions): DeltaNetGradients;
}

/**
 * Gradients of the DeltaNet ops (TileOPs' `(dq, dk, dv, dbeta)`), in the op's layout; `using`
 * disposes those the library allocated.
 */
export interface DeltaNetGradients extends Disposable {
  /** Shaped like q, dtype of q. */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like beta, float32. */
  dbeta: Tensor;
}

/** What the decode ops return (with `inPlace`, newState is the state that was given). */
export interface DecodeResult {
  /** `[B, H, V]`, dtype of q. */
  output: Tensor;
  /** `[B, H, K, V]`, dtype of the state. */
  newState: Tensor;
}

function gradients(r: BackwardOutputs, out: unknown): DeltaNetGradients {
  r.dInitialState?.dispose();
  return disposable({ dq: r.dq, dk: r.dk, dv: r.dv, dbeta: r.dbeta }, callerBuffers(out));
}

/**
 * DeltaNet forward: returns the output, the chunk states and the WY factors (TileOPs' `(o, S, Aw,
 * Au)`), from a zero state.
 *
 * @example
 * ```ts
 * import { DeltaNetFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new DeltaNetFwdOp({ layout: "bhsd", chunkSize: 64, useQkL2norm: true });
 * using q = Tensor.randn([1, 2, 100, 32]);
 * using k = Tensor.randn([1, 2, 100, 32]);
 * using v = Tensor.randn([1, 2, 100, 32]);
 * using beta = Tensor.rand([1, 2, 100]);
 * using r = op.forward(q, k, v, beta);
 * console.log(r.chunkStates.shape); // [1, 2, 3, 32, 32]
 * using dO = Tensor.randn([1, 2, 100, 32]);
 * using grads = r.backward(dO);
 * ```
 */
export class DeltaNetFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DeltaTunedOpOptions) {
    this.#options = resolveOptions("DeltaNetFwdOp", options, 64, CHUNKED_FWD_OP_OPTIONS, "required");
  }

  /** Runs the forward (into `out`'s buffers where given; they stay the caller's). */
  forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, out?: DeltaForwardBuffers): DeltaNetFwdResult {
    return forwardWithFactors("DeltaNetFwdOp", this.#options, false, { q, k, v, beta }, out, gradients);
  }
}

/**
 * DeltaNet backward: gradients of q, k, v and beta from the output's gradient (first). `S` (the chunk
 * states of {@link DeltaNetFwdOp}) supplies the state the forward started from (its first entry);
 * without it the start state is zero. TileOPs' Aw, Au, w and u are not needed: the backward
 * recomputes what it needs from the inputs, which costs less than reading them.
 *
 * @example
 * ```ts
 * import { DeltaNetBwdOp, DeltaNetFwdOp, Tensor } from "@attnkit/attnkit";
 * const options = { layout: "bhsd", useQkL2norm: true } as const;
 * using q = Tensor.randn([1, 2, 50, 16]);
 * using k = Tensor.randn([1, 2, 50, 16]);
 * using v = Tensor.randn([1, 2, 50, 16]);
 * using beta = Tensor.rand([1, 2, 50]);
 * using fwd = new DeltaNetFwdOp(options).forward(q, k, v, beta);
 * using dO = Tensor.randn([1, 2, 50, 16]);
 * using grads = new DeltaNetBwdOp(options).backward(dO, q, k, v, beta, fwd.chunkStates);
 * ```
 */
export class DeltaNetBwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DeltaTunedOpOptions) {
    this.#options = resolveOptions("DeltaNetBwdOp", options, 64, CHUNKED_BWD_OP_OPTIONS, "required");
  }

  /** Runs the backward (into `out`'s buffers where given; they stay the caller's). */
  backward(
    dO: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    S?: Tensor,
    out?: DeltaBackwardBuffers,
  ): DeltaNetGradients {
    const s = opSettings(this.#options, false);
    return gradients(backwardFromChunkStates("DeltaNetBwdOp", { q, k, v, beta }, s, dO, S, out), out);
  }
}

/**
 * DeltaNet forward and backward in one op: `forward` returns the output and keeps (its own handles
 * on) the inputs; `backward` turns the output's gradient into the inputs' gradients and releases
 * them, as does `dispose()`.
 *
 * @example
 * ```ts
 * import { DeltaNetOp, Tensor } from "@attnkit/attnkit";
 * using op = new DeltaNetOp({ layout: "bhsd", useQkL2norm: true });
 * using q = Tensor.randn([2, 2, 64, 32]);
 * using k = Tensor.randn([2, 2, 64, 32]);
 * using v = Tensor.randn([2, 2, 64, 32]);
 * using beta = Tensor.rand([2, 2, 64]);
 * using o = op.forward(q, k, v, beta);
 * using dO = Tensor.randn([2, 2, 64, 32]);
 * using grads = op.backward(dO);
 * ```
 */
export class DeltaNetOp implements Disposable {
  readonly #run: CombinedDeltaRun<DeltaNetGradients>;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DeltaCombinedOpOptions) {
    this.#run = new CombinedDeltaRun("DeltaNetOp", options, false, gradients);
  }

  /** Runs the forward and keeps the inputs for {@link DeltaNetOp.backward}. */
  forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, out?: { output?: Tensor }): Tensor {
    return this.#run.forward({ q, k, v, beta }, out);
  }

  /**
   * Gradients of the last forward's inputs (into `out`'s buffers where given; they stay the
   * caller's); releases the kept inputs.
   */
  backward(dO: Tensor, out?: DeltaBackwardBuffers): DeltaNetGradients {
    return this.#run.backward(dO, out);
  }

  /** True between a forward and its backward (inputs are held). */
  get holdsInputs(): boolean {
    return this.#run.held;
  }

  /** Releases the kept inputs (safe to call twice). */
  dispose(): void {
    this.#run.dispose();
  }

  /** Same as `dispose()`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * DeltaNet decode: one token per sequence, `S' = S`, `u = beta (v - S'^T k)`, `S_new = S' + k u^T`,
 * `o = scale S_new^T q`. q, k `[B, HK, K]`, v `[B, H, V]`, beta `[B, H]`, state `[B, H, K, V]`
 * (float32 or the dtype of q): no sequence dimension, so no layout. float32 inputs are computed in
 * full float32 (no TF32).
 *
 * @example
 * ```ts
 * import { DeltaNetDecodeFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new DeltaNetDecodeFwdOp({ useQkL2norm: true });
 * using q = Tensor.randn([4, 2, 32]);
 * using k = Tensor.randn([4, 2, 32]);
 * using v = Tensor.randn([4, 2, 32]);
 * using beta = Tensor.rand([4, 2]);
 * using state = Tensor.zeros([4, 2, 32, 32]);
 * const { output, newState } = op.forward(q, k, v, beta, state);
 * output.dispose();
 * newState.dispose();
 * ```
 */
export class DeltaNetDecodeFwdOp {
  readonly #settings: DecodeSettings;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DecodeOpOptions = {}) {
    this.#settings = decodeSettings("DeltaNetDecodeFwdOp", options, false);
  }

  /** Runs one step (into `out`'s buffers where given). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    state: Tensor,
    out?: { output?: Tensor; newState?: Tensor },
  ): DecodeResult {
    return deltaDecode("DeltaNetDecodeFwdOp", { q, k, v, beta, state }, this.#settings, out);
  }
}
