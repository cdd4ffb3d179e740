// The attention test cases' machinery: make inputs on a device, run the kernel into NaN-poisoned
// buffers, and hold the result to the FlashAttention rule against the float64 oracle.
//
// Tolerance rule (both dtypes): the kernel's max abs error against the float64 oracle must be at most
// 2x (forward output) or 3x (dq, dk, dv) the max abs error of a same-precision reference computed the
// plain way (reference/attention.ts: scores and softmax in fp32, P and dS rounded to the dtype
// before their products, results rounded to the dtype), plus FlashAttention's rounding allowance (twice
// the largest rounding error of (x + 0.3) - 0.3 in the dtype over the oracle's values: about an ulp) and
// 1e-5 (attentionBound, roundingAllowance in reference/tolerance.ts). LSE: within 1e-3 relative
// (|error| <= 1e-3 * max(1, |LSE|)), and exactly -inf where the oracle's row admits no key. A NaN,
// or any non-finite value where the oracle is finite, fails.
import {
  attention,
  attentionBackward,
  type AttentionOptions,
  type BackwardBuffers,
  compare,
  type Device,
  type ForwardBuffers,
  type Tensor,
  Tensor as T,
} from "../mod.ts";
import { expectNoLeak, HAS_CUDA, poison } from "./helpers.ts";
import {
  attentionBackward as referenceBackward,
  attentionForward as referenceForward,
  type AttentionProblem,
  FLOAT64,
  samePrecision,
} from "../reference/attention.ts";
import { attentionBound, roundingAllowance } from "../reference/tolerance.ts";

/** Packed q / k / v of a case, each as its exact values and as the kernel's inputs rounded. */
export type ExactAndRounded = { exact: ArrayLike<number>; rounded: ArrayLike<number> }[];

/**
 * The reference problem of packed sequences (`qStart` / `kvStart` offsets) on the exact or the rounded
 * inputs, under a case's mask options: causal (bottom-right, right window 0), left window, soft cap.
 */
export function packedProblem(
  inputs: ExactAndRounded,
  which: "exact" | "rounded",
  shape: {
    qStart: readonly number[];
    kvStart: readonly number[];
    heads: number;
    headsKv: number;
    dim: number;
  },
  c: { causal?: boolean; windowLeft?: number; softcap?: number },
): AttentionProblem {
  return {
    q: inputs[0][which],
    k: inputs[1][which],
    v: inputs[2][which],
    ...shape,
    smScale: shape.dim ** -0.5,
    softcap: c.softcap ?? 0,
    causal: c.causal ?? false,
    windowLeft: c.windowLeft ?? -1,
    windowRight: c.causal ? 0 : -1,
  };
}

/** Registers a test of large shapes for CUDA only (reported as ignored without a GPU). */
export function cudaTest(name: string, fn: () => Promise<void>): void {
  Deno.test({ name: `${name} [cuda]${HAS_CUDA ? "" : " (no GPU: skipped)"}`, ignore: !HAS_CUDA, fn });
}

/** One test case: dense (batch, seqQ, seqKv) or varlen (lengthsQ, lengthsKv). */
export interface AttentionCase {
  dtype: "float16" | "bfloat16";
  heads: number;
  headsKv: number;
  dim: number;
  batch?: number;
  seqQ?: number;
  seqKv?: number;
  lengthsQ?: number[];
  lengthsKv?: number[];
  causal?: boolean;
  windowLeft?: number;
  windowRight?: number;
  softcap?: number;
  scale?: number;
  /** Dense layout (default "bshd"); varlen cases are "thd". */
  layout?: "bshd" | "bhsd";
  /** Standard deviation of q (larger makes the softmax peakier; default 1). */
  qStd?: number;
}

