/**
 * GLA op classes, TileOPs' GLA* with camelCase options: the chunked forward that also returns the
 * per-chunk states, the backward that reads them, and the one-token decode. Tensors are `"bshd"`
 * (TileOPs' BTHD): q, k `[B, T, HK, K]`, v `[B, T, H, V]`, the per-channel log decay g
 * `[B, T, H, K]` (any floating dtype, cast to float32 on the device). Chunk states are
 * `[B, NT + 1, H, K, V]` float32 with NT = ceil(T / 64): entry c is the state before chunk c (tokens
 * 64c ..), entry NT the final state. Construct once, call many times: each call is checked on its
 * own, so shapes and dtype may change between calls.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectForwardTensorsLive, expectTensor } from "../checks.ts";
import { Tensor } from "../tensor.ts";
import type { DecodeResult } from "./deltanet.ts";
import {
  checkGlaCall,
  GLA_CHUNK,
  glaBackward,
  type GlaBackwardBuffers,
  type GlaBackwardOutputs,
  glaDecode,
  glaForward,
  type GlaSettings,
} from "./gla_native.ts";
import type { LinearLayout } from "./layouts.ts";
import { type ResolvedOptions, resolveOptions } from "./op_support.ts";
import { callerBuffers, disposable } from "./results.ts";

/** Constructor options of {@link GLAFwdOp} and {@link GLABwdOp}. */
export interface GlaOpOptions {
  /** Tokens per chunk: 64 (the only size; default). */
  chunkSize?: number;
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** `"bshd"`, the layout the ops read (may be left out). */
  layout?: LinearLayout;
}

/** Constructor options of {@link GLADecodeFwdOp}. */
export interface GlaDecodeOpOptions {
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** Write the new state over the given state and return that same tensor (default false). */
  inPlace?: boolean;
}

/** Gradients of the GLA ops (TileOPs' `(dq, dk, dv, dg)`); `using` disposes those the library allocated. */
export interface GlaOpGradients extends Disposable {
  /** Shaped like q, dtype of q. */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like g (`[B, T, H, K]`), float32. */
  dg: Tensor;
  /** `[B, H, K, V]` float32: with an initial state (the forward's, or `hasInitialState`). */
  dInitialState?: Tensor;
}

/** Options of a {@link GLAFwdResult}'s own backward. */
export interface GlaOpResultBackwardOptions {
  /** Gradient of the final state, `[B, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /** Buffers for the gradients (exact shape, dtype and device; dgk float32), left the caller's. */
  out?: GlaBackwardBuffers;
}

/**
 * What {@link GLAFwdOp} returns (TileOPs' `(o, final_state, chunk_states)`) and its own backward;
 * `using` disposes the three tensors (except buffers the caller passed in `out`).
 */
export interface GLAFwdResult extends Disposable {
  /** Shaped like v, dtype of q. */
  output: Tensor;
  /** `[B, H, K, V]` float32. */
  finalState: Tensor;
  /** `[B, NT + 1, H, K, V]` float32: the state before each chunk of 64 tokens and the final state. */
  chunkStates: Tensor;
  /**
   * Gradients of this forward from the output's gradient (reads the chunk states), with its inputs
   * (referenced, not copied: keep them until this runs) and options.
   */
  backward(dOutput: Tensor, options?: GlaOpResultBackwardOptions): GlaOpGradients;
}

const CHUNKED: OptionSpec = { layout: "any", chunkSize: "any", scale: "any" };
const DECODE: OptionSpec = { scale: "any", inPlace: "any" };

function resolve(op: string, options: unknown): ResolvedOptions {
  const o = resolveOptions(op, options, GLA_CHUNK, CHUNKED, "bshd");
  if (o.chunkSize !== GLA_CHUNK) {
    throw invalidArgument(
      op,
      `chunkSize: the GLA kernels run chunks of ${GLA_CHUNK} tokens, got ${o.chunkSize}`,
    );
  }
  return o;
}

function settings(o: ResolvedOptions, initialState?: Tensor): GlaSettings {
  return { layout: "bshd", scale: o.scale, recurrent: false, initialState };
}

function opGradients(r: GlaBackwardOutputs, out: unknown): GlaOpGradients {
  const { dq, dk, dv, dgk, dInitialState } = r;
  return disposable({ dq, dk, dv, dg: dgk!, dInitialState }, callerBuffers(out));
}

/**
 * GLA forward, chunked: the output, the final state and the chunk states that {@link GLABwdOp}
 * reads (TileOPs' `GLAFwdOp`), optionally from an initial state `[B, H, K, V]` float32.
 *
 * @example
 * ```ts
 * import { GLAFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GLAFwdOp({ chunkSize: 64 });
 * using q = Tensor.randn([1, 100, 2, 32]);
 * using k = Tensor.randn([1, 100, 2, 32], { std: 0.2 });
 * using v = Tensor.randn([1, 100, 2, 32]);
 * using g = Tensor.rand([1, 100, 2, 32], { low: -0.3, high: 0 });
 * using r = op.forward(q, k, v, g);
 * console.log(r.chunkStates.shape); // [1, 3, 2, 32, 32]
 * using dO = Tensor.randn([1, 100, 2, 32]);
 * using grads = r.backward(dO);
 * ```
 */
