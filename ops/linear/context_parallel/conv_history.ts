/**
 * The short convolution's history under context parallelism: each span segment that continues a
 * sequence from elsewhere needs the W - 1 tokens of that sequence before it, which other fragments
 * hold (several of them when the pieces before it are shorter than W - 1). Each fragment sends the
 * last W - 1 tokens of its last subsequence (its tail) with one all-gather; every rank knows every
 * piece's length from the plan's table, so each history row is picked from the gathered tails on the
 * device, with the indices a routing holds (conv_layout.ts). The backward sends the histories'
 * gradients back the same way and adds them to the tokens they came from.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";
import { routedRows, withZeroRow } from "./rows.ts";
import type { Communicator } from "./communicator.ts";
import { checkLayoutChoice } from "./layout_options.ts";
import type { ContextParallelPlan } from "./plan.ts";
import type { ContextParallelRouting } from "./routing.ts";

/** Options of {@link contextParallelConvHistory}: a plan or a routing built with `convHistory`. */
export interface ConvHistoryOptions {
  /** This rank's plan (or pass `routing`). */
  plan?: ContextParallelPlan;
  /**
   * This rank's layout as device tensors, built with `convHistory: width - 1`
   * (`plan.routing(device, { ..., convHistory })`): the call then reads the layout only from it, so a
   * graph captured around it replays for every layout copied into it.
   */
  routing?: ContextParallelRouting;
  /** This rank's communicator; its rank and world must be the plan's. */
  group: Communicator;
  /** The convolution's width W (the history holds W - 1 tokens). */
  width: number;
}

/** The histories of a rank's segments, and the way back for their gradients. */
export interface ConvHistory extends Disposable {
  /**
   * `[N, W - 1, C]` in x's dtype, oldest first (zeros before a sequence's first token); N the span's
   * segments (the routing's `maxSubsequences`), matching its `cuSeqlens` (the routing's `runCuSeqlens`).
   */
  readonly history: Tensor;
  /**
   * The gradient the histories send back to this rank's span tokens, `[1, T, C]` float32 (add it to
   * the convolution's dx). Every rank calls it, in the same order.
   */
  backward(dHistory: Tensor): Promise<Tensor>;
}

/**
 * The convolution history of every segment of this rank's span: pass it as `causalConv1d`'s
 * `initialState` with `cuSeqlens: plan.cuSeqlens` (or the routing's `runCuSeqlens`). Every rank calls
 * it, with its own plan (or routing) and group.
 *
 * @example
 * ```ts
 * import { causalConv1d, ContextParallelPlan, contextParallelConvHistory, SimulatedGroup, Tensor } from "@attnkit/attnkit";
 * const groups = SimulatedGroup.create(2);
 * const outputs = await Promise.all(groups.map(async (group) => {
 *   const plan = ContextParallelPlan.fromFragments([0, 40], [[[0, 20]], [[20, 40]]], group.rank);
 *   const x = Tensor.randn([1, 20, 8], { seed: group.rank });
 *   const weight = Tensor.randn([8, 4], { seed: 7 });
 *   using h = await contextParallelConvHistory(x, { plan, group, width: 4 });
 *   return causalConv1d(x, weight, { cuSeqlens: plan.cuSeqlens, initialState: h.history }).output;
 * }));
 * console.log(outputs[1].shape); // [1, 20, 8]
 * ```
 */