/** A short name for test titles. */
export function caseName(c: AttentionCase): string {
  const parts: string[] = [c.dtype];
  if (c.lengthsQ) parts.push(`varlen q[${c.lengthsQ}] kv[${c.lengthsKv}]`);
  else parts.push(`B${c.batch ?? 1} Sq${c.seqQ} Skv${c.seqKv ?? c.seqQ}`);
  parts.push(`H${c.heads}/${c.headsKv} D${c.dim}`);
  if (c.causal) parts.push("causal");
  if ((c.windowLeft ?? -1) >= 0 || (c.windowRight ?? -1) >= 0) {
    parts.push(`window(${c.windowLeft ?? -1},${c.windowRight ?? -1})`);
  }
  if (c.softcap) parts.push(`softcap ${c.softcap}`);
  if (c.scale) parts.push(`scale ${c.scale}`);
  if (c.layout === "bhsd") parts.push("bhsd");
  return parts.join(" ");
}

function offsets(lengths: number[]): number[] {
  const out = [0];
  for (const n of lengths) out.push(out[out.length - 1] + n);
  return out;
}

interface Geometry {
  varlen: boolean;
  batch: number;
  qStart: number[];
  kvStart: number[];
  qShape: number[];
  kvShape: number[];
}

function geometryOf(c: AttentionCase): Geometry {
  if (c.lengthsQ) {
    const qStart = offsets(c.lengthsQ), kvStart = offsets(c.lengthsKv!);
    return {
      varlen: true,
      batch: c.lengthsQ.length,
      qStart,
      kvStart,
      qShape: [qStart[qStart.length - 1], c.heads, c.dim],
      kvShape: [kvStart[kvStart.length - 1], c.headsKv, c.dim],
    };
  }
  const B = c.batch ?? 1, Sq = c.seqQ!, Skv = c.seqKv ?? Sq;
  const bhsd = c.layout === "bhsd";
  return {
    varlen: false,
    batch: B,
    qStart: Array.from({ length: B + 1 }, (_, b) => b * Sq),
    kvStart: Array.from({ length: B + 1 }, (_, b) => b * Skv),
    qShape: bhsd ? [B, c.heads, Sq, c.dim] : [B, Sq, c.heads, c.dim],
    kvShape: bhsd ? [B, c.headsKv, Skv, c.dim] : [B, Skv, c.headsKv, c.dim],
  };
}

// Host values of a q-like or k-like tensor in packed [T, H, D] order.
function packed(t: Tensor, c: AttentionCase): Float64Array {
  const values = Float64Array.from(t.toArray() as Float32Array);
  if (c.layout !== "bhsd" || c.lengthsQ) return values;
  const [B, H, S, D] = t.shape;
  const out = new Float64Array(values.length);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      for (let s = 0; s < S; s++) {
        const src = ((b * H + h) * S + s) * D, dst = ((b * S + s) * H + h) * D;
        for (let d = 0; d < D; d++) out[dst + d] = values[src + d];
      }
    }
  }
  return out;
}

// The kernel's LSE in the oracle's [H, Tq] order.
function packedLse(lse: Tensor, g: Geometry): Float64Array {
  const values = Float64Array.from(lse.toArray() as Float32Array);
  if (g.varlen) return values;
  const [B, H, S] = lse.shape;
  const out = new Float64Array(values.length);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      for (let s = 0; s < S; s++) out[h * B * S + b * S + s] = values[(b * H + h) * S + s];
    }
  }
  return out;
}

/** Inputs of a case on a device, their host copies, and the oracle's problem. */
export interface CaseInputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  problem: AttentionProblem;
  geometry: Geometry;
  options: Omit<AttentionOptions, "out" | "returnLse">;
}

