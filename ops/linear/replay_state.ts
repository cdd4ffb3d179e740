/**
 * Zero-drift serving for the chunked linear ops: a {@link ReplayState} keeps, per pool slot, the tokens of
 * the unfinished 64-token chunk, and the pool keeps the float32 state after the last complete chunk. A
 * paged call with a replay state then runs the chunked training op over each sequence's cached suffix
 * followed by its new tokens, starting from that boundary state: every chunk it computes starts where the
 * training op's chunk starts, so prefill and decode give the bits that the training op gives on the whole
 * sequence (with the same kernels; on a float32 pool).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkArgument, checkOptions, numberIn, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape } from "../checks.ts";
import type { Device } from "../device.ts";
import { type CuSeqlens, int32Seqlens, seqlensOffsets } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { selectRows } from "../tensor_math/indexing.ts";
import { where } from "../tensor_math/elementwise.ts";
import { type Pool, POOL_GATHER, POOL_SCATTER, poolCopy } from "./pool_run.ts";

/** The chunk length of the training ops, which a replay state's suffix stays below. */
export const REPLAY_CHUNK = 64;

/** The sizes of a {@link ReplayState}. */
export interface ReplayStateShape {
  /** Value heads H. */
  heads: number;
  /** Query / key heads HK (default `heads`). */
  keyHeads?: number;
  /** Key head dimension K. */
  keyDim: number;
  /** Value head dimension V (default `keyDim`). */
  valueDim?: number;
  /** `"head"`: one gate per head and token (Gated DeltaNet); `"channel"`: one per key channel (KDA). */
  gate: "head" | "channel";
  /** The dtype of the q, k and v caches, the calls' q dtype (default `"bfloat16"`). */
  dtype?: "bfloat16" | "float32";
  /** Where the caches live (default `"cpu"`). */
  device?: Device | string;
}

const SHAPE_SPEC: OptionSpec = {
  heads: numberIn(1, 2 ** 16, true),
  keyHeads: numberIn(1, 2 ** 16, true),
  keyDim: numberIn(1, 4096, true),
  valueDim: numberIn(1, 4096, true),
  gate: ["head", "channel"],
  dtype: ["bfloat16", "float32"],
  device: "string",
};

/**
 * The token caches of each slot's unfinished chunk: q, k `[numSlots, 64, HK, K]` and v `[numSlots, 64, H, V]`
 * in the calls' q dtype, the gate `[numSlots, 64, H]` (or `[.., H, K]` per channel) and beta
 * `[numSlots, 64, H]` in float32, and `count [numSlots]` (int32, 0..63) tokens held per slot. Pass it to
 * {@link pagedChunkGdn} / {@link pagedChunkKda} as `replayState` with the state pool it belongs to; the two
 * together hold each sequence's recurrent state.
 *
 * @example
 * ```ts
 * import { ReplayState } from "@attnkit/attnkit";
 * using replay = ReplayState.zeros(8, { heads: 4, keyDim: 64, gate: "head" });
 * console.log(replay.q.shape, replay.count.shape); // [8, 64, 4, 64] [8]
 * ```
 */
export class ReplayState implements Disposable {
  /** Cached queries `[numSlots, 64, HK, K]`. */
  readonly q: Tensor;
  /** Cached keys `[numSlots, 64, HK, K]`. */
  readonly k: Tensor;
  /** Cached values `[numSlots, 64, H, V]`. */
  readonly v: Tensor;
  /** Cached gates, float32: `[numSlots, 64, H]` or `[numSlots, 64, H, K]`. */
  readonly gate: Tensor;
  /** Cached write gates, float32 `[numSlots, 64, H]`. */
  readonly beta: Tensor;
  /** Tokens each slot holds, int32 `[numSlots]`, each in 0..63. */
  readonly count: Tensor;

  private constructor(t: Pick<ReplayState, "q" | "k" | "v" | "gate" | "beta" | "count">) {
    this.q = t.q, this.k = t.k, this.v = t.v, this.gate = t.gate, this.beta = t.beta, this.count = t.count;
  }

