// Shared by the linear_*.test.ts files: random delta-rule problems on a device with their exact
// values on the host, the float64 oracle's answers, NaN-poisoned result buffers and the tolerance
// rule per dtype.
import { DELTA_RULE_TOLERANCE, type DeltaRuleTolerance } from "../reference/tolerance.ts";
import { assertClose, type Device, type DType, Tensor } from "../mod.ts";
import {
  type DeltaReferenceGradients,
  type DeltaReferenceInputs,
  type DeltaReferenceOutputs,
  deltaRuleReference,
  deltaRuleReferenceBackward,
} from "../reference/delta_rule.ts";
import { host, LinearCase, type LinearCaseSpec, poisoned } from "./linear_case.ts";

export { host, poisoned };

/** The tolerances of a q/k/v dtype: the shipped rule (reference/tolerance.ts, FLA's for 16-bit inputs). */
export function tol(dtype: DType): DeltaRuleTolerance {
  return DELTA_RULE_TOLERANCE[dtype as "float32"];
}

/** What a random problem looks like. */
export interface CaseSpec extends LinearCaseSpec {
  /** Gated delta rule. */
  gated: boolean;
  /** In-kernel L2 norm; without it keys are drawn with norm about 1 (std K^-0.5), a stable recurrence. */
  l2norm?: boolean;
  /** Dtype of g and beta (default float32). */
  gateDtype?: DType;
  /** g is uniform in [gateLow, 0] (default -0.25). */
  gateLow?: number;
  /** Query scale (default: the op's K^-0.5). */
  scale?: number;
  /** Standard deviation of the keys (default K^-0.5 without l2norm, 1 with it). */
  keyStd?: number;
  /** beta is uniform in [betaLow, betaHigh] (default [0, 1]). */
  betaLow?: number;
  /** Upper end of beta. */
  betaHigh?: number;
}

/** The exact input values on the host, as the oracle takes them. */
export type HostInputs = DeltaReferenceInputs & {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  g?: Float64Array;
  beta: Float64Array;
  initialState?: Float64Array;
};

/** A random problem on a device, its host copy and the oracle's answers. */
export class DeltaCase
  extends LinearCase<CaseSpec, HostInputs, DeltaReferenceOutputs, DeltaReferenceGradients> {
  readonly scale: number;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly g: Tensor | undefined;
  readonly beta: Tensor;
  readonly hostInputs: HostInputs;
  protected readonly oracle = { forward: deltaRuleReference, backward: deltaRuleReferenceBackward };

  constructor(device: Device, spec: CaseSpec, seed: number) {
    super(device, spec, seed);
    const { B, T, H, K, V, dtype } = spec;
    const HK = this.HK;
    this.scale = spec.scale ?? K ** -0.5;
    const gateDtype = spec.gateDtype ?? "float32";
    const keyStd = spec.keyStd ?? (spec.l2norm ? 1 : K ** -0.5);
    try {
      this.q = this.own(Tensor.randn([B, T, HK, K], { dtype, device, seed, offset: 0 }));
      this.k = this.own(Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: keyStd }));
      this.v = this.own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
      this.g = spec.gated
        ? this.own(
          Tensor.rand([B, T, H], {
            dtype: gateDtype,
            device,
            seed: seed + 3,
            low: spec.gateLow ?? -0.25,
            high: 0,
          }),
        )
        : undefined;
      this.beta = this.own(
        Tensor.rand([B, T, H], {
          dtype: gateDtype,
          device,
          seed: seed + 4,
          low: spec.betaLow ?? 0,
          high: spec.betaHigh ?? 1,
        }),
      );
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.hostInputs = {
      ...this.hostProblem(this.q, this.k, this.v),
      g: this.g ? host(this.g) : undefined,
      beta: host(this.beta),
      scale: this.scale,
      initialState: this.initialState ? host(this.initialState) : undefined,
      cuSeqlens: spec.cuSeqlens,
      l2norm: spec.l2norm ?? false,
    };
  }

  /** The common options of the functional API for this case (its tensors are "bshd"). */
  options(): {
    layout: "bshd";
    initialState?: Tensor;
    cuSeqlens?: Tensor;
    useQkL2norm: boolean;
    scale?: number;
  } {
    return {
      layout: "bshd",
      initialState: this.initialState,
      cuSeqlens: this.cuSeqlens,
      useQkL2norm: this.spec.l2norm ?? false,
      scale: this.spec.scale,
    };
  }

  /** NaN-poisoned gradient buffers (dInitialState when the case has an initial state; dg, dbeta float32). */
  backwardBuffers(): {
    dq: Tensor;
    dk: Tensor;
    dv: Tensor;
    dbeta: Tensor;
    dg?: Tensor;
    dInitialState?: Tensor;
  } {
    const { B, T, H } = this.spec;
    return {
      ...this.qkvGradBuffers(),
      dbeta: this.poisoned32([B, T, H]),
      dg: this.g ? this.poisoned32([B, T, H]) : undefined,
      dInitialState: this.initialState ? this.poisoned32(this.stateShape()) : undefined,
    };
  }
}

