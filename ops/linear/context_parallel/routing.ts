/**
 * A plan's layout as device tensors, the only thing the recipes read while they run: span offsets,
 * each gather slot's summary row, and the fold steps of every segment's entry state and exit cotangent.
 * Built with caps (`slots`, `maxSubsequences`), every tensor's shape depends only on the caps, the
 * world and the span length, so one set of tensors serves every layout within them (`copyFrom` writes
 * another layout's values in place): a graph captured around a recipe replays for any of them.
 *
 * Index conventions: summaries are computed for `maxSubsequences + 1` segments, the last one always
 * empty (its summary is the neutral one; padding segments are empty too); a slot's flat index in the
 * gathered buffers is `rank * (slots + 1) + fragment`, and `slots` (rank 0's extra slot) is neutral.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { Tensor } from "../../tensor.ts";
import type { ConvLayout } from "./conv_layout.ts";
import type { ContextParallelPlan } from "./plan.ts";
import { trustRows } from "./rows.ts";

/** Options of `ContextParallelPlan.routing`. */
export interface RoutingOptions {
  /** Gather slots per rank the routing has room for (default: this table's most fragments on a rank). */
  slots?: number;
  /** Span segments it has room for (default: this span's count). */
  maxSubsequences?: number;
  /**
   * The short convolution's history length W - 1 (default 0: none): the routing then also holds the
   * history exchange's indices, for `contextParallelConvHistory` with `options.routing`.
   */
  convHistory?: number;
}

/** The convolution history's indices of a routing (conv_layout.ts). */
export interface ConvRouting {
  /** W - 1. */
  readonly history: number;
  /** Gradient rows each rank sends back (the same on every rank). */
  readonly rows: number;
  /** int64 `[(slots + 1) * history]`: the span token of each tail row (spanLength: zero). */
  readonly tokens: Tensor;
  /** int64 `[maxSubsequences * history]`: the gathered tail row of each history position. */
  readonly pick: Tensor;
  /** int64 `[rows * history]`: this rank's history gradient rows padded to `rows` segments. */
  readonly padRows: Tensor;
  /** int64 `[depth, (slots + 1) * history]`: the gathered gradients each tail row adds, step by step. */
  readonly readers: Tensor;
  /** int64 `[spanLength]`: each span token's tail row. */
  readonly tokenRows: Tensor;
}

/** Which summary passes a routing's recipe runs (a pass no slot reads is skipped). */
export interface RoutingPasses {
  /** Biases of the forward slots. */
  readonly bias: boolean;
  /** Transitions of the forward slots. */
  readonly transition: boolean;
  /** Transitions of the reverse slots (the backward). */
  readonly reverse: boolean;
}

/**
 * One layout of a plan as fixed-shape device tensors (`plan.routing(device, caps)`); the recipes take it
 * as `options.routing`. Disposing it frees the tensors.
 *
 * @example
 * ```ts
 * import { ContextParallelPlan } from "@attnkit/attnkit";
 * const plan = ContextParallelPlan.fromFragments([0, 100], [[[0, 50]], [[50, 100]]], 1);
 * using routing = plan.routing("cpu", { slots: 2, maxSubsequences: 3 });
 * console.log(routing.entryFold.shape); // [3, 3]: world * slots - 1 steps, a column per segment
 * ```
 */
export class ContextParallelRouting implements Disposable {
  /** int32 `[maxSubsequences + 2]`: the span's offsets, padded with its length (the last segment empty). */
  readonly cuSeqlens: Tensor;
  /** int32 `[maxSubsequences + 1]`: the offsets the span runs with (its segments and empty padding). */
  readonly runCuSeqlens: Tensor;
  /** int64 `[slots + 1]`: each forward slot's segment (its fragment's last subsequence), or the neutral row. */
  readonly forwardRows: Tensor;
  /** int64 `[slots + 1]`: whose transition each forward slot carries (the identity where none is read). */
  readonly forwardTransitionRows: Tensor;
  /** int64 `[slots + 1]`: each reverse slot's segment (its fragment's first subsequence), or the neutral row. */
  readonly reverseRows: Tensor;
  /** int64 `[slots + 1]`: whose transition each reverse slot carries (the identity where none is read). */
  readonly reverseTransitionRows: Tensor;
  /** int64 `[steps, maxSubsequences]`: the flat slots each segment's entry state folds, in token order. */
  readonly entryFold: Tensor;
  /** int64 `[steps, maxSubsequences]`: the flat slots each segment's exit cotangent folds, last piece first. */
  readonly exitFold: Tensor;
  /** bool `[maxSubsequences]`: segments that end their sequence (their exit states are final states). */
  readonly terminal: Tensor;
  /** The convolution history's indices, when built with `convHistory`. */
  readonly conv?: ConvRouting;

