/**
 * The short convolution's history under context parallelism: each span segment that continues a
 * sequence from elsewhere needs the W - 1 tokens of that sequence before it, which other fragments
 * hold (several of them when the pieces before it are shorter than W - 1). Each fragment sends the
 * last W - 1 tokens of its last subsequence (its tail) with one all-gather; every rank knows every
 * piece's length from the plan's table, so each history row is picked from the gathered tails on the
 * device. The backward sends the histories' gradients back the same way and adds them to the tokens
 * they came from.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";
import { withZeroRow } from "./rows.ts";
import { checkGroup, type Communicator } from "./communicator.ts";
import { ContextParallelPlan } from "./plan.ts";

/** Options of {@link contextParallelConvHistory}. */
export interface ConvHistoryOptions {
  /** This rank's plan. */
  plan: ContextParallelPlan;
  /** This rank's communicator; its rank and world must be the plan's. */
  group: Communicator;
  /** The convolution's width W (the history holds W - 1 tokens). */
  width: number;
}

/** The histories of a rank's segments, and the way back for their gradients. */
export interface ConvHistory extends Disposable {
  /** `[N, W - 1, C]` in x's dtype, oldest first (zeros before a sequence's first token). */
  readonly history: Tensor;
  /**
   * The gradient the histories send back to this rank's span tokens, `[1, T, C]` float32 (add it to
   * the convolution's dx). Every rank calls it, in the same order.
   */
  backward(dHistory: Tensor): Promise<Tensor>;
}

/** Every rank's plan, and for each of its segments' history positions the (slot, tail row) it reads. */
function layoutOf(plan: ContextParallelPlan, history: number) {
  const plans = plan.table.map((_, r) =>
    r === plan.cpRank ? plan : ContextParallelPlan.fromFragments(plan.cuSeqlensGlobal, plan.table, r)
  );
  const width = plan.slots + 1;
  // Each slot's tail: the last `history` tokens of its fragment's last subsequence, right-aligned.
  const tailPiece = plans.map((p) =>
    p.fragmentSegments().map((s) => (s.last >= 0 ? p.subsequences[s.last] : undefined))
  );
  const tailRow = (rank: number, fragment: number, position: number) =>
    (rank * width + fragment) * history + position;
  // For rank r's segment i at history position q: the tail row it reads, or -1.
  const reads = plans.map((p) => {
    const segments = p.fragmentSegments();
    return p.subsequences.map((sub, i) => {
      const f = sub.fragment;
      const rows = new Array<number>(history).fill(-1);
      // Only a fragment's first subsequence continues a sequence from elsewhere.
      if (segments[f].first !== i) return rows;
      // Walk the predecessors back from the nearest, filling positions from the newest.
      let q = history - 1;
      for (const slot of [...p.predecessors[f]].reverse()) {
        const piece = tailPiece[slot.rank][slot.fragment]!;
        const take = Math.min(piece.stop - piece.start, q + 1);
        for (let j = 0; j < take; j++) rows[q - j] = tailRow(slot.rank, slot.fragment, history - 1 - j);
        q -= take;
        if (q < 0) break;
      }
      return rows;
    });
  });
  return { plans, width, tailPiece, reads };
}

