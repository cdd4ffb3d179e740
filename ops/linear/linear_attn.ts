/**
 * Linear attention, flash-linear-attention's `chunk_linear_attn` with an explicit layout: per value
 * head `S <- S + k_t v_t^T`, `o_t = S^T (scale q_t)` (no decay), and with `normalize` each output
 * divided by `z_t + 1e-10`, `z_t = scale q_t . (k_1 + ... + k_t)` summed over the tokens of the
 * token's own sequence (the initial state carries no key sum).
 *
 * The forward divides in the kernel where it can (one native call: the CPU backend, on CUDA the split
 * state kernel at bfloat16, K = V = 128, which carries the keys' sum beside the state, and the general
 * path for what no kernel takes), and so does the backward (the same kernel recomputes the output, scans
 * over keys and queries give the normaliser's gradient). Elsewhere the chunk kernels run over the values
 * with ones columns, which give the normaliser beside the numerator (`linear_attn_normalised.ts`).
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { checkOptions } from "../args.ts";
import { expectSameDevice, expectSameDType, expectTensor } from "../checks.ts";
import type { Device } from "../device.ts";
import { explain } from "../kernels.ts";
import { Tensor } from "../tensor.ts";
import {
  BACKWARD_OPTIONS,
  FORWARD_OPTIONS,
  type GlaBackwardOptions,
  type GlaEngine,
  type GlaGradients,
  type GlaOptions,
  type GlaResult,
  KERNEL,
  parseOptions,
  runBackward,
  runForward,
} from "./gla_functional.ts";
import {
  checkGlaCall,
  glaBackward,
  type GlaBackwardExtras,
  type GlaBackwardOutputs,
  glaForward,
  type GlaForwardOutputs,
  type GlaForwardWants,
} from "./gla_native.ts";
import { checkStateArg, expectInLayout, provided } from "./delta_native.ts";
import { normalisedBackward, normalisedForward } from "./linear_attn_normalised.ts";
import { sequencePattern } from "./layouts.ts";
import { TensorScope } from "./scope.ts";

/** Options of {@link chunkLinearAttn}. */
export interface LinearAttnOptions extends GlaOptions {
  /** Divide each output by `scale q_t . sum_{s <= t} k_s + 1e-10` (default false). */
  normalize?: boolean;
}

/** Options of {@link chunkLinearAttnBackward}. */
export interface LinearAttnBackwardOptions extends GlaBackwardOptions {
  /** The forward's `normalize`. */
  normalize?: boolean;
}

const NORMALIZE = { normalize: "boolean" } as const;
/** Added to the normaliser (FLA's epsilon). */
const NORMALIZE_EPS = 1e-10;
const GRADIENT_BUFFERS = { dq: "any", dk: "any", dv: "any", dInitialState: "any" } as const;

/** A normalised forward as the planner sees it. */
export interface NormalisedCall {
  device: Device;
  dtype: Tensor["dtype"];
  /** Key (feature) and value head dims. */
  K: number;
  V: number;
  /** Sequences and value heads. */
  N: number;
  H: number;
  recurrent: boolean;
  chunkStates: boolean;
}

/**
 * How a normalised forward runs: `"native"`, one call that divides by the normaliser itself (the CPU
 * backend; on CUDA the split state kernel, or the general path for what no kernel takes), or
 * `"onesColumns"`, the chunk kernels over the values with ones columns (`linear_attn_normalised.ts`).
 */
export type NormalisedRoute = "native" | "onesColumns";

/** Planner answers by call shape. */
const routeByShape = new Map<string, NormalisedRoute>();

/**
 * The route of a normalised forward (or, with `pass` `"backward"`, of its backward) on its device.
 */
export function normalisedRoute(
  c: NormalisedCall,
  pass: "forward" | "backward" = "forward",
): NormalisedRoute {
  if (c.device === "cpu") return "native";
  const query = {
    op: pass === "forward" ? "linear.gla.fwd" : "linear.gla.bwd",
    device: c.device,
    dtype: c.dtype as "bfloat16",
    k: c.K,
    v: c.V,
    b: c.N,
    h: c.H,
    channel: false,
    recurrent: c.recurrent,
    normalize: true,
    chunkStates: c.chunkStates,
  } as const;
  const key = JSON.stringify(query);
  let route = routeByShape.get(key);
  if (route === undefined) {
    // The planner sends a normalised call the split kernel does not take (forward, or the backward's
    // recompute) to the general path; the chunk kernels serve it over ones columns wherever they serve
    // the plain call.
    const fused = explain(query).path !== "general";
    const plain = explain({ ...query, normalize: false }).path !== "general";
    route = fused || !plain || c.chunkStates ? "native" : "onesColumns";
    routeByShape.set(key, route);
  }
  return route;
}

/**
 * Whether one native call gives the normalised output (`normalisedRoute` is `"native"`), or with `pass`
 * `"backward"` its gradients.
 */
export function fusedNormaliser(c: NormalisedCall, pass: "forward" | "backward" = "forward"): boolean {
  return normalisedRoute(c, pass) === "native";
}

/**
 * Linear attention with the normaliser: forward and backward each one native call where the planner
 * serves the normaliser (`normalisedRoute`), else over the chunk kernels with ones columns.
 */
