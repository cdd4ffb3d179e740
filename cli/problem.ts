/**
 * What the op families of the command line share: a case (random inputs of one shape on a device)
 * that can check itself against the float64 oracle and be timed, and the verdict of one compared
 * output.
 *
 * @module
 */
import { compare, type Device, type DType, type FeatureMapKind, Tensor } from "../mod.ts";
import { PAGED_DECODE_BASE, type RowTolerance, rowToleranceBreach } from "../reference/tolerance.ts";
import type { CacheFlags } from "./attention_decode.ts";
import type { PoolFlags } from "./pool_decode.ts";
import type { Shape } from "./shape.ts";

/** The verdict on one output of a check. */
export interface CheckRow {
  /** The output, e.g. `output`, `dq`. */
  name: string;
  /** Largest |actual - oracle|. */
  maxAbs: number;
  /** RMS(actual - oracle) / RMS(oracle). */
  relRms: number;
  /** The bound, as text, e.g. `rel RMS <= 5.0e-3`. */
  bound: string;
  /** Whether the output meets its bound (and has no NaN or stray non-finite value). */
  pass: boolean;
  /** Why it failed beyond the numbers (NaN, infinities). */
  problem?: string;
}

/** The timed modes. */
export type Mode = "fwd" | "bwd" | "fwdbwd";

/** What a case needs to know about its run. */
export interface CaseSettings {
  /** Sizes. */
  shape: Shape;
  /** Dtype of q, k, v. */
  dtype: DType;
  /** Where the op runs. */
  device: Device;
  /** Seed of the random inputs. */
  seed: number;
  /** Linear ops: L2-normalise q and k in the kernel. */
  l2norm: boolean;
  /** fmap: the feature map (default `"elu+1"`, the function's). */
  phi?: FeatureMapKind;
  /** fmap: every token sees every other (default false: causal). */
  bidirectional?: boolean;
  /** fmap: the normaliser's eps (default the library's). */
  eps?: number;
  /** fmap: cosformer's position weights. */
  cosformer?: boolean;
  /** attention-decode: the cache's layout (default contiguous, every row valid). */
  cache?: CacheFlags;
  /** kda-decode, gdn-pool-decode: the gate transform and the pool's dtype (default KDA's bounded, float32). */
  pool?: PoolFlags;
}

/** Random inputs of one op and shape on a device: checked against the oracle and timed. */
export interface OpCase extends Disposable {
  /** The inputs, one line. */
  readonly description: string;
  /**
   * Runs the op (outputs poisoned with NaN first) and the oracle on the first `batches` batch rows;
   * `progress` hears of the oracle's (sequence, head) pairs.
   */
  check(batches: number, backward: boolean, progress: (done: number, total: number) => void): CheckRow[];
  /** A call of the op in a mode, for timing (its results disposed). */
  call(mode: Mode): () => void;
  /** The modes the op times. */
  readonly modes: readonly Mode[];
  /** FLOPs of one call in a mode (the benchmarks' convention); absent for the memory-bound decode ops. */
  flops?(mode: Mode): number;
  /**
   * Bytes one call in a mode must move at the least (each input read once, each output written once),
   * where the benchmarks' convention counts them; undefined for a mode it does not.
   */
  bytes?(mode: Mode): number | undefined;
}

/** A forward's result that runs its own backward. */
export interface Trainable extends Disposable {
  /** The gradients from the output's (disposed by the caller). */
  backward(dOutput: Tensor): Disposable;
}

/**
 * The timing call of a mode of an op that writes into a given output and whose result runs its own
 * backward: fwd runs `forward(output)` into one buffer `makeOutput` makes (and owns) up front, fwdbwd
 * `forward()` then the backward from `dO`; another mode is refused, naming `op`.
 */
export function trainingCall(
  mode: Mode,
  op: string,
  makeOutput: () => Tensor,
  forward: (output?: Tensor) => Trainable,
  dO: Tensor,
): () => void {
  if (mode === "fwd") {
    const output = makeOutput();
    return () => {
      using _r = forward(output);
    };
  }
  if (mode === "fwdbwd") {
    return () => {
      using r = forward();
      using _grads = r.backward(dO);
    };
  }
  throw new Error(`${op} times fwd and fwdbwd, not ${mode}`);
}

