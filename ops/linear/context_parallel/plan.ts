/**
 * Who owns which tokens under context parallelism. The global stream is the packed batch of every
 * sequence (`cuSeqlensGlobal`); each rank owns a list of fragments, contiguous global token ranges
 * that together tile the stream once (one fragment for a contiguous shard, two for zig-zag, whole
 * documents for a document-aligned partition). A fragment is cut at sequence boundaries into
 * subsequences; a rank's span is its fragments' subsequences in order, one local `cuSeqlens` segment
 * each. Each fragment has one gather slot: forward, the summary of its last subsequence when that
 * sequence continues after it; backward, the reverse summary of its first subsequence when that
 * sequence began before it. A segment's entry state folds its predecessors' slots in token order.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkOptions } from "../../args.ts";
import { Tensor } from "../../tensor.ts";
import { ContextParallelRouting, type RoutingOptions } from "./routing.ts";
import { convLayout } from "./conv_layout.ts";

/** A half-open global token range `[start, stop)`. */
export type Fragment = readonly [start: number, stop: number];

/** The part of one fragment inside one sequence: global tokens `[start, stop)`. */
export interface Subsequence {
  /** The global sequence (index into `cuSeqlensGlobal`'s segments). */
  readonly sequence: number;
  /** First global token. */
  readonly start: number;
  /** One past the last global token. */
  readonly stop: number;
  /** The local fragment it belongs to. */
  readonly fragment: number;
}

/** A gather slot: a rank's fragment. */
export interface Slot {
  /** The rank holding the fragment. */
  readonly rank: number;
  /** The fragment's index in that rank's list. */
  readonly fragment: number;
}

const OP = "ContextParallelPlan.fromFragments";

function checkOffsets(cu: unknown): number[] {
  const list = ArrayBuffer.isView(cu) && !(cu instanceof DataView)
    ? Array.from(cu as unknown as ArrayLike<number | bigint>, Number)
    : cu;
  if (!Array.isArray(list) || list.length < 1) {
    throw invalidArgument(OP, `cuSeqlensGlobal: expected offsets [0, ..., total], got ${cu}`);
  }
  list.forEach((x, i) => {
    if (!Number.isSafeInteger(x) || x < 0 || (i === 0 ? x !== 0 : x < list[i - 1])) {
      throw invalidArgument(
        OP,
        `cuSeqlensGlobal[${i}]: expected ${i === 0 ? "0" : `an integer >= ${list[i - 1]}`}, got ${x}`,
      );
    }
  });
  return list as number[];
}

function checkFragments(fragments: unknown, total: number): Fragment[][] {
  if (!Array.isArray(fragments) || fragments.length < 1) {
    throw invalidArgument(
      OP,
      `fragments: expected one list of [start, stop) ranges per rank, got ${fragments}`,
    );
  }
  const all: { start: number; stop: number; where: string }[] = [];
  const table = fragments.map((row, r) => {
    if (!Array.isArray(row)) {
      throw invalidArgument(OP, `fragments[${r}]: expected a list of ranges, got ${row}`);
    }
    return row.map((f, i) => {
      const where = `fragments[${r}][${i}]`;
      if (!Array.isArray(f) || f.length !== 2 || !f.every((x) => Number.isSafeInteger(x))) {
        throw invalidArgument(OP, `${where}: expected [start, stop] integers, got ${JSON.stringify(f)}`);
      }
      const [start, stop] = f as [number, number];
      if (start < 0 || stop < start || stop > total) {
        throw invalidArgument(
          OP,
          `${where}: expected 0 <= start <= stop <= ${total}, got [${start}, ${stop}]`,
        );
      }
      all.push({ start, stop, where });
      return [start, stop] as const;
    });
  });
  // Together the fragments must tile [0, total) exactly once (empty ones tile nothing).
  const cover = all.filter((f) => f.stop > f.start).sort((a, b) => a.start - b.start);
  let at = 0;
  for (const f of cover) {
    if (f.start !== at) {
      throw invalidArgument(
        OP,
        f.start < at
          ? `${f.where}: [${f.start}, ${f.stop}) overlaps tokens another fragment owns (before ${at})`
          : `fragments: tokens [${at}, ${f.start}) belong to no fragment`,
      );
    }
    at = f.stop;
  }
  if (at !== total) throw invalidArgument(OP, `fragments: tokens [${at}, ${total}) belong to no fragment`);
  return table;
}