/** Makes fresh random inputs for a case. */
export function makeInputs(device: Device, c: AttentionCase, seed: number): CaseInputs {
  const g = geometryOf(c);
  const q = T.randn(g.qShape, { dtype: c.dtype, device, seed, std: c.qStd ?? 1 });
  const k = T.randn(g.kvShape, { dtype: c.dtype, device, seed: seed + 1 });
  const v = T.randn(g.kvShape, { dtype: c.dtype, device, seed: seed + 2 });
  const options: Omit<AttentionOptions, "out" | "returnLse"> = {
    isCausal: c.causal ?? false,
    windowSizeLeft: c.windowLeft,
    windowSizeRight: c.windowRight,
    softcap: c.softcap,
    scale: c.scale,
    layout: g.varlen ? "thd" : c.layout ?? "bshd",
    cuSeqlensQ: g.varlen ? g.qStart : undefined,
    cuSeqlensK: g.varlen ? g.kvStart : undefined,
  };
  const problem: AttentionProblem = {
    q: packed(q, c),
    k: packed(k, c),
    v: packed(v, c),
    qStart: g.qStart,
    kvStart: g.kvStart,
    heads: c.heads,
    headsKv: c.headsKv,
    dim: c.dim,
    smScale: c.scale ?? 1 / Math.sqrt(c.dim),
    softcap: c.softcap ?? 0,
    causal: c.causal ?? false,
    windowLeft: c.windowLeft ?? -1,
    windowRight: c.windowRight ?? -1,
  };
  return {
    q,
    k,
    v,
    problem,
    geometry: g,
    options,
    [Symbol.dispose]() {
      q.dispose();
      k.dispose();
      v.dispose();
    },
  };
}

/** Throws unless `actual` meets the FlashAttention rule (see the top of this file). */
export function expectFlashRule(
  name: string,
  actual: ArrayLike<number>,
  oracle: ArrayLike<number>,
  reference: ArrayLike<number>,
  direction: "forward" | "backward",
  dtype: "float16" | "bfloat16",
): { error: number; referenceError: number } {
  const got = compare(actual, oracle);
  const ref = compare(reference, oracle);
  if (got.nanCount > 0 || got.nonFiniteMismatches > 0) {
    const i = got.firstNonFiniteMismatch;
    throw new Error(
      `${name}: ${got.nanCount} NaN and ${got.nonFiniteMismatches} non-finite mismatches ` +
        `(first at flat index ${i}: got ${actual[i]}, oracle ${oracle[i]})`,
    );
  }
  const allowance = roundingAllowance(oracle, dtype);
  const bound = attentionBound(ref.maxAbs, direction, allowance);
  if (!(got.maxAbs <= bound)) {
    throw new Error(
      `${name}: max error ${got.maxAbs.toExponential(3)} exceeds ${direction === "forward" ? 2 : 3} x the ` +
        `plain reference's ${ref.maxAbs.toExponential(3)} + the rounding allowance ` +
        `${
          allowance.toExponential(3)
        } + 1e-5 (worst at flat index ${got.worstIndex}: got ${got.worstActual}, ` +
        `oracle ${got.worstExpected})`,
    );
  }
  return { error: got.maxAbs, referenceError: ref.maxAbs };
}

/** Throws unless the LSE is within 1e-3 relative of the oracle's, with -inf exactly where it has -inf. */
export function expectLse(actual: ArrayLike<number>, oracle: ArrayLike<number>): void {
  for (let i = 0; i < oracle.length; i++) {
    const a = actual[i], e = oracle[i];
    const ok = e === -Infinity
      ? a === -Infinity
      : Number.isFinite(a) && Math.abs(a - e) <= 1e-3 * Math.max(1, Math.abs(e));
    if (!ok) throw new Error(`lse: element ${i} (head-major [H, Tq] order) is ${a}, oracle ${e}`);
  }
}

/** A forward implementation under test: writes output (and lse) into the given poisoned buffers. */
export type ForwardRunner = (inputs: CaseInputs, out: Required<ForwardBuffers>) => void;

/** The default runner: the functional `attention` with the case's options. */
export const functionalForward: ForwardRunner = (inputs, out) => {
  attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLse: true, out })[Symbol.dispose]();
};

function lseShapeOf(g: Geometry, c: AttentionCase): number[] {
  return g.varlen ? [c.heads, g.qShape[0]] : [g.batch, c.heads, c.seqQ!];
}

