/**
 * Folding gathered summaries into each span segment's entry state (forward) or exit cotangent
 * (backward), the step between a rank's all-gather and its local run: for your own collective (a
 * point-to-point pipeline, a recursive-doubling scan) around the prepared spans, the routing and these.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { Tensor } from "../../tensor.ts";
import { ContextParallelRouting } from "./routing.ts";
import { routedRows } from "./rows.ts";
import { checkSummary, type StateSummary } from "./summaries.ts";

/**
 * Folds gathered slots into each segment's state, from zero: step j applies to segment i the flat slot
 * `fold[j][i]` (the neutral slot where a segment has no more), `state = T state + b`. `fold` is a routing's.
 */
export function foldSlots(gathered: StateSummary, fold: Tensor): Tensor {
  const [, H, K, V] = gathered.bias.shape;
  let state = Tensor.zeros([fold.shape[1], H, K, V], { device: gathered.bias.device });
  for (let j = 0; j < fold.shape[0]; j++) {
    using row = fold.select(0, j);
    using t = routedRows(gathered.transition, row);
    using b = routedRows(gathered.bias, row);
    using moved = t.matmul(state);
    state.dispose();
    state = moved.add(b);
  }
  return state;
}

function fold(op: string, gathered: StateSummary, routing: ContextParallelRouting, steps: Tensor): Tensor {
  checkSummary(op, "gathered", gathered);
  if (!(routing instanceof ContextParallelRouting)) {
    throw invalidArgument(op, "routing: expected a ContextParallelRouting (plan.routing(device))");
  }
  const { bias, transition } = gathered;
  const width = routing.slots + 1;
  if (bias.ndim !== 5 || bias.shape[0] !== routing.world || bias.shape[1] !== width) {
    throw invalidArgument(
      op,
      `gathered.bias: expected [${routing.world}, ${width}, H, K, V] (every rank's slots), got [${bias.shape}]`,
    );
  }
  const [, , H, K, V] = bias.shape;
  using flatBias = bias.reshape([routing.world * width, H, K, V]);
  using flatTransition = transition.reshape([routing.world * width, H, K, K]);
  return foldSlots({ bias: flatBias, transition: flatTransition, [Symbol.dispose]() {} }, steps);
}

/**
 * Each span segment's entry state `[maxSubsequences, H, K, V]` from every rank's forward slot summaries
 * as the all-gather returns them (`[world, slots + 1, H, K, V]` and `[world, slots + 1, H, K, K]`):
 * the predecessors folded in token order from zero (zero where a segment starts its sequence).
 *
 * @example
 * ```ts
 * import { composeEntryStates, ContextParallelPlan, neutralSummary } from "@attnkit/attnkit";
 * const plan = ContextParallelPlan.fromFragments([0, 64], [[[0, 64]]], 0);
 * using routing = plan.routing("cpu");
 * using gathered = neutralSummary([1, 2, 2], 8, 8); // one rank, one slot and the neutral one
 * using entry = composeEntryStates(gathered, routing);
 * console.log(entry.shape); // [1, 2, 8, 8]
 * ```
 */
export function composeEntryStates(gathered: StateSummary, routing: ContextParallelRouting): Tensor {
  return fold("composeEntryStates", gathered, routing, routing.entryFold);
}

/**
 * Each span segment's exit cotangent from later pieces `[maxSubsequences, H, K, V]`, from every rank's
 * reverse slot summaries (`c`, `T^T`) as the all-gather returns them: the successors folded last piece
 * first (zero where a segment ends its sequence). Add the caller's own exit-state gradient to it.
 *
 * @example
 * ```ts
 * import { composeExitCotangents, ContextParallelPlan, neutralSummary } from "@attnkit/attnkit";
 * const plan = ContextParallelPlan.fromFragments([0, 64], [[[0, 64]]], 0);
 * using routing = plan.routing("cpu");
 * using gathered = neutralSummary([1, 2, 2], 8, 8);
 * using later = composeExitCotangents(gathered, routing); // zeros: nothing comes after
 * ```
 */
export function composeExitCotangents(gathered: StateSummary, routing: ContextParallelRouting): Tensor {
  return fold("composeExitCotangents", gathered, routing, routing.exitFold);
}