  /** @internal Use `plan.routing`. */
  constructor(
    plan: ContextParallelPlan,
    device: string,
    /** Slots per rank. */
    readonly slots: number,
    /** Span segments. */
    readonly maxSubsequences: number,
    /** Built with caps: every pass runs and the fold takes world * slots - 1 steps (any layout fits). */
    capped: boolean,
    /** The convolution history's layout (conv_layout.ts) and its gradient rows per rank, if asked for. */
    conv?: { history: number; rows: number; layout: ConvLayout },
  ) {
    const M = maxSubsequences, S = slots, width = S + 1;
    this.world = plan.world;
    this.cpRank = plan.cpRank;
    this.spanLength = plan.spanLength;
    const offsets = [...plan.cuSeqlens];
    while (offsets.length < M + 2) offsets.push(plan.spanLength);
    const segs = plan.fragmentSegments();
    const slot = (pick: (f: number) => number) =>
      Array.from({ length: width }, (_, f) => (f < segs.length ? pick(f) : M));
    const forward = slot((f) => (segs[f].last >= 0 && plan.successors[f].length > 0 ? segs[f].last : M));
    const forwardT = forward.map((r, f) =>
      r < M && segs[f].first === segs[f].last && plan.predecessors[f].length > 0 ? r : M
    );
    const reverse = slot((f) => (segs[f].first >= 0 && plan.predecessors[f].length > 0 ? segs[f].first : M));
    // A reverse slot's transition carries the cotangent its segment's exit receives from later pieces:
    // needed only where that segment is also its fragment's last and the sequence goes on elsewhere.
    const reverseT = reverse.map((r, f) =>
      r < M && segs[f].first === segs[f].last && plan.successors[f].length > 0 ? r : M
    );
    const steps = capped
      ? Math.max(0, plan.world * S - 1)
      : Math.max(0, ...plan.predecessors.map((p) => p.length), ...plan.successors.map((p) => p.length));
    // No segment continues a sequence from elsewhere (fixed for this layout only, never with caps).
    this.entryFree = !capped && plan.predecessors.every((p) => p.length === 0);
    this.exitFree = !capped && plan.successors.every((p) => p.length === 0);
    // Which passes run: with caps all of them (another layout may need any), else those a slot reads.
    this.passes = capped ? { bias: true, transition: true, reverse: true } : {
      bias: forward.some((r) => r < M),
      transition: forwardT.some((r) => r < M),
      reverse: reverseT.some((r) => r < M),
    };
    // A segment's fold: its fragment's predecessors when it is that fragment's first subsequence
    // (entry), its successors when it is the last (exit); the neutral slot S elsewhere.
    const fold = (
      end: "first" | "last",
      lists: readonly (readonly { rank: number; fragment: number }[])[],
    ) => {
      const out = new BigInt64Array(steps * M).fill(BigInt(S));
      plan.subsequences.forEach(({ fragment: f }, i) => {
        if (segs[f][end] !== i) return;
        lists[f].forEach((p, j) => (out[j * M + i] = BigInt(p.rank * width + p.fragment)));
      });
      return out;
    };
    const int64 = (values: ArrayLike<number | bigint>, shape: number[]) =>
      Tensor.from(BigInt64Array.from(values as ArrayLike<number>, (v) => BigInt(v)), { shape, device });
    this.cuSeqlens = Tensor.from(Int32Array.from(offsets), { device });
    this.runCuSeqlens = Tensor.from(Int32Array.from(offsets.slice(0, M + 1)), { device });
    this.forwardRows = int64(forward, [width]);
    this.forwardTransitionRows = int64(forwardT, [width]);
    this.reverseRows = int64(reverse, [width]);
    this.reverseTransitionRows = int64(reverseT, [width]);
    this.entryFold = Tensor.from(fold("first", plan.predecessors), {
      shape: [steps, M],
      device,
    });
    this.exitFold = Tensor.from(fold("last", plan.successors), { shape: [steps, M], device });
    trustRows(
      this.forwardRows,
      this.forwardTransitionRows,
      this.reverseRows,
      this.reverseTransitionRows,
      this.entryFold,
      this.exitFold,
    );
    const terminal = new Array<number>(M).fill(0);
    for (const i of plan.terminal) terminal[i] = 1;
    using t = Tensor.from(terminal, { shape: [M], device });
    this.terminal = t.gt(0);
    if (conv) {
      const { history: W1, rows, layout } = conv;
      const padRows = Array.from({ length: rows * W1 }, (_, i) => (i < M * W1 ? i : M * W1));
      this.conv = {
        history: W1,
        rows,
        tokens: int64(layout.tokens, [width * W1]),
        pick: int64(layout.pick, [M * W1]),
        padRows: int64(padRows, [rows * W1]),
        readers: int64(layout.readers, [layout.readers.length / Math.max(1, width * W1), width * W1]),
        tokenRows: int64(layout.tokenRows, [plan.spanLength]),
      };
    }
  }

