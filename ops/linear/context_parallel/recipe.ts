/**
 * Context-parallel Gated DeltaNet: each rank runs its span, exchanging state summaries with one
 * all-gather. Forward: the summary of every fragment's last subsequence that its sequence continues
 * after (one slot per fragment, neutral otherwise, and one neutral slot more), gathered from all ranks;
 * each segment that continues a sequence from elsewhere folds its predecessors' slots in token order
 * into its entry state; then the span runs from those states. Every sequence starts from zero.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";
import type { Communicator } from "./communicator.ts";
import { ContextParallelPlan } from "./plan.ts";
import { chunkGdnPrepare, type PreparedGdn } from "./prepare.ts";
import { type StateSummary, summaryOf } from "./summaries.ts";
import { chunkGatedDeltaRuleBackward, type DeltaRuleGradients } from "../delta_rule.ts";

/** Options of {@link contextParallelGdn}. */
export interface ContextParallelOptions {
  /** This rank's plan (`ContextParallelPlan.fromFragments`). */
  plan: ContextParallelPlan;
  /** This rank's communicator; its rank and world must be the plan's. */
  group: Communicator;
  /** Query scale (default `K ** -0.5`). */
  scale?: number;
  /** L2-normalise q and k inside the kernels (default false). */
  useQkL2norm?: boolean;
}

/** What a rank gets back. */
export interface ContextParallelResult extends Disposable {
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
  backward(dOutput: Tensor, options?: { dExitStates?: Tensor }): Promise<DeltaRuleGradients>;
}

const OPTIONS = { plan: "object", group: "object", scale: "number", useQkL2norm: "boolean" } as const;

/** Checks the options shared by the recipe's calls; returns them with the plan and group checked. */
export function checkContextParallel(op: string, options: unknown): ContextParallelOptions {
  const o = checkOptions<ContextParallelOptions>(op, options, OPTIONS);
  if (!(o.plan instanceof ContextParallelPlan)) {
    throw invalidArgument(
      op,
      "options.plan: expected a ContextParallelPlan (ContextParallelPlan.fromFragments)",
    );
  }
  const g = o.group;
  if (!g || typeof g.allGather !== "function") {
    throw invalidArgument(op, "options.group: expected a Communicator { rank, world, allGather }");
  }
  if (g.world !== o.plan.world || g.rank !== o.plan.cpRank) {
    throw invalidArgument(
      op,
      `options.group: rank ${g.rank} of ${g.world}, but the plan is rank ${o.plan.cpRank} of ${o.plan.world}`,
    );
  }
  return o;
}

