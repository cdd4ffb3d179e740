/**
 * The functional entry points: `attention` (forward; its result runs its own backward) and
 * `attentionBackward`, for dense (`"bshd"` or `"bhsd"`) and packed (`"thd"`) inputs, MHA and GQA,
 * causal, sliding windows and softcap.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions, type OptionSpec } from "../args.ts";
import { expectTensor } from "../checks.ts";
import { type Layout, requireLayout } from "../layout.ts";
import { type CuSeqlens, type Int32Seqlens, int32Seqlens } from "../seqlens.ts";
import type { Tensor } from "../tensor.ts";
import { type MaskOptions, resolveMask, resolveScore, type ScoreOptions } from "./options.ts";
import {
  type AttentionGradients,
  type AttentionOutput,
  type AttentionResult,
  type BackwardBuffers,
  type ForwardBuffers,
  forwardResult,
  runBackward,
} from "./run.ts";
import { denseSources, type KvSource, packedSources, type QuerySource } from "./sources.ts";

/** Options of {@link attention}. */
export interface AttentionOptions extends MaskOptions, ScoreOptions {
  /**
   * Layout of q, k, v and the output (required; none is assumed): `"bshd"` `[batch, seq, heads, dim]`,
   * `"bhsd"` `[batch, heads, seq, dim]` (read in place, no copy), or `"thd"` `[totalTokens, heads, dim]`
   * for packed sequences delimited by `cuSeqlensQ` / `cuSeqlensK`.
   */
  layout: Layout;
  /**
   * With layout `"thd"`: the query offsets `[N + 1]` starting at 0, as host numbers (`number[]`,
   * `Int32Array`, `BigInt64Array`) or an int32 / int64 tensor on q's device. Each sequence is aligned on
   * its own lengths.
   */
  cuSeqlensQ?: CuSeqlens;
  /** With layout `"thd"`: the key offsets, like `cuSeqlensQ`. */
  cuSeqlensK?: CuSeqlens;
  /** Make the LSE part of the result (`result.lse`); the result keeps it internally either way. */
  returnLse?: boolean;
  /**
   * Buffers to write instead of allocating (checked for shape, dtype and device; the caller keeps them:
   * disposing the result never disposes them).
   */
  out?: ForwardBuffers;
}

/** Options of {@link attentionBackward}: the forward's options plus the backward's own. */
export interface AttentionBackwardOptions extends Omit<AttentionOptions, "returnLse" | "out"> {
  /** A fixed reduction order on the GPU (slower); the CPU backend is always deterministic. */
  deterministic?: boolean;
  /** Gradient buffers to write instead of allocating (the caller keeps them). */
  out?: BackwardBuffers;
}

// The keys of the functional options; resolveMask, resolveScore, requireLayout and int32Seqlens
// check their values.
const FORWARD_OPTIONS: OptionSpec = {
  isCausal: "any",
  windowSizeLeft: "any",
  windowSizeRight: "any",
  scale: "any",
  softcap: "any",
  layout: "any",
  cuSeqlensQ: "any",
  cuSeqlensK: "any",
  returnLse: "boolean",
  out: "object",
};
const BACKWARD_OPTIONS: OptionSpec = {
  ...Object.fromEntries(Object.entries(FORWARD_OPTIONS).filter(([k]) => k !== "returnLse")),
  deterministic: "boolean",
};

const LAYOUT_NAMES: readonly Layout[] = ["bshd", "bhsd", "thd"];

type Sources = { query: QuerySource; kv: KvSource; keep: Int32Seqlens[] };

function given(value: unknown): boolean {
  return value !== undefined && value !== null;
}

// Builds the query and KV sources of a functional call, uploading host offsets if needed.
function sourcesOf(
  op: string,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: Pick<AttentionOptions, "layout" | "cuSeqlensQ" | "cuSeqlensK">,
): Sources {
  const layout = requireLayout(op, options.layout, LAYOUT_NAMES);
  expectTensor(op, "q", q);
  const hasQ = given(options.cuSeqlensQ), hasK = given(options.cuSeqlensK);
  if (layout !== "thd") {
    if (hasQ || hasK) {
      throw invalidArgument(
        op,
        `${hasQ ? "cuSeqlensQ" : "cuSeqlensK"}: given with layout "${layout}"; packed sequences take ` +
          `layout "thd" [totalTokens, heads, dim]`,
      );
    }
    return { ...denseSources(q, k, v, layout), keep: [] };
  }
  if (!hasQ || !hasK) {
    throw invalidArgument(
      op,
      `${
        hasQ ? "cuSeqlensK" : "cuSeqlensQ"
      }: layout "thd" (packed sequences) needs both cuSeqlensQ and cuSeqlensK`,
    );
  }
  const cuQ = int32Seqlens(op, "cuSeqlensQ", options.cuSeqlensQ, q.device);
  let cuK;
  try {
    cuK = int32Seqlens(op, "cuSeqlensK", options.cuSeqlensK, q.device);
  } catch (e) {
    cuQ[Symbol.dispose]();
    throw e;
  }
  return { ...packedSources(q, k, v, { q: cuQ, k: cuK }), keep: [cuQ, cuK] };
}

