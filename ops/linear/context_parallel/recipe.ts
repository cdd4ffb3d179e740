/**
 * Context-parallel delta rules (Gated DeltaNet, KDA): each rank runs its span, exchanging state
 * summaries with one all-gather each way. Forward: the summary of every fragment's last subsequence
 * that its sequence continues after (one slot per fragment, neutral otherwise, and one neutral slot
 * more), gathered from all ranks; each segment that continues a sequence from elsewhere folds its
 * predecessors' slots in token order into its entry state; then the span runs from those states. Every
 * sequence starts from zero.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";
import type { Communicator } from "./communicator.ts";
import { checkLayoutChoice } from "./layout_options.ts";
import { GDN_FAMILY, KDA_FAMILY, type SpanFamily, type SpanGradients, type SpanInputs } from "./family.ts";
import { foldSlots } from "./compose.ts";
import type { ContextParallelPlan } from "./plan.ts";
import { checkSpanInputs, type OpenSpan, openSpan } from "./prepare.ts";
import type { ContextParallelRouting } from "./routing.ts";
import { type StateSummary, summaryOf } from "./summaries.ts";

/** Where a context-parallel call runs: this rank's layout (a plan, or its routing) and communicator. */
export interface ContextParallelLayout {
  /** This rank's plan (`ContextParallelPlan.fromFragments`); eager calls. */
  plan?: ContextParallelPlan;
  /**
   * Or its routing (`plan.routing(device, caps)`), which the caller keeps: the layout as fixed-shape
   * device tensors, so that another layout copied into it runs as that layout.
   */
  routing?: ContextParallelRouting;
  /** This rank's communicator; its rank and world must be the layout's. */
  group: Communicator;
}

/** Options of {@link contextParallelGdn}. */
export interface ContextParallelGdnOptions extends ContextParallelLayout {
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** L2-normalise q and k inside the kernels (default false). */
  useQkL2norm?: boolean;
}

