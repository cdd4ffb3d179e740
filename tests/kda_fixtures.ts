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
import { host, poisoned } from "./linear_fixtures.ts";

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
export interface KdaSpec {
  /** Which function. */
  fn: KdaFn;
  /** Batch (1 with cuSeqlens). */
  B: number;
  /** Tokens. */
  T: number;
  /** Value heads. */
  H: number;
  /** Query/key heads (default H). */
  HK?: number;
  /** Key head dimension. */
  K: number;
  /** Value head dimension. */
  V: number;
  /** Dtype of q, k, v. */
  dtype: DType;
  /** Packed offsets. */
  cuSeqlens?: number[];
  /** Start from a random state (default true). */
  initialState?: boolean;
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
export class KdaCase implements Disposable {
  readonly spec: KdaSpec;
  readonly device: Device;
  readonly HK: number;
  readonly N: number;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly gate: Tensor;
  readonly beta: Tensor;
  /** In the spec's state layout. */
  readonly initialState?: Tensor;
  readonly cuSeqlens?: Tensor;
  readonly hostInputs: KdaReferenceInputs;
  #owned: Tensor[] = [];
  #reference: KdaReferenceOutputs | undefined;

  constructor(device: Device, spec: KdaSpec, seed: number) {
    this.spec = spec;
    this.device = device;
    const { B, T, H, K, V, dtype } = spec;
    const HK = (this.HK = spec.HK ?? H);
    this.N = spec.cuSeqlens ? spec.cuSeqlens.length - 1 : B;
    const rand = generator(seed ^ 0x2545f491);
    const own = <X extends Tensor>(t: X) => (this.#owned.push(t), t);
    try {
      this.q = own(Tensor.randn([B, T, HK, K], { dtype, device, seed }));
      this.k = own(Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: K ** -0.5 }));
      this.v = own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
      const low = spec.gateLow ?? -0.5;
      const gates = Float32Array.from({ length: B * T * H * K }, () => low * rand());
      if (spec.spike !== undefined) {
        for (let i = 0; i < gates.length; i++) if (rand() < 1 / 16) gates[i] = spec.spike;
      }
      using g32 = Tensor.from(gates, { shape: [B, T, H, K], device });
      this.gate = own(g32.cast(spec.gateDtype ?? "float32"));
      using b32 = Tensor.rand([B, T, H], { device, seed: seed + 3 });
      this.beta = own(b32.cast(spec.gateDtype ?? "float32"));
      const stateShape = spec.stateLayout === "vk" ? [this.N, H, V, K] : [this.N, H, K, V];
      this.initialState = spec.initialState === false
        ? undefined
        : own(Tensor.randn(stateShape, { device, seed: seed + 5, std: 0.5 }));
      this.cuSeqlens = spec.cuSeqlens
        ? own(Tensor.from(Int32Array.from(spec.cuSeqlens), { device }))
        : undefined;
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.hostInputs = {
      B,
      T,
      H,
      HK,
      K,
      V,
      q: host(this.q),
      k: host(this.k),
      v: host(this.v),
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
  stateShape(): number[] {
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

  /** A random output gradient (dtype of q) and final-state gradient (state layout), owned by the case. */
  cotangents(seed: number): { dOutput: Tensor; dFinalState: Tensor } {
    const { B, T, H, V, dtype } = this.spec;
    return {
      dOutput: this.own(Tensor.randn([B, T, H, V], { dtype, device: this.device, seed: seed + 10 })),
      dFinalState: this.own(Tensor.randn(this.stateShape(), { device: this.device, seed: seed + 11 })),
    };
  }

  /** Tracks another tensor for disposal with the case. */
  own<X extends Tensor>(t: X): X {
    this.#owned.push(t);
    return t;
  }

  /** Disposes every tensor the case made. */
  dispose(): void {
    for (const t of this.#owned) t.dispose();
    this.#owned = [];
  }

  /** Same as `dispose()`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