/** What a backward implementation under test receives besides the inputs. */
export interface BackwardArgs {
  output: Tensor;
  lse: Tensor;
  dOut: Tensor;
  deterministic: boolean;
}

/** A backward implementation under test: writes dq, dk, dv into the given poisoned buffers. */
export type BackwardRunner = (inputs: CaseInputs, args: BackwardArgs, out: Required<BackwardBuffers>) => void;

/** The default runner: the functional `attentionBackward` with the case's options. */
export const functionalBackward: BackwardRunner = (inputs, args, out) => {
  attentionBackward(args.dOut, inputs.q, inputs.k, inputs.v, args.output, args.lse, {
    ...inputs.options,
    deterministic: args.deterministic,
    out,
  })[Symbol.dispose]();
};

/** The backward a forward result runs itself: `attention(...).backward(dO)`, no options repeated. */
export const resultBackward: BackwardRunner = (inputs, args, out) => {
  using fwd = attention(inputs.q, inputs.k, inputs.v, inputs.options);
  fwd.backward(args.dOut, { deterministic: args.deterministic, out })[Symbol.dispose]();
};

/**
 * Runs the forward of a case into poisoned buffers and checks output and LSE against the oracle.
 * `lse: false` for runners that do not write an LSE.
 */
export async function checkForward(
  device: Device,
  c: AttentionCase,
  seed: number,
  run: ForwardRunner = functionalForward,
  lse = true,
): Promise<void> {
  await expectNoLeak(device, () => {
    using inputs = makeInputs(device, c, seed);
    using output = poison(T.empty(inputs.q.shape, { dtype: c.dtype, device }));
    using lseOut = poison(T.empty(lseShapeOf(inputs.geometry, c), { dtype: "float32", device }));
    run(inputs, { output, lse: lseOut });
    const oracle = referenceForward(inputs.problem, FLOAT64);
    const plain = referenceForward(inputs.problem, samePrecision(c.dtype));
    expectFlashRule("output", packed(output, c), oracle.output, plain.output, "forward", c.dtype);
    if (lse) expectLse(packedLse(lseOut, inputs.geometry), oracle.lse);
  });
}

/** Runs forward then backward of a case (into poisoned buffers) and checks dq, dk, dv against the oracle. */
export async function checkBackward(
  device: Device,
  c: AttentionCase,
  seed: number,
  deterministic = false,
  run: BackwardRunner = functionalBackward,
): Promise<void> {
  await expectNoLeak(device, () => {
    using inputs = makeInputs(device, c, seed);
    using dOut = T.randn(inputs.q.shape, { dtype: c.dtype, device, seed: seed + 3 });
    using fwd = attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLse: true });
    using dq = poison(T.empty(inputs.q.shape, { dtype: c.dtype, device }));
    using dk = poison(T.empty(inputs.k.shape, { dtype: c.dtype, device }));
    using dv = poison(T.empty(inputs.k.shape, { dtype: c.dtype, device }));
    run(inputs, { output: fwd.output, lse: fwd.lse, dOut, deterministic }, { dq, dk, dv });
    const dOutHost = packed(dOut, c);
    const exact = referenceForward(inputs.problem, FLOAT64);
    const oracle = referenceBackward(inputs.problem, dOutHost, exact.output, FLOAT64);
    const precision = samePrecision(c.dtype);
    const plainForward = referenceForward(inputs.problem, precision);
    const plain = referenceBackward(inputs.problem, dOutHost, plainForward.output, precision);
    expectFlashRule("dq", packed(dq, c), oracle.dq, plain.dq, "backward", c.dtype);
    expectFlashRule("dk", packed(dk, c), oracle.dk, plain.dk, "backward", c.dtype);
    expectFlashRule("dv", packed(dv, c), oracle.dv, plain.dv, "backward", c.dtype);
  });
}
