// What the random linear-attention test cases (delta rule, gated linear family, KDA) share: the sizes
// read from the spec, the tensors a case owns and disposes together, the random initial state and
// packed offsets, random log gates with spikes, random cotangents, the host copy of q, k and v, the
// oracle's answers on it, NaN-poisoned result buffers and the tolerances of the gated families.
import {
  DELTA_RULE_TOLERANCE,
  type DeltaRuleTolerance,
  GATE_GRADIENT_TOLERANCE,
  type GateFamily,
} from "../reference/tolerance.ts";
import { type Device, type DType, Tensor } from "../mod.ts";
import { poison } from "./helpers.ts";
import type { RecurrentOracle } from "./recurrent_oracle.ts";

/** Reads a tensor's values exactly (float16/bfloat16 widen exactly) as float64. */
export function host(t: Tensor): Float64Array {
  return Float64Array.from(t.toArray() as Float32Array);
}

/** A fresh NaN-filled tensor: an element the kernel does not write fails the comparison. */
export function poisoned(shape: readonly number[], dtype: DType, device: Device): Tensor {
  return poison(Tensor.empty(shape, { dtype, device }));
}

/** The delta rule's tolerances, and one for the gradient of a gated family's decays. */
export interface GatedTolerance extends DeltaRuleTolerance {
  /** dgate, dgk, dg (relative RMS). */
  dgate: number;
}

/** The tolerances of a q/k/v dtype: the delta rule's, with dgate the family's (GATE_GRADIENT_TOLERANCE). */
export function gatedTolerance(dtype: DType, family: GateFamily): GatedTolerance {
  const key = dtype as "float32";
  return { ...DELTA_RULE_TOLERANCE[key], dgate: GATE_GRADIENT_TOLERANCE[family][key] };
}

/**
 * One spec per q/k/v dtype (float32, bfloat16, float16, outermost) and function, each of `shape`: the
 * full matrix a family's functions are held to the oracle over.
 */
export function everyDtypeAndFn<F, X>(fns: readonly F[], shape: X): (X & { fn: F; dtype: DType })[] {
  const dtypes: DType[] = ["float32", "bfloat16", "float16"];
  return dtypes.flatMap((dtype) => fns.map((fn) => ({ fn, ...shape, dtype })));
}

/** The spec fields every family's case reads. */
export interface LinearCaseSpec {
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
}

/**
 * The base of a family's random case: owns its tensors and disposes them together. I, O and G are the
 * oracle's inputs, outputs and gradients.
 */
export abstract class LinearCase<S extends LinearCaseSpec, I, O, G> implements Disposable {
  readonly spec: S;
  readonly device: Device;
  readonly HK: number;
  /** Sequences: B, or the packed sequence count. */
  readonly N: number;
  /** A random initial state in the case's state shape, unless the spec says false. */
  readonly initialState?: Tensor;
  /** The packed offsets on the device. */
  readonly cuSeqlens?: Tensor;
  /** The exact input values on the host, as the oracle takes them. */
  abstract readonly hostInputs: I;
  protected abstract readonly oracle: RecurrentOracle<I, O, G>;
  #owned: Tensor[] = [];
  #reference: O | undefined;

  constructor(device: Device, spec: S, seed: number) {
    this.spec = spec;
    this.device = device;
    this.HK = spec.HK ?? spec.H;
    this.N = spec.cuSeqlens ? spec.cuSeqlens.length - 1 : spec.B;
    try {
      if (spec.initialState !== false) {
        this.initialState = this.own(Tensor.randn(this.stateShape(), { device, seed: seed + 5, std: 0.5 }));
      }
      if (spec.cuSeqlens) this.cuSeqlens = this.own(Tensor.from(Int32Array.from(spec.cuSeqlens), { device }));
    } catch (e) {
      this.dispose();
      throw e;
    }
  }

  /** The state shape (the family's layout may change it). */
  stateShape(): number[] {
    const { H, K, V } = this.spec;
    return [this.N, H, K, V];
  }

  /** Host state values in the case's state layout, as the oracle's [N, H, K, V]. */
  toKv(a: Float64Array): Float64Array {
    return a;
  }

  /** The oracle's forward (computed once). */
  reference(): O {
    this.#reference ??= this.oracle.forward(this.hostInputs);
    return this.#reference;
  }

  /** The oracle's gradients for this output gradient and final-state gradient (in the state layout). */
  referenceBackward(dOutput: Tensor, dFinalState?: Tensor): G {
    const dHT = dFinalState ? this.toKv(host(dFinalState)) : undefined;
    return this.oracle.backward(this.hostInputs, host(dOutput), dHT);
  }

  /** NaN-poisoned buffers for the output (dtype of q) and the final state (float32). */
  forwardBuffers(): { output: Tensor; finalState: Tensor } {
    const { B, T, H, V, dtype } = this.spec;
    const output = this.own(poisoned([B, T, H, V], dtype, this.device));
    const finalState = this.own(poisoned(this.stateShape(), "float32", this.device));
    return { output, finalState };
  }

  /** NaN-poisoned buffers for dq, dk and dv (dtype of q). */
  protected qkvGradBuffers(): { dq: Tensor; dk: Tensor; dv: Tensor } {
    const { B, T, H, K, V, dtype } = this.spec;
    return {
      dq: this.own(poisoned([B, T, this.HK, K], dtype, this.device)),
      dk: this.own(poisoned([B, T, this.HK, K], dtype, this.device)),
      dv: this.own(poisoned([B, T, H, V], dtype, this.device)),
    };
  }

  /** A NaN-poisoned float32 buffer owned by the case (the gradients of gates, beta and state). */
  protected poisoned32(shape: number[]): Tensor {
    return this.own(poisoned(shape, "float32", this.device));
  }

  /**
   * Random natural-log gates of `shape`, uniform in [low, 0], with `spike` at about one element in 16
   * when given, cast to `dtype`; `rand` draws the values.
   */
  protected randomGate(
    rand: () => number,
    shape: number[],
    low: number,
    spike: number | undefined,
    dtype: DType,
  ) {
    const a = Float32Array.from({ length: shape.reduce((x, y) => x * y, 1) }, () => low * rand());
    if (spike !== undefined) { for (let i = 0; i < a.length; i++) if (rand() < 1 / 16) a[i] = spike; }
    using raw = Tensor.from(a, { shape, device: this.device });
    return this.own(raw.cast(dtype));
  }

  /** The sizes and host copies of q, k and v, the start of the oracle's inputs. */
  protected hostProblem(q: Tensor, k: Tensor, v: Tensor) {
    const { B, T, H, K, V } = this.spec;
    return { B, T, H, HK: this.HK, K, V, q: host(q), k: host(k), v: host(v) };
  }

  /** A random output gradient (dtype of q) and final-state gradient (state shape), owned by the case. */
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
