/**
 * Zero-drift serving for the chunked linear ops: a {@link ReplayState} keeps, per pool slot, the tokens of
 * the unfinished 64-token chunk, and the pool keeps the float32 state after the last complete chunk. A
 * paged call with a replay state then runs the chunked training op over each sequence's cached suffix
 * followed by its new tokens, starting from that boundary state: every chunk it computes starts where the
 * training op's chunk starts, so prefill and decode give the bits that the training op gives on the whole
 * sequence (with the same kernels; on a float32 pool). The plan of a call is made on the device
 * (ak_replay_plan) and its runs are sized by capacity, so a call can be captured in a graph.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkArgument, checkOptions, numberIn, type OptionSpec } from "../args.ts";
import { expectDType, expectSameDevice, expectShape } from "../checks.ts";
import type { Device } from "../device.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { insideCapture } from "../graph.ts";
import { type CuSeqlens, int32Seqlens, seqlensOffsets } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
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

/** Runs the chunked op over packed inputs `[1, n, ...]` with offsets `cu` (an int32 tensor) from `initial`. */
export type ReplayForward = (
  x: ReplayInputs,
  initial: Tensor,
  cu: Tensor,
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

/** ak_replay_plan's flag: the indices, offsets and counts were checked (or vouched for) already. */
const REPLAY_TRUSTED = 1;

/** A replay plan made on the inputs' device (ak_replay_plan): the runs' offsets and the code lists. */
class DevicePlan implements Disposable {
  /** Run A's rows at most (its inputs' capacity). */
  readonly capA: number;
  /** Run B's rows at most. */
  readonly capB: number;
  readonly cuA: Tensor;
  readonly cuB: Tensor;
  /** int32: src A [capA] | src B [capB] | out [R] | keep [N, 64] | count [N]. */
  readonly lists: Tensor;

  constructor(readonly N: number, readonly R: number, device: string) {
    this.capA = R + (REPLAY_CHUNK - 1) * N;
    this.capB = (REPLAY_CHUNK - 1) * N;
    const made: Tensor[] = [];
    try {
      for (const n of [N + 1, N + 1, this.capA + this.capB + R + (REPLAY_CHUNK + 1) * N]) {
        made.push(Tensor.empty([n], { dtype: "int32", device }));
      }
    } catch (e) {
      for (const t of made) t.dispose();
      throw e;
    }
    [this.cuA, this.cuB, this.lists] = made;
  }

  /** A descriptor of `n` codes of the lists from element `at`. */
  codes(op: string, at: number, n: number): Uint8Array<ArrayBuffer> {
    return this.lists.viewDescriptor([n], [1], op, at);
  }

  /** Where run A's source codes start, then run B's, the output's. */
  get srcA(): number {
    return 0;
  }
  get srcB(): number {
    return this.capA;
  }
  get out(): number {
    return this.capA + this.capB;
  }

  dispose(): void {
    for (const t of [this.cuA, this.cuB, this.lists]) t.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * The checks an eager call makes on the host before anything is written: the indices (within the pool, no
 * live slot twice), the offsets (from 0, nondecreasing, within T) and each resumed live slot's count.
 */
function checkOnHost(op: string, p: Pool, off: Int32Array | undefined, T: number, r: ReplayState): void {
  const idx = p.indices.values("int32");
  const resume = p.hasInitialState?.toArray();
  const counts = r.count.values("int32");
  const slots = p.cache.shape[0], C = REPLAY_CHUNK;
  if (off !== undefined) checkOffsets(op, off, p.N, T);
  const seen = new Map<number, number>();
  for (let n = 0; n < p.N; n++) {
    const slot = idx[n];
    if (slot >= slots) {
      throw invalidArgument(op, `stateIndices: entry ${n} is ${slot}, past the ${slots} slots of stateCache`);
    }
    if (slot <= 0) continue;
    if (seen.has(slot)) {
      throw invalidArgument(op, `stateIndices: entries ${seen.get(slot)} and ${n} both name slot ${slot}`);
    }
    seen.set(slot, n);
    const held = resume !== undefined && resume[n] === 0 ? 0 : counts[slot];
    if (!(held >= 0 && held < C)) {
      throw invalidArgument(
        op,
        `options.replayState.count: slot ${slot} holds ${held} tokens, expected 0..${C - 1}`,
      );
    }
  }
}

/** The sequences the plan walks: B rows of T tokens, or packed offsets [N + 1] (B = 1). */
function checkLayout(op: string, offsets: number | undefined, B: number, N: number): void {
  if (offsets === undefined) {
    if (N !== B) throw invalidArgument(op, `stateIndices: expected one entry per batch row (${B}), got ${N}`);
    return;
  }
  if (B !== 1) throw invalidArgument(op, `q: packed input (cuSeqlens given) needs batch size 1, got ${B}`);
  if (offsets !== N + 1) {
    throw invalidArgument(
      op,
      `options.cuSeqlens: expected ${N + 1} offsets (one per stateIndices entry + 1)`,
    );
  }
}

/** Packed offsets: from 0, nondecreasing, the last within the T tokens. */
function checkOffsets(op: string, off: Int32Array, N: number, T: number): void {
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

/** A tensor `[a, b, ...]` viewed as rows `[a b, ...]`. */
const rowsOf = (t: Tensor) => t.reshape([t.shape[0] * t.shape[1], ...t.shape.slice(2)]);

/**
 * `[1, n, ...]` in `first`'s dtype: each row the one its code names (ak_replay_rows), from `first` (c > 0)
 * or `second` (c < 0), zero for 0.
 */
function pickRows(
  op: string,
  first: Tensor,
  second: Tensor,
  codes: Uint8Array<ArrayBuffer>,
  n: number,
): Tensor {
  const dims = first.shape.slice(1);
  using rows = Tensor.empty([n, ...dims], { dtype: first.dtype, device: first.device });
  unwrap(
    native().ak_replay_rows(first.descriptor(op), second.descriptor(op), codes, rows.descriptor(op)),
    op,
  );
  return rows.reshape([1, n, ...dims]);
}

/** One replayed run: its inputs gathered from the caches and the call's rows, and the forward's result. */
interface Run extends Disposable {
  inputs: Tensor[];
  result: { output: Tensor; finalState?: Tensor } & Disposable;
}

/**
 * The paged chunked call with a replay state (see the module). The plan is made on the inputs' device
 * (ak_replay_plan): runs A (each sequence's complete chunks, from its boundary state) and B (its unfinished
 * chunk, from A's final state) gather their tokens by the plan's codes, sized by their capacities (A: B T +
 * 63 N rows, B: 63 N), so nothing but the eager checks is read back and the call can be captured in a graph.
 * A's final states go to the pool, B's tokens to the caches, the new counts last.
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
  const device = x.q.device, lib = native();
  using offsets = cu === undefined ? undefined : int32Seqlens(op, "options.cuSeqlens", cu, device);
  checkLayout(op, offsets?.tensor.shape[0], B, p.N);
  // Eagerly, checked on the host before anything is written (the CPU always); inside a capture on the device.
  const onHost = !insideCapture() && (p.checkIndices || device === "cpu");
  if (onHost) checkOnHost(op, p, offsets ? seqlensOffsets(offsets) : undefined, T, r);
  if (p.N === 0) return Tensor.zeros([B, T, H, V], { dtype: x.q.dtype, device });
  using plan = new DevicePlan(p.N, B * T, device);
  unwrap(
    lib.ak_replay_plan(
      p.indices.descriptor(op),
      p.hasInitialState?.descriptor(op) ?? null,
      r.count.descriptor(op),
      offsets?.tensor.descriptor(op) ?? null,
      BigInt(B),
      BigInt(T),
      plan.cuA.descriptor(op),
      plan.cuB.descriptor(op),
      plan.lists.descriptor(op),
      onHost || !p.checkIndices ? REPLAY_TRUSTED : 0,
    ),
    op,
  );
  const cachedRows = NAMES.map((n) => rowsOf(r[n]));
  const freshRows = NAMES.map((n) => rowsOf(x[n]));
  const runs: Run[] = [];
  const run = (at: number, rows: number, cuRun: Tensor, initial: Tensor): Run => {
    const codes = plan.codes(op, at, rows);
    const inputs: Tensor[] = [];
    try {
      for (const [i, cached] of cachedRows.entries()) {
        inputs.push(pickRows(op, cached, freshRows[i], codes, rows));
      }
      const [q, k, v, gate, beta] = inputs;
      const result = forward({ q, k, v, gate, beta }, initial, cuRun);
      const done = {
        inputs,
        result,
        [Symbol.dispose]: () => (result[Symbol.dispose](), inputs.forEach((t) => t.dispose())),
      };
      runs.push(done);
      return done;
    } catch (e) {
      for (const t of inputs) t.dispose();
      throw e;
    }
  };
  try {
    const shape = kv ? [p.N, H, p.K, V] : [p.N, H, V, p.K];
    using initial = Tensor.empty(shape, { dtype: "float32", device });
    // The plan's checks cover the indices: the gather need not read them back again.
    poolCopy(op, { ...p, checkIndices: false }, initial, POOL_GATHER, kv);
    const a = run(plan.srcA, plan.capA, plan.cuA, initial);
    const boundary = a.result.finalState!;
    const b = run(plan.srcB, plan.capB, plan.cuB, boundary);
    const output = assemble(op, [B, T, H, V], plan, a.result.output, b.result.output);
    try {
      poolCopy(op, { ...p, checkIndices: false }, boundary, POOL_SCATTER, kv);
      // Run B's tokens become the slots' cached rows; the counts go last.
      for (const [i, name] of NAMES.entries()) {
        using rows = rowsOf(b.inputs[i]);
        unwrap(
          lib.ak_replay_keep(
            rows.descriptor(op),
            r[name].descriptor(op),
            plan.lists.descriptor(op),
            p.indices.descriptor(op),
          ),
          op,
        );
      }
      unwrap(
        lib.ak_replay_commit(r.count.descriptor(op), plan.lists.descriptor(op), p.indices.descriptor(op)),
        op,
      );
    } catch (e) {
      output.dispose();
      throw e;
    }
    return output;
  } finally {
    for (const done of runs) done[Symbol.dispose]();
    for (const t of [...cachedRows, ...freshRows]) t.dispose();
  }
}

/** The call's output `[B, T, H, V]`: each token's row from run A or B, zero for padding and spare rows. */
function assemble(op: string, dims: number[], plan: DevicePlan, outA: Tensor, outB: Tensor): Tensor {
  const [B, T, H, V] = dims;
  using a = outA.reshape([plan.capA, H, V]);
  using b = outB.reshape([plan.capB, H, V]);
  using rows = pickRows(op, a, b, plan.codes(op, plan.out, B * T), B * T);
  return rows.reshape([B, T, H, V]);
}
