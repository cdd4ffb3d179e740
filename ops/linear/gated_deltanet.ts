/**
 * Gated DeltaNet op classes, TileOPs' GatedDeltaNet* with camelCase options. Per token:
 * `S <- exp(g) S`, then the delta update and `o = scale S^T q` (scale defaults to `K ** -0.5`).
 * Layouts: `"bhsd"` (q, k `[B, HK, T, K]`, v `[B, H, T, V]`, g and beta `[B, H, T]`) or `"bshd"`
 * (q, k `[B, T, HK, K]`, v `[B, T, H, V]`, g and beta `[B, T, H]`). The classes whose name states a
 * layout (`...BTHD...` reads `"bshd"`, `...BHTD...` reads `"bhsd"`) take it from the name; the
 * others require `layout`. Tensors are read in place through strided views (g and beta are cast and
 * permuted to float32 on the device). Construct once, call many times: each call is checked on its
 * own, so shapes and dtype may change between calls. The BTHD forward serves every shape and dtype
 * the other ops serve.
 *
 * @module
 */
import { checkArgument, numberIn } from "../args.ts";
import {
  type BackwardOutputs,
  checkChunkSize,
  checkDeltaCall,
  type DecodeSettings,
  type DeltaBackwardBuffers,
  deltaDecode,
  deltaForward,
  type DeltaForwardBuffers,
  type DeltaInputs,
} from "./delta_native.ts";
import type { DecodeResult } from "./deltanet.ts";
import type { LinearLayout } from "./layouts.ts";
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
  type NamedLayoutOpOptions,
  type OpResultBackwardOptions,
  opSettings,
  type ResolvedOptions,
  resolveOptions,
} from "./op_support.ts";
import { callerBuffers, disposable } from "./results.ts";
import type { Tensor } from "../tensor.ts";

/**
 * What the Gated DeltaNet forward ops return (TileOPs' `(o, S, Aw, Au)`) and its own backward;
 * `using` disposes the four tensors (except buffers the caller passed in `out`).
 */
export interface GatedDeltaNetFwdResult extends Disposable {
  /** o, shaped like v (in the layout of the inputs), dtype of q. */
  output: Tensor;
  /** S: the state before each chunk and the final state, `[B, H, NC + 1, K, V]` float32. */
  chunkStates: Tensor;
  /** Aw = Tm diag(beta exp(gc)) per chunk, `[B, H, T, chunkSize]` float32 (w = Aw k). */
  aw: Tensor;
  /** Au = Tm diag(beta) per chunk, `[B, H, T, chunkSize]` float32 (u = Au v). */
  au: Tensor;
  /**
   * Gradients of this forward from the output's gradient, with its inputs (referenced, not copied:
   * keep them until this runs) and options.
   */
  backward(dOutput: Tensor, options?: OpResultBackwardOptions): GatedDeltaNetGradients;
}

/** What the prefill ops return; `using` disposes both (except buffers the caller passed in `out`). */
export interface GatedDeltaNetPrefillResult extends Disposable {
  /** o, shaped like v (in the layout of the inputs), dtype of q. */
  output: Tensor;
  /** `[B, H, K, V]` float32. */
  finalState: Tensor;
}

/**
 * Gradients of the Gated DeltaNet ops (TileOPs' `(dq, dk, dv, dg, dbeta)`), in the op's layout;
 * `using` disposes those the library allocated.
 */
export interface GatedDeltaNetGradients extends Disposable {
  /** Shaped like q, dtype of q. */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like g, float32. */
  dg: Tensor;
  /** Shaped like beta, float32. */
  dbeta: Tensor;
}

/** Options of the prefill ops: `chunkSize` undefined or null picks one per call. */
export interface PrefillOpOptions extends Omit<NamedLayoutOpOptions, "chunkSize"> {
  /** 32, 64 or 128; default: 128 when batch * heads <= 8 and T >= 128, else 64. */
  chunkSize?: number | null;
}

type GatedInputs = Required<Pick<DeltaInputs, "g">> & DeltaInputs;

function gatedGradients(r: BackwardOutputs, out: unknown): GatedDeltaNetGradients {
  r.dInitialState?.dispose();
  return disposable({ dq: r.dq, dk: r.dk, dv: r.dv, dg: r.dg!, dbeta: r.dbeta }, callerBuffers(out));
}

