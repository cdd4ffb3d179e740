/**
 * The command line's softmax-attention case: `attention` (MHA / GQA, optionally causal) on standard
 * normal inputs in the `"bshd"` layout, held to FlashAttention's rule against the float64 oracle: the
 * max abs error at most 2x (output) or 3x (dq, dk, dv) that of a same-precision reference, plus its
 * rounding allowance (`roundingAllowance`: about an ulp of the dtype around the values) and 1e-5; the
 * LSE within 1e-3 relative.
 *
 * @module
 */
import { attention, attentionBackward, compare, type DType, Tensor } from "../mod.ts";
import {
  attentionBackward as referenceBackward,
  attentionForward as referenceForward,
  type AttentionProblem,
  FLOAT64,
  samePrecision,
} from "../reference/attention.ts";
import { ATTENTION_TOLERANCE, attentionBound, roundingAllowance } from "../reference/tolerance.ts";
import { attentionForwardFlops, modeFactor } from "./flops.ts";
import {
  byMaxAbs,
  type CaseSettings,
  type CheckRow,
  hostValues,
  type Mode,
  type OpCase,
  poisoned,
} from "./problem.ts";
import type { Shape } from "./shape.ts";

// Query-key-dim multiply-adds per second of one oracle pass on one core (measured roughly; the
// estimate only decides whether to warn). A check runs two passes: the oracle and the same-precision
// reference.
const ORACLE_FORWARD_RATE = 4e8;
const ORACLE_BACKWARD_RATE = 2.5e8;

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function attentionOracleSeconds(
  shape: Shape,
  causal: boolean,
  batches: number,
  backward: boolean,
): number {
  const work = batches * shape.heads * shape.seq * shape.seqKv * shape.dim * (causal ? 0.5 : 1);
  return 2 * work / ORACLE_FORWARD_RATE + (backward ? 2 * work / ORACLE_BACKWARD_RATE : 0);
}

// The LSE rule: |error| <= lseRelative * max(1, |LSE|), and -inf exactly where the oracle has it.
function lseRow(actual: Float64Array, oracle: Float64Array): CheckRow {
  const c = compare(actual, oracle);
  let worst = 0, problem: string | undefined;
  for (let i = 0; i < oracle.length; i++) {
    const a = actual[i], e = oracle[i];
    if (!Number.isFinite(e)) {
      if (a !== e) problem ??= `${e} expected at ${i}, got ${a}`;
      continue;
    }
    if (!Number.isFinite(a)) {
      problem ??= `${a} at ${i} where the oracle is ${e}`;
      continue;
    }
    worst = Math.max(worst, Math.abs(a - e) / Math.max(1, Math.abs(e)));
  }
  const bound = ATTENTION_TOLERANCE.lseRelative;
  return {
    name: "lse",
    maxAbs: c.maxAbs,
    relRms: c.relRms,
    bound: `|error| / max(1, |lse|) <= ${bound.toExponential(0)} (worst ${worst.toExponential(2)})`,
    pass: problem === undefined && worst <= bound,
    problem,
  };
}

/** The random inputs of an attention problem (standard normal) and an output gradient. */
export interface AttentionInputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  dO: Tensor;
  /** Everything made; disposing the inputs disposes these, last first (a caller may add its own). */
  owned: Disposable[];
}

/** Random inputs of an attention problem, bshd. */
export function attentionInputs(settings: CaseSettings): AttentionInputs {
  const { shape, dtype, device, seed } = settings;
  const B = shape.batch, S = shape.seq, SK = shape.seqKv, H = shape.heads, HKV = shape.headsKv, D = shape.dim;
  const owned: Disposable[] = [];
  const own = <T extends Disposable>(t: T) => (owned.push(t), t);
  try {
    return {
      q: own(Tensor.randn([B, S, H, D], { dtype, device, seed })),
      k: own(Tensor.randn([B, SK, HKV, D], { dtype, device, seed: seed + 1 })),
      v: own(Tensor.randn([B, SK, HKV, D], { dtype, device, seed: seed + 2 })),
      dO: own(Tensor.randn([B, S, H, D], { dtype, device, seed: seed + 5 })),
      owned,
      [Symbol.dispose]: () => [...owned].reverse().forEach((t) => t[Symbol.dispose]()),
    };
  } catch (e) {
    for (const t of owned) t[Symbol.dispose]();
    throw e;
  }
}

/** Key and value rows the oracle reads instead of a dense cache: sequence b's at kvStart[b]. */
export interface GatheredRows {
  k: Float64Array;
  v: Float64Array;
  kvStart: number[];
}

/**
 * The oracle's problem over the first `batches` batch rows: q `[B, S, H, D]`, k and v `[B, SKV, HKV, D]`
 * of `shape` (or tensors holding the same values in that order, e.g. decode's q `[B, H, D]` with S 1),
 * or, given `rows`, those key and value rows (a paged or ragged cache, gathered); scale D^-0.5;
 * `progress` hears of the (sequence, head) pairs of `passes` passes over it in all, a pass ending at
 * each `nextPass()`.
 */