/** Checks that q ... beta are one span of the plan: `bshd`, batch 1, `spanLength` tokens. */
export function checkSpan(op: string, plan: ContextParallelPlan, inputs: Record<string, unknown>): void {
  for (const [name, t] of Object.entries(inputs)) {
    const x = expectTensor(op, name, t);
    if (x.shape[0] !== 1 || x.shape[1] !== plan.spanLength) {
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
export function foldSlots(gathered: StateSummary, rows: readonly number[][], start: Tensor): Tensor {
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

/** The gathered `[world, width, ...]` summary as `[world * width, ...]`. */
function flatten(bias: Tensor, transition: Tensor): StateSummary {
  const rows = bias.shape[0] * bias.shape[1];
  return {
    bias: bias.reshape([rows, ...bias.shape.slice(2)]),
    transition: transition.reshape([rows, ...transition.shape.slice(2)]),
    [Symbol.dispose]() {
      this.bias.dispose();
      this.transition.dispose();
    },
  };
}

/**
 * Gated DeltaNet over this rank's span of a context-parallel layout (every rank calls it, with its own
 * plan and communicator): the output equals the unsharded `chunkGatedDeltaRule` on the global stream,
 * gathered into the span, and `exitStates` its states at every segment's end.
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
export async function contextParallelGdn(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  g: Tensor,
  beta: Tensor,
  options: ContextParallelOptions,
): Promise<ContextParallelResult> {
  const op = "contextParallelGdn";
  const o = checkContextParallel(op, options);
  const plan = o.plan;
  checkSpan(op, plan, { q, k, v, g, beta });
  if (v.ndim !== 4 || q.ndim !== 4) throw invalidArgument(op, "q, v: expected [1, T, heads, dim] (bshd)");
  const N = plan.subsequences.length, H = v.shape[2], K = q.shape[3], V = v.shape[3];
  const width = plan.slots + 1; // every rank's slots and one neutral slot after them
  const neutral = plan.slots; // rank 0's neutral slot
  using prepared = chunkGdnPrepare(q, k, v, g, beta, {
    cuSeqlens: plan.cuSeqlens,
    scale: o.scale,
    useQkL2norm: o.useQkL2norm,
  });
  // Forward slots: a fragment's last subsequence when its sequence continues after it.
  const segs = plan.fragmentSegments();
  const rows = Array.from({ length: width }, (_, f) => {
    const s = segs[f];
    return s && s.last >= 0 && plan.successors[f].length > 0 ? s.last : N;
  });
  let gathered: StateSummary;
  {
    using local = prepared.stateSummaries(rows);
    const bias = await o.group.allGather(local.bias);
    const transition = await o.group.allGather(local.transition);
    gathered = flatten(bias, transition);
    bias.dispose();
    transition.dispose();
  }
  try {
    // Entry states: a fragment's first subsequence folds the fragment's predecessors; others start at 0.
    const firstOf = new Map(segs.flatMap((s, f) => (s.first >= 0 ? [[s.first, f] as const] : [])));
    const steps = Math.max(0, ...plan.predecessors.map((p) => p.length));
    const fold = Array.from({ length: steps }, (_, j) =>
      Array.from({ length: N }, (_, i) => {
        const f = firstOf.get(i);
        const p = f === undefined ? undefined : plan.predecessors[f][j];
        return p ? p.rank * width + p.fragment : neutral;
      }));
    const inputs = { q, k, v, g, beta };
    if (N === 0) {
      const empty = Tensor.zeros([1, 0, H, V], { dtype: q.dtype, device: q.device });
      const none = () => Tensor.zeros([0, H, K, V], { device: q.device });
      return result(o, inputs, empty, none(), none());
    }
    using zero = Tensor.zeros([N, H, K, V], { device: q.device });
    const entry = foldSlots(gathered, fold, zero);
    const run = prepared.run(entry);
    return result(o, inputs, run.output, run.finalState!, entry);
  } finally {
    gathered[Symbol.dispose]();
  }
}

type Inputs = { q: Tensor; k: Tensor; v: Tensor; g: Tensor; beta: Tensor };

function result(
  o: ContextParallelOptions,
  inputs: Inputs,
  output: Tensor,
  exitStates: Tensor,
  entryStates: Tensor,
): ContextParallelResult {
  return {
    output,
    exitStates,
    entryStates,
    backward: (dOutput, options) => backwardOf(o, inputs, entryStates, dOutput, options),
    [Symbol.dispose]() {
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
async function backwardOf(
  o: ContextParallelOptions,
  x: Inputs,
  entry: Tensor,
  dOutput: Tensor,
  options: { dExitStates?: Tensor } = {},
): Promise<DeltaRuleGradients> {
  const op = "contextParallelGdn.backward";
  const opts = checkOptions<{ dExitStates?: Tensor }>(op, options, { dExitStates: "any" });
  const plan = o.plan;
  checkSpan(op, plan, { dOutput });
  const N = plan.subsequences.length, H = x.v.shape[2], K = x.q.shape[3], V = x.v.shape[3];
  const dExit = opts.dExitStates ? expectTensor(op, "options.dExitStates", opts.dExitStates) : undefined;
  if (dExit && dExit.shape.join() !== [N, H, K, V].join()) {
    throw invalidArgument(op, `options.dExitStates: expected [${[N, H, K, V]}], got [${dExit.shape}]`);
  }
  const width = plan.slots + 1, neutral = plan.slots;
  const segs = plan.fragmentSegments();
  const base = {
    layout: "bshd",
    cuSeqlens: [...plan.cuSeqlens],
    scale: o.scale,
    useQkL2norm: o.useQkL2norm,
  } as const;
  using prepared: PreparedGdn = chunkGdnPrepare(x.q, x.k, x.v, x.g, x.beta, {
    cuSeqlens: plan.cuSeqlens,
    scale: o.scale,
    useQkL2norm: o.useQkL2norm,
  });
  // Reverse slots: a fragment's first subsequence when its sequence began before it.
  const rows = Array.from({ length: width }, (_, f) => {
    const s = segs[f];
    return s && s.first >= 0 && plan.predecessors[f].length > 0 ? s.first : N;
  });
  let gathered: StateSummary;
  {
    // c: pass A's entry cotangents (zero for a neutral row); T^T from the prepared span.
    using forward = prepared.stateSummaries(rows);
    let c: Tensor;
    if (N > 0) {
      using zeroExit = dExit ? undefined : Tensor.zeros([N, H, K, V], { device: x.q.device });
      using passA = chunkGatedDeltaRuleBackward(dOutput, x.q, x.k, x.v, x.g, x.beta, {
        ...base,
        initialState: entry,
        dFinalState: dExit ?? zeroExit,
      });
      c = rowsOrZero(passA.dInitialState!, rows, N);
    } else {
      c = Tensor.zeros([width, H, K, V], { device: x.q.device });
    }
    using transposed = forward.transition.transpose(-2, -1);
    using reverse = summaryOf(c, transposed.clone());
    const bias = await o.group.allGather(reverse.bias);
    const transition = await o.group.allGather(reverse.transition);
    gathered = flatten(bias, transition);
    bias.dispose();
    transition.dispose();
  }
  try {
    if (N === 0) return emptyGradients(x);
    // Exit cotangents from later pieces: a fragment's last subsequence folds its successors.
    const lastOf = new Map(segs.flatMap((s, f) => (s.last >= 0 ? [[s.last, f] as const] : [])));
    const steps = Math.max(0, ...plan.successors.map((p) => p.length));
    const fold = Array.from({ length: steps }, (_, j) =>
      Array.from({ length: N }, (_, i) => {
        const f = lastOf.get(i);
        const p = f === undefined ? undefined : plan.successors[f][j];
        return p ? p.rank * width + p.fragment : neutral;
      }));
    using zero = Tensor.zeros([N, H, K, V], { device: x.q.device });
    using fromLater = foldSlots(gathered, fold, zero);
    using total = dExit ? fromLater.add(dExit) : fromLater.clone();
    const grads = chunkGatedDeltaRuleBackward(dOutput, x.q, x.k, x.v, x.g, x.beta, {
      ...base,
      initialState: entry,
      dFinalState: total,
    });
    // The entry states' cotangent went to the ranks that own the earlier pieces, through the exchange.
    const { dInitialState, ...rest } = grads;
    dInitialState?.dispose();
    const { dq, dk, dv, dbeta, dg } = rest;
    return {
      dq,
      dk,
      dv,
      dbeta,
      dg,
      [Symbol.dispose]() {
        for (const t of [dq, dk, dv, dbeta, dg]) t?.dispose();
      },
    };
  } finally {
    gathered[Symbol.dispose]();
  }
}

/** Rows `rows` of `t` `[N, ...]`, a zero row where a row is N. */
function rowsOrZero(t: Tensor, rows: readonly number[], N: number): Tensor {
  using picked = t.indexSelect(0, rows.map((r) => Math.min(r, N - 1)));
  using keep = Tensor.from(rows.map((r) => (r < N ? 1 : 0)), {
    shape: [rows.length, 1, 1, 1],
    device: t.device,
  });
  return picked.mul(keep);
}

function emptyGradients(x: Inputs): DeltaRuleGradients {
  const like = (t: Tensor, dtype = x.q.dtype) => Tensor.zeros(t.shape, { dtype, device: t.device });
  const out = {
    dq: like(x.q),
    dk: like(x.k),
    dv: like(x.v),
    dbeta: like(x.beta, "float32"),
    dg: like(x.g, "float32"),
  };
  return {
    ...out,
    [Symbol.dispose]() {
      for (const t of Object.values(out)) t.dispose();
    },
  };
}
