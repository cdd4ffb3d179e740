// Shared by the gla_ops*.test.ts files: random problems of the gated linear family (GLA, simple GLA,
// retention, linear attention) on a device with their exact values on the host, the float64
// oracle's answers, NaN-poisoned result buffers, and runners for every public function.
//
// Tolerance rule (relative RMS against float64 fed the same rounded inputs, reference/tolerance.ts):
// float32 outputs and states 5e-5, gradients 8e-5 (gate gradients 2e-4); float16/bfloat16 0.005,
// 0.008 and 0.02, relative to the RMS of the expected values (the output's scale).
import {
  gatedLinearReference,
  gatedLinearReferenceBackward,
  type GatedLinearReferenceGradients,
  type GatedLinearReferenceInputs,
  type GatedLinearReferenceOutputs,
  retentionLogDecay,
} from "../reference/linear_attention.ts";
import {
  chunkGla,
  chunkGlaBackward,
  chunkLinearAttn,
  chunkLinearAttnBackward,
  chunkRetention,
  chunkRetentionBackward,
  chunkSimpleGla,
  chunkSimpleGlaBackward,
  type Device,
  type DType,
  type GlaGradients,
  type GlaResult,
  recurrentGla,
  recurrentGlaBackward,
  Tensor,
} from "../mod.ts";
import { generator } from "./oracle_checks.ts";
import { type GatedTolerance, gatedTolerance, host, LinearCase, type LinearCaseSpec } from "./linear_case.ts";

export { expectAgree, expectClose, expectSame, host, leadingRows, pathTolerance } from "./linear_fixtures.ts";

/**
 * The tolerances of a q/k/v dtype: the delta rule's, and dgate for the decays' gradients. dgk, dg
 * (relative RMS): a reverse cumsum over the sequence of q dq - k dk, terms that largely cancel, so the
 * 16-bit operands of dq and dk leave it several times dq's error. On the H200, simple GLA in bf16 with
 * gates uniform in [-6, 0] over 60 seeds: median 0.021, 90th percentile 0.034, worst 0.073 (K = 16), and
 * one seed of the test at 0.084; gates in [-0.25, 0]: worst 0.014. The bound (0.12) leaves room above
 * the worst seen; a wrong gradient is off by order 1.
 */
export function tol(dtype: DType): GatedTolerance {
  return gatedTolerance(dtype, "gla");
}

/** The public functions under test. */
export type Fn = "chunkGla" | "recurrentGla" | "chunkSimpleGla" | "chunkRetention" | "chunkLinearAttn";

/** What a random problem looks like. */
export interface GlaSpec extends LinearCaseSpec {
  /** Which function. */
  fn: Fn;
  /** Simple GLA: a decay per token (default true for chunkSimpleGla). */
  g?: boolean;
  /** Simple GLA: a decay per head. */
  gGamma?: boolean;
  /** Linear attention's normaliser. */
  normalize?: boolean;
  /** Gates uniform in [gateLow, 0] (default -0.25). */
  gateLow?: number;
  /** Also a decay of -20 at about one token in 16 (per head, per channel for GLA). */
  spikes?: boolean;
  /** Dtype of the gates (default float32). */
  gateDtype?: DType;
  /** Query scale (default the op's K^-0.5). */
  scale?: number;
}

/** A random problem on a device, its host copy and the oracle's answers. */
export class GlaCase extends LinearCase<
  GlaSpec,
  GatedLinearReferenceInputs,
  GatedLinearReferenceOutputs,
  GatedLinearReferenceGradients