  /**
   * Empty caches (every count 0) for a pool of `numSlots` slots.
   *
   * @example
   * ```ts
   * import { ReplayState } from "@attnkit/attnkit";
   * using replay = ReplayState.zeros(4, { heads: 2, keyHeads: 1, keyDim: 16, valueDim: 32, gate: "channel" });
   * console.log(replay.gate.shape); // [4, 64, 2, 16]
   * ```
   */
  static zeros(numSlots: number, shape: ReplayStateShape): ReplayState {
    const op = "ReplayState.zeros";
    checkArgument(op, "numSlots", numSlots, numberIn(1, 2 ** 31 - 1, true));
    const s = checkOptions<ReplayStateShape>(op, shape, SHAPE_SPEC, "shape");
    for (const key of ["heads", "keyDim", "gate"] as const) {
      if (s[key] === undefined) throw invalidArgument(op, `shape.${key}: required`);
    }
    const H = s.heads, HK = s.keyHeads ?? H, K = s.keyDim, V = s.valueDim ?? K;
    const device = s.device ?? "cpu", dtype = s.dtype ?? "bfloat16", C = REPLAY_CHUNK;
    const made: Tensor[] = [];
    const zeros = (dims: number[], dt: "bfloat16" | "float32" | "int32") => {
      const t = Tensor.zeros(dims, { dtype: dt, device });
      made.push(t);
      return t;
    };
    try {
      return new ReplayState({
        q: zeros([numSlots, C, HK, K], dtype),
        k: zeros([numSlots, C, HK, K], dtype),
        v: zeros([numSlots, C, H, V], dtype),
        gate: zeros(s.gate === "head" ? [numSlots, C, H] : [numSlots, C, H, K], "float32"),
        beta: zeros([numSlots, C, H], "float32"),
        count: zeros([numSlots], "int32"),
      });
    } catch (e) {
      for (const t of made) t.dispose();
      throw e;
    }
  }

  /** Releases the caches (safe twice). */
  dispose(): void {
    for (const t of [this.q, this.k, this.v, this.gate, this.beta, this.count]) t.dispose();
  }

  /** Same as {@link ReplayState.dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/** One call's inputs, as the paged ops take them (`"bshd"`). */
export interface ReplayInputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  gate: Tensor;
  beta: Tensor;
}

/** Runs the chunked op over packed inputs `[1, n, ...]` with offsets `cu` from `initial`. */
export type ReplayForward = (
  x: ReplayInputs,
  initial: Tensor,
  cu: number[],
) => { output: Tensor; finalState?: Tensor } & Disposable;

const NAMES = ["q", "k", "v", "gate", "beta"] as const;

/** Checks a replay state against a call's inputs and pool. */
export function checkReplay(
  op: string,
  value: unknown,
  x: ReplayInputs,
  p: Pool,
  perChannel: boolean,
): ReplayState {
  if (!(value instanceof ReplayState)) {
    throw invalidArgument(op, "options.replayState: expected a ReplayState (ReplayState.zeros)");
  }
  const r = value, C = REPLAY_CHUNK, slots = p.cache.shape[0];
  const [HK, K, H, V] = [x.q.shape[2], x.q.shape[3], x.v.shape[2], x.v.shape[3]];
  const name = (t: string) => `options.replayState.${t}`;
  expectShape(op, name("q"), r.q, [slots, C, HK, K]);
  expectShape(op, name("k"), r.k, [slots, C, HK, K]);
  expectShape(op, name("v"), r.v, [slots, C, H, V]);
  expectShape(op, name("gate"), r.gate, perChannel ? [slots, C, H, K] : [slots, C, H]);
  expectShape(op, name("beta"), r.beta, [slots, C, H]);
  expectShape(op, name("count"), r.count, [slots]);
  for (const t of NAMES) {
    expectSameDevice(op, name(t), r[t], x.q, "q");
    // The caches hold the calls' own values: the same dtype keeps them exact.
    expectDType(op, t, x[t], [r[t].dtype]);
  }
  expectDType(op, name("count"), r.count, ["int32"]);
  expectSameDevice(op, name("count"), r.count, x.q, "q");
  return r;
}

