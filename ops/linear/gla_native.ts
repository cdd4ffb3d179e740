/**
 * The gated linear family's bridge to the C entries (GLA, simple GLA, retention, linear attention):
 * checks the arguments with the names the public API uses, reads `"bhsd"` tensors in place through
 * strided `[B, T, H, D]` views, casts the gates to float32 on the device, allocates the results and
 * calls `ak_gla_fwd/bwd/decode`. Every public function and op of the family runs through here.
 *
 * @module
 */
import { checkOptions, type OptionSpec } from "../args.ts";
import { invalidArgument } from "../../ffi/errors.ts";
import { native, unwrap } from "../../ffi/library.ts";
import { GlaFlags } from "../../ffi/symbols_linear.ts";
import { expectDType, expectSameDevice, expectShape, expectTensor } from "../checks.ts";
import type { CuSeqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import {
  checkDOutput,
  checkHeadDims,
  checkHeads,
  checkScale,
  checkStateArg,
  decodeResults,
  type DeltaSizes,
  expectInLayout,
  expectQkv,
  f32Result,
  forwardResults,
  GATE_DTYPES,
  provided,
  qkvGradResults,
  rowsResult,
  scalarsF32,
  scalarsGrad,
  seqlensView,
  sequenceCount,
  tokenMajor,
} from "./delta_native.ts";
import { type LinearLayout, sequencePattern, warnIfLayoutLooksSwapped } from "./layouts.ts";
import { TensorScope } from "./scope.ts";

/** Tokens per chunk of the chunked algorithm (and per entry of the chunk states). */
export const GLA_CHUNK = 64;

/** The tensors of one call of the gated linear family. */
export interface GlaInputs {
  /** Queries. */
  q: Tensor;
  /** Keys. */
  k: Tensor;
  /** Values. */
  v: Tensor;
  /** Natural-log decay per key channel, shaped like v with K channels (GLA). */
  gk?: Tensor;
  /** Natural-log decay per token and value head (simple GLA). */
  g?: Tensor;
  /** Natural-log decay per value head, `[H]` (simple GLA's g_gamma, retention). */
  gGamma?: Tensor;
}

/** How to run one call. */
export interface GlaSettings {
  /** Memory order of q, k, v, gk, g and the outputs. */
  layout: LinearLayout;
  /** Query scale; default K^-0.5. */
  scale?: number;
  /** Token-by-token algorithm. */
  recurrent: boolean;
  /** `[N, H, K, V]` float32. */
  initialState?: Tensor;
  /** `[N + 1]` offsets of packed sequences (batch 1): host numbers or an int32/int64 tensor. */
  cuSeqlens?: CuSeqlens;
}

/** Caller-provided forward results. */
export type GlaForwardBuffers = Partial<Record<"output" | "finalState" | "chunkStates", Tensor>>;
/** Caller-provided gradient buffers (dgk, dg and dgGamma float32). */
export type GlaBackwardBuffers = Partial<
  Record<"dq" | "dk" | "dv" | "dgk" | "dg" | "dgGamma" | "dInitialState", Tensor>
>;

/** What the forward returns. */
export interface GlaForwardOutputs {
  /** Shaped like v, dtype of q. */
  output: Tensor;
  /** `[N, H, K, V]` float32, when asked. */
  finalState?: Tensor;
  /** `[B, NT + 1, H, K, V]` float32, when asked (NT = ceil(T / 64)). */
  chunkStates?: Tensor;
}

/** What the backward returns. */
export interface GlaBackwardOutputs {
  /** Gradient of q, its shape and dtype. */
  dq: Tensor;
  /** Gradient of k. */
  dk: Tensor;
  /** Gradient of v. */
  dv: Tensor;
  /** Gradient of gk (with gk), its shape, float32. */
  dgk?: Tensor;
  /** Gradient of g (with g), its shape, float32. */
  dg?: Tensor;
  /** Gradient of gGamma (with gGamma), `[H]` float32: the token decay's gradient summed. */
  dgGamma?: Tensor;
  /** Gradient of the initial state, when one was given and asked for. */
  dInitialState?: Tensor;
}

const FORWARD_BUFFERS: OptionSpec = { output: "any", finalState: "any", chunkStates: "any" };
const BACKWARD_BUFFERS: OptionSpec = {
  dq: "any",
  dk: "any",
  dv: "any",
  dgk: "any",
  dg: "any",
  dgGamma: "any",
  dInitialState: "any",
};
const DECODE_BUFFERS: OptionSpec = { output: "any", newState: "any" };

// ---- checks ----

function checkGate(op: string, name: string, t: unknown, q: Tensor): Tensor {
  const gate = expectTensor(op, name, t);
  expectSameDevice(op, name, gate, q, "q");
  expectDType(op, name, gate, GATE_DTYPES);
  return gate;
}

/** Checks the tensors and settings of a forward or backward call; returns the sizes. */
export function checkGlaCall(op: string, inputs: GlaInputs, s: GlaSettings): DeltaSizes {
  const { q, k, v } = expectQkv(op, inputs, {});
  expectSameDevice(op, "k", k, q, "q");
  expectSameDevice(op, "v", v, q, "q");
  const L = s.layout;
  const sizes = expectInLayout(op, "q", q, L, sequencePattern(L, "HK", "K"));
  expectInLayout(op, "k", k, L, sequencePattern(L, "HK", "K"), sizes);
  expectInLayout(op, "v", v, L, sequencePattern(L, "H", "V"), sizes);
  if (inputs.gk !== undefined) {
    expectInLayout(op, "gk", checkGate(op, "gk", inputs.gk, q), L, sequencePattern(L, "H", "K"), sizes);
  }
  if (inputs.g !== undefined) {
    expectInLayout(op, "g", checkGate(op, "g", inputs.g, q), L, sequencePattern(L, "H"), sizes);
  }
  if (inputs.gGamma !== undefined) {
    expectShape(op, "gGamma", checkGate(op, "gGamma", inputs.gGamma, q), [sizes.H]);
  }
  const { B, T, H, HK, K, V } = sizes;
  checkHeads(op, HK, H);
  checkHeadDims(op, K, V);
  checkScale(op, s.scale, K);
  const N = sequenceCount(op, s.cuSeqlens, B, q);
  if (s.initialState !== undefined) checkStateArg(op, "initialState", s.initialState, q, [N, H, K, V]);
  warnIfLayoutLooksSwapped(op, L, T, HK);
  return { B, T, H, HK, K, V, N };
}

/** Checks chunk states `[B, NT + 1, H, K, V]` float32 (a forward's, read by a backward). */
function checkChunkStates(op: string, name: string, t: unknown, q: Tensor, sizes: DeltaSizes): Tensor {
  const h = expectTensor(op, name, t);
  expectDType(op, name, h, ["float32"]);
  expectSameDevice(op, name, h, q, "q");
  const { B, T, H, K, V } = sizes;
  expectShape(op, name, h, [B, Math.ceil(T / GLA_CHUNK) + 1, H, K, V]);
  return h;
}

// ---- inputs ----

/** A float32 tensor for the C side: the tensor itself, or a device cast owned by the scope. */
function asF32(scope: TensorScope, t: Tensor): Tensor {
  return t.dtype === "float32" ? t : scope.temp(t.cast("float32"));
}

// The descriptors of the inputs shared by the forward and the backward.
function prepareInputs(op: string, scope: TensorScope, inputs: GlaInputs, s: GlaSettings) {
  const cuSeqlens = seqlensView(op, scope, s.cuSeqlens, inputs.q.device);
  const gGamma = inputs.gGamma !== undefined ? asF32(scope, inputs.gGamma) : undefined;
  return {
    // The leading arguments of ak_gla_fwd and ak_gla_bwd, in their order.
    operands: [
      tokenMajor(inputs.q, s.layout),
      tokenMajor(inputs.k, s.layout),
      tokenMajor(inputs.v, s.layout),
      inputs.gk !== undefined ? tokenMajor(asF32(scope, inputs.gk), s.layout) : null,
      inputs.g !== undefined ? scalarsF32(op, scope, inputs.g, s.layout) : null,
      gGamma?.descriptor() ?? null,
      s.initialState?.descriptor() ?? null,
      cuSeqlens,
    ] as const,
    scale: checkScale(op, s.scale, inputs.q.shape[3]), // K is the last dimension in both layouts
    flags: s.recurrent ? GlaFlags.RECURRENT : 0,
  };
}

// ---- calls ----

/** What the forward computes besides the output. */
export interface GlaForwardWants {
  /** The state after the last token of each sequence. */
  finalState?: boolean;
  /** The state before every chunk of 64 tokens and the final state (fixed length only). */
  chunkStates?: boolean;
  /**
   * Linear attention's normaliser (no decays): each output row divided by `scale q_t . (k_1 + ... + k_t)`
   * plus this eps, in the kernel.
   */
  normalizeEps?: number;
}

/**
 * Runs the forward. The output rows past the last packed sequence (`cuSeqlens[N]`) are left
 * unwritten. Results in `out` are the caller's; the others are new tensors.
 */
export function glaForward(
  op: string,
  inputs: GlaInputs,
  s: GlaSettings,
  wants: GlaForwardWants = {},
  out?: GlaForwardBuffers,
): GlaForwardOutputs {
  out = checkOptions<GlaForwardBuffers>(op, out ?? undefined, FORWARD_BUFFERS, "out");
  const sizes = checkGlaCall(op, inputs, s);
  const { B, T, H, K, V } = sizes;
  if (wants.chunkStates && s.cuSeqlens !== undefined) {
    throw invalidArgument(op, "chunk states exist only for fixed-length input (no cuSeqlens)");
  }
  const device = inputs.q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s);
  const { output, finalState } = forwardResults(op, scope, s.layout, sizes, inputs.q, wants.finalState, out);
  const NT = Math.ceil(T / GLA_CHUNK);
  const chunkStates = wants.chunkStates
    ? f32Result(op, scope, [B, NT + 1, H, K, V], device, "chunkStates", out.chunkStates)
    : undefined;
  unwrap(
    native().ak_gla_fwd(
      ...x.operands,
      x.scale,
      x.flags | (wants.normalizeEps !== undefined ? GlaFlags.NORMALIZE : 0),
      output.view,
      finalState?.descriptor() ?? null,
      chunkStates?.descriptor() ?? null,
      wants.normalizeEps ?? 0,
    ),
    op,
  );
  scope.release();
  return { output: output.tensor, finalState, chunkStates };
}