/** The sequence holding global token t (the last sequence whose start is <= t, skipping empty ones). */
function sequenceOf(cu: readonly number[], t: number): number {
  let lo = 0, hi = cu.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

function cut(cu: readonly number[], [start, stop]: Fragment, fragment: number): Subsequence[] {
  const out: Subsequence[] = [];
  for (let t = start; t < stop;) {
    const s = sequenceOf(cu, t);
    const end = Math.min(stop, cu[s + 1]);
    out.push({ sequence: s, start: t, stop: end, fragment });
    t = end;
  }
  return out;
}

/**
 * One rank's view of a context-parallel layout, built on the host from every rank's fragments.
 *
 * @example
 * ```ts
 * import { ContextParallelPlan } from "@attnkit/attnkit";
 * // Sequences [0, 40), [40, 232), [232, 384), zig-zag over two ranks.
 * const plan = ContextParallelPlan.fromFragments([0, 40, 232, 384], [
 *   [[0, 96], [288, 384]],
 *   [[96, 192], [192, 288]],
 * ], 1);
 * console.log(plan.cuSeqlens); // [0, 96, 136, 192]
 * ```
 */
export class ContextParallelPlan {
  /** This rank's subsequences in span order. */
  readonly subsequences: readonly Subsequence[];
  /** Span offsets, one segment per subsequence. */
  readonly cuSeqlens: readonly number[];
  /** Gather slots per rank: the most fragments any rank holds. */
  readonly slots: number;
  /** Per local fragment: the slots of its sequence's pieces before its first subsequence, in token order. */
  readonly predecessors: readonly (readonly Slot[])[];
  /** Per local fragment: the slots of its sequence's pieces after its last subsequence, last first. */
  readonly successors: readonly (readonly Slot[])[];
  /** Local indices of the subsequences that end their sequence (their exit states are final states). */
  readonly terminal: readonly number[];

  private constructor(
    /** `table[rank][fragment]`: every rank's fragments. */
    readonly table: readonly (readonly Fragment[])[],
    /** This rank's row of the table. */
    readonly cpRank: number,
    /** The global sequence offsets. */
    readonly cuSeqlensGlobal: readonly number[],
  ) {
    const cu = cuSeqlensGlobal;
    const pieces = table.map((row) => row.map((f, i) => cut(cu, f, i)));
    this.subsequences = pieces[cpRank].flat();
    this.cuSeqlens = this.subsequences.reduce((acc, s) => [...acc, acc[acc.length - 1] + s.stop - s.start], [
      0,
    ]);
    this.slots = Math.max(...table.map((row) => row.length));
    // Every slot's pieces of each sequence, to find a fragment's neighbours in token order.
    const bySequence = new Map<number, { start: number; slot: Slot }[]>();
    pieces.forEach((row, rank) =>
      row.forEach((subs, fragment) => {
        for (const s of subs) {
          const list = bySequence.get(s.sequence) ?? [];
          list.push({ start: s.start, slot: { rank, fragment } });
          bySequence.set(s.sequence, list);
        }
      })
    );
    for (const list of bySequence.values()) list.sort((a, b) => a.start - b.start);
    const mine = pieces[cpRank];
    this.predecessors = mine.map((subs) => {
      if (subs.length === 0) return [];
      const first = subs[0];
      return bySequence.get(first.sequence)!.filter((p) => p.start < first.start).map((p) => p.slot);
    });
    this.successors = mine.map((subs) => {
      if (subs.length === 0) return [];
      const last = subs[subs.length - 1];
      return bySequence.get(last.sequence)!.filter((p) => p.start > last.start).map((p) => p.slot).reverse();
    });
    this.terminal = this.subsequences.flatMap((s, i) => (s.stop === cu[s.sequence + 1] ? [i] : []));
  }

  /**
   * Builds `cpRank`'s plan from every rank's fragments (`fragments[rank]`, half-open global ranges in
   * span order). Cut points need no alignment to sequences or chunks; the fragments must tile
   * `[0, total)` exactly once (empty fragments are allowed).
   */
  static fromFragments(
    cuSeqlensGlobal: readonly number[] | Int32Array | BigInt64Array,
    fragments: readonly (readonly Fragment[])[],
    cpRank: number,
  ): ContextParallelPlan {
    const cu = checkOffsets(cuSeqlensGlobal);
    const table = checkFragments(fragments, cu[cu.length - 1]);
    if (!Number.isInteger(cpRank) || cpRank < 0 || cpRank >= table.length) {
      throw invalidArgument(OP, `cpRank: expected an integer in [0, ${table.length}), got ${cpRank}`);
    }
    return new ContextParallelPlan(table, cpRank, cu);
  }

  /** Ranks in the layout. */
  get world(): number {
    return this.table.length;
  }

  /** This rank's fragments in span order. */
  get fragments(): readonly Fragment[] {
    return this.table[this.cpRank];
  }

  /** Tokens in this rank's span. */
  get spanLength(): number {
    return this.cuSeqlens[this.cuSeqlens.length - 1];
  }

  /** Local index of each fragment's first and last subsequence (-1 for an empty fragment). */
  fragmentSegments(): { first: number; last: number }[] {
    return this.fragments.map((_, f) => {
      const mine = this.subsequences.flatMap((s, i) => (s.fragment === f ? [i] : []));
      return mine.length ? { first: mine[0], last: mine[mine.length - 1] } : { first: -1, last: -1 };
    });
  }

  /**
   * This layout as fixed-shape device tensors for the recipes (`options.routing`). With caps (`slots`,
   * `maxSubsequences`: the most this loader will ever need), every layout with this span length gives
   * tensors of the same shapes, so one routing serves them all (copy each new layout's into it with
   * `copyFrom`).
   */
  routing(device = "cpu", options: RoutingOptions = {}): ContextParallelRouting {
    const op = "ContextParallelPlan.routing";
    const o = checkOptions<RoutingOptions>(op, options, {
      slots: "integer",
      maxSubsequences: "integer",
      convHistory: "integer",
    });
    const N = this.subsequences.length;
    const slots = o.slots ?? this.slots, M = o.maxSubsequences ?? N;
    if (!Number.isInteger(slots) || slots < this.slots) {
      throw invalidArgument(
        op,
        `options.slots: expected an integer >= ${this.slots} (this table's), got ${slots}`,
      );
    }
    if (!Number.isInteger(M) || M < N) {
      throw invalidArgument(
        op,
        `options.maxSubsequences: expected an integer >= ${N} (this span's), got ${M}`,
      );
    }
    const capped = o.slots !== undefined || o.maxSubsequences !== undefined;
    const W1 = o.convHistory ?? 0;
    if (!Number.isInteger(W1) || W1 < 0) {
      throw invalidArgument(op, `options.convHistory: expected an integer >= 0 (W - 1), got ${W1}`);
    }
    let conv;
    if (W1 > 0) {
      const plans = this.table.map((_, r) =>
        r === this.cpRank ? this : ContextParallelPlan.fromFragments(this.cuSeqlensGlobal, this.table, r)
      );
      // Every rank sends as many gradient rows: the caps' segments, else the most any rank has.
      const rows = capped ? M : Math.max(...plans.map((p) => p.subsequences.length));
      const depth = capped ? Math.max(1, this.world * slots - 1) : 0;
      const layout = convLayout(plans, this.cpRank, W1, { width: slots + 1, M, rows, depth });
      conv = { history: W1, rows, layout };
    }
    return new ContextParallelRouting(this, device, slots, M, capped, conv);
  }

  /**
   * The global token id of every span token, int64 `[spanLength]`: the bridge from global tensors to the
   * span (`indexSelect` the global tokens with it).
   */
  globalTokenIds(device = "cpu"): Tensor {
    const ids = new BigInt64Array(this.spanLength);
    let at = 0;
    for (const s of this.subsequences) for (let t = s.start; t < s.stop; t++) ids[at++] = BigInt(t);
    return Tensor.from(ids, { device });
  }
}