/** Where each token of the replayed runs comes from, where outputs go, what the caches keep. */
interface ReplayPlan {
  cuA: number[];
  cuB: number[];
  fromA: Source[];
  fromB: Source[];
  /** Per output row (b T + t): ["A" | "B", position] or undefined (zero). */
  out: ([boolean, number] | undefined)[];
  /** Per sequence n and cache row r: the position in run B that becomes the slot's row r (or -1). */
  keep: number[];
  counts: Int32Array;
}

/** A token of a replayed run: a cached row (slot * 64 + j) or a row of the call's inputs (b T + t). */
type Source = [cached: boolean, row: number];

function plan(op: string, x: ReplayInputs, p: Pool, cu: CuSeqlens | undefined, r: ReplayState): ReplayPlan {
  const [B, T] = [x.q.shape[0], x.q.shape[1]], C = REPLAY_CHUNK, slots = p.cache.shape[0];
  const idx = p.indices.values("int32");
  const resume = p.hasInitialState?.toArray();
  const counts = r.count.values("int32");
  using offsets = cu === undefined ? undefined : int32Seqlens(op, "options.cuSeqlens", cu, x.q.device);
  const off = offsets ? seqlensOffsets(offsets) : undefined;
  checkLayout(op, off, B, T, p.N);
  const seen = new Map<number, number>();
  const plan: ReplayPlan = {
    cuA: [0],
    cuB: [0],
    fromA: [],
    fromB: [],
    out: new Array(B * T).fill(undefined),
    keep: new Array(p.N * C).fill(-1),
    counts: Int32Array.from(counts),
  };
  for (let n = 0; n < p.N; n++) {
    const slot = idx[n];
    if (slot >= slots) {
      throw invalidArgument(op, `stateIndices: entry ${n} is ${slot}, past the ${slots} slots of stateCache`);
    }
    if (slot <= 0) {
      plan.cuA.push(plan.fromA.length), plan.cuB.push(plan.fromB.length);
      continue;
    }
    if (seen.has(slot)) {
      throw invalidArgument(op, `stateIndices: entries ${seen.get(slot)} and ${n} both name slot ${slot}`);
    }
    seen.set(slot, n);
    const fresh = resume !== undefined && resume[n] === 0;
    const held = fresh ? 0 : counts[slot];
    if (!(held >= 0 && held < C)) {
      throw invalidArgument(
        op,
        `options.replayState.count: slot ${slot} holds ${held} tokens, expected 0..${C - 1}`,
      );
    }
    const start = off ? off[n] : n * T, len = off ? off[n + 1] - off[n] : T;
    const total = held + len, full = Math.floor(total / C) * C;
    const startB = plan.fromB.length;
    for (let j = 0; j < total; j++) {
      const src: Source = j < held ? [true, slot * C + j] : [false, start + j - held];
      const run = j < full ? plan.fromA : plan.fromB;
      if (j >= held) plan.out[start + j - held] = [j < full, run.length];
      run.push(src);
    }
    for (let j = full; j < total; j++) plan.keep[n * C + j - full] = startB + j - full;
    plan.counts[slot] = total - full;
    plan.cuA.push(plan.fromA.length), plan.cuB.push(plan.fromB.length);
  }
  return plan;
}