const NORMALIZED: GlaEngine = {
  forward(op, inputs, s, wants: GlaForwardWants, out): GlaForwardOutputs {
    const { B, T, H, K, V, N } = checkGlaCall(op, inputs, s);
    const { device, dtype } = inputs.q;
    const call = { device, dtype, K, V, N, H, recurrent: s.recurrent, chunkStates: !!wants.chunkStates };
    if (normalisedRoute(call) === "native") {
      return glaForward(op, inputs, s, { ...wants, normalizeEps: NORMALIZE_EPS }, out);
    }
    const shape = s.layout === "bshd" ? [B, T, H, V] : [B, H, T, V];
    const given = provided(op, "output", out?.output, shape, dtype, device);
    const givenState = provided(op, "finalState", out?.finalState, [N, H, K, V], "float32", device);
    using scope = new TensorScope();
    const output = given ?? scope.result(Tensor.empty(shape, { dtype, device }));
    const finalState = wants.finalState
      ? givenState ?? scope.result(Tensor.empty([N, H, K, V], { dtype: "float32", device }))
      : undefined;
    normalisedForward(op, inputs, s, NORMALIZE_EPS, output, finalState);
    scope.release();
    return { output, finalState };
  },
  backward(op, inputs, s, dOutput, extras: GlaBackwardExtras): GlaBackwardOutputs {
    const { B, T, H, HK, K, V, N } = checkGlaCall(op, inputs, s);
    const q = inputs.q;
    const { device, dtype } = q;
    const dOut = expectTensor(op, "dOutput", dOutput);
    expectSameDType(op, "dOutput", dOut, q, "q");
    expectSameDevice(op, "dOutput", dOut, q, "q");
    expectInLayout(op, "dOutput", dOut, s.layout, sequencePattern(s.layout, "H", "V"), { B, T, H, V });
    const out = checkOptions<Record<keyof typeof GRADIENT_BUFFERS, Tensor | undefined>>(
      op,
      extras.out ?? undefined,
      GRADIENT_BUFFERS,
      "out",
    );
    const dFinalState = extras.dFinalState ?? undefined;
    if (dFinalState !== undefined) checkStateArg(op, "dFinalState", dFinalState, q, [N, H, K, V]);
    const call = { device, dtype, K, V, N, H, recurrent: s.recurrent, chunkStates: false };
    if (normalisedRoute(call, "backward") === "native") {
      return glaBackward(op, inputs, s, dOut, { ...extras, normalizeEps: NORMALIZE_EPS });
    }
    const qkShape = s.layout === "bshd" ? [B, T, HK, K] : [B, HK, T, K];
    const vShape = s.layout === "bshd" ? [B, T, H, V] : [B, H, T, V];
    using scope = new TensorScope();
    const buffer = (name: string, given: Tensor | undefined, shape: number[], type: Tensor["dtype"]) =>
      provided(op, name, given, shape, type, device) ??
        scope.result(Tensor.empty(shape, { dtype: type, device }));
    const into = {
      dq: buffer("dq", out.dq, qkShape, dtype),
      dk: buffer("dk", out.dk, qkShape, dtype),
      dv: buffer("dv", out.dv, vShape, dtype),
      dInitialState: s.initialState && extras.wantDInitialState !== false
        ? buffer("dInitialState", out.dInitialState, [N, H, K, V], "float32")
        : undefined,
    };
    normalisedBackward(op, inputs, s, NORMALIZE_EPS, dOut, dFinalState, into);
    scope.release();
    return into;
  },
};

function engineOf(op: string, normalize: unknown): GlaEngine {
  if (normalize !== undefined && typeof normalize !== "boolean") {
    throw invalidArgument(op, `normalize: expected a boolean, got ${typeof normalize}`);
  }
  return normalize ? NORMALIZED : KERNEL;
}

/**
 * Linear attention, chunked, with the optional normaliser of FLA's `normalize`.
 *
 * @example
 * ```ts
 * import { chunkLinearAttn, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.rand([1, 100, 2, 32]); // positive features keep the normaliser away from 0
 * using k = Tensor.rand([1, 100, 2, 32]);
 * using v = Tensor.randn([1, 100, 2, 32]);
 * using r = chunkLinearAttn(q, k, v, { layout: "bshd", normalize: true, outputFinalState: true });
 * using dO = Tensor.randn([1, 100, 2, 32]);
 * using grads = r.backward(dO);
 * console.log(grads.dq.shape); // [1, 100, 2, 32]
 * ```
 */
export function chunkLinearAttn(q: Tensor, k: Tensor, v: Tensor, options: LinearAttnOptions): GlaResult {
  const op = "chunkLinearAttn";
  const { o, s } = parseOptions<LinearAttnOptions>(op, options, { ...FORWARD_OPTIONS, ...NORMALIZE }, false);
  return runForward({
    op,
    inputs: { q, k, v },
    s,
    outputFinalState: o.outputFinalState ?? false,
    out: o.out,
    engine: engineOf(op, o.normalize),
    callerTensors: { q, k, v },
  });
}

/**
 * Gradients of {@link chunkLinearAttn} from `dOutput` (first) and an optional `dFinalState`, with
 * the forward's inputs and options (`normalize` included).
 *
 * @example
 * ```ts
 * import { chunkLinearAttnBackward, Tensor } from "@attnkit/attnkit";
 * using q = Tensor.rand([1, 40, 2, 16]);
 * using k = Tensor.rand([1, 40, 2, 16]);
 * using v = Tensor.randn([1, 40, 2, 16]);
 * using dO = Tensor.randn([1, 40, 2, 16]);
 * using grads = chunkLinearAttnBackward(dO, q, k, v, { layout: "bshd", normalize: true });
 * console.log(grads.dk.shape); // [1, 40, 2, 16]
 * ```
 */
export function chunkLinearAttnBackward(
  dOutput: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: LinearAttnBackwardOptions,
): GlaGradients {
  const op = "chunkLinearAttnBackward";
  const { o, s } = parseOptions<LinearAttnBackwardOptions>(
    op,
    options,
    { ...BACKWARD_OPTIONS, ...NORMALIZE },
    false,
  );
  return runBackward(op, { q, k, v }, s, dOutput, o, engineOf(op, o.normalize));
}
