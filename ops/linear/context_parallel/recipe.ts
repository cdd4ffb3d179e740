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
import { GDN_FAMILY, KDA_FAMILY, type SpanFamily, type SpanGradients, type SpanInputs } from "./family.ts";
import { ContextParallelPlan } from "./plan.ts";
import { type PreparedSpan, prepareSpan } from "./prepare.ts";
import { type StateSummary, summaryOf } from "./summaries.ts";

/** Where a context-parallel call runs: this rank's plan and communicator. */
export interface ContextParallelLayout {
  /** This rank's plan (`ContextParallelPlan.fromFragments`). */
  plan: ContextParallelPlan;
  /** This rank's communicator; its rank and world must be the plan's. */
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
   * The exit state of every span segment, `[N, H, K, V]` float32; those at `plan.terminal` are their
   * sequences' final states, the others the states another piece continued from.
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

/** Checks the options of a recipe call: the layout (plan and group agree) and the variant's own. */
function checkLayout(
  family: SpanFamily,
  options: unknown,
): { layout: ContextParallelLayout; own: Record<string, unknown> } {
  const op = family.recipe;
  const o = checkOptions<ContextParallelLayout & Record<string, unknown>>(op, options, {
    ...family.options,
    plan: "object",
    group: "object",
  });
  const { plan, group, ...own } = o;
  if (!(plan instanceof ContextParallelPlan)) {
    throw invalidArgument(
      op,
      "options.plan: expected a ContextParallelPlan (ContextParallelPlan.fromFragments)",
    );
  }
  if (!group || typeof group.allGather !== "function") {
    throw invalidArgument(op, "options.group: expected a Communicator { rank, world, allGather }");
  }
  if (group.world !== plan.world || group.rank !== plan.cpRank) {
    throw invalidArgument(
      op,
      `options.group: rank ${group.rank} of ${group.world}, but the plan is rank ${plan.cpRank} of ${plan.world}`,
    );
  }
  return { layout: { plan, group }, own };
}

/** Checks that the tensors are one span of the plan: `bshd`, batch 1, `spanLength` tokens. */
function checkSpan(op: string, plan: ContextParallelPlan, inputs: Record<string, unknown>): void {
  for (const [name, t] of Object.entries(inputs)) {
    const x = expectTensor(op, name, t);
    if (x.ndim < 3 || x.shape[0] !== 1 || x.shape[1] !== plan.spanLength) {
      throw invalidArgument(
        op,
        `${name}: expected [1, ${plan.spanLength}, ...] (this rank's span, bshd), got [${x.shape}]`,
      );
    }
  }
}

/**
 * Folds gathered slots into each local segment's state: for step j, segment i applies the slot
 * `rows[j][i]` (flat `rank * width + slot`); rows point at a neutral slot where a segment has no more.
 */
function foldSlots(gathered: StateSummary, rows: readonly number[][], start: Tensor): Tensor {
  let state = start.clone();
  for (const row of rows) {
    using t = gathered.transition.indexSelect(0, row);
    using b = gathered.bias.indexSelect(0, row);
    using moved = t.matmul(state);
    state.dispose();
    state = moved.add(b);
  }
  return state;
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

/** For each fold step, each segment's slot: `pick(segment)` lists its slots (none: the neutral one). */
function foldRows(
  plan: ContextParallelPlan,
  pick: (segment: number) => readonly { rank: number; fragment: number }[],
): number[][] {
  const width = plan.slots + 1, N = plan.subsequences.length;
  const lists = Array.from({ length: N }, (_, i) => pick(i));
  const steps = Math.max(0, ...lists.map((l) => l.length));
  return Array.from(
    { length: steps },
    (_, j) => lists.map((l) => (l[j] ? l[j].rank * width + l[j].fragment : plan.slots)),
  );
}

async function forwardOf<G extends SpanGradients>(
  family: SpanFamily,
  x: SpanInputs,
  options: unknown,
): Promise<ContextParallelResult<G>> {
  const op = family.recipe;
  const { layout, own } = checkLayout(family, options);
  const { plan, group } = layout;
  checkSpan(op, plan, { q: x.q, k: x.k, v: x.v, [family.gateName]: x.gate, beta: x.beta });
  const N = plan.subsequences.length, H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const width = plan.slots + 1; // every rank's slots and one neutral slot after them
  // Kept by the result: the backward reads its segments' transitions.
  const prepared = prepareSpan(family, x, { ...own, cuSeqlens: plan.cuSeqlens });
  let kept = false;
  // Forward slots: a fragment's last subsequence when its sequence continues after it.
  const segs = plan.fragmentSegments();
  const rows = Array.from({ length: width }, (_, f) => {
    const s = segs[f];
    return s && s.last >= 0 && plan.successors[f].length > 0 ? s.last : N;
  });
  let gathered: StateSummary | undefined;
  try {
    {
      // A slot's transition is read only where its segment is not a sequence's first piece.
      const transitionRows = rows.map((r, f) =>
        r < N && segs[f].first === segs[f].last && plan.predecessors[f].length > 0 ? r : N
      );
      using local = prepared.stateSummaries(rows, transitionRows);
      gathered = await gather(group, local);
    }
    const inputs = x;
    if (N === 0) {
      const empty = Tensor.zeros([1, 0, H, V], { dtype: x.q.dtype, device: x.q.device });
      const none = () => Tensor.zeros([0, H, K, V], { device: x.q.device });
      kept = true;
      return result(family, layout, own, inputs, prepared, empty, none(), none());
    }
    // Entry states: a fragment's first subsequence folds the fragment's predecessors; others start at 0.
    const firstOf = new Map(segs.flatMap((s, f) => (s.first >= 0 ? [[s.first, f] as const] : [])));
    const fold = foldRows(plan, (i) => {
      const f = firstOf.get(i);
      return f === undefined ? [] : plan.predecessors[f];
    });
    using zero = Tensor.zeros([N, H, K, V], { device: x.q.device });
    const entry = foldSlots(gathered, fold, zero);
    try {
      const run = prepared.run(entry);
      kept = true;
      return result(family, layout, own, inputs, prepared, run.output, run.finalState, entry);
    } catch (e) {
      entry.dispose();
      throw e;
    }
  } finally {
    gathered?.[Symbol.dispose]();
    if (!kept) prepared[Symbol.dispose]();
  }
}

function result<G extends SpanGradients>(
  family: SpanFamily,
  layout: ContextParallelLayout,
  own: Record<string, unknown>,
  inputs: SpanInputs,
  prepared: PreparedSpan,
  output: Tensor,
  exitStates: Tensor,
  entryStates: Tensor,
): ContextParallelResult<G> {
  return {
    output,
    exitStates,
    entryStates,
    backward: (dOutput, options) =>
      backwardOf<G>(family, layout, own, inputs, prepared, entryStates, dOutput, options),
    [Symbol.dispose]() {
      prepared[Symbol.dispose]();
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
  layout: ContextParallelLayout,
  own: Record<string, unknown>,
  x: SpanInputs,
  prepared: PreparedSpan,
  entry: Tensor,
  dOutput: Tensor,
  options: { dExitStates?: Tensor } = {},
): Promise<G> {
  const op = `${family.recipe}.backward`;
  const opts = checkOptions<{ dExitStates?: Tensor }>(op, options, { dExitStates: "any" });
  const { plan, group } = layout;
  checkSpan(op, plan, { dOutput });
  const N = plan.subsequences.length, H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const dExit = opts.dExitStates ? expectTensor(op, "options.dExitStates", opts.dExitStates) : undefined;
  if (dExit && dExit.shape.join() !== [N, H, K, V].join()) {
    throw invalidArgument(op, `options.dExitStates: expected [${[N, H, K, V]}], got [${dExit.shape}]`);
  }
  const width = plan.slots + 1;
  const segs = plan.fragmentSegments();
  const call = { cuSeqlens: plan.cuSeqlens, initialState: entry, options: own };
  // Reverse slots: a fragment's first subsequence when its sequence began before it.
  const rows = Array.from({ length: width }, (_, f) => {
    const s = segs[f];
    return s && s.first >= 0 && plan.predecessors[f].length > 0 ? s.first : N;
  });
  let gathered: StateSummary;
  {
    // c: pass A's entry cotangents (zero for a neutral row); T^T from the prepared span.
    using forward = prepared.stateSummaries(rows.map(() => N), rows); // the transitions only
    let c: Tensor;
    if (N > 0) {
      using zeroExit = dExit ? undefined : Tensor.zeros([N, H, K, V], { device: x.q.device });
      using passA = family.backward(dOutput, x, { ...call, dFinalState: (dExit ?? zeroExit)! });
      c = rowsOrZero(passA.dInitialState!, rows, N);
    } else {
      c = Tensor.zeros([width, H, K, V], { device: x.q.device });
    }
    using transposed = forward.transition.transpose(-2, -1);
    using reverse = summaryOf(c, transposed.clone());
    gathered = await gather(group, reverse);
  }
  try {
    if (N === 0) return emptyGradients(family, x) as G;
    // Exit cotangents from later pieces: a fragment's last subsequence folds its successors.
    const lastOf = new Map(segs.flatMap((s, f) => (s.last >= 0 ? [[s.last, f] as const] : [])));
    const fold = foldRows(plan, (i) => {
      const f = lastOf.get(i);
      return f === undefined ? [] : plan.successors[f];
    });
    using zero = Tensor.zeros([N, H, K, V], { device: x.q.device });
    using fromLater = foldSlots(gathered, fold, zero);
    using total = dExit ? fromLater.add(dExit) : fromLater.clone();
    const grads = family.backward(dOutput, x, { ...call, dFinalState: total });
    // The entry states' cotangent went to the ranks that own the earlier pieces, through the exchange.
    grads.dInitialState?.dispose();
    return keep(family.gradients.map((name) => [name, grads[name]!])) as G;
  } finally {
    gathered[Symbol.dispose]();
  }
}

/** Rows `rows` of `t` `[N, ...]`, a zero row where a row is N. */
function rowsOrZero(t: Tensor, rows: readonly number[], N: number): Tensor {
  using picked = t.indexSelect(0, rows.map((r) => Math.min(r, N - 1)));
  using mask = Tensor.from(rows.map((r) => (r < N ? 1 : 0)), {
    shape: [rows.length, 1, 1, 1],
    device: t.device,
  });
  return picked.mul(mask);
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
