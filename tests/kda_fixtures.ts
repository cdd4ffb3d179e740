// Shared by the kda*.test.ts files: random KDA problems on a device with their exact values on the
// host, the float64 oracle's answers, NaN-poisoned result buffers and runners for the public functions.
//
// Tolerance rule (relative RMS against float64 fed the same rounded inputs, reference/tolerance.ts):
// float32 outputs and states 5e-5, dq/dk/dv 8e-5, dgate/dbeta/dInitialState 2e-4; float16/bfloat16
// 0.005, 0.008 and 0.02 (dgate 0.08: a chunked kernel forms it as a reverse cumsum of terms that
// largely cancel, as GLA's), relative to the RMS of the expected values.
import { DELTA_RULE_TOLERANCE, type DeltaRuleTolerance } from "../reference/tolerance.ts";
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
import { host, LinearCase, type LinearCaseSpec, poisoned } from "./linear_case.ts";

export { expectAgree, expectClose, expectSame, host, leadingRows, pathTolerance } from "./linear_fixtures.ts";

/** The tolerances of KDA: the delta rule's, and one for the gate's gradient. */
export interface KdaTolerance extends DeltaRuleTolerance {
  /** dgate (relative RMS). */
  dgate: number;
}

/** The tolerances of a q/k/v dtype. */
export function tol(dtype: DType): KdaTolerance {
  const t = DELTA_RULE_TOLERANCE[dtype as "float32"];
  return { ...t, dgate: dtype === "float32" ? t.dsmall : 0.08 };
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
export class KdaCase extends LinearCase<KdaSpec> {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly gate: Tensor;
  readonly beta: Tensor;
  /** In the spec's state layout. */
  readonly initialState?: Tensor;
  readonly cuSeqlens?: Tensor;
  readonly hostInputs: KdaReferenceInputs;
  #reference: KdaReferenceOutputs | undefined;

  constructor(device: Device, spec: KdaSpec, seed: number) {
    super(device, spec);
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
      const tensors = this.stateAndOffsets(seed);
      this.initialState = tensors.initialState;
      this.cuSeqlens = tensors.cuSeqlens;
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
  toKv(a: ArrayLike<number>): Float64Array {
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

  /** The oracle's forward (computed once). */
  reference(): KdaReferenceOutputs {
    this.#reference ??= kdaReference(this.hostInputs);
    return this.#reference;
  }

  /** The oracle's gradients (dFinalState in the spec's layout). */
  referenceBackward(dOutput: Tensor, dFinalState?: Tensor): KdaReferenceGradients {
    return kdaReferenceBackward(
      this.hostInputs,
      host(dOutput),
      dFinalState ? this.toKv(host(dFinalState)) : undefined,
    );
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
    const { B, T, H, V, dtype } = this.spec;
    const out = {
      output: this.own(poisoned([B, T, H, V], dtype, this.device)),
      finalState: this.own(poisoned(this.stateShape(), "float32", this.device)),
    };
    const o = { ...this.options(), outputFinalState: true, out, ...extra };
    const f = this.spec.fn === "chunkKda" ? chunkKda : recurrentKda;
    return f(this.q, this.k, this.v, this.gate, this.beta, o);
  }

  /** Runs the backward function into NaN-poisoned buffers. */
  backward(dOutput: Tensor, dFinalState?: Tensor): KdaGradients {
    const { B, T, H, K, V, dtype } = this.spec;
    const HK = this.HK;
    const out: Record<string, Tensor> = {
      dq: this.own(poisoned([B, T, HK, K], dtype, this.device)),
      dk: this.own(poisoned([B, T, HK, K], dtype, this.device)),
      dv: this.own(poisoned([B, T, H, V], dtype, this.device)),
      dgate: this.own(poisoned([B, T, H, K], "float32", this.device)),
      dbeta: this.own(poisoned([B, T, H], "float32", this.device)),
    };
    if (this.initialState) out.dInitialState = this.own(poisoned(this.stateShape(), "float32", this.device));
    const o = { ...this.options(), dFinalState, out };
    const f = this.spec.fn === "chunkKda" ? chunkKdaBackward : recurrentKdaBackward;
    return f(dOutput, this.q, this.k, this.v, this.gate, this.beta, o);
  }
}