/**
 * Gated DeltaNet forward over `"bshd"` (BTHD, token-major) inputs, from a zero state; returns o, S,
 * Aw and Au.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetBTHDFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GatedDeltaNetBTHDFwdOp({ useQkL2norm: true });
 * using q = Tensor.randn([1, 80, 2, 32], { dtype: "bfloat16" });
 * using k = Tensor.randn([1, 80, 2, 32], { dtype: "bfloat16" });
 * using v = Tensor.randn([1, 80, 2, 32], { dtype: "bfloat16" });
 * using g = Tensor.rand([1, 80, 2], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 80, 2]);
 * using r = op.forward(q, k, v, g, beta);
 * ```
 */
export class GatedDeltaNetBTHDFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op (`layout`, when given, must be `"bshd"`); shapes and dtype come with each call. */
  constructor(options: NamedLayoutOpOptions = {}) {
    this.#options = resolveOptions("GatedDeltaNetBTHDFwdOp", options, 64, CHUNKED_FWD_OP_OPTIONS, "bshd");
  }

  /** Runs the forward on bshd tensors (into `out`'s buffers where given; they stay the caller's). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    out?: DeltaForwardBuffers,
  ): GatedDeltaNetFwdResult {
    const inputs = { q, k, v, g, beta };
    return forwardWithFactors("GatedDeltaNetBTHDFwdOp", this.#options, true, inputs, out, gatedGradients);
  }
}

/**
 * Gated DeltaNet forward over `"bhsd"` (BHTD, head-major) inputs, from a zero state; returns o, S,
 * Aw and Au. {@link GatedDeltaNetBwdOp} takes the S this returns.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetBHTDFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GatedDeltaNetBHTDFwdOp({ useQkL2norm: true });
 * using q = Tensor.randn([1, 2, 80, 32]);
 * using k = Tensor.randn([1, 2, 80, 32]);
 * using v = Tensor.randn([1, 2, 80, 32]);
 * using g = Tensor.rand([1, 2, 80], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 2, 80]);
 * using r = op.forward(q, k, v, g, beta);
 * using dO = Tensor.randn([1, 2, 80, 32]);
 * using grads = r.backward(dO);
 * ```
 */
export class GatedDeltaNetBHTDFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op (`layout`, when given, must be `"bhsd"`); shapes and dtype come with each call. */
  constructor(options: NamedLayoutOpOptions = {}) {
    this.#options = resolveOptions("GatedDeltaNetBHTDFwdOp", options, 64, CHUNKED_FWD_OP_OPTIONS, "bhsd");
  }

  /** Runs the forward on bhsd tensors (into `out`'s buffers where given; they stay the caller's). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    out?: DeltaForwardBuffers,
  ): GatedDeltaNetFwdResult {
    const inputs = { q, k, v, g, beta };
    return forwardWithFactors("GatedDeltaNetBHTDFwdOp", this.#options, true, inputs, out, gatedGradients);
  }
}

/** The prefill ops' chunk size for a call (the serving default when none was given). */
export function prefillChunkSize(
  chosen: number | undefined,
  batch: number,
  heads: number,
  T: number,
): number {
  const op = "prefillChunkSize";
  for (const [name, value] of [["batch", batch], ["heads", heads], ["T", T]] as const) {
    checkArgument(op, name, value, numberIn(0, Number.MAX_SAFE_INTEGER, true));
  }
  if (chosen !== undefined && chosen !== null) {
    checkChunkSize(op, chosen);
    return chosen;
  }
  return batch * heads <= 8 && T >= 128 ? 128 : 64;
}

function prefill(
  op: string,
  o: ResolvedOptions,
  inputs: GatedInputs,
  initialState: Tensor | undefined,
  out: { output?: Tensor; finalState?: Tensor } | undefined,
): GatedDeltaNetPrefillResult {
  const probe = checkDeltaCall(op, inputs, { ...opSettings(o, true, 64), initialState });
  const chunkSize = prefillChunkSize(o.chunkSize, probe.B, probe.H, probe.T);
  const s = { ...opSettings(o, true, chunkSize), initialState };
  // Inference: the call is not remembered for a backward's checks.
  const r = deltaForward(op, inputs, s, { finalState: true, remember: false }, out);
  return disposable({ output: r.output, finalState: r.finalState! }, callerBuffers(out));
}