/** What a backward takes besides the inputs and settings. */
export interface GlaBackwardExtras {
  /** Gradient of the final state, `[N, H, K, V]` float32 (default zero). */
  dFinalState?: Tensor;
  /** The forward's chunk states `[B, NT + 1, H, K, V]`, read instead of recomputing them. */
  chunkStates?: Tensor;
  /** Compute dInitialState when an initial state was given (default true). */
  wantDInitialState?: boolean;
  /** Compute dgGamma when gGamma was given (default true; retention has no use for it). */
  wantDgGamma?: boolean;
  /** Caller-provided gradient buffers. */
  out?: GlaBackwardBuffers;
  /** The gradients of the normalised forward with this eps (linear attention only). */
  normalizeEps?: number;
}

/**
 * Runs the backward: gradients of the forward with the same inputs and settings, from `dOutput`
 * (the output's layout and dtype) and an optional `dFinalState`. Gradient rows of tokens past the
 * last packed sequence are zero.
 */
export function glaBackward(
  op: string,
  inputs: GlaInputs,
  s: GlaSettings,
  dOutput: Tensor,
  extras: GlaBackwardExtras = {},
): GlaBackwardOutputs {
  const { dFinalState, wantDInitialState = true, wantDgGamma = true } = extras;
  const out = checkOptions<GlaBackwardBuffers>(op, extras.out ?? undefined, BACKWARD_BUFFERS, "out");
  const sizes = checkGlaCall(op, inputs, s);
  const { B, T, H, K, V, N } = sizes;
  const q = inputs.q;
  const dO = checkDOutput(op, dOutput, q, s.layout, sizes);
  if (dFinalState !== undefined && dFinalState !== null) {
    checkStateArg(op, "dFinalState", dFinalState, q, [N, H, K, V]);
  }
  const chunkStates = extras.chunkStates !== undefined
    ? checkChunkStates(op, "chunkStates", extras.chunkStates, q, sizes)
    : undefined;
  if (chunkStates && s.cuSeqlens !== undefined) {
    throw invalidArgument(op, "chunkStates: exist only for fixed-length input (no cuSeqlens)");
  }
  const device = q.device;
  using scope = new TensorScope();
  const x = prepareInputs(op, scope, inputs, s);
  const { dq, dk, dv } = qkvGradResults(op, scope, s.layout, sizes, q, out);
  const dgk = inputs.gk !== undefined
    ? rowsResult(op, scope, s.layout, { B, T, heads: H, D: K }, "float32", device, "dgk", out.dgk)
    : undefined;
  // The kernel writes the token decay's gradient where it is wanted: g's, or gGamma's (its sum).
  const needDg = inputs.g !== undefined || (inputs.gGamma !== undefined && wantDgGamma);
  const dg = inputs.g !== undefined
    ? scalarsGrad(op, scope, s.layout, sizes, inputs.g, "dg", out.dg)
    : undefined;
  const dgScratch = needDg && dg === undefined
    ? scope.temp(Tensor.empty([B, T, H], { dtype: "float32", device }))
    : undefined;
  const dInitialState = s.initialState && wantDInitialState
    ? f32Result(op, scope, [N, H, K, V], device, "dInitialState", out.dInitialState)
    : undefined;
  const dgGammaBuffer = inputs.gGamma !== undefined && wantDgGamma
    ? provided(op, "dgGamma", out.dgGamma, [H], "float32", device)
    : undefined;
  unwrap(
    native().ak_gla_bwd(
      ...x.operands,
      chunkStates?.descriptor() ?? null,
      tokenMajor(dO, s.layout),
      dFinalState?.descriptor() ?? null,
      x.scale,
      x.flags | (extras.normalizeEps !== undefined ? GlaFlags.NORMALIZE : 0),
      dq.view,
      dk.view,
      dv.view,
      dgk?.view ?? null,
      dg?.view ?? dgScratch?.descriptor() ?? null,
      dInitialState?.descriptor() ?? null,
      extras.normalizeEps ?? 0,
    ),
    op,
  );
  const dgTensor = dg?.finish();
  let dgGamma: Tensor | undefined;
  if (inputs.gGamma !== undefined && wantDgGamma) {
    // Sum over batch and tokens of the kernel's [B, T, H] rows (dg's result is in the layout).
    const rows = dgScratch ?? dgTensor!;
    const tokenDims = dgScratch || s.layout === "bshd" ? [0, 1] : [0, 2];
    const sum = scope.temp(rows.sum(tokenDims));
    dgGamma = dgGammaBuffer ? dgGammaBuffer.copyFrom(sum) : scope.result(scope.keep(sum));
  }
  const result = {
    dq: dq.tensor,
    dk: dk.tensor,
    dv: dv.tensor,
    dgk: dgk?.tensor,
    dg: dgTensor,
    dgGamma,
    dInitialState,
  };
  scope.release();
  return result;
}