function release(keep: Disposable[]): void {
  for (const k of keep) k[Symbol.dispose]();
}

/**
 * Softmax attention: `softmax(mask(cap(scale * q k^T))) v` per head, with query head h reading KV
 * head `floor(h / (Hq / Hkv))` (MHA when Hq = Hkv). `layout` is required: `"bshd"` or `"bhsd"` for
 * dense inputs, `"thd"` for packed sequences with `cuSeqlensQ` / `cuSeqlensK` (each aligned on its own
 * lengths). float16 or bfloat16; head dim a multiple of 8 up to 256. Softmax and accumulation run in
 * fp32; the output has q's dtype. `isCausal` defaults to false. A row that admits no key gives output 0
 * (and LSE -inf). The result runs its own backward: `result.backward(dOutput)`, so it always computes the
 * LSE (a float32 per row and head); `GroupedQueryAttentionDenseFwdOp` returns the output alone, for
 * inference.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([2, 128, 8, 64], { dtype: "bfloat16", seed: 1 });
 * using k = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using v = Tensor.randn([2, 128, 2, 64], { dtype: "bfloat16", seed: 3 });
 * using dO = Tensor.randn([2, 128, 8, 64], { dtype: "bfloat16", seed: 4 });
 * using r = attention(q, k, v, { layout: "bshd", isCausal: true, returnLse: true });
 * console.log(r.output.shape, r.lse.shape); // [2, 128, 8, 64] [2, 8, 128]
 * using grads = r.backward(dO); // same inputs and options as the forward
 * ```
 */
export function attention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: AttentionOptions & { returnLse: true },
): AttentionOutput;
/**
 * Softmax attention (see the first signature); `result.lse` is undefined unless `returnLse`.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * // PyTorch's order: [batch, heads, seq, dim]
 * using q = Tensor.randn([1, 2, 16, 64], { dtype: "float16", seed: 1 });
 * using r = attention(q, q, q, { layout: "bhsd", isCausal: true, windowSizeLeft: 4 });
 * console.log(r.output.shape); // [1, 2, 16, 64]
 * // packed sequences of lengths 3 and 13
 * using p = Tensor.randn([16, 2, 64], { dtype: "float16", seed: 2 });
 * using packed = attention(p, p, p, { layout: "thd", cuSeqlensQ: [0, 3, 16], cuSeqlensK: [0, 3, 16] });
 * ```
 */
export function attention(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions): AttentionResult;
export function attention(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions): AttentionResult {
  const op = "attention";
  const o = checkOptions<AttentionOptions>(op, options, FORWARD_OPTIONS);
  const mask = resolveMask(op, o);
  const score = resolveScore(op, o);
  const sources = sourcesOf(op, q, k, v, o);
  try {
    return forwardResult(
      { op, query: sources.query, kv: sources.kv, mask, score, out: o.out, keep: sources.keep },
      o.returnLse ?? false,
      "attention(...).backward",
    );
  } catch (e) {
    release(sources.keep);
    throw e;
  }
}

/**
 * Backward of {@link attention}, the output gradient first: from dO, q, k, v, the forward's output
 * and LSE, returns dq, dk and dv (dk, dv summed over each KV group). It recomputes the scores from the
 * LSE; no Sq x Skv matrix is stored. Pass the forward's options: options that contradict the forward
 * that produced `lse` (mask, scale, softcap, layout, offsets) are refused. `result.backward(dO)` on the
 * forward's result does the same without repeating them.
 *
 * @example
 * ```ts
 * import { attention, attentionBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 64, 4, 64], { dtype: "float16", seed: 1 });
 * using kv = Tensor.randn([1, 64, 1, 64], { dtype: "float16", seed: 2 });
 * using dO = Tensor.randn([1, 64, 4, 64], { dtype: "float16", seed: 3 });
 * const options = { layout: "bshd", isCausal: true } as const;
 * using fwd = attention(q, kv, kv, { ...options, returnLse: true });
 * using grads = attentionBackward(dO, q, kv, kv, fwd.output, fwd.lse, options);
 * console.log(grads.dk.shape); // [1, 64, 1, 64]
 * ```
 */
export function attentionBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  output: Tensor,
  lse: Tensor,
  options: AttentionBackwardOptions,
): AttentionGradients {
  const op = "attentionBackward";
  const o = checkOptions<AttentionBackwardOptions>(op, options, BACKWARD_OPTIONS);
  const mask = resolveMask(op, o);
  const score = resolveScore(op, o);
  const sources = sourcesOf(op, q, k, v, o);
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
      deterministic: o.deterministic ?? false,
      out: o.out,
    });
  } finally {
    release(sources.keep);
  }
}