export function attentionProblem(
  x: { q: Tensor; k: Tensor; v: Tensor },
  shape: Shape,
  causal: boolean,
  batches: number,
  passes: number,
  progress: (done: number, total: number) => void,
  rows?: GatheredRows,
): { problem: AttentionProblem; nextPass: () => void } {
  const { seq: S, seqKv: SK, heads: H, headsKv: HKV, dim: D } = shape;
  const starts = (len: number) => Array.from({ length: batches + 1 }, (_, b) => b * len);
  let pass = 0;
  progress(0, passes * batches * H);
  const problem: AttentionProblem = {
    q: hostValues(x.q, batches * S * H * D),
    k: rows?.k ?? hostValues(x.k, batches * SK * HKV * D),
    v: rows?.v ?? hostValues(x.v, batches * SK * HKV * D),
    qStart: starts(S),
    kvStart: rows?.kvStart ?? starts(SK),
    heads: H,
    headsKv: HKV,
    dim: D,
    smScale: D ** -0.5,
    softcap: 0,
    causal,
    windowLeft: -1,
    windowRight: -1,
    onProgress: (done, total) => progress(pass * total + done, passes * total),
  };
  return { problem, nextPass: () => void pass++ };
}

/**
 * The verdict on an output or gradient under FlashAttention's rule: its max abs error against the
 * float64 oracle at most 2x (forward) or 3x (backward) the same-precision reference's, plus the rounding
 * allowance of the oracle's values in the dtype and 1e-5.
 */
export function flashRuleRow(
  name: string,
  actual: ArrayLike<number>,
  oracle: Float64Array,
  plain: Float64Array,
  direction: "forward" | "backward",
  dtype: DType,
): CheckRow {
  const factor = direction === "forward"
    ? ATTENTION_TOLERANCE.forwardFactor
    : ATTENTION_TOLERANCE.backwardFactor;
  const allowance = roundingAllowance(oracle, dtype as "bfloat16");
  const why = `${factor}x the ${samePrecision(dtype as "bfloat16").name} reference's error + ` +
    `${allowance.toExponential(2)} rounding + ${ATTENTION_TOLERANCE.slack}`;
  const bound = attentionBound(compare(plain, oracle).maxAbs, direction, allowance);
  return byMaxAbs(name, actual, oracle, bound, why);
}

/** A random softmax-attention problem. */
export function attentionCase(settings: CaseSettings, causal: boolean): OpCase {
  const { shape, dtype, device } = settings;
  const B = shape.batch, S = shape.seq, SK = shape.seqKv, H = shape.heads, HKV = shape.headsKv, D = shape.dim;
  const inputs = attentionInputs(settings);
  const { q, k, v, dO, owned } = inputs;
  const own = <T extends Disposable>(t: T) => (owned.push(t), t);
  const options = { layout: "bshd" as const, isCausal: causal };
  const same = samePrecision(dtype as "bfloat16");

  return {
    description: `q [${B}, ${S}, ${H}, ${D}] ${dtype}; k, v [${B}, ${SK}, ${HKV}, ${D}] ${dtype}; ` +
      `scale D^-0.5${causal ? "; causal" : ""}`,
    modes: ["fwd", "bwd", "fwdbwd"],

    check(batches, backward, progress): CheckRow[] {
      using output = poisoned([B, S, H, D], dtype, device);
      using lse = poisoned([B, H, S], "float32", device);
      using r = attention(q, k, v, { ...options, returnLse: true, out: { output, lse } });
      using grads = backward ? r.backward(dO) : undefined;
      const qCount = batches * S * H * D, kvCount = batches * SK * HKV * D;
      const { problem, nextPass } = attentionProblem(
        inputs,
        shape,
        causal,
        batches,
        backward ? 4 : 2,
        progress,
      );
      const oracle = referenceForward(problem, FLOAT64);
      nextPass();
      const plain = referenceForward(problem, same);
      nextPass();
      // The oracle's LSE is [H, B * S]; the op's [B, H, S].
      const lseOracle = new Float64Array(batches * H * S);
      for (let b = 0; b < batches; b++) {
        for (let h = 0; h < H; h++) {
          for (let i = 0; i < S; i++) {
            lseOracle[(b * H + h) * S + i] = oracle.lse[h * batches * S + b * S + i];
          }
        }
      }
      const rows = [
        flashRuleRow("output", hostValues(r.output, qCount), oracle.output, plain.output, "forward", dtype),
        lseRow(hostValues(r.lse!, batches * H * S), lseOracle),
      ];
      if (grads) {
        const dOut = hostValues(dO, qCount);
        const want = referenceBackward(problem, dOut, oracle.output, FLOAT64);
        nextPass();
        const plainGrads = referenceBackward(problem, dOut, plain.output, same);
        for (const [name, count] of [["dq", qCount], ["dk", kvCount], ["dv", kvCount]] as const) {
          rows.push(
            flashRuleRow(
              name,
              hostValues(grads[name], count),
              want[name],
              plainGrads[name],
              "backward",
              dtype,
            ),
          );
        }
      }
      return rows;
    },

    call(mode: Mode): () => void {
      if (mode === "fwd") {
        const output = own(Tensor.empty([B, S, H, D], { dtype, device }));
        return () => {
          using _r = attention(q, k, v, { ...options, out: { output } });
        };
      }
      if (mode === "bwd") {
        const fwd = own(attention(q, k, v, { ...options, returnLse: true }));
        return () => {
          using _grads = attentionBackward(dO, q, k, v, fwd.output, fwd.lse!, options);
        };
      }
      return () => {
        using r = attention(q, k, v, options);
        using _grads = r.backward(dO);
      };
    },

    flops: (mode: Mode) => attentionForwardFlops(B, H, S, SK, D, causal) * modeFactor("attention", mode),

    [Symbol.dispose]: inputs[Symbol.dispose],
  };
}