/** The sequences the plan walks: B rows of T tokens, or packed offsets [N + 1] (B = 1) in order within T. */
function checkLayout(op: string, off: Int32Array | undefined, B: number, T: number, N: number): void {
  if (off === undefined) {
    if (N !== B) throw invalidArgument(op, `stateIndices: expected one entry per batch row (${B}), got ${N}`);
    return;
  }
  if (B !== 1) throw invalidArgument(op, `q: packed input (cuSeqlens given) needs batch size 1, got ${B}`);
  if (off.length !== N + 1) {
    throw invalidArgument(
      op,
      `options.cuSeqlens: expected ${N + 1} offsets (one per stateIndices entry + 1)`,
    );
  }
  if (off[0] !== 0) throw invalidArgument(op, `options.cuSeqlens: must start at 0, got ${off[0]}`);
  for (let i = 1; i <= N; i++) {
    if (off[i] < off[i - 1]) {
      throw invalidArgument(
        op,
        `options.cuSeqlens: must be nondecreasing, but entry ${i} is below entry ${i - 1}`,
      );
    }
  }
  if (off[N] > T) {
    throw invalidArgument(op, `options.cuSeqlens: the last offset ${off[N]} exceeds the ${T} tokens`);
  }
}

/** int32 lists uploaded together (one host copy) and handed out as device tensors, in order. */
function upload(device: string, lists: ArrayLike<number>[]): Tensor[] {
  const total = lists.reduce((n, l) => n + l.length, 0);
  const all = new Int32Array(total);
  let at = 0;
  for (const l of lists) all.set(l, at), at += l.length;
  using joined = Tensor.from(all, { dtype: "int32", device });
  at = 0;
  return lists.map((l) => {
    const part = joined.slice(0, at, at + l.length);
    at += l.length;
    return part;
  });
}

/** A bool mask `[n, 1, ...]` broadcasting over a tensor of `rank` dims. */
function rowMask(picks: Tensor, rank: number): Tensor {
  using b = picks.cast("bool");
  return b.reshape([picks.shape[0], ...new Array(rank - 1).fill(1)]);
}

/** Rows of each `cached[i]` (`[numSlots * 64, ...]`) and `fresh[i]` (`[B T, ...]`) in the order of `from`. */
function gather(op: string, cached: Tensor[], fresh: Tensor[], from: Source[]): Tensor[] {
  const n = from.length;
  const [cIdx, fIdx, picks] = upload(cached[0].device, [
    from.map(([isCached, row]) => (isCached ? row : 0)),
    from.map(([isCached, row]) => (isCached ? 0 : row)),
    from.map(([isCached]) => (isCached ? 1 : 0)),
  ]);
  const out: Tensor[] = [];
  try {
    for (const [i, c] of cached.entries()) {
      const dims = c.shape.slice(1);
      using fromCache = selectRows(op, c, cIdx);
      if (fresh[i].shape[0] === 0) {
        out.push(fromCache.reshape([1, n, ...dims]));
        continue;
      }
      using fromFresh = selectRows(op, fresh[i], fIdx);
      using mask = rowMask(picks, c.ndim);
      using rows = where(mask, fromCache, fromFresh);
      out.push(rows.reshape([1, n, ...dims]));
    }
    return out;
  } catch (e) {
    for (const t of out) t.dispose();
    throw e;
  } finally {
    for (const t of [cIdx, fIdx, picks]) t.dispose();
  }
}

/**
 * The paged chunked call with a replay state (see the module): runs A (each sequence's complete chunks, from
 * its boundary state) and B (its unfinished chunk, from A's final state), writes A's final states to the pool,
 * B's tokens to the caches and the new counts. Eager only: the plan is made from host copies of the indices,
 * counts and offsets.
 */