> {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly gk?: Tensor;
  readonly g?: Tensor;
  readonly gGamma?: Tensor;
  readonly hostInputs: GatedLinearReferenceInputs;
  protected readonly oracle = { forward: gatedLinearReference, backward: gatedLinearReferenceBackward };

  constructor(device: Device, spec: GlaSpec, seed: number) {
    super(device, spec, seed);
    const { B, T, H, K, V, dtype, fn } = spec;
    const HK = this.HK;
    const rand = generator(seed ^ 0x5bd1e995);
    const gate = (shape: number[]) =>
      this.randomGate(
        rand,
        shape,
        spec.gateLow ?? -0.25,
        spec.spikes ? -20 : undefined,
        spec.gateDtype ?? "float32",
      );
    try {
      // Positive q and k for the normaliser (its denominator stays away from 0, as with feature maps).
      const positive = spec.normalize === true;
      this.q = this.own(
        positive
          ? Tensor.rand([B, T, HK, K], { dtype, device, seed, low: 0.1, high: 1 })
          : Tensor.randn([B, T, HK, K], { dtype, device, seed }),
      );
      this.k = this.own(
        positive
          ? Tensor.rand([B, T, HK, K], { dtype, device, seed: seed + 1, low: 0.1, high: 1 })
          : Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: K ** -0.5 }),
      );
      this.v = this.own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
      if (fn === "chunkGla" || fn === "recurrentGla") this.gk = gate([B, T, H, K]);
      if (fn === "chunkSimpleGla" && spec.g !== false) this.g = gate([B, T, H]);
      if (fn === "chunkSimpleGla" && spec.gGamma) {
        const a = Float32Array.from({ length: H }, () => -0.02 - 0.3 * rand());
        this.gGamma = this.own(Tensor.from(a, { device }));
      }
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.hostInputs = {
      ...this.hostProblem(this.q, this.k, this.v),
      gk: this.gk ? host(this.gk) : undefined,
      g: this.g ? host(this.g) : undefined,
      gGamma: fn === "chunkRetention"
        ? Float64Array.from(retentionLogDecay(H), Math.fround)
        : this.gGamma
        ? host(this.gGamma)
        : undefined,
      scale: spec.scale ?? K ** -0.5,
      normalize: spec.normalize ?? false,
      initialState: this.initialState ? host(this.initialState) : undefined,
      cuSeqlens: spec.cuSeqlens,
    };
  }

  /**
   * Per head, the sum over tokens of |dg_t| (the per-token decay gradients dgGamma adds up), from the
   * oracle with g = 0 when the case has none: the scale of dgGamma's rounding error in 16 bits.
   */
  dgGammaScale(dOutput: Tensor, dFinalState?: Tensor): Float64Array {
    const { B, T, H } = this.spec;
    const x = { ...this.hostInputs, g: this.hostInputs.g ?? new Float64Array(B * T * H) };
    const { dg } = gatedLinearReferenceBackward(
      x,
      host(dOutput),
      dFinalState ? host(dFinalState) : undefined,
    );
    const scale = new Float64Array(H);
    for (let i = 0; i < dg.length; i++) scale[i % H] += Math.abs(dg[i]);
    return scale;
  }

  /** The options of the call (bshd) besides buffers. */
  options(): { layout: "bshd"; [key: string]: unknown } {
    const o: { layout: "bshd"; [key: string]: unknown } = {
      layout: "bshd",
      initialState: this.initialState,
      cuSeqlens: this.cuSeqlens,
      scale: this.spec.scale,
    };
    if (this.spec.fn === "chunkSimpleGla") Object.assign(o, { g: this.g, gGamma: this.gGamma });
    if (this.spec.normalize !== undefined) o.normalize = this.spec.normalize;
    return o;
  }

  /** Runs the forward of the case's function into NaN-poisoned buffers (final state asked). */
  forward(extra: Record<string, unknown> = {}): GlaResult {
    const o = { ...this.options(), outputFinalState: true, out: this.forwardBuffers(), ...extra };
    return callForward(this.spec.fn, this.q, this.k, this.v, this.gk, o);
  }

  /** Runs the case's backward function into NaN-poisoned buffers. */
  backward(dOutput: Tensor, dFinalState?: Tensor): GlaGradients {
    const { B, T, H, K } = this.spec;
    const out: Record<string, Tensor> = this.qkvGradBuffers();
    if (this.gk) out.dgk = this.poisoned32([B, T, H, K]);
    if (this.g) out.dg = this.poisoned32([B, T, H]);
    if (this.gGamma) out.dgGamma = this.poisoned32([H]);
    if (this.initialState) out.dInitialState = this.poisoned32(this.stateShape());
    const o = { ...this.options(), dFinalState, out };
    return callBackward(this.spec.fn, dOutput, this.q, this.k, this.v, this.gk, o);
  }
}

/** Calls a function's forward (gk is used by the GLA functions only). */
export function callForward(
  fn: Fn,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor | undefined,
  // deno-lint-ignore no-explicit-any
  o: any,
): GlaResult {
  switch (fn) {
    case "chunkGla":
      return chunkGla(q, k, v, gk!, o);
    case "recurrentGla":
      return recurrentGla(q, k, v, gk!, o);
    case "chunkSimpleGla":
      return chunkSimpleGla(q, k, v, o);
    case "chunkRetention":
      return chunkRetention(q, k, v, o);
    case "chunkLinearAttn":
      return chunkLinearAttn(q, k, v, o);
  }
}

/** Calls a function's backward function. */
export function callBackward(
  fn: Fn,
  dO: Tensor,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  gk: Tensor | undefined,
  // deno-lint-ignore no-explicit-any
  o: any,
): GlaGradients {
  switch (fn) {
    case "chunkGla":
      return chunkGlaBackward(dO, q, k, v, gk!, o);
    case "recurrentGla":
      return recurrentGlaBackward(dO, q, k, v, gk!, o);
    case "chunkSimpleGla":
      return chunkSimpleGlaBackward(dO, q, k, v, o);
    case "chunkRetention":
      return chunkRetentionBackward(dO, q, k, v, o);
    case "chunkLinearAttn":
      return chunkLinearAttnBackward(dO, q, k, v, o);
  }
}
