/**
 * The functional entry points: `attention` (forward) and `attentionBackward`, for dense (BSHD or
 * BHSD) and packed varlen inputs, MHA and GQA, causal, sliding windows and softcap.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectTensor } from "../checks.ts";
import type { Tensor } from "../tensor.ts";
import {
  type AttentionLayout,
  type MaskOptions,
  resolveLayout,
  resolveMask,
  resolveScore,
  type ScoreOptions,
} from "./options.ts";
import {
  type AttentionGradients,
  type AttentionOutput,
  type BackwardBuffers,
  type ForwardBuffers,
  forwardWithLse,
  runBackward,
  runForward,
} from "./run.ts";
import { cuSeqlensTensor, type KvSource, type QuerySource } from "./sources.ts";

/** Options of {@link attention}. */
export interface AttentionOptions extends MaskOptions, ScoreOptions {
  /** Dense layout of q, k, v and the output: `"bshd"` (default) or `"bhsd"`. Ignored for varlen. */
  layout?: AttentionLayout;
  /**
   * Varlen: cumulative query lengths, int32 `[N + 1]` starting at 0 (a Tensor on q's device, or host
   * numbers). Given together with `cuSeqlensKv`; q is then `[Tq, Hq, D]`, k and v `[Tkv, Hkv, D]`.
   */
  cuSeqlensQ?: Tensor | ArrayLike<number>;
  /** Varlen: cumulative key lengths, like `cuSeqlensQ`. */
  cuSeqlensKv?: Tensor | ArrayLike<number>;
  /** Also return the LSE (for a later backward): the result is then `{ output, lse }`. */
  returnLse?: boolean;
  /**
   * Buffers to write instead of allocating (checked for shape, dtype and device). An `lse` buffer is
   * written even without `returnLse`.
   */
  out?: ForwardBuffers;
}

/** Options of {@link attentionBackward}: the forward's options plus the backward's own. */
export interface AttentionBackwardOptions extends Omit<AttentionOptions, "returnLse" | "out"> {
  /** A fixed reduction order on the GPU (slower); the CPU backend is always deterministic. */
  deterministic?: boolean;
  /** Gradient buffers to write instead of allocating. */
  out?: BackwardBuffers;
}

type Sources = { query: QuerySource; kv: KvSource; release: () => void };

// The keys of the functional options; resolveMask, resolveScore, resolveLayout and cuSeqlensTensor
// check their values.
const FORWARD_OPTIONS: OptionSpec = {
  isCausal: "any",
  windowSizeLeft: "any",
  windowSizeRight: "any",
  smScale: "any",
  softcap: "any",
  layout: "any",
  cuSeqlensQ: "any",
  cuSeqlensKv: "any",
  returnLse: "boolean",
  out: "object",
};
const BACKWARD_OPTIONS: OptionSpec = {
  ...Object.fromEntries(Object.entries(FORWARD_OPTIONS).filter(([k]) => k !== "returnLse")),
  deterministic: "boolean",
};

// Builds the query and KV sources of a functional call, uploading host cu_seqlens if needed.
function sourcesOf(
  op: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: Pick<AttentionOptions, "layout" | "cuSeqlensQ" | "cuSeqlensKv">,
): Sources {
  expectTensor(op, "q", q);
  const layout = resolveLayout(op, options.layout);
  const hasQ = options.cuSeqlensQ !== undefined && options.cuSeqlensQ !== null;
  const hasKv = options.cuSeqlensKv !== undefined && options.cuSeqlensKv !== null;
  if (hasQ !== hasKv) {
    throw invalidArgument(
      op,
      hasQ
        ? "cuSeqlensKv: expected it because cuSeqlensQ is given (varlen needs both)"
        : "cuSeqlensQ: expected it because cuSeqlensKv is given (varlen needs both)",
    );
  }
  if (!hasQ) {
    return { query: { kind: "dense", q, layout }, kv: { kind: "dense", k, v, layout }, release: () => {} };
  }
  const cuQ = cuSeqlensTensor(op, "cuSeqlensQ", options.cuSeqlensQ!, q.device);
  let cuKv;
  try {
    cuKv = cuSeqlensTensor(op, "cuSeqlensKv", options.cuSeqlensKv!, q.device);
  } catch (e) {
    if (cuQ.owned) cuQ.tensor.dispose();
    throw e;
  }
  return {
    query: { kind: "packed", q, cuSeqlens: cuQ.tensor },
    kv: { kind: "packed", k, v, cuSeqlens: cuKv.tensor },
    release: () => {
      if (cuQ.owned) cuQ.tensor.dispose();
      if (cuKv.owned) cuKv.tensor.dispose();
    },
  };
}