/**
 * Compares a tensor to expected values (the oracle's, or another kernel result's) by relative RMS.
 * The expected values must hold no NaN, so any NaN in `actual` fails (assertClose alone would let a
 * NaN match a NaN, as two unwritten buffers would), as does a differing pattern of infinities.
 */
export function expectClose(
  actual: Tensor | ArrayLike<number>,
  expected: ArrayLike<number>,
  relRms: number,
  name: string,
): void {
  for (let i = 0; i < expected.length; i++) {
    if (Number.isNaN(expected[i])) throw new Error(`${name}: the expected values hold NaN at ${i}`);
  }
  assertClose(actual, expected, { relRms, name });
}

/** The first `tokens` token rows of a batch-one `[1, T, heads, D]` array (the rows packed sequences cover). */
export function leadingRows(a: ArrayLike<number>, tokens: number, rowSize: number): Float64Array {
  return Float64Array.from({ length: tokens * rowSize }, (_, i) => a[i]);
}

/**
 * A tensor's first `tokens` token rows of a batch-one `[1, T, heads, D]` tensor, as float64. Only
 * those rows are read: the rows past a packed call's last offset may never have been written.
 */
export function leadingRowsOf(t: Tensor, tokens: number): Float64Array {
  using rows = t.slice(1, 0, tokens);
  return Float64Array.from(host(rows));
}

/**
 * Checks two kernel results are identical (the same arithmetic on the same values). Unlike
 * assert.deepEqual, a NaN fails even where both hold NaN, so two unwritten buffers never pass.
 */
export function expectSame(actual: ArrayLike<number>, expected: ArrayLike<number>, name: string): void {
  if (actual.length !== expected.length) {
    throw new Error(`${name}: ${actual.length} elements, expected ${expected.length}`);
  }
  for (let i = 0; i < actual.length; i++) {
    if (Number.isNaN(actual[i]) || actual[i] !== expected[i]) {
      throw new Error(`${name}: element ${i} is ${actual[i]}, expected ${expected[i]} (identical results)`);
    }
  }
}

/**
 * Compares two kernel results that may take different code paths (layouts, packing, grouping):
 * relative RMS within `relRms`, and no NaN on either side (assertClose lets NaN match NaN, which
 * two unwritten buffers would).
 */
export function expectAgree(
  actual: Tensor | ArrayLike<number>,
  expected: ArrayLike<number>,
  relRms: number,
  name: string,
): void {
  const a = actual instanceof Tensor ? host(actual) : actual;
  for (const [side, values] of [["actual", a], ["expected", expected]] as const) {
    for (let i = 0; i < values.length; i++) {
      if (Number.isNaN(values[i])) throw new Error(`${name}: ${side} element ${i} is NaN`);
    }
  }
  assertClose(a, expected, { relRms, name });
}

/** The agreement bound of two code paths on the same inputs: 1e-5 for float32, 16-bit output rounding otherwise. */
export function pathTolerance(dtype: DType): number {
  return dtype === "float32" ? 1e-5 : 0.004;
}

/** A `"bhsd"` copy (on the device, owned by the case) of a `"bshd"` tensor (or of g / beta). */
export function toBhsd(c: DeltaCase, t: Tensor): Tensor {
  return c.own(t.permute(t.ndim === 4 ? [0, 2, 1, 3] : [0, 2, 1]));
}

/** `"bhsd"` copies (owned by the case) of a case's inputs: q, k, v, g (when gated) and beta. */
export function bhsdInputs(c: DeltaCase): { q: Tensor; k: Tensor; v: Tensor; g?: Tensor; beta: Tensor } {
  const { q, k, v, g, beta } = c;
  return {
    q: toBhsd(c, q),
    k: toBhsd(c, k),
    v: toBhsd(c, v),
    g: g ? toBhsd(c, g) : undefined,
    beta: toBhsd(c, beta),
  };
}

/** A `"bhsd"` tensor's values in `"bshd"` order, as float64. */
export function bshdValues(t: Tensor): Float64Array {
  using p = t.permute(t.ndim === 4 ? [0, 2, 1, 3] : [0, 2, 1]);
  return host(p);
}