  /** Ranks in the group. */
  readonly world: number;
  /** This rank. */
  readonly cpRank: number;
  /** Tokens in this rank's span. */
  readonly spanLength: number;
  /** Which summary passes the recipes run with this routing. */
  readonly passes: RoutingPasses;
  /**
   * Every entry state is zero (no segment continues a sequence from another fragment; false with caps):
   * the span's run from zero is then its forward, and the bias pass's run can be that run; the backward
   * then needs no entry cotangents.
   */
  readonly entryFree: boolean;
  /**
   * No segment's sequence goes on in another fragment (false with caps): every exit cotangent is the
   * caller's, so the backward's two passes are one.
   */
  readonly exitFree: boolean;

  /** The fold steps: world * slots - 1 with caps, else the most predecessors or successors of a fragment. */
  get steps(): number {
    return this.entryFold.shape[0];
  }

  /**
   * Replaces this routing's values with another layout's (same world, rank, span length, caps and
   * passes), in place: the next call with this routing runs that layout. Update only between whole
   * forward / backward steps.
   */
  copyFrom(other: ContextParallelRouting): this {
    const op = "ContextParallelRouting.copyFrom";
    if (!(other instanceof ContextParallelRouting)) {
      throw invalidArgument(op, "other: expected a ContextParallelRouting");
    }
    const same = (what: string, a: unknown, b: unknown) => {
      if (a !== b) throw invalidArgument(op, `other: ${what} ${b}, this routing's is ${a}`);
    };
    same("world", this.world, other.world);
    same("rank", this.cpRank, other.cpRank);
    same("span length", this.spanLength, other.spanLength);
    same("slots", this.slots, other.slots);
    same("maxSubsequences", this.maxSubsequences, other.maxSubsequences);
    same("steps", this.steps, other.steps);
    for (const k of ["bias", "transition", "reverse"] as const) {
      if (other.passes[k] && !this.passes[k]) {
        throw invalidArgument(
          op,
          `other: needs the ${k} pass, which this routing skips (build it with caps)`,
        );
      }
    }
    if ((this.entryFree && !other.entryFree) || (this.exitFree && !other.exitFree)) {
      throw invalidArgument(
        op,
        "other: its sequences cross fragments where this routing's do not (build both with caps)",
      );
    }
    same("convolution history", this.conv?.history ?? 0, other.conv?.history ?? 0);
    if (this.conv && other.conv) {
      same("convolution gradient rows", this.conv.rows, other.conv.rows);
      same("convolution reader steps", this.conv.readers.shape[0], other.conv.readers.shape[0]);
    }
    for (const key of TENSORS) this[key].copyFrom(other[key]);
    if (this.conv && other.conv) { for (const key of CONV_TENSORS) this.conv[key].copyFrom(other.conv[key]); }
    return this;
  }

  /** Frees the tensors. */
  [Symbol.dispose](): void {
    for (const key of TENSORS) this[key].dispose();
    if (this.conv) { for (const key of CONV_TENSORS) this.conv[key].dispose(); }
  }
}

const TENSORS = [
  "cuSeqlens",
  "runCuSeqlens",
  "forwardRows",
  "forwardTransitionRows",
  "reverseRows",
  "reverseTransitionRows",
  "entryFold",
  "exitFold",
  "terminal",
] as const;

const CONV_TENSORS = ["tokens", "pick", "padRows", "readers", "tokenRows"] as const;