export async function contextParallelConvHistory(
  x: Tensor,
  options: ConvHistoryOptions,
): Promise<ConvHistory> {
  const op = "contextParallelConvHistory";
  const o = checkOptions<ConvHistoryOptions>(op, options, {
    plan: "object",
    routing: "object",
    group: "object",
    width: "integer",
  });
  const { plan, routing: given, layout, group } = checkLayoutChoice(op, o.plan, o.routing, o.group);
  if (!Number.isInteger(o.width) || o.width < 1) {
    throw invalidArgument(op, `options.width: expected an integer >= 1, got ${o.width}`);
  }
  expectTensor(op, "x", x);
  if (x.ndim !== 3 || x.shape[0] !== 1 || x.shape[1] !== layout.spanLength) {
    throw invalidArgument(
      op,
      `x: expected [1, ${layout.spanLength}, C] (this rank's span), got [${x.shape}]`,
    );
  }
  const W1 = o.width - 1;
  if (given && (given.conv?.history ?? 0) !== W1) {
    throw invalidArgument(
      op,
      `options.routing: built with convHistory ${given.conv?.history ?? 0}, the width asks for ${W1} ` +
        "(plan.routing(device, { convHistory: width - 1 }))",
    );
  }
  if (given && given.cuSeqlens.device !== x.device) {
    throw invalidArgument(op, `options.routing: on ${given.cuSeqlens.device}, x on ${x.device}`);
  }
  const routing = given ?? plan!.routing(x.device, { convHistory: W1 });
  const owned = given === undefined;
  try {
    return await exchange(x, routing, group, W1, owned);
  } catch (e) {
    if (owned) routing[Symbol.dispose]();
    throw e;
  }
}

async function exchange(
  x: Tensor,
  routing: ContextParallelRouting,
  group: Communicator,
  W1: number,
  owned: boolean,
): Promise<ConvHistory> {
  const op = "contextParallelConvHistory";
  const C = x.shape[2], T = routing.spanLength, M = routing.maxSubsequences, width = routing.slots + 1;
  let history: Tensor;
  if (W1 === 0) {
    history = Tensor.zeros([M, 0, C], { dtype: x.dtype, device: x.device });
  } else {
    const conv = routing.conv!;
    // This rank's tails, [width, W - 1, C], gathered from every rank; each history position picks its row.
    using flat = x.reshape([T, C]);
    using asFloat = flat.cast("float32");
    using padded = withZeroRow(asFloat);
    using tails = routedRows(padded, conv.tokens);
    using shaped = tails.reshape([width, W1, C]);
    using gathered = await group.allGather(shaped);
    using rows = gathered.reshape([routing.world * width * W1, C]);
    using rowsPadded = withZeroRow(rows);
    using picked = routedRows(rowsPadded, conv.pick);
    using picked3 = picked.reshape([M, W1, C]);
    history = picked3.cast(x.dtype);
  }
  return {
    history,
    async backward(dHistory: Tensor): Promise<Tensor> {
      const what = `${op}: backward`;
      expectTensor(what, "dHistory", dHistory);
      if (dHistory.shape.join() !== [M, W1, C].join()) {
        throw invalidArgument(what, `dHistory: expected [${[M, W1, C]}], got [${dHistory.shape}]`);
      }
      if (W1 === 0) return Tensor.zeros([1, T, C], { device: x.device });
      const conv = routing.conv!;
      // Every rank's history gradients, padded to the same rows on every rank.
      using d32 = dHistory.cast("float32");
      using d2 = d32.reshape([M * W1, C]);
      using dPadded = withZeroRow(d2);
      using mine = routedRows(dPadded, conv.padRows);
      using mine3 = mine.reshape([conv.rows, W1, C]);
      using all = await group.allGather(mine3);
      using allRows = all.reshape([routing.world * conv.rows * W1, C]);
      using allPadded = withZeroRow(allRows);
      // Each tail row adds the gradients of the positions that read it, one reader per step.
      let tailGrad = Tensor.zeros([width * W1, C], { device: x.device });
      for (let j = 0; j < conv.readers.shape[0]; j++) {
        using index = conv.readers.select(0, j);
        using part = routedRows(allPadded, index);
        const next = tailGrad.add(part);
        tailGrad.dispose();
        tailGrad = next;
      }
      // Each span token takes its tail row's gradient (a token sits in one tail at most).
      using withZero = withZeroRow(tailGrad);
      tailGrad.dispose();
      using perToken = routedRows(withZero, conv.tokenRows);
      return perToken.reshape([1, T, C]);
    },
    [Symbol.dispose]() {
      history.dispose();
      if (owned) routing[Symbol.dispose]();
    },
  };
}
