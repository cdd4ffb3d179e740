/**
 * The one place that calls the attention C entries: validates a call, allocates (or checks) the
 * outputs, passes BSHD views, releases what it allocated when the call fails, and builds the forward
 * results that run their own backward.
 *
 * @module
 */
import { checkOptions } from "../args.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { AttentionFlags } from "../../ffi/symbols_attention.ts";
import {
  expectForwardTensorsLive,
  expectSameDevice,
  expectSameDType,
  expectShape,
  expectTensor,
} from "../checks.ts";
import type { Tensor } from "../tensor.ts";
import { expectSameForward, type ForwardRecord, recordForward } from "./forward_record.ts";
import type { ResolvedMask, ResolvedScore } from "./options.ts";
import {
  type AttentionGeometry,
  bshdDescriptor,
  describeCall,
  keyShape,
  type KvSource,
  lseShape,
  outputTensor,
  queryShape,
  type QuerySource,
} from "./sources.ts";

/**
 * Options of a forward result's {@link AttentionResult.backward}: the forward's own options (mask,
 * scale, softcap, layout, offsets) are reused, so only the backward's own remain.
 *
 * @example
 * ```ts
 * import type { ResultBackwardOptions } from "@attnkit/attnkit";
 * const options: ResultBackwardOptions = { deterministic: true };
 * ```
 */
export interface ResultBackwardOptions {
  /** A fixed reduction order on the GPU (slower); the CPU backend is always deterministic. */
  deterministic?: boolean;
  /** Gradient buffers to write instead of allocating (the caller keeps them). */
  out?: BackwardBuffers;
}

/**
 * What a forward returns: the output (dtype of q, shaped like q), the LSE when asked for, and
 * `backward(dOutput)`, which runs the backward with the forward's inputs and options (autograd-like).
 * The result holds references to q, k and v (not ownership): keep them alive until `backward` has run.
 * Disposing the result releases what the forward allocated (output, LSE, uploaded offsets); buffers
 * the caller passed in `out` are never disposed by it.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using dO = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 2 });
 * using result = attention(q, q, q, { layout: "bshd", isCausal: true });
 * using grads = result.backward(dO);
 * console.log(result.output.shape, grads.dq.shape); // [1, 8, 2, 64] [1, 8, 2, 64]
 * ```
 */
export interface AttentionResult {
  /** Attention output, shaped like q, dtype of q. */
  readonly output: Tensor;
  /**
   * Log-sum-exp of each row's scores (float32, natural log, `[B, Hq, Sq]`, or `[Hq, Tq]` when packed;
   * -inf for a row that admits no key), when the forward was asked for it (`returnLse`); the result
   * keeps it internally either way for `backward`.
   */
  readonly lse: Tensor | undefined;
  /**
   * Runs the backward of this forward for the output gradient `dOutput` (shaped like the output):
   * the same q, k, v, output, LSE and options. Refused once the result, or one of the forward's
   * inputs, has been disposed.
   */
  backward(dOutput: Tensor, options?: ResultBackwardOptions): AttentionGradients;
  /** Disposes what the forward allocated (never the caller's `out` buffers). */
  [Symbol.dispose](): void;
}

/**
 * A forward result whose LSE is part of the result (`returnLse: true`, and the training op classes).
 *
 * @example
 * ```ts
 * import { attention, type AttentionOutput, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using result: AttentionOutput = attention(q, q, q, { layout: "bshd", returnLse: true });
 * console.log(result.output.shape, result.lse.shape); // [1, 8, 2, 64] [1, 2, 8]
 * ```
 */
export interface AttentionOutput extends AttentionResult {
  /** Log-sum-exp of each row's scores, float32. */
  readonly lse: Tensor;
}

/**
 * Gradients of a backward call: dq shaped like q, dk and dv shaped like k (summed over each KV
 * group), dtype of q. Disposing the result disposes the gradients it allocated, never buffers the
 * caller passed in `out`.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using fwd = attention(q, q, q, { layout: "bshd", isCausal: true });
 * using grads = fwd.backward(fwd.output);
 * console.log(grads.dq.shape); // [1, 8, 2, 64]
 * ```
 */
export interface AttentionGradients {
  /** Gradient of q. */
  readonly dq: Tensor;
  /** Gradient of k, summed over the query heads of each KV head. */
  readonly dk: Tensor;
  /** Gradient of v, summed likewise. */
  readonly dv: Tensor;
  /** Disposes the gradients this call allocated. */
  [Symbol.dispose](): void;
}

/** Caller-provided forward outputs (e.g. poisoned buffers in tests, or reused memory); the caller keeps them. */
export interface ForwardBuffers {
  /** Output, shaped like q, dtype of q. */
  output?: Tensor;
  /** LSE, float32, `[B, Hq, Sq]` or `[Hq, Tq]`. */
  lse?: Tensor;
}