function prefillOptions(op: string, options: PrefillOpOptions, layout: LinearLayout): ResolvedOptions {
  return resolveOptions(op, options, undefined, CHUNKED_FWD_OP_OPTIONS, layout);
}

/**
 * Gated DeltaNet inference prefill over `"bshd"` (BTHD, token-major) inputs: `(q, k, v, g, beta) ->
 * (o, finalState)`, from a zero state or `initialState` (`[B, H, K, V]` float32). Without a chunk size
 * it picks 128 when batch * heads <= 8 and T >= 128, else 64.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetPrefillBTHDFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GatedDeltaNetPrefillBTHDFwdOp({ useQkL2norm: true });
 * using q = Tensor.randn([1, 200, 2, 32]);
 * using k = Tensor.randn([1, 200, 2, 32]);
 * using v = Tensor.randn([1, 200, 2, 32]);
 * using g = Tensor.rand([1, 200, 2], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 200, 2]);
 * using r = op.forward(q, k, v, g, beta);
 * console.log(r.finalState.shape); // [1, 2, 32, 32]
 * ```
 */
export class GatedDeltaNetPrefillBTHDFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op (`layout`, when given, must be `"bshd"`); shapes and dtype come with each call. */
  constructor(options: PrefillOpOptions = {}) {
    this.#options = prefillOptions("GatedDeltaNetPrefillBTHDFwdOp", options, "bshd");
  }

  /** Runs the prefill on bshd tensors, from `initialState` (`[B, H, K, V]` float32) or zeros. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initialState?: Tensor,
    out?: { output?: Tensor; finalState?: Tensor },
  ): GatedDeltaNetPrefillResult {
    return prefill("GatedDeltaNetPrefillBTHDFwdOp", this.#options, { q, k, v, g, beta }, initialState, out);
  }
}

/**
 * Gated DeltaNet inference prefill over `"bhsd"` (BHTD, head-major) inputs; the same arithmetic as
 * {@link GatedDeltaNetPrefillBTHDFwdOp}.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetPrefillBHTDFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GatedDeltaNetPrefillBHTDFwdOp({ chunkSize: 64, useQkL2norm: true });
 * using q = Tensor.randn([1, 2, 100, 32]);
 * using k = Tensor.randn([1, 2, 100, 32]);
 * using v = Tensor.randn([1, 2, 100, 32]);
 * using g = Tensor.rand([1, 2, 100], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 2, 100]);
 * using r = op.forward(q, k, v, g, beta);
 * ```
 */
export class GatedDeltaNetPrefillBHTDFwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op (`layout`, when given, must be `"bhsd"`); shapes and dtype come with each call. */
  constructor(options: PrefillOpOptions = {}) {
    this.#options = prefillOptions("GatedDeltaNetPrefillBHTDFwdOp", options, "bhsd");
  }

  /** Runs the prefill on bhsd tensors, from `initialState` (`[B, H, K, V]` float32) or zeros. */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initialState?: Tensor,
    out?: { output?: Tensor; finalState?: Tensor },
  ): GatedDeltaNetPrefillResult {
    return prefill("GatedDeltaNetPrefillBHTDFwdOp", this.#options, { q, k, v, g, beta }, initialState, out);
  }
}

/**
 * Gated DeltaNet backward: gradients of q, k, v, g and beta from the output's gradient (first). `S`
 * (the chunk states of a forward op) supplies the state the forward started from (its first entry);
 * without it the start state is zero. The rest is recomputed from the inputs.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetBHTDFwdOp, GatedDeltaNetBwdOp, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 2, 50, 16]);
 * using k = Tensor.randn([1, 2, 50, 16]);
 * using v = Tensor.randn([1, 2, 50, 16]);
 * using g = Tensor.rand([1, 2, 50], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 2, 50]);
 * using fwd = new GatedDeltaNetBHTDFwdOp({ useQkL2norm: true }).forward(q, k, v, g, beta);
 * using dO = Tensor.randn([1, 2, 50, 16]);
 * const op = new GatedDeltaNetBwdOp({ layout: "bhsd", useQkL2norm: true });
 * using grads = op.backward(dO, q, k, v, g, beta, fwd.chunkStates);
 * ```
 */