/**
 * Softmax attention: `softmax(mask(cap(smScale * q k^T))) v` per head, with query head h reading
 * KV head `floor(h / (Hq / Hkv))` (MHA when Hq = Hkv). Dense inputs are BSHD (`[B, S, H, D]`) or
 * BHSD; with `cuSeqlensQ`/`cuSeqlensKv` they are packed `[T, H, D]` sequences, each aligned on its
 * own lengths. float16 or bfloat16; head dim a multiple of 8 up to 256. Softmax and accumulation run
 * in fp32; the output has q's dtype. `isCausal` defaults to false here (the op classes follow the
 * seed: true). A row that admits no key gives output 0 (and LSE -inf).
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 128, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 3 });
 * using o = attention(q, k, v, { isCausal: true, windowSizeLeft: 32 });
 * using r = attention(q, k, v, { isCausal: true, returnLse: true }); // r.output, r.lse
 * ```
 */
export function attention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: AttentionOptions & { returnLse: true },
): AttentionOutput;
/**
 * Softmax attention returning the output only (see the first signature).
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 16, 2, 64], { dtype: "float16", seed: 1 });
 * using o = attention(q, q, q, { isCausal: true });
 * ```
 */
export function attention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options?: AttentionOptions & { returnLse?: false },
): Tensor;
/**
 * Softmax attention with `returnLse` known only at run time: the output, or `{ output, lse }`.
 *
 * @example
 * ```ts
 * import { attention, type AttentionOptions, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 16, 2, 64], { dtype: "float16", seed: 1 });
 * const options: AttentionOptions = { returnLse: false };
 * const result = attention(q, q, q, options);
 * if ("lse" in result) result[Symbol.dispose]();
 * else result.dispose();
 * ```
 */
export function attention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options?: AttentionOptions,
): Tensor | AttentionOutput;
export function attention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: AttentionOptions = {},
): Tensor | AttentionOutput {
  const op = "attention";
  options = checkOptions<AttentionOptions>(op, options, FORWARD_OPTIONS);
  const mask = resolveMask(op, options, false);
  const score = resolveScore(op, options);
  const sources = sourcesOf(op, q, k, v, options);
  try {
    const call = { op, query: sources.query, kv: sources.kv, mask, score, out: options.out };
    if (options.returnLse) return forwardWithLse(call);
    // The LSE is only computed here when the caller passed a buffer for it (theirs to keep).
    return runForward(call, false).output;
  } finally {
    sources.release();
  }
}

/**
 * Backward of {@link attention}: from q, k, v, the forward's output and LSE, and the output's
 * gradient dO, returns dq, dk and dv (dk, dv summed over each KV group). It recomputes the scores
 * from the LSE; no Sq x Skv matrix is stored. Pass the forward's own mask and score options.
 *
 * @example
 * ```ts
 * import { attention, attentionBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 4, 64], { dtype: "float16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 1, 64], { dtype: "float16", seed: 2 });
 * using dO = Tensor.randn([1, 64, 4, 64], { dtype: "float16", seed: 3 });
 * using fwd = attention(q, kv, kv, { isCausal: true, returnLse: true });
 * using grads = attentionBackward(q, kv, kv, fwd.output, dO, fwd.lse, { isCausal: true });
 * console.log(grads.dk.shape); // [1, 64, 1, 64]
 * ```
 */
export function attentionBackward(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  output: Tensor,
  dOutput: Tensor,
  lse: Tensor,
  options: AttentionBackwardOptions = {},
): AttentionGradients {
  const op = "attentionBackward";
  options = checkOptions<AttentionBackwardOptions>(op, options, BACKWARD_OPTIONS);
  const mask = resolveMask(op, options, false);
  const score = resolveScore(op, options);
  const sources = sourcesOf(op, q, k, v, options);
  try {
    return runBackward({
      op,
      query: sources.query,
      kv: sources.kv,
      mask,
      score,
      output,
      dOutput,
      lse,
      deterministic: options.deterministic ?? false,
      out: options.out,
    });
  } finally {
    sources.release();
  }
}
