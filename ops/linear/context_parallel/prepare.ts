/**
 * The local half of context parallelism: a rank's span prepared once, then asked for the state
 * summaries of its segments and run from the entry states the exchange composed. A segment's summary
 * comes from two passes of the chunked forward over the span (every segment at once): from a zero
 * state, whose exit is the bias, and from the identity with the values zeroed, whose exit is the
 * transition (the state `[K, K]` then plays the `[K, V]` one). One empty segment is appended to both
 * passes: its summary is the neutral one, the row that unused gather slots point at.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";
import { GDN_FAMILY, KDA_FAMILY, type SpanFamily, type SpanGradients, type SpanInputs } from "./family.ts";
import { pickRows, withZeroRow } from "./rows.ts";
import { type StateSummary, summaryOf } from "./summaries.ts";

/** Options of {@link chunkGdnPrepare}. */
export interface GdnPrepareOptions {
  /** The span's segment offsets `[N + 1]` (host numbers); default one segment of the whole span. */
  cuSeqlens?: readonly number[];
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** L2-normalise q and k inside the kernels (default false). */
  useQkL2norm?: boolean;
}

/** Options of {@link chunkKdaPrepare}. */
export interface KdaPrepareOptions {
  /** The span's segment offsets `[N + 1]` (host numbers); default one segment of the whole span. */
  cuSeqlens?: readonly number[];
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** Allow approximate exponentials for the decays (as `chunkKda`'s `fastmath`; default false). */
  fastmath?: boolean;
}

/** A prepared span: summaries of its segments, and the run from entry states. */
export interface PreparedSpan extends Disposable {
  /** Segments in the span. */
  readonly segments: number;
  /**
   * The summaries of the listed segments, `[rows.length, H, K, V]` and `[rows.length, H, K, K]`; a row
   * equal to `segments` gives the neutral summary. `transitionRows` (default `rows`) says whose
   * transitions are wanted, row for row (`segments`: the identity): a state folded from zero never needs
   * its first map's, and a pass whose rows are all `segments` is not run.
   */
  stateSummaries(rows: readonly number[], transitionRows?: readonly number[]): StateSummary;
  /** The chunked forward over the span from `initialState` `[N, H, K, V]` (float32), with its exit states. */
  run(initialState: Tensor): { output: Tensor; finalState: Tensor };
  /**
   * The reverse summaries of the listed segments for the backward's exchange: `bias` the entry cotangent
   * `c` `[rows.length, H, K, V]` each segment gets from this span alone (its outputs' gradient `dOutput`
   * and the caller's own exit cotangents `dExitStates`, default zero), `transition` its forward map
   * transposed, `T^T` `[rows.length, H, K, K]`: the entry cotangent is `c + T^T e` for an exit cotangent
   * `e` from later pieces. A row equal to `segments` gives zeros and the identity. Gather them and fold
   * each segment's `e` with `composeExitCotangents`.
   */
  reverseSummaries(
    dOutput: Tensor,
    entryStates: Tensor,
    rows: readonly number[],
    dExitStates?: Tensor,
  ): StateSummary;
  /**
   * The span's gradients from its entry states and each segment's whole exit cotangent (the caller's plus
   * what later pieces send): the inputs' gradients and `dInitialState`, the entry states' cotangent.
   */
  backward(dOutput: Tensor, entryStates: Tensor, dExitStates: Tensor): SpanGradients;
}

/** The offsets a span's passes and run use: host numbers, or int32 device tensors. */
export interface SpanOffsets {
  /** `[segments + 2]`: the segments, then at least one empty one (its summary is the neutral one). */
  passes: readonly number[] | Tensor;
  /** `[segments + 1]`: what the span runs with. */
  run: readonly number[] | Tensor;
  /** Segments (the neutral row's index). */
  segments: number;
}

/** A span whose summaries are asked for by rows (host numbers or int64 device tensors). */
export interface OpenSpan extends Disposable {
  /** Rows of the biases and transitions; a pass that is off gives zeros / identities without running. */
  summaries(
    rows: readonly number[] | Tensor,
    transitionRows: readonly number[] | Tensor,
    passes: { bias: boolean; transition: boolean },
  ): StateSummary;
  /** The chunked forward over the span from `initialState`, with its exit states. */
  run(initialState: Tensor): { output: Tensor; finalState: Tensor };
  /**
   * The forward from zero entry states (the caller's result owns both tensors): the bias pass's own run
   * when the span was opened with `zeroRun` and the pass ran, else a run of its own.
   */
  runFromZero(): { output: Tensor; finalState: Tensor };
  /** The span's gradients from its entry states and exit cotangents (zero when none are given). */
  backward(dOutput: Tensor, entryStates: Tensor, dExitStates?: Tensor): SpanGradients;
  /**
   * Reverse summaries: each listed row's entry cotangent picked from `dEntry` (the segments' `[N, H, K,
   * V]`; zeros without it) and the transitions of `transitionRows` transposed (`transition` off: the
   * identity); a row equal to the segments' count gives zeros and the identity.
   */
  reverseSummaries(
    dEntry: Tensor | undefined,
    rows: readonly number[] | Tensor,
    transitionRows: readonly number[] | Tensor,
    transition: boolean,
  ): StateSummary;
}

/** Opens a span whose inputs and offsets the caller checked. `zeroRun`: keep the bias pass's output. */
export function openSpan(
  family: SpanFamily,
  x: SpanInputs,
  own: Record<string, unknown>,
  offsets: SpanOffsets,
  zeroRun = false,
): OpenSpan {
  const T = x.q.shape[1], H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const count = offsets.segments + 1;
  // Each pass runs once, when a row first needs it.
  let biases: Tensor | undefined, transitions: Tensor | undefined, zeroOutput: Tensor | undefined;
  const runFrom = (initialState: Tensor) => {
    const r = family.forward(x, x.v, { cuSeqlens: offsets.run, initialState, options: own });
    return { output: r.output, finalState: r.finalState };
  };
  const runFromZeroState = () => {
    // Zero entry states given, as the span's backward will name them.
    using entry = Tensor.zeros([offsets.segments, H, K, V], { device: x.v.device });
    return runFrom(entry);
  };
  const biasPass = (): Tensor => {
    if (biases) return biases;
    if (!zeroRun) {
      // Every segment from a zero state, and the empty one after them (the neutral row).
      using fromZero = family.forward(x, x.v, { cuSeqlens: offsets.passes, options: own });
      biases = fromZero.finalState.clone();
      return biases;
    }
    // The span's own run from zero entry states, kept; the neutral row appended to its exit states.
    const r = runFromZeroState();
    zeroOutput = r.output;
    using flat = r.finalState.reshape([offsets.segments, H * K * V]);
    r.finalState.dispose();
    using padded = withZeroRow(flat);
    biases = padded.reshape([offsets.segments + 1, H, K, V]);
    return biases;
  };
  const transitionPass = (): Tensor => {
    if (transitions) return transitions;
    // From the identity, values zeroed.
    using zeros = Tensor.zeros([1, T, H, K], { dtype: x.v.dtype, device: x.v.device });
    using eye = identityStates(count, H, K, x.v.device);
    using fromEye = family.forward(x, zeros, { cuSeqlens: offsets.passes, initialState: eye, options: own });
    transitions = fromEye.finalState.clone();
    return transitions;
  };
  const length = (r: readonly number[] | Tensor) => (Array.isArray(r) ? r.length : (r as Tensor).shape[0]);
  const summaries = (
    rows: readonly number[] | Tensor,
    transitionRows: readonly number[] | Tensor,
    passes: { bias: boolean; transition: boolean },
  ) => {
    const device = x.v.device;
    const bias = passes.bias ? pickRows(biasPass(), rows) : Tensor.zeros([length(rows), H, K, V], { device });
    const transition = passes.transition
      ? pickRows(transitionPass(), transitionRows)
      : identityStates(length(transitionRows), H, K, device);
    return summaryOf(bias, transition);
  };
  return {
    summaries,
    run: runFrom,
    runFromZero() {
      if (zeroOutput && biases) {
        // The bias pass was this run: its exit states are the biases' first rows.
        const output = zeroOutput;
        zeroOutput = undefined;
        return { output, finalState: biases.slice(0, 0, offsets.segments) };
      }
      return runFromZeroState();
    },
    backward(dOutput, entryStates, dExitStates) {
      const call = { cuSeqlens: offsets.run, initialState: entryStates, options: own };
      if (dExitStates) return family.backward(dOutput, x, { ...call, dFinalState: dExitStates });
      using zero = Tensor.zeros(entryStates.shape, { device: x.q.device });
      return family.backward(dOutput, x, { ...call, dFinalState: zero });
    },
    reverseSummaries(dEntry, rows, transitionRows, transition) {
      let c: Tensor;
      if (dEntry) {
        using flat = dEntry.reshape([offsets.segments, H * K * V]);
        using padded = withZeroRow(flat);
        using picked = pickRows(padded, rows);
        c = picked.reshape([length(rows), H, K, V]);
      } else {
        c = Tensor.zeros([length(rows), H, K, V], { device: x.q.device });
      }
      using forward = summaries(rows, transitionRows, { bias: false, transition });
      using transposed = forward.transition.transpose(-2, -1);
      return summaryOf(c, transposed.clone());
    },
    [Symbol.dispose]() {
      biases?.dispose();
      transitions?.dispose();
      zeroOutput?.dispose();
      biases = transitions = zeroOutput = undefined;
    },
  };
}

/** Checks a span's inputs and prepares it for `family`. */
export function prepareSpan(family: SpanFamily, x: SpanInputs, options: unknown): PreparedSpan {
  const op = family.prepare;
  const o = checkOptions<{ cuSeqlens?: readonly number[] } & Record<string, unknown>>(op, options ?? {}, {
    ...family.options,
    cuSeqlens: "any",
  });
  const { cuSeqlens, ...own } = o;
  checkSpanInputs(op, family, x);
  const T = x.q.shape[1];
  const cu = cuSeqlens ?? [0, T];
  if (!Array.isArray(cu) || cu.length < 1 || cu[0] !== 0 || cu[cu.length - 1] !== T) {
    throw invalidArgument(op, `options.cuSeqlens: expected host offsets from 0 to ${T}, got ${cu}`);
  }
  const segments = cu.length - 1;
  const span = openSpan(family, x, own, { passes: [...cu, T], run: cu, segments });
  const checkRows = (what: string, rows: unknown, count?: number) => {
    if (!Array.isArray(rows) || !rows.every((r) => Number.isInteger(r) && r >= 0 && r <= segments)) {
      throw invalidArgument(
        `${op}: stateSummaries`,
        `${what}: expected segment indices in [0, ${segments}], got ${rows}`,
      );
    }
    if (count !== undefined && rows.length !== count) {
      throw invalidArgument(
        `${op}: stateSummaries`,
        `${what}: expected ${count} rows (one per row), got ${rows.length}`,
      );
    }
  };
  return {
    segments,
    stateSummaries(rows: readonly number[], transitionRows: readonly number[] = rows): StateSummary {
      checkRows("rows", rows);
      checkRows("transitionRows", transitionRows, rows.length);
      return span.summaries(rows, transitionRows, {
        bias: rows.some((r) => r < segments),
        transition: transitionRows.some((r) => r < segments),
      });
    },
    run: (initialState: Tensor) => span.run(initialState),
    reverseSummaries(dOutput, entryStates, rows, dExitStates) {
      checkRows("rows", rows);
      using grads = span.backward(dOutput, entryStates, dExitStates);
      return span.reverseSummaries(grads.dInitialState, [...rows], [...rows], rows.some((r) => r < segments));
    },
    backward: (dOutput, entryStates, dExitStates) => span.backward(dOutput, entryStates, dExitStates),
    [Symbol.dispose]: () => span[Symbol.dispose](),
  };
}

/** Checks q, k, v, the gate and beta: `bshd` tensors of batch 1. */
export function checkSpanInputs(op: string, family: SpanFamily, x: SpanInputs): void {
  for (const [name, t] of [["q", x.q], ["k", x.k], ["v", x.v], [family.gateName, x.gate], ["beta", x.beta]]) {
    expectTensor(op, name as string, t);
    if ((t as Tensor).shape[0] !== 1) {
      throw invalidArgument(op, `${name}: expected batch 1 (one packed span), got [${(t as Tensor).shape}]`);
    }
  }
  if (x.v.ndim !== 4 || x.q.ndim !== 4) throw invalidArgument(op, `q, v: expected [1, T, heads, dim] (bshd)`);
}

/**
 * Prepares a rank's span of Gated DeltaNet inputs (`bshd`, batch 1: q, k `[1, T, HK, K]`, v
 * `[1, T, H, V]`, g and beta `[1, T, H]`) for context parallelism.
 *
 * @example
 * ```ts
 * import { chunkGdnPrepare, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 96, 2, 16]);
 * using k = Tensor.randn([1, 96, 2, 16]);
 * using v = Tensor.randn([1, 96, 2, 16]);
 * using g = Tensor.rand([1, 96, 2], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 96, 2]);
 * using prepared = chunkGdnPrepare(q, k, v, g, beta, { cuSeqlens: [0, 40, 96], useQkL2norm: true });
 * using s = prepared.stateSummaries([1]); // the second segment's map
 * console.log(s.transition.shape); // [1, 2, 16, 16]
 * ```
 */
export function chunkGdnPrepare(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: GdnPrepareOptions = {},
): PreparedSpan {
  return prepareSpan(GDN_FAMILY, { q, k, v, gate: g, beta }, options);
}

/**
 * Prepares a rank's span of KDA inputs (`bshd`, batch 1: q, k `[1, T, HK, K]`, v `[1, T, H, V]`, gate
 * `[1, T, H, K]`, beta `[1, T, H]`; states in the `"kv"` layout) for context parallelism.
 *
 * @example
 * ```ts
 * import { chunkKdaPrepare, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 80, 2, 16]);
 * using k = Tensor.randn([1, 80, 2, 16], { std: 0.25 });
 * using v = Tensor.randn([1, 80, 2, 16]);
 * using gate = Tensor.rand([1, 80, 2, 16], { low: -0.3, high: 0 });
 * using beta = Tensor.rand([1, 80, 2]);
 * using prepared = chunkKdaPrepare(q, k, v, gate, beta, { cuSeqlens: [0, 30, 80] });
 * using s = prepared.stateSummaries([0, 1]);
 * console.log(s.bias.shape); // [2, 2, 16, 16]
 * ```
 */
export function chunkKdaPrepare(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: KdaPrepareOptions = {},
): PreparedSpan {
  return prepareSpan(KDA_FAMILY, { q, k, v, gate, beta }, options);
}

/** `count` x `H` identity matrices `[count, H, K, K]`, float32, formed on the device. */
export function identityStates(count: number, H: number, K: number, device: string): Tensor {
  using index = Tensor.arange(0, K, 1, { dtype: "int32", device });
  using rows = index.reshape([K, 1]);
  using columns = index.reshape([1, K]);
  using same = rows.eq(columns);
  using eye = same.cast("float32");
  using all = eye.broadcastTo([count, H, K, K]);
  return all.clone();
}
