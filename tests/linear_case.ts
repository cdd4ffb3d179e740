// What the random linear-attention test cases (delta rule, gated linear family, KDA) share: the sizes
// read from the spec, the tensors a case owns and disposes together, the random initial state and
// packed offsets, random log gates with spikes, random cotangents, the host copy of q, k and v and
// NaN-poisoned result buffers.
import { type Device, type DType, Tensor } from "../mod.ts";
import { poison } from "./helpers.ts";

/** Reads a tensor's values exactly (float16/bfloat16 widen exactly) as float64. */
export function host(t: Tensor): Float64Array {
  return Float64Array.from(t.toArray() as Float32Array);
}

/** A fresh NaN-filled tensor: an element the kernel does not write fails the comparison. */
export function poisoned(shape: readonly number[], dtype: DType, device: Device): Tensor {
  return poison(Tensor.empty(shape, { dtype, device }));
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

/** The base of a family's random case: owns its tensors and disposes them together. */
export class LinearCase<S extends LinearCaseSpec> implements Disposable {
  readonly spec: S;
  readonly device: Device;
  readonly HK: number;
  /** Sequences: B, or the packed sequence count. */
  readonly N: number;
  #owned: Tensor[] = [];

  constructor(device: Device, spec: S) {
    this.spec = spec;
    this.device = device;
    this.HK = spec.HK ?? spec.H;
    this.N = spec.cuSeqlens ? spec.cuSeqlens.length - 1 : spec.B;
  }

  /** The state shape (the family's layout may change it). */
  stateShape(): number[] {
    const { H, K, V } = this.spec;
    return [this.N, H, K, V];
  }

  /** A random initial state (none when the spec says false) and the packed offsets on the device. */
  protected stateAndOffsets(seed: number): { initialState?: Tensor; cuSeqlens?: Tensor } {
    const { spec, device } = this;
    return {
      initialState: spec.initialState === false
        ? undefined
        : this.own(Tensor.randn(this.stateShape(), { device, seed: seed + 5, std: 0.5 })),
      cuSeqlens: spec.cuSeqlens
        ? this.own(Tensor.from(Int32Array.from(spec.cuSeqlens), { device }))
        : undefined,
    };
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