/**
 * The convolution history of every segment of this rank's span: pass it as `causalConv1d`'s
 * `initialState` with `cuSeqlens: plan.cuSeqlens`. Every rank calls it, with its own plan and group.
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
    group: "object",
    width: "integer",
  });
  const { plan, group } = o;
  if (!(plan instanceof ContextParallelPlan)) {
    throw invalidArgument(
      op,
      "options.plan: expected a ContextParallelPlan (ContextParallelPlan.fromFragments)",
    );
  }
  checkGroup(op, group, plan, "plan");
  if (!Number.isInteger(o.width) || o.width < 1) {
    throw invalidArgument(op, `options.width: expected an integer >= 1, got ${o.width}`);
  }
  expectTensor(op, "x", x);
  if (x.ndim !== 3 || x.shape[0] !== 1 || x.shape[1] !== plan.spanLength) {
    throw invalidArgument(op, `x: expected [1, ${plan.spanLength}, C] (this rank's span), got [${x.shape}]`);
  }
  const W1 = o.width - 1, C = x.shape[2], T = plan.spanLength, N = plan.subsequences.length;
  const { plans, width, tailPiece, reads } = layoutOf(plan, W1);
  const me = plan.cpRank;
  // This rank's tails, [width, W - 1, C]: span token of each position, or T (a zero row).
  const tokenOf: number[] = [];
  const mySegments = plan.fragmentSegments();
  for (let f = 0; f < width; f++) {
    const piece = f < plan.fragments.length ? tailPiece[me][f] : undefined;
    const stop = piece ? plan.cuSeqlens[mySegments[f].last + 1] : 0;
    const len = piece ? piece.stop - piece.start : 0;
    for (let q = 0; q < W1; q++) {
      const back = W1 - 1 - q; // 0: the newest
      tokenOf.push(back < len ? stop - 1 - back : T);
    }
  }
  using flat = x.reshape([T, C]);
  using asFloat = flat.cast("float32");
  using padded = withZeroRow(asFloat);
  using tails = padded.indexSelect(0, tokenOf);
  using shaped = tails.reshape([width, W1, C]);
  using gathered = await group.allGather(shaped);
  using rows = gathered.reshape([plan.world * width * W1, C]);
  using rowsPadded = withZeroRow(rows);
  const zero = plan.world * width * W1;
  const pick = reads[me].flat().map((r) => (r < 0 ? zero : r));
  using picked = rowsPadded.indexSelect(0, pick);
  using picked3 = picked.reshape([N, W1, C]);
  const history = picked3.cast(x.dtype);
  const nMax = Math.max(...plans.map((p) => p.subsequences.length));
  return {
    history,
    async backward(dHistory: Tensor): Promise<Tensor> {
      const what = `${op}: backward`;
      expectTensor(what, "dHistory", dHistory);
      if (dHistory.shape.join() !== [N, W1, C].join()) {
        throw invalidArgument(what, `dHistory: expected [${[N, W1, C]}], got [${dHistory.shape}]`);
      }
      // Every rank's history gradients, padded to the most segments any rank has (and one zero row).
      using d32 = dHistory.cast("float32");
      using d2 = d32.reshape([N * W1, C]);
      const padRows = Array.from({ length: (nMax + 1) * W1 }, (_, i) => (i < N * W1 ? i : N * W1));
      using dPadded = withZeroRow(d2);
      using mine = dPadded.indexSelect(0, padRows);
      using mine3 = mine.reshape([nMax + 1, W1, C]);
      using all = await group.allGather(mine3);
      using allRows = all.reshape([plan.world * (nMax + 1) * W1, C]);
      const zeroRow = nMax * W1; // rank 0's padding row
      // For each of this rank's tail rows, the history positions (of any rank) that read it.
      const readers = new Map<number, number[]>();
      reads.forEach((segments, r) =>
        segments.forEach((positions, i) =>
          positions.forEach((row, q) => {
            if (row < 0 || Math.floor(row / (width * W1)) !== me) return;
            const local = row - me * width * W1;
            const list = readers.get(local) ?? [];
            list.push((r * (nMax + 1) + i) * W1 + q);
            readers.set(local, list);
          })
        )
      );
      const depth = Math.max(0, ...[...readers.values()].map((l) => l.length));
      let tailGrad = Tensor.zeros([width * W1, C], { device: x.device });
      for (let j = 0; j < depth; j++) {
        const index = Array.from({ length: width * W1 }, (_, t) => readers.get(t)?.[j] ?? zeroRow);
        using part = allRows.indexSelect(0, index);
        const next = tailGrad.add(part);
        tailGrad.dispose();
        tailGrad = next;
      }
      // Each span token takes its tail row's gradient (a token sits in one tail at most).
      const rowOfToken = new Array<number>(T).fill(width * W1);
      tokenOf.forEach((t, row) => {
        if (t < T) rowOfToken[t] = row;
      });
      using withZero = withZeroRow(tailGrad);
      tailGrad.dispose();
      using perToken = withZero.indexSelect(0, rowOfToken);
      return perToken.reshape([1, T, C]);
    },
    [Symbol.dispose]() {
      history.dispose();
    },
  };
}