export class GLAFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: GlaOpOptions = {}) {
    this.#options = resolve("GLAFwdOp", options);
  }

  /** Runs the forward (into `out`'s buffers where given; they stay the caller's). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    initialState?: Tensor,
    out?: { output?: Tensor; finalState?: Tensor; chunkStates?: Tensor },
  ): GLAFwdResult {
    const op = "GLAFwdOp";
    const inputs = { q, k, v, gk: g };
    const s = settings(this.#options, initialState ?? undefined);
    const r = glaForward(op, inputs, s, { finalState: true, chunkStates: true }, out);
    const fields = { output: r.output, finalState: r.finalState!, chunkStates: r.chunkStates! };
    return Object.assign(disposable(fields, callerBuffers(out)), {
      backward(dOutput: Tensor, options?: GlaOpResultBackwardOptions): GlaOpGradients {
        const bop = `${op}.backward`;
        const o = checkOptions<GlaOpResultBackwardOptions>(bop, options, {
          dFinalState: "any",
          out: "object",
        });
        expectForwardTensorsLive(bop, { q, k, v, g, initialState, chunkStates: fields.chunkStates });
        const grads = glaBackward(bop, inputs, s, dOutput, {
          dFinalState: o.dFinalState ?? undefined,
          chunkStates: fields.chunkStates,
          out: o.out,
        });
        return opGradients(grads, o.out);
      },
    });
  }
}

/**
 * GLA backward (TileOPs' `GLABwdOp`): gradients of q, k, v and g from the output's gradient (first),
 * reading the forward's chunk states `h` instead of recomputing them, and an optional gradient of
 * the final state `dht`. With `hasInitialState`, `h[:, 0]` is the forward's initial state and its
 * gradient comes back as `dInitialState`; without it the forward started from zeros.
 *
 * @example
 * ```ts
 * import { GLABwdOp, GLAFwdOp, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 70, 2, 16]);
 * using k = Tensor.randn([1, 70, 2, 16]);
 * using v = Tensor.randn([1, 70, 2, 16]);
 * using g = Tensor.rand([1, 70, 2, 16], { low: -0.3, high: 0 });
 * using fwd = new GLAFwdOp().forward(q, k, v, g);
 * using dO = Tensor.randn([1, 70, 2, 16]);
 * using grads = new GLABwdOp().backward(dO, q, k, v, g, fwd.chunkStates);
 * console.log(grads.dg.shape); // [1, 70, 2, 16]
 * ```
 */
export class GLABwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: GlaOpOptions = {}) {
    this.#options = resolve("GLABwdOp", options);
  }

  /** Runs the backward (into `out`'s buffers where given; they stay the caller's). */
  backward(
    dO: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    h: Tensor,
    dht?: Tensor,
    hasInitialState = false,
    out?: GlaBackwardBuffers,
  ): GlaOpGradients {
    const op = "GLABwdOp";
    if (typeof hasInitialState !== "boolean") {
      throw invalidArgument(op, `hasInitialState: expected a boolean, got ${typeof hasInitialState}`);
    }
    const inputs = { q, k, v, gk: g };
    const s = settings(this.#options);
    if (!(h instanceof Tensor)) throw invalidArgument(op, "h: expected the chunk states a GLAFwdOp returned");
    const { B, T, H, K, V } = checkGlaCall(op, inputs, s);
    const expected = [B, Math.ceil(T / GLA_CHUNK) + 1, H, K, V];
    if (h.ndim !== 5 || h.shape.join() !== expected.join()) {
      throw invalidArgument(op, `h: expected shape [${expected.join(", ")}], got [${h.shape.join(", ")}]`);
    }
    const h0 = hasInitialState ? h.select(1, 0) : undefined;
    try {
      const r = glaBackward(op, inputs, { ...s, initialState: h0 }, dO, {
        dFinalState: dht ?? undefined,
        chunkStates: h,
        out,
      });
      return opGradients(r, out);
    } finally {
      h0?.dispose();
    }
  }
}

/**
 * GLA decode (TileOPs' `GLADecodeFwdOp`): one token per sequence, `S_new = diag(exp(gk)) S + k v^T`,
 * `o = S_new^T (scale q)`. q, k `[B, HK, K]`, v `[B, H, V]`, gk `[B, H, K]`, state `[B, H, K, V]`
 * float32: no sequence dimension, so no layout. float32 inputs are computed in full float32.
 *
 * @example
 * ```ts
 * import { GLADecodeFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GLADecodeFwdOp({ inPlace: true });
 * using q = Tensor.randn([4, 2, 32]);
 * using k = Tensor.randn([4, 2, 32]);
 * using v = Tensor.randn([4, 2, 32]);
 * using gk = Tensor.rand([4, 2, 32], { low: -0.3, high: 0 });
 * using state = Tensor.zeros([4, 2, 32, 32]);
 * using output = op.forward(q, k, v, gk, state).output; // state now holds the new state
 * ```
 */
export class GLADecodeFwdOp {
  readonly #scale: number | undefined;
  readonly #inPlace: boolean;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: GlaDecodeOpOptions = {}) {
    const o = resolveOptions("GLADecodeFwdOp", options, undefined, DECODE, "none");
    this.#scale = o.scale;
    this.#inPlace = options.inPlace ?? false;
  }

  /** Runs one step (into `out`'s buffers where given). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    gk: Tensor,
    state: Tensor,
    out?: { output?: Tensor; newState?: Tensor },
  ): DecodeResult {
    expectTensor("GLADecodeFwdOp", "gk", gk);
    return glaDecode(
      "GLADecodeFwdOp",
      { q, k, v, gk, state },
      { scale: this.#scale, inPlace: this.#inPlace },
      out,
    );
  }
}