/** The tensors of one decode step. */
export interface GlaDecodeInputs extends GlaInputs {
  /** `[B, H, K, V]` float32. */
  state: Tensor;
}

/** Runs one decode step: q, k `[B, HK, K]`, v `[B, H, V]`, gk `[B, H, K]`, g `[B, H]`, gGamma `[H]`. */
export function glaDecode(
  op: string,
  inputs: GlaDecodeInputs,
  s: { scale?: number; inPlace: boolean },
  out?: { output?: Tensor; newState?: Tensor },
): { output: Tensor; newState: Tensor } {
  out = checkOptions<{ output?: Tensor; newState?: Tensor }>(op, out ?? undefined, DECODE_BUFFERS, "out");
  const { q, k, v, state } = expectQkv(op, inputs, { state: inputs.state });
  for (const [name, t] of [["k", k], ["v", v], ["state", state]] as const) {
    expectSameDevice(op, name, t, q, "q");
  }
  const sizes = expectShape(op, "q", q, ["B", "HK", "K"]);
  expectShape(op, "k", k, ["B", "HK", "K"], sizes);
  expectShape(op, "v", v, ["B", "H", "V"], sizes);
  const { B, H, HK, K, V } = sizes;
  checkHeads(op, HK, H);
  checkHeadDims(op, K, V);
  if (inputs.gk !== undefined) expectShape(op, "gk", checkGate(op, "gk", inputs.gk, q), [B, H, K]);
  if (inputs.g !== undefined) expectShape(op, "g", checkGate(op, "g", inputs.g, q), [B, H]);
  if (inputs.gGamma !== undefined) expectShape(op, "gGamma", checkGate(op, "gGamma", inputs.gGamma, q), [H]);
  expectDType(op, "state", state, ["float32"]);
  expectShape(op, "state", state, [B, H, K, V]);
  const scale = checkScale(op, s.scale, K);
  using scope = new TensorScope();
  const gate = (t: Tensor | undefined) => t === undefined ? null : asF32(scope, t).descriptor();
  // The state was checked float32 above, so the new state is float32 too.
  const { output, newState } = decodeResults(op, scope, q, state, { B, H, V }, s.inPlace, out);
  unwrap(
    native().ak_gla_decode(
      q.descriptor(),
      k.descriptor(),
      v.descriptor(),
      gate(inputs.gk),
      gate(inputs.g),
      gate(inputs.gGamma),
      state.descriptor(),
      scale,
      output.descriptor(),
      newState.descriptor(),
    ),
    op,
  );
  scope.release();
  return { output, newState };
}