/** Caller-provided backward outputs; the caller keeps them. */
export interface BackwardBuffers {
  /** Shaped like q. */
  dq?: Tensor;
  /** Shaped like k. */
  dk?: Tensor;
  /** Shaped like k. */
  dv?: Tensor;
}

/** One forward call, fully described. */
export interface ForwardCall {
  /** Name for messages. */
  op: string;
  /** Queries. */
  query: QuerySource;
  /** Keys and values. */
  kv: KvSource;
  /** Which keys each row admits. */
  mask: ResolvedMask;
  /** How scores are formed. */
  score: ResolvedScore;
  /** Outputs to write instead of allocating. */
  out?: ForwardBuffers;
  /** What the call made for itself (uploaded offsets) and a result must release with it. */
  keep?: Disposable[];
}

/** One backward call: the forward's description plus its results and the output gradient. */
export interface BackwardCall extends Omit<ForwardCall, "out" | "keep"> {
  /** The forward's output. */
  output: Tensor;
  /** Gradient of the loss with respect to the output. */
  dOutput: Tensor;
  /** The forward's LSE. */
  lse: Tensor;
  /** A fixed reduction order on the GPU (slower; the CPU backend is always deterministic). */
  deterministic: boolean;
  /** Gradients to write instead of allocating. */
  out?: BackwardBuffers;
}

/** The C entries' flags of a mask (and the backward's deterministic order). */
export function flagsOf(mask: ResolvedMask, deterministic = false): number {
  return (mask.causal ? AttentionFlags.CAUSAL : 0) | (deterministic ? AttentionFlags.DETERMINISTIC : 0);
}

/** The softmax scale of a call: the op's, else 1 / sqrt(D). */
export function scaleOf(score: ResolvedScore, g: Pick<AttentionGeometry, "dim">): number {
  return score.scale ?? 1 / Math.sqrt(g.dim);
}

function recordOf(call: Omit<ForwardCall, "out">, g: AttentionGeometry): ForwardRecord {
  const side = (s: QuerySource | KvSource) =>
    s.kind === "packed" ? { tensor: s.cuSeqlens, host: s.offsets } : undefined;
  return {
    layout: g.layout,
    mask: call.mask,
    scale: scaleOf(call.score, g),
    softcap: call.score.softcap,
    cuQ: side(call.query),
    cuK: side(call.kv),
  };
}

function cuDescriptors(call: { query: QuerySource; kv: KvSource }): [Uint8Array | null, Uint8Array | null] {
  return [
    call.query.kind === "packed" ? call.query.cuSeqlens.descriptor() : null,
    call.kv.kind === "packed" ? call.kv.cuSeqlens.descriptor() : null,
  ];
}

function disposeOwned(items: ({ tensor: Tensor; owned: boolean } | undefined)[]): void {
  for (const item of items) if (item?.owned) item.tensor.dispose();
}

interface Written {
  output: { tensor: Tensor; owned: boolean };
  lse: { tensor: Tensor; owned: boolean } | undefined;
}

// Runs the forward and records what it ran with on the tensors it wrote.
function forwardInto(call: ForwardCall, wantLse: boolean): Written {
  const { op } = call;
  const out = checkOptions<ForwardBuffers>(op, call.out ?? undefined, { output: "any", lse: "any" }, "out");
  const g = describeCall(op, call.query, call.kv);
  const made: { tensor: Tensor; owned: boolean }[] = [];
  try {
    const output = outputTensor(op, "output", out.output, queryShape(g), g.dtype, g.device);
    made.push(output);
    const lse = wantLse || (out.lse !== undefined && out.lse !== null)
      ? outputTensor(op, "lse", out.lse, lseShape(g), "float32", g.device)
      : undefined;
    if (lse) made.push(lse);
    const [cuQ, cuKv] = cuDescriptors(call);
    unwrap(
      native().ak_attention_fwd(
        bshdDescriptor(call.query.q, g, op),
        bshdDescriptor(call.kv.k, g, op),
        bshdDescriptor(call.kv.v, g, op),
        cuQ,
        cuKv,
        scaleOf(call.score, g),
        call.score.softcap,
        flagsOf(call.mask),
        call.mask.windowLeft,
        call.mask.windowRight,
        bshdDescriptor(output.tensor, g, op),
        lse ? lse.tensor.descriptor(op) : null,
      ),
      op,
    );
    recordForward(recordOf(call, g), output.tensor, lse?.tensor);
    return { output, lse };
  } catch (e) {
    disposeOwned(made);
    throw e;
  }
}

/**
 * Runs the forward and returns its output (and the LSE when `wantLse` or a buffer for it is given),
 * for ops that return tensors: the caller owns them (or already did, for its own buffers).
 */
export function runForward(call: ForwardCall, wantLse: boolean): { output: Tensor; lse: Tensor | undefined } {
  const { output, lse } = forwardInto(call, wantLse);
  return { output: output.tensor, lse: lse?.tensor };
}

