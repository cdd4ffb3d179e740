/**
 * The one place that calls the attention C entries: validates a call, allocates (or checks) the
 * outputs, passes BSHD views, and releases what it allocated when the call fails.
 *
 * @module
 */
import { checkOptions } from "../args.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { AttentionFlags } from "../../ffi/symbols_attention.ts";
import { expectSameDevice, expectSameDType, expectShape, expectTensor } from "../checks.ts";
import type { Tensor } from "../tensor.ts";
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
 * What a training forward returns: the output (dtype of q, shaped like q) and the LSE (float32,
 * natural log, `[B, Hq, Sq]` or `[Hq, Tq]` for varlen; -inf for a row that admits no key).
 * Disposing the result disposes both.
 *
 * @example
 * ```ts
 * import { attention, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using result = attention(q, q, q, { returnLse: true });
 * console.log(result.output.shape, result.lse.shape); // [1, 8, 2, 64] [1, 2, 8]
 * ```
 */
export interface AttentionOutput {
  /** Attention output, shaped like q, dtype of q. */
  readonly output: Tensor;
  /** Log-sum-exp of each row's scores, float32. */
  readonly lse: Tensor;
  /** Disposes output and lse. */
  [Symbol.dispose](): void;
}

/**
 * Gradients of a backward call: dq shaped like q, dk and dv shaped like k (summed over each KV
 * group), dtype of q. Disposing the result disposes all three.
 *
 * @example
 * ```ts
 * import { attention, attentionBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.randn([1, 8, 2, 64], { dtype: "bfloat16", seed: 1 });
 * using fwd = attention(q, q, q, { isCausal: true, returnLse: true });
 * using grads = attentionBackward(q, q, q, fwd.output, fwd.output, fwd.lse, { isCausal: true });
 * console.log(grads.dq.shape);
 * ```
 */
export interface AttentionGradients {
  /** Gradient of q. */
  readonly dq: Tensor;
  /** Gradient of k, summed over the query heads of each KV head. */
  readonly dk: Tensor;
  /** Gradient of v, summed likewise. */
  readonly dv: Tensor;
  /** Disposes dq, dk and dv. */
  [Symbol.dispose](): void;
}

/** Caller-provided forward outputs (e.g. poisoned buffers in tests, or reused memory). */
export interface ForwardBuffers {
  /** Output, shaped like q, dtype of q. */
  output?: Tensor;
  /** LSE, float32, `[B, Hq, Sq]` or `[Hq, Tq]`. */
  lse?: Tensor;
}

/** Caller-provided backward outputs. */
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
}

/** One backward call: the forward's description plus its results and the output gradient. */
export interface BackwardCall extends Omit<ForwardCall, "out"> {
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

function flagsOf(mask: ResolvedMask, deterministic = false): number {
  return (mask.causal ? AttentionFlags.CAUSAL : 0) | (deterministic ? AttentionFlags.DETERMINISTIC : 0);
}

function scaleOf(score: ResolvedScore, g: AttentionGeometry): number {
  return score.smScale ?? 1 / Math.sqrt(g.dim);
}

function cuDescriptors(call: { query: QuerySource; kv: KvSource }): [Uint8Array | null, Uint8Array | null] {
  return [
    call.query.kind === "packed" ? call.query.cuSeqlens.descriptor() : null,
    call.kv.kind === "packed" ? call.kv.cuSeqlens.descriptor() : null,
  ];
}

function disposeOwned(items: { tensor: Tensor; owned: boolean }[]): void {
  for (const item of items) if (item.owned) item.tensor.dispose();
}

/** Runs the forward; computes the LSE only when `wantLse` (or a buffer for it is given). */
export function runForward(call: ForwardCall, wantLse: boolean): { output: Tensor; lse: Tensor | undefined } {
  const { op } = call;
  call = {
    ...call,
    out: checkOptions<ForwardBuffers>(op, call.out ?? undefined, { output: "any", lse: "any" }, "out"),
  };
  const g = describeCall(op, call.query, call.kv);
  const made: { tensor: Tensor; owned: boolean }[] = [];
  try {
    const output = outputTensor(op, "output", call.out?.output, queryShape(g), g.dtype, g.device);
    made.push(output);
    const lse = wantLse || call.out?.lse !== undefined
      ? outputTensor(op, "lse", call.out?.lse, lseShape(g), "float32", g.device)
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
    return { output: output.tensor, lse: lse?.tensor };
  } catch (e) {
    disposeOwned(made);
    throw e;
  }
}

/** Runs the forward and returns output and LSE. */
export function forwardWithLse(call: ForwardCall): AttentionOutput {
  const { output, lse } = runForward(call, true);
  return {
    output,
    lse: lse!,
    [Symbol.dispose]() {
      output.dispose();
      lse!.dispose();
    },
  };
}

/** Runs the backward and returns dq, dk, dv. */
export function runBackward(call: BackwardCall): AttentionGradients {
  const { op } = call;
  call = {
    ...call,
    out: checkOptions<BackwardBuffers>(op, call.out ?? undefined, { dq: "any", dk: "any", dv: "any" }, "out"),
  };
  const g = describeCall(op, call.query, call.kv);
  const q = call.query.q;
  for (const [name, t] of [["o", call.output], ["dO", call.dOutput]] as const) {
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
    const dq = outputTensor(op, "dq", call.out?.dq, queryShape(g), g.dtype, g.device);
    made.push(dq);
    const dk = outputTensor(op, "dk", call.out?.dk, keyShape(g), g.dtype, g.device);
    made.push(dk);
    const dv = outputTensor(op, "dv", call.out?.dv, keyShape(g), g.dtype, g.device);
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
    return {
      dq: dq.tensor,
      dk: dk.tensor,
      dv: dv.tensor,
      [Symbol.dispose]() {
        dq.tensor.dispose();
        dk.tensor.dispose();
        dv.tensor.dispose();
      },
    };
  } catch (e) {
    disposeOwned(made);
    throw e;
  }
}