/**
 * Uniform draws in [0, 1) from a seed: a 32-bit LCG, enough for the layouts a case draws (cache lengths
 * and pages, pool slots), which need only be reproducible.
 *
 * @example
 * ```ts
 * import { uniforms } from "./problem.ts";
 * const a = uniforms(7), b = uniforms(7);
 * console.log(a() === b()); // true: the same seed, the same draws
 * ```
 */
export function uniforms(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}

/** A tensor's values as float64 (16-bit values widen exactly); the first `count` elements. */
export function hostValues(t: Tensor, count = t.numel): Float64Array {
  const all = t.toArray() as Float32Array;
  return Float64Array.from(count === all.length ? all : all.subarray(0, count));
}

/** A fresh NaN-filled tensor: an element the op does not write fails the comparison. */
export function poisoned(shape: readonly number[], dtype: DType, device: Device): Tensor {
  return Tensor.empty(shape, { dtype, device }).fill(NaN);
}

function nonFinite(c: ReturnType<typeof compare>): string | undefined {
  if (c.nanCount > 0) return `${c.nanCount} NaN`;
  if (c.nonFiniteMismatches > 0) return `${c.nonFiniteMismatches} non-finite where the oracle is finite`;
  return undefined;
}

// The row of a compared output; a non-finite problem fails it whatever its error.
function verdict(name: string, c: ReturnType<typeof compare>, bound: string, within: boolean): CheckRow {
  const problem = nonFinite(c);
  return { name, maxAbs: c.maxAbs, relRms: c.relRms, bound, pass: problem === undefined && within, problem };
}

/** Judges an output by its relative RMS error. */
export function byRelRms(
  name: string,
  actual: ArrayLike<number>,
  oracle: ArrayLike<number>,
  bound: number,
): CheckRow {
  const c = compare(actual, oracle);
  return verdict(name, c, `rel RMS <= ${bound.toExponential(1)}`, c.relRms <= bound);
}

/** Judges an output by its max abs error, with the bound's explanation. */
export function byMaxAbs(
  name: string,
  actual: ArrayLike<number>,
  oracle: ArrayLike<number>,
  bound: number,
  why: string,
): CheckRow {
  const c = compare(actual, oracle);
  return verdict(name, c, `max abs <= ${bound.toExponential(2)} (${why})`, c.maxAbs <= bound);
}

/**
 * Judges an output element by element under the paged decode steps' row rule (`rowToleranceBreach`):
 * `|error| <= (2^-16 + relative) |oracle| + 2^-16 s + absolute`, s the row's scale (its largest |oracle|,
 * or `magnitude` where given); a failure names the first element past its bound.
 *
 * @example
 * ```ts
 * import { byRowTolerance } from "./problem.ts";
 * const row = byRowTolerance("output", [1, 2.01], [1, 2], 2, { relative: 0, absolute: 0 });
 * console.log(row.pass, row.problem); // false element 1: ...
 * ```
 */
export function byRowTolerance(
  name: string,
  actual: ArrayLike<number>,
  oracle: ArrayLike<number>,
  rowLength: number,
  tolerance: RowTolerance,
  magnitude?: ArrayLike<number>,
): CheckRow {
  const c = compare(actual, oracle);
  const breach = rowToleranceBreach(actual, oracle, rowLength, tolerance, magnitude);
  const relative = (PAGED_DECODE_BASE + tolerance.relative).toExponential(1);
  const absolute = tolerance.absolute > 0 ? ` + ${tolerance.absolute.toExponential(1)}` : "";
  const bound = `|err| <= ${relative} |ref| + 2^-16 row scale${absolute}`;
  const row = verdict(name, c, bound, breach === undefined);
  if (breach && !row.problem) {
    const { index, actual: got, expected, bound: limit } = breach;
    row.problem = `element ${index}: ${got.toExponential(3)} vs ${expected.toExponential(3)}, ` +
      `bound ${limit.toExponential(2)}`;
  }
  return row;
}
