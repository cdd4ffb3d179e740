/**
 * Where the short convolution's history rows come from under context parallelism, as index arrays a
 * routing uploads once (routing.ts): each fragment's tail (the last W - 1 tokens of its last
 * subsequence) is gathered from every rank, and each segment that continues a sequence from elsewhere
 * picks its history from the gathered tails, newest position from the nearest predecessor. The
 * backward reverses the picks: each tail row adds the gradients of the history positions that read it.
 *
 * @module
 */
import type { ContextParallelPlan } from "./plan.ts";

/** The convolution history's index arrays of one rank (row counts in the doc of each field). */
export interface ConvLayout {
  /** `[width * W1]`: the span token each of this rank's tail rows holds (`T`: a zero row). */
  tokens: number[];
  /** `[M * W1]`: the gathered tail row each history position reads (`world * width * W1`: zero). */
  pick: number[];
  /**
   * `[depth * width * W1]`: for each of this rank's tail rows, the gathered history gradients it adds,
   * one per step (rows of `world * rows * W1` gathered gradients; `world * rows * W1`: zero).
   */
  readers: number[];
  /** `[T]`: the tail row each span token sits in (`width * W1`: none, a zero row). */
  tokenRows: number[];
  /** Steps of `readers` this layout needs (the routing pads to its cap). */
  depth: number;
}

/**
 * The layout of rank `plans[me]`'s history. `plans` holds every rank's plan of one table; `width` the
 * gather slots per rank (slots + 1); `M` this rank's segment rows; `rows` the gradient rows every rank
 * sends (the same on every rank); `depth` the reader steps to fill (at least the layout's).
 */
export function convLayout(
  plans: readonly ContextParallelPlan[],
  me: number,
  W1: number,
  sizes: { width: number; M: number; rows: number; depth?: number },
): ConvLayout {
  const { width, M, rows } = sizes;
  const plan = plans[me], world = plans.length, T = plan.spanLength;
  const segments = plans.map((p) => p.fragmentSegments());
  // Each slot's tail piece: its fragment's last subsequence.
  const tailPiece = plans.map((p, r) =>
    segments[r].map((s) => (s.last >= 0 ? p.subsequences[s.last] : undefined))
  );
  const tailRow = (rank: number, fragment: number, position: number) =>
    (rank * width + fragment) * W1 + position;
  // For rank r's segment i at history position q: the gathered tail row it reads, or -1.
  const reads = plans.map((p, r) =>
    p.subsequences.map((sub, i) => {
      const f = sub.fragment;
      const out = new Array<number>(W1).fill(-1);
      // Only a fragment's first subsequence continues a sequence from elsewhere.
      if (segments[r][f].first !== i) return out;
      let q = W1 - 1; // filled newest first, walking the predecessors back from the nearest
      for (const slot of [...p.predecessors[f]].reverse()) {
        const piece = tailPiece[slot.rank][slot.fragment]!;
        const take = Math.min(piece.stop - piece.start, q + 1);
        for (let j = 0; j < take; j++) out[q - j] = tailRow(slot.rank, slot.fragment, W1 - 1 - j);
        q -= take;
        if (q < 0) break;
      }
      return out;
    })
  );
  // This rank's tails: the span token of each position, right-aligned, or T.
  const tokens: number[] = [];
  for (let f = 0; f < width; f++) {
    const piece = f < plan.fragments.length ? tailPiece[me][f] : undefined;
    const stop = piece ? plan.cuSeqlens[segments[me][f].last + 1] : 0;
    const len = piece ? piece.stop - piece.start : 0;
    for (let q = 0; q < W1; q++) {
      const back = W1 - 1 - q; // 0: the newest
      tokens.push(back < len ? stop - 1 - back : T);
    }
  }
  const zeroTail = world * width * W1;
  const pick = new Array<number>(M * W1).fill(zeroTail);
  reads[me].forEach((positions, i) =>
    positions.forEach((row, q) => (pick[i * W1 + q] = row < 0 ? zeroTail : row))
  );
  // For each of this rank's tail rows, the gathered gradient rows (of any rank) that read it.
  const readersOf = new Map<number, number[]>();
  reads.forEach((segs, r) =>
    segs.forEach((positions, i) =>
      positions.forEach((row, q) => {
        if (row < 0 || Math.floor(row / (width * W1)) !== me) return;
        const local = row - me * width * W1;
        const list = readersOf.get(local) ?? [];
        list.push((r * rows + i) * W1 + q);
        readersOf.set(local, list);
      })
    )
  );
  const need = Math.max(0, ...[...readersOf.values()].map((l) => l.length));
  const depth = Math.max(need, sizes.depth ?? 0);
  const zeroGrad = world * rows * W1;
  const readers: number[] = [];
  for (let j = 0; j < depth; j++) {
    for (let t = 0; t < width * W1; t++) readers.push(readersOf.get(t)?.[j] ?? zeroGrad);
  }
  const tokenRows = new Array<number>(T).fill(width * W1);
  tokens.forEach((t, row) => {
    if (t < T) tokenRows[t] = row;
  });
  return { tokens, pick, readers, tokenRows, depth: need };
}
