/**
 * Running a forward over a paged state pool `[numSlots, H, V, K]` (float32 or bfloat16): the selected slots
 * gathered into per-sequence states (one launch on CUDA, after one read-back of the `[N]` indices that
 * refuses an index past the pool or a live slot named twice, unless the caller vouches for them), the
 * forward, its final states scattered back in place, and the padding sequences' output rows zeroed where
 * they live. Shared by the paged chunked prefill and the recurrent forms with `stateIndices`.
 *
 * @module
 */
import { native, unwrap } from "../../ffi/library.ts";
import { PoolMode } from "../../ffi/symbols_linear.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { checkArgument } from "../args.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import { type CuSeqlens, int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { optionalPerSequence, perSequence } from "./pool_args.ts";

/** The pool options every pool form takes. */
export interface PoolOptions {
  /** `[N]` bool: false starts that sequence from a zero state. Default: every live slot resumes. */
  hasInitialState?: Tensor;
  /**
   * true (default): `stateIndices` are read to the host once and an index past the pool or a live slot
   * named twice is refused before anything is written; on a CUDA device that read waits for the stream.
   * false: no read (indices known good): an index past the pool is skipped on the device and a live slot
   * named twice ends unspecified. The CPU always checks.
   */
  checkIndices?: boolean;
}

/** ak_state_pool_copy's directions. */
export const POOL_GATHER = PoolMode.GATHER;
export const POOL_SCATTER = PoolMode.SCATTER;
const POOL_TRUSTED_INDICES = PoolMode.TRUSTED_INDICES;

/** A checked pool call. */
export interface Pool {
  cache: Tensor;
  indices: Tensor;
  hasInitialState?: Tensor;
  /** Whether the gather reads the indices back and checks them (options.checkIndices). */
  checkIndices: boolean;
  N: number;
  H: number;
  V: number;
  K: number;
}

/** Checks the pool, its indices and options against q `[B, T, HK, K]` and v `[B, T, H, V]`. */
export function checkPool(
  op: string,
  q: Tensor,
  v: Tensor,
  stateCache: unknown,
  stateIndices: unknown,
  o: PoolOptions,
  cacheName = "stateCache",
): Pool {
  const cache = expectTensor(op, cacheName, stateCache);
  expectDType(op, cacheName, cache, ["float32", "bfloat16"]);
  expectSameDevice(op, cacheName, cache, q, "q");
  if (v.ndim !== 4) throw invalidArgument(op, `v: expected [B, T, H, V], got [${v.shape.join(", ")}]`);
  expectShape(op, cacheName, cache, [null, v.shape[2], v.shape[3], q.shape[3]]);
  const indices = perSequence(op, "stateIndices", stateIndices, "int32", q, "q");
  const hasInitialState = optionalPerSequence(
    op,
    "options.hasInitialState",
    o.hasInitialState,
    "bool",
    q,
    "q",
    {
      N: indices.shape[0],
    },
  );
  return {
    cache,
    indices,
    hasInitialState,
    checkIndices: o.checkIndices !== false,
    N: indices.shape[0],
    H: v.shape[2],
    V: v.shape[3],
    K: q.shape[3],
  };
}

/**
 * Moves states between the pool and `states`: `[N, H, V, K]` as the pool holds them, or with `kv` the delta
 * rule's `[N, H, K, V]`, passed as its transposed view so the copy itself transposes.
 */
export function poolCopy(op: string, p: Pool, states: Tensor, direction: number, kv = false): void {
  const { N, H, V, K } = p;
  unwrap(
    native().ak_state_pool_copy(
      p.cache.descriptor(op),
      p.indices.descriptor(op),
      direction === POOL_GATHER ? p.hasInitialState?.descriptor(op) ?? null : null,
      kv ? states.viewDescriptor([N, H, V, K], [H * K * V, K * V, 1, V], op) : states.descriptor(op),
      // The gather checks the indices (unless told not to); the scatter of the same call needs no second look.
      direction | (direction === POOL_SCATTER || !p.checkIndices ? POOL_TRUSTED_INDICES : 0),
    ),
    op,
  );
}

/** Zeroes the output rows of padding sequences (index <= 0) on the output's device, in place. */
export function zeroPadding(op: string, output: Tensor, p: Pool, cuSeqlens: CuSeqlens | undefined): void {
  // The chunked op has checked the offsets: a tensor goes as it is, host numbers are uploaded.
  using uploaded = cuSeqlens === undefined || cuSeqlens instanceof Tensor
    ? undefined
    : int32Seqlens(op, "cuSeqlens", cuSeqlens, output.device);
  const offsets = cuSeqlens instanceof Tensor ? cuSeqlens : uploaded?.tensor;
  unwrap(
    native().ak_zero_padding_rows(
      output.descriptor(op),
      p.indices.descriptor(op),
      offsets?.descriptor(op) ?? null,
    ),
    op,
  );
}

/**
 * Runs `forward(initial, output)` on the pool: `initial` holds the gathered states (`[N, H, V, K]`, or with
 * `kv` the delta rule's `[N, H, K, V]`), `output` `[B, T, H, V]` in q's dtype is to be written, and the
 * forward returns its result with the final states in the same layout, which go back to the slots before
 * the result is disposed. Returns the output.
 */
export function runOnPool(
  op: string,
  q: Tensor,
  p: Pool,
  cuSeqlens: CuSeqlens | undefined,
  kv: boolean,
  forward: (initial: Tensor, output: Tensor) => { finalState?: Tensor } & Disposable,
): Tensor {
  const shape = kv ? [p.N, p.H, p.K, p.V] : [p.N, p.H, p.V, p.K];
  using initial = Tensor.empty(shape, { dtype: "float32", device: q.device });
  poolCopy(op, p, initial, POOL_GATHER, kv);
  const output = Tensor.empty([q.shape[0], q.shape[1], p.H, p.V], { dtype: q.dtype, device: q.device });
  try {
    using result = forward(initial, output);
    poolCopy(op, p, result.finalState!, POOL_SCATTER, kv);
    zeroPadding(op, output, p, cuSeqlens);
  } catch (e) {
    output.dispose();
    throw e;
  }
  return output;
}

/** The pool options of the recurrent forms (`recurrentKda`, `recurrentGatedDeltaRule`). */
export interface RecurrentPoolOptions extends PoolOptions {
  /**
   * `[N]` int32, one slot per sequence (N = B, or the packed sequences): `initialState` is then a pool
   * `[numSlots, H, V, K]` (float32 | bfloat16) whose selected slots are each sequence's initial state and
   * receive its final state in place (inference only; `"bshd"` only; no `outputFinalState` or `out`). An
   * index <= 0 is padding: zero output rows, no slot touched.
   */
  stateIndices?: Tensor;
}

/** The result of a recurrent form on a pool: the output; the states went back to the slots. */
export interface PooledResult extends Disposable {
  /** `[B, T, H, V]` in q's dtype; padding sequences' rows zero, rows past the last offset unspecified. */
  output: Tensor;
  /** Always undefined: the final states are in the pool. */
  finalState?: undefined;
  /** Refused: the pool form is inference only. */
  backward(...args: unknown[]): never;
}

const POOL_KEYS = ["stateIndices", "hasInitialState", "checkIndices"] as const;

/**
 * Splits the pool keys off a recurrent call's options: `pool` when `stateIndices` is given (the other keys
 * are refused without it), and the rest for the forward.
 */
export function splitPoolOptions<O extends object>(
  op: string,
  options: O,
): { pool?: RecurrentPoolOptions; rest: O } {
  if (options === null || typeof options !== "object") return { rest: options };
  const o = options as O & RecurrentPoolOptions;
  const rest = { ...o } as Record<string, unknown>;
  for (const key of POOL_KEYS) delete rest[key];
  if (o.stateIndices === undefined) {
    const stray = POOL_KEYS.find((key) => key !== "stateIndices" && o[key] !== undefined);
    if (stray) throw invalidArgument(op, `${stray}: only with stateIndices (a state pool)`);
    return { rest: rest as O };
  }
  if (o.checkIndices !== undefined) checkArgument(op, "options.checkIndices", o.checkIndices, "boolean");
  return { pool: o, rest: rest as O };
}

/** The forward options a pool form passes on (the rest is the caller's). */
interface PooledForwardOptions {
  layout?: unknown;
  initialState?: unknown;
  outputFinalState?: unknown;
  out?: unknown;
  cuSeqlens?: CuSeqlens;
  stateLayout?: unknown;
}

/**
 * A recurrent forward over the pool in `rest.initialState`: checks what the pool form refuses, then
 * {@link runOnPool} with `call` given the caller's options, the gathered states, `outputFinalState` and
 * the output buffer.
 */
export function recurrentOnPool<O extends PooledForwardOptions>(
  op: string,
  q: unknown,
  v: unknown,
  rest: O,
  pool: RecurrentPoolOptions,
  kv: boolean,
  call: (options: O) => { finalState?: Tensor } & Disposable,
): PooledResult {
  if (rest.layout !== "bshd") {
    throw invalidArgument(
      op,
      `layout: the pool form (stateIndices) takes "bshd", got ${String(rest.layout)}`,
    );
  }
  if (rest.initialState === undefined) {
    throw invalidArgument(op, "initialState: with stateIndices, the pool [numSlots, H, V, K] they index");
  }
  if (rest.outputFinalState !== undefined && rest.outputFinalState !== false) {
    throw invalidArgument(
      op,
      "outputFinalState: the pool form writes the final states to their slots instead",
    );
  }
  if (rest.out !== undefined) throw invalidArgument(op, "out: not with stateIndices (the output is new)");
  if (rest.stateLayout !== undefined && rest.stateLayout !== "vk") {
    throw invalidArgument(
      op,
      `stateLayout: the pool is [numSlots, H, V, K] ("vk"), got ${String(rest.stateLayout)}`,
    );
  }
  const qt = expectTensor(op, "q", q), vt = expectTensor(op, "v", v);
  if (qt.ndim !== 4) throw invalidArgument(op, `q: expected [B, T, HK, K], got [${qt.shape.join(", ")}]`);
  const p = checkPool(op, qt, vt, rest.initialState, pool.stateIndices, pool, "options.initialState");
  const output = runOnPool(op, qt, p, rest.cuSeqlens, kv, (initial, out) =>
    call({
      ...rest,
      initialState: initial,
      outputFinalState: true,
      out: { output: out },
      ...(kv ? {} : { stateLayout: "vk" }),
    }));
  return {
    output,
    finalState: undefined,
    backward(): never {
      throw invalidArgument(op, "backward: the pool form (stateIndices) is inference only");
    },
    [Symbol.dispose]() {
      output.dispose();
    },
  };
}