/**
 * Runs the forward and returns a result that can run its own backward (see {@link AttentionResult}).
 * The LSE is always computed (the backward needs it) and exposed when `exposeLse`. `backwardOp` names
 * the result's backward in messages. The result takes over `call.keep`.
 */
export function forwardResult(call: ForwardCall, exposeLse: true, backwardOp: string): AttentionOutput;
/** As above, with the LSE exposed only when asked. */
export function forwardResult(call: ForwardCall, exposeLse: boolean, backwardOp: string): AttentionResult;
export function forwardResult(call: ForwardCall, exposeLse: boolean, backwardOp: string): AttentionResult {
  const { output, lse } = forwardInto(call, true);
  const keep = call.keep ?? [];
  let disposed = false;
  const saved = { query: call.query, kv: call.kv, mask: call.mask, score: call.score };
  return {
    output: output.tensor,
    lse: exposeLse ? lse!.tensor : undefined,
    backward(dOutput: Tensor, options?: ResultBackwardOptions): AttentionGradients {
      const op = backwardOp;
      if (disposed) {
        throw invalidArgument(op, "the forward's result was disposed; call backward() before disposing it");
      }
      const o = checkOptions<ResultBackwardOptions>(op, options, { deterministic: "boolean", out: "object" });
      expectForwardTensorsLive(op, {
        q: saved.query.q,
        k: saved.kv.k,
        v: saved.kv.v,
        output: output.tensor,
        lse: lse!.tensor,
        cuSeqlensQ: saved.query.kind === "packed" ? saved.query.cuSeqlens : undefined,
        cuSeqlensK: saved.kv.kind === "packed" ? saved.kv.cuSeqlens : undefined,
      });
      return runBackward({
        op,
        ...saved,
        output: output.tensor,
        dOutput,
        lse: lse!.tensor,
        deterministic: o.deterministic ?? false,
        out: o.out,
      });
    },
    [Symbol.dispose]() {
      if (disposed) return;
      disposed = true;
      disposeOwned([output, lse]);
      for (const k of keep) k[Symbol.dispose]();
    },
  };
}

/** Runs the backward and returns dq, dk, dv, refusing options that contradict the forward's. */
export function runBackward(call: BackwardCall): AttentionGradients {
  const { op } = call;
  const out = checkOptions<BackwardBuffers>(
    op,
    call.out ?? undefined,
    { dq: "any", dk: "any", dv: "any" },
    "out",
  );
  const g = describeCall(op, call.query, call.kv);
  expectSameForward(op, recordOf(call, g), call.output, call.lse);
  const q = call.query.q;
  for (const [name, t] of [["dO", call.dOutput], ["o", call.output]] as const) {
    expectTensor(op, name, t);
    expectSameDType(op, name, t, q, "q");
    expectSameDevice(op, name, t, q, "q");
    expectShape(op, name, t, queryShape(g));
  }
  const lse = expectTensor(op, "lse", call.lse);
  if (lse.dtype !== "float32") throw invalidArgument(op, `lse: expected dtype float32, got ${lse.dtype}`);
  expectSameDevice(op, "lse", lse, q, "q");
  expectShape(op, "lse", lse, lseShape(g));
  if (typeof call.deterministic !== "boolean") {
    throw invalidArgument(op, `deterministic: expected a boolean, got ${String(call.deterministic)}`);
  }
  const made: { tensor: Tensor; owned: boolean }[] = [];
  try {
    const dq = outputTensor(op, "dq", out.dq, queryShape(g), g.dtype, g.device);
    made.push(dq);
    const dk = outputTensor(op, "dk", out.dk, keyShape(g), g.dtype, g.device);
    made.push(dk);
    const dv = outputTensor(op, "dv", out.dv, keyShape(g), g.dtype, g.device);
    made.push(dv);
    const [cuQ, cuKv] = cuDescriptors(call);
    unwrap(
      native().ak_attention_bwd(
        bshdDescriptor(q, g, op),
        bshdDescriptor(call.kv.k, g, op),
        bshdDescriptor(call.kv.v, g, op),
        bshdDescriptor(call.output, g, op),
        bshdDescriptor(call.dOutput, g, op),
        lse.descriptor(op),
        cuQ,
        cuKv,
        scaleOf(call.score, g),
        call.score.softcap,
        flagsOf(call.mask, call.deterministic),
        call.mask.windowLeft,
        call.mask.windowRight,
        bshdDescriptor(dq.tensor, g, op),
        bshdDescriptor(dk.tensor, g, op),
        bshdDescriptor(dv.tensor, g, op),
      ),
      op,
    );
    let disposed = false;
    return {
      dq: dq.tensor,
      dk: dk.tensor,
      dv: dv.tensor,
      [Symbol.dispose]() {
        if (disposed) return;
        disposed = true;
        disposeOwned(made);
      },
    };
  } catch (e) {
    disposeOwned(made);
    throw e;
  }
}
