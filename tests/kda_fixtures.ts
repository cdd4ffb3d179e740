// Shared by the kda*.test.ts files: random KDA problems on a device with their exact values on the
// host, the float64 oracle's answers, NaN-poisoned result buffers and runners for the public functions.
//
// Tolerance rule (relative RMS against float64 fed the same rounded inputs, reference/tolerance.ts):
// float32 outputs and states 5e-5, dq/dk/dv 8e-5, dgate/dbeta/dInitialState 2e-4; float16/bfloat16
// 0.005, 0.008 and 0.02 (dgate 0.08: a chunked kernel forms it as a reverse cumsum of terms that
// largely cancel, as GLA's), relative to the RMS of the expected values.
import {
  kdaReference,
  kdaReferenceBackward,
  type KdaReferenceGradients,
  type KdaReferenceInputs,
  type KdaReferenceOutputs,
} from "../reference/kda.ts";
import {
  chunkKda,
  chunkKdaBackward,
  type Device,
  type DType,
  type KdaGradients,
  type KdaResult,
  type KdaStateLayout,
  recurrentKda,
  recurrentKdaBackward,
  Tensor,
} from "../mod.ts";
import { generator } from "./oracle_checks.ts";
import { type GatedTolerance, gatedTolerance, host, LinearCase, type LinearCaseSpec } from "./linear_case.ts";

export { expectAgree, expectClose, expectSame, host, leadingRows, pathTolerance } from "./linear_fixtures.ts";

/** The tolerances of a q/k/v dtype: the delta rule's, and dgate for the gate's gradient. */
export function tol(dtype: DType): GatedTolerance {
  return gatedTolerance(dtype, "kda");
}

/** The public functions under test. */
export type KdaFn = "chunkKda" | "recurrentKda";

/** What a random problem looks like. */
export interface KdaSpec extends LinearCaseSpec {
  /** Which function. */
  fn: KdaFn;
  /** Gates uniform in [gateLow, 0] (default -0.5). */
  gateLow?: number;
  /** Also this gate value at about one element in 16 (e.g. -20). */
  spike?: number;
  /** Dtype of gate and beta (default float32). */
  gateDtype?: DType;
  /** Query scale (default the op's K^-0.5). */
  scale?: number;
  /** State layout (default "kv"). */
  stateLayout?: KdaStateLayout;
}

/** [N, H, A, B] host values with the last two axes swapped. */
export function swapLast(a: ArrayLike<number>, N: number, H: number, A: number, B: number): Float64Array {
  const out = new Float64Array(N * H * A * B);
  for (let nh = 0; nh < N * H; nh++) {
    for (let i = 0; i < A; i++) {
      for (let j = 0; j < B; j++) out[(nh * B + j) * A + i] = a[(nh * A + i) * B + j];
    }
  }
  return out;
}

/** A random problem on a device, its host copy and the oracle's answers. */
export class KdaCase
  extends LinearCase<KdaSpec, KdaReferenceInputs, KdaReferenceOutputs, KdaReferenceGradients> {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly gate: Tensor;
  readonly beta: Tensor;
  readonly hostInputs: KdaReferenceInputs;
  protected readonly oracle = { forward: kdaReference, backward: kdaReferenceBackward };

  constructor(device: Device, spec: KdaSpec, seed: number) {
    super(device, spec, seed);
    const { B, T, H, K, V, dtype } = spec;
    const HK = this.HK;
    const rand = generator(seed ^ 0x2545f491);
    try {
      this.q = this.own(Tensor.randn([B, T, HK, K], { dtype, device, seed }));
      this.k = this.own(Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: K ** -0.5 }));
      this.v = this.own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
      const gateDtype = spec.gateDtype ?? "float32";
      this.gate = this.randomGate(rand, [B, T, H, K], spec.gateLow ?? -0.5, spec.spike, gateDtype);
      using b32 = Tensor.rand([B, T, H], { device, seed: seed + 3 });
      this.beta = this.own(b32.cast(gateDtype));
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.hostInputs = {
      ...this.hostProblem(this.q, this.k, this.v),
      gate: host(this.gate),
      beta: host(this.beta),
      scale: spec.scale ?? K ** -0.5,
      initialState: this.initialState ? this.toKv(host(this.initialState)) : undefined,
      cuSeqlens: spec.cuSeqlens,
    };
  }

  /** Host state values in the spec's layout, as [N, H, K, V]. */
  override toKv(a: ArrayLike<number>): Float64Array {
    const { H, K, V } = this.spec;
    return this.spec.stateLayout === "vk" ? swapLast(a, this.N, H, V, K) : Float64Array.from(a);
  }

  /** [N, H, K, V] host state values in the spec's layout. */
  fromKv(a: ArrayLike<number>): Float64Array {
    const { H, K, V } = this.spec;
    return this.spec.stateLayout === "vk" ? swapLast(a, this.N, H, K, V) : Float64Array.from(a);
  }

  /** The state shape in the spec's layout. */
  override stateShape(): number[] {
    const { H, K, V } = this.spec;
    return this.spec.stateLayout === "vk" ? [this.N, H, V, K] : [this.N, H, K, V];
  }

  /** The options of the call (bshd) besides buffers. */
  options(): { layout: "bshd"; [key: string]: unknown } {
    return {
      layout: "bshd",
      initialState: this.initialState,
      cuSeqlens: this.cuSeqlens,
      scale: this.spec.scale,
      stateLayout: this.spec.stateLayout,
    };
  }

  /** Runs the forward into NaN-poisoned buffers (final state asked). */
  forward(extra: Record<string, unknown> = {}): KdaResult {
    const o = { ...this.options(), outputFinalState: true, out: this.forwardBuffers(), ...extra };
    const f = this.spec.fn === "chunkKda" ? chunkKda : recurrentKda;
    return f(this.q, this.k, this.v, this.gate, this.beta, o);
  }

  /** Runs the backward function into NaN-poisoned buffers. */
  backward(dOutput: Tensor, dFinalState?: Tensor): KdaGradients {
    const { B, T, H, K } = this.spec;
    const out: Record<string, Tensor> = {
      ...this.qkvGradBuffers(),
      dgate: this.poisoned32([B, T, H, K]),
      dbeta: this.poisoned32([B, T, H]),
    };
    if (this.initialState) out.dInitialState = this.poisoned32(this.stateShape());
    const o = { ...this.options(), dFinalState, out };
    const f = this.spec.fn === "chunkKda" ? chunkKdaBackward : recurrentKdaBackward;
    return f(dOutput, this.q, this.k, this.v, this.gate, this.beta, o);
  }
}