export function runWithReplay(
  op: string,
  x: ReplayInputs,
  p: Pool,
  cu: CuSeqlens | undefined,
  kv: boolean,
  r: ReplayState,
  forward: ReplayForward,
): Tensor {
  const [B, T, H, V] = [x.q.shape[0], x.q.shape[1], p.H, p.V];
  const pl = plan(op, x, p, cu, r);
  const flat = (t: Tensor) => t.reshape([t.shape[0] * t.shape[1], ...t.shape.slice(2)]);
  const cachedRows = NAMES.map((n) => flat(r[n]));
  const freshRows = NAMES.map((n) => flat(x[n]));
  const run = (from: Source[], cuRun: number[], initial: Tensor) => {
    if (from.length === 0) return undefined;
    const inputs = gather(op, cachedRows, freshRows, from);
    try {
      const [q, k, v, gate, beta] = inputs;
      return { result: forward({ q, k, v, gate, beta }, initial, cuRun), inputs };
    } catch (e) {
      for (const t of inputs) t.dispose();
      throw e;
    }
  };
  const shape = kv ? [p.N, H, p.K, V] : [p.N, H, V, p.K];
  using initial = Tensor.empty(shape, { dtype: "float32", device: x.q.device });
  let a: ReturnType<typeof run>, b: ReturnType<typeof run>;
  try {
    // The plan checked the indices on the host already: the gather need not read them back again.
    poolCopy(op, { ...p, checkIndices: false }, initial, POOL_GATHER, kv);
    a = run(pl.fromA, pl.cuA, initial);
    const boundary = a?.result.finalState ?? initial;
    b = run(pl.fromB, pl.cuB, boundary);
    const output = assemble(op, x.q, [B, T, H, V], pl, a?.result.output, b?.result.output);
    try {
      poolCopy(op, p, boundary, POOL_SCATTER, kv);
      if (b !== undefined) keepSuffix(op, p, r, b.inputs, pl);
      using counts = Tensor.from(pl.counts, { dtype: "int32", device: r.count.device });
      r.count.copyFrom(counts);
    } catch (e) {
      output.dispose();
      throw e;
    }
    return output;
  } finally {
    for (const done of [a, b]) {
      if (done === undefined) continue;
      done.result[Symbol.dispose]();
      for (const t of done.inputs) t.dispose();
    }
    for (const t of [...cachedRows, ...freshRows]) t.dispose();
  }
}

/** The call's output `[B, T, H, V]`: each token's row from run A or B, zero for padding and spare rows. */
function assemble(
  op: string,
  q: Tensor,
  dims: number[],
  pl: ReplayPlan,
  outA?: Tensor,
  outB?: Tensor,
): Tensor {
  const [B, T, H, V] = dims, rows = B * T;
  const at = (fromA: boolean) => pl.out.map((s) => (s !== undefined && s[0] === fromA ? s[1] : 0));
  const picked = (fromA: boolean) => pl.out.map((s) => (s !== undefined && s[0] === fromA ? 1 : 0));
  const [atA, atB, inA, inB] = upload(q.device, [at(true), at(false), picked(true), picked(false)]);
  try {
    const pickFrom = (o: Tensor | undefined, positions: Tensor) => {
      if (o === undefined) return undefined;
      using f = o.reshape([o.shape[1], H, V]);
      return selectRows(op, f, positions);
    };
    using zero = Tensor.zeros([rows, H, V], { dtype: q.dtype, device: q.device });
    using a = pickFrom(outA, atA);
    using b = pickFrom(outB, atB);
    using maskA = rowMask(inA, 3);
    using maskB = rowMask(inB, 3);
    using restB = b ? where(maskB, b, zero) : zero.clone();
    using all = a ? where(maskA, a, restB) : restB.clone();
    return all.reshape([B, T, H, V]);
  } finally {
    for (const t of [atA, atB, inA, inB]) t.dispose();
  }
}

/** Writes each live slot's unfinished chunk (run B's tokens) into the caches. */
function keepSuffix(op: string, p: Pool, r: ReplayState, inputsB: Tensor[], pl: ReplayPlan): void {
  const [keep] = upload(r.q.device, [pl.keep.map((at) => Math.max(at, 0))]);
  using _keep = keep;
  for (const [i, name] of NAMES.entries()) {
    const cache = r[name];
    const src = inputsB[i];
    using rows = src.reshape(src.shape.slice(1));
    using picked = selectRows(op, rows, keep);
    using states = picked.reshape([p.N, REPLAY_CHUNK, ...cache.shape.slice(2)]);
    using f32 = states.dtype === "float32" ? states.clone() : states.cast("float32");
    poolCopy(op, { ...p, cache, hasInitialState: undefined, checkIndices: false }, f32, POOL_SCATTER);
  }
}