/** Options of {@link contextParallelKda}. */
export interface ContextParallelKdaOptions extends ContextParallelLayout {
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** Allow approximate exponentials for the decays (as `chunkKda`'s; default false). */
  fastmath?: boolean;
}

/** What a rank gets back. */
export interface ContextParallelResult<G extends SpanGradients = SpanGradients> extends Disposable {
  /** The span's output, `[1, spanLength, H, V]`. */
  output: Tensor;
  /**
   * The exit state of every span segment, `[N, H, K, V]` float32 (N: the routing's `maxSubsequences`,
   * padding rows zero); those at `plan.terminal` (`routing.terminal`) are their sequences' final states,
   * the others the states another piece continued from.
   */
  exitStates: Tensor;
  /** The state each segment started from, `[N, H, K, V]` float32 (zero where a sequence starts). */
  entryStates: Tensor;
  /**
   * The gradients of this forward (every rank calls it, in the same order): from the output's
   * gradient and, optionally, the exit states' (`dExitStates`, `[N, H, K, V]`; set only the terminal
   * rows for the final states' gradient). The inputs must still be alive.
   */
  backward(dOutput: Tensor, options?: { dExitStates?: Tensor }): Promise<G>;
}

/** Gated DeltaNet's gradients under context parallelism (span order, like the inputs). */
export interface ContextParallelGdnGradients extends SpanGradients {
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

/** KDA's gradients under context parallelism (span order, like the inputs). */
export interface ContextParallelKdaGradients extends SpanGradients {
  /** Shaped like q, dtype of q. */
  dq: Tensor;
  /** Shaped like k, dtype of q. */
  dk: Tensor;
  /** Shaped like v, dtype of q. */
  dv: Tensor;
  /** Shaped like gate, float32. */
  dgate: Tensor;
  /** Shaped like beta, float32. */
  dbeta: Tensor;
}

interface Layout {
  routing: ContextParallelRouting;
  /** Built here from a plan: disposed with the result. */
  owned: boolean;
  group: Communicator;
  own: Record<string, unknown>;
}

/** Checks the options of a recipe call (a plan or a routing, and a group that agrees) and the inputs. */
function checkLayout(family: SpanFamily, options: unknown, x: SpanInputs): Layout {
  const op = family.recipe;
  const o = checkOptions<ContextParallelLayout & Record<string, unknown>>(op, options, {
    ...family.options,
    plan: "object",
    routing: "object",
    group: "object",
  });
  const { plan: planOption, routing: routingOption, group: groupOption, ...own } = o;
  const { plan, routing, layout, group } = checkLayoutChoice(op, planOption, routingOption, groupOption);
  checkSpanInputs(op, family, x);
  checkSpan(op, layout.spanLength, { q: x.q, k: x.k, v: x.v, [family.gateName]: x.gate, beta: x.beta });
  if (routing && routing.cuSeqlens.device !== x.q.device) {
    throw invalidArgument(op, `options.routing: on ${routing.cuSeqlens.device}, the inputs on ${x.q.device}`);
  }
  return { routing: routing ?? plan!.routing(x.q.device), owned: !routing, group, own };
}

/** Checks that the tensors are one span: `bshd`, batch 1, `spanLength` tokens. */
function checkSpan(op: string, spanLength: number, inputs: Record<string, unknown>): void {
  for (const [name, t] of Object.entries(inputs)) {
    const x = expectTensor(op, name, t);
    if (x.ndim < 3 || x.shape[0] !== 1 || x.shape[1] !== spanLength) {
      throw invalidArgument(
        op,
        `${name}: expected [1, ${spanLength}, ...] (this rank's span, bshd), got [${x.shape}]`,
      );
    }
  }
}

/** Gathers a local `[width, H, K, *]` summary from every rank as `[world * width, H, K, *]`. */
async function gather(group: Communicator, local: StateSummary): Promise<StateSummary> {
  const flat = (t: Tensor) => {
    const out = t.reshape([t.shape[0] * t.shape[1], ...t.shape.slice(2)]);
    t.dispose();
    return out;
  };
  const bias = flat(await group.allGather(local.bias));
  try {
    return summaryOf(bias, flat(await group.allGather(local.transition)));
  } catch (e) {
    bias.dispose();
    throw e;
  }
}

async function forwardOf<G extends SpanGradients>(
  family: SpanFamily,
  x: SpanInputs,
  options: unknown,
): Promise<ContextParallelResult<G>> {
  const layout = checkLayout(family, options, x);
  const { routing, group, own } = layout;
  const M = routing.maxSubsequences, H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const offsets = { passes: routing.cuSeqlens, run: routing.runCuSeqlens, segments: M };
  // Kept by the result: the backward reads its segments' transitions.
  // With no entry to wait for, the bias pass is the forward itself: one run instead of two.
  const span = openSpan(family, x, own, offsets, routing.entryFree);
  let kept = false;
  let gathered: StateSummary | undefined;
  try {
    {
      using local = span.summaries(routing.forwardRows, routing.forwardTransitionRows, routing.passes);
      gathered = await gather(group, local);
    }
    if (M === 0) {
      const empty = Tensor.zeros([1, 0, H, V], { dtype: x.q.dtype, device: x.q.device });
      const none = () => Tensor.zeros([0, H, K, V], { device: x.q.device });
      kept = true;
      return result(family, layout, x, span, empty, none(), none());
    }
    const entry = routing.entryFree ? Tensor.zeros([M, H, K, V], { device: x.q.device }) : foldSlots(
      gathered,
      routing.entryFold,
    );
    try {
      const run = routing.entryFree ? span.runFromZero() : span.run(entry);
      kept = true;
      return result(family, layout, x, span, run.output, run.finalState, entry);
    } catch (e) {
      entry.dispose();
      throw e;
    }
  } finally {
    gathered?.[Symbol.dispose]();
    if (!kept) {
      span[Symbol.dispose]();
      if (layout.owned) routing[Symbol.dispose]();
    }
  }
}

function result<G extends SpanGradients>(
  family: SpanFamily,
  layout: Layout,
  inputs: SpanInputs,
  span: OpenSpan,
  output: Tensor,
  exitStates: Tensor,
  entryStates: Tensor,
): ContextParallelResult<G> {
  return {
    output,
    exitStates,
    entryStates,
    backward: (dOutput, options) =>
      backwardOf<G>(family, layout, inputs, span, entryStates, dOutput, options),
    [Symbol.dispose]() {
      span[Symbol.dispose]();
      if (layout.owned) layout.routing[Symbol.dispose]();
      output.dispose();
      exitStates.dispose();
      entryStates.dispose();
    },
  };
}

/**
 * The backward, two local passes around one exchange: pass A (the exit states' own gradient only)
 * gives each segment's entry cotangent c; a fragment whose first subsequence continues a sequence from
 * elsewhere sends the reverse summary (c, T^T) of that subsequence (T its forward transition); a
 * fragment whose last subsequence continues elsewhere folds its successors' reverse summaries, last
 * piece first, into the cotangent its exit state receives from them; pass B runs with the sum.
 */
async function backwardOf<G extends SpanGradients>(
  family: SpanFamily,
  layout: Layout,
  x: SpanInputs,
  span: OpenSpan,
  entry: Tensor,
  dOutput: Tensor,
  options: { dExitStates?: Tensor } = {},
): Promise<G> {
  const op = `${family.recipe}.backward`;
  const opts = checkOptions<{ dExitStates?: Tensor }>(op, options, { dExitStates: "any" });
  const { routing, group } = layout;
  checkSpan(op, routing.spanLength, { dOutput });
  const M = routing.maxSubsequences, H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const dExit = opts.dExitStates ? expectTensor(op, "options.dExitStates", opts.dExitStates) : undefined;
  if (dExit && dExit.shape.join() !== [M, H, K, V].join()) {
    throw invalidArgument(op, `options.dExitStates: expected [${[M, H, K, V]}], got [${dExit.shape}]`);
  }
  // Pass A: the gradients with only the caller's exit cotangents. Its entry cotangents c go to the ranks
  // that own earlier pieces (not needed when no segment has one: entryFree); when no exit receives a
  // cotangent from elsewhere (exitFree), pass A is already the whole backward.
  const passA = M > 0 && (!routing.entryFree || routing.exitFree)
    ? span.backward(dOutput, entry, dExit)
    : undefined;
  let gathered: StateSummary;
  try {
    // c (zero for a neutral row), and T^T of the reverse slots' segments where a later piece sends one.
    using reverse = span.reverseSummaries(
      routing.entryFree ? undefined : passA?.dInitialState,
      routing.reverseRows,
      routing.reverseTransitionRows,
      routing.passes.reverse,
    );
    gathered = await gather(group, reverse);
  } catch (e) {
    passA?.[Symbol.dispose]();
    throw e;
  }
  try {
    if (M === 0) return emptyGradients(family, x) as G;
    let grads: SpanGradients;
    if (routing.exitFree) {
      grads = passA!;
    } else {
      passA?.[Symbol.dispose]();
      using fromLater = foldSlots(gathered, routing.exitFold);
      using total = dExit ? fromLater.add(dExit) : fromLater.clone();
      grads = span.backward(dOutput, entry, total);
    }
    // The entry states' cotangent went to the ranks that own the earlier pieces, through the exchange.
    grads.dInitialState?.dispose();
    return keep(family.gradients.map((name) => [name, grads[name]!])) as G;
  } finally {
    gathered[Symbol.dispose]();
  }
}

/** A gradients object owning the named tensors. */
function keep(entries: [string, Tensor][]): SpanGradients {
  const out = Object.fromEntries(entries) as Record<string, Tensor>;
  return Object.assign(out, {
    [Symbol.dispose]() {
      for (const [, t] of entries) t.dispose();
    },
  }) as SpanGradients;
}

function emptyGradients(family: SpanFamily, x: SpanInputs): SpanGradients {
  const like = (t: Tensor, dtype = x.q.dtype) => Tensor.zeros(t.shape, { dtype, device: t.device });
  const of: Record<string, () => Tensor> = {
    dq: () => like(x.q),
    dk: () => like(x.k),
    dv: () => like(x.v),
    dbeta: () => like(x.beta, "float32"),
  };
  return keep(family.gradients.map((name) => [name, of[name]?.() ?? like(x.gate, "float32")]));
}

/**
 * Gated DeltaNet over this rank's span of a context-parallel layout (every rank calls it, with its own
 * plan and communicator): the output equals the unsharded `chunkGatedDeltaRule` on the global stream,
 * gathered into the span, and `exitStates` its states at every segment's end. Inputs are the span's
 * tokens, `bshd` with batch 1 (`plan.globalTokenIds()` selects them from global tensors).
 *
 * @example
 * ```ts
 * import { ContextParallelPlan, contextParallelGdn, SimulatedGroup, Tensor } from "@attnkit/attnkit";
 * const cu = [0, 100, 160];
 * const fragments = [[[0, 80]], [[80, 160]]] as const;
 * const groups = SimulatedGroup.create(2);
 * const results = await Promise.all(groups.map((group) => {
 *   const plan = ContextParallelPlan.fromFragments(cu, fragments, group.rank);
 *   const T = plan.spanLength, seed = 10 * group.rank;
 *   const q = Tensor.randn([1, T, 2, 16], { seed });
 *   const k = Tensor.randn([1, T, 2, 16], { seed: seed + 1 });
 *   const v = Tensor.randn([1, T, 2, 16], { seed: seed + 2 });
 *   const g = Tensor.rand([1, T, 2], { seed: seed + 3, low: -0.3, high: 0 });
 *   const beta = Tensor.rand([1, T, 2], { seed: seed + 4 });
 *   return contextParallelGdn(q, k, v, g, beta, { plan, group, useQkL2norm: true });
 * }));
 * console.log(results[1].exitStates.shape); // [2, 2, 16, 16]: rank 1's two segments
 * ```
 */
export function contextParallelGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: ContextParallelGdnOptions,
): Promise<ContextParallelResult<ContextParallelGdnGradients>> {
  return forwardOf(GDN_FAMILY, { q, k, v, gate: g, beta }, options);
}

/**
 * KDA over this rank's span of a context-parallel layout (every rank calls it, with its own plan and
 * communicator): the output equals the unsharded `chunkKda` on the global stream, gathered into the
 * span; states in the `"kv"` layout `[N, H, K, V]`.
 *
 * @example
 * ```ts
 * import { ContextParallelPlan, contextParallelKda, SimulatedGroup, Tensor } from "@attnkit/attnkit";
 * const groups = SimulatedGroup.create(2);
 * const results = await Promise.all(groups.map((group) => {
 *   const plan = ContextParallelPlan.fromFragments([0, 120], [[[0, 50]], [[50, 120]]], group.rank);
 *   const T = plan.spanLength, seed = 10 * group.rank;
 *   const q = Tensor.randn([1, T, 2, 16], { seed });
 *   const k = Tensor.randn([1, T, 2, 16], { seed: seed + 1, std: 0.25 });
 *   const v = Tensor.randn([1, T, 2, 16], { seed: seed + 2 });
 *   const gate = Tensor.rand([1, T, 2, 16], { seed: seed + 3, low: -0.3, high: 0 });
 *   const beta = Tensor.rand([1, T, 2], { seed: seed + 4 });
 *   return contextParallelKda(q, k, v, gate, beta, { plan, group });
 * }));
 * console.log(results[0].output.shape); // [1, 50, 2, 16]
 * ```
 */
export function contextParallelKda(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gate: Tensor,
  beta: Tensor,
  options: ContextParallelKdaOptions,
): Promise<ContextParallelResult<ContextParallelKdaGradients>> {
  return forwardOf(KDA_FAMILY, { q, k, v, gate, beta }, options);
}