export class GatedDeltaNetBwdOp {
  readonly #options: ResolvedOptions;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DeltaTunedOpOptions) {
    this.#options = resolveOptions("GatedDeltaNetBwdOp", options, 64, CHUNKED_BWD_OP_OPTIONS, "required");
  }

  /** Runs the backward (into `out`'s buffers where given; they stay the caller's). */
  backward(
    dO: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    S?: Tensor,
    out?: DeltaBackwardBuffers,
  ): GatedDeltaNetGradients {
    const s = opSettings(this.#options, true);
    const r = backwardFromChunkStates("GatedDeltaNetBwdOp", { q, k, v, g, beta }, s, dO, S, out);
    return gatedGradients(r, out);
  }
}

/**
 * Gated DeltaNet forward and backward in one op: `forward` returns the output and keeps (its own
 * handles on) the inputs; `backward` returns the inputs' gradients and releases them, as does
 * `dispose()`.
 *
 * @example
 * ```ts
 * import { GatedDeltaNetOp, Tensor } from "@attnkit/attnkit";
 * using op = new GatedDeltaNetOp({ layout: "bhsd", chunkSize: 64, useQkL2norm: true });
 * using q = Tensor.randn([1, 2, 64, 32]);
 * using k = Tensor.randn([1, 2, 64, 32]);
 * using v = Tensor.randn([1, 2, 64, 32]);
 * using g = Tensor.rand([1, 2, 64], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 2, 64]);
 * using o = op.forward(q, k, v, g, beta);
 * using dO = Tensor.randn([1, 2, 64, 32]);
 * using grads = op.backward(dO);
 * ```
 */
export class GatedDeltaNetOp implements Disposable {
  readonly #run: CombinedDeltaRun<GatedDeltaNetGradients>;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DeltaCombinedOpOptions) {
    this.#run = new CombinedDeltaRun("GatedDeltaNetOp", options, true, gatedGradients);
  }

  /** Runs the forward and keeps the inputs for {@link GatedDeltaNetOp.backward}. */
  forward(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, out?: { output?: Tensor }): Tensor {
    return this.#run.forward({ q, k, v, g, beta }, out);
  }

  /**
   * Gradients of the last forward's inputs (into `out`'s buffers where given; they stay the
   * caller's); releases the kept inputs.
   */
  backward(dO: Tensor, out?: DeltaBackwardBuffers): GatedDeltaNetGradients {
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
 * Gated DeltaNet decode: one token per sequence, `S' = exp(g) S`, `u = beta (v - S'^T k)`,
 * `S_new = S' + k u^T`, `o = scale S_new^T q`. q, k `[B, HK, K]`, v `[B, H, V]`, g and beta
 * `[B, H]`, state `[B, H, K, V]` (float32 or the dtype of q): no sequence dimension, so no layout.
 * float32 inputs are computed in full float32 (no TF32).
 *
 * @example
 * ```ts
 * import { GatedDeltaNetDecodeFwdOp, Tensor } from "@attnkit/attnkit";
 * const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: true, inPlace: true });
 * using q = Tensor.randn([4, 2, 32]);
 * using k = Tensor.randn([4, 2, 32]);
 * using v = Tensor.randn([4, 2, 32]);
 * using g = Tensor.rand([4, 2], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([4, 2]);
 * using state = Tensor.zeros([4, 2, 32, 32]);
 * using output = op.forward(q, k, v, g, beta, state).output; // state now holds the new state
 * ```
 */
export class GatedDeltaNetDecodeFwdOp {
  readonly #settings: DecodeSettings;

  /** Builds the op; shapes and dtype come with each call. */
  constructor(options: DecodeOpOptions = {}) {
    this.#settings = decodeSettings("GatedDeltaNetDecodeFwdOp", options, true);
  }

  /** Runs one step (into `out`'s buffers where given). */
  forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    state: Tensor,
    out?: { output?: Tensor; newState?: Tensor },
  ): DecodeResult {
    return deltaDecode("GatedDeltaNetDecodeFwdOp", { q, k, v, g, beta, state }, this.#settings, out);
  }
}
