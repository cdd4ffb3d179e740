/**
 * What the command line's linear-attention cases share (the delta rules, the gated linear family, KDA):
 * q, k, v and the output gradient, drawn alike for every family; the tensors a case owns; and the case
 * itself, built from a family's side inputs (gates, beta), forward and oracle: the op into a NaN-poisoned
 * output, the float64 oracle over the first batch rows, a verdict row per output and gradient, and the
 * timing calls of modes fwd and fwdbwd.
 *
 * Inputs (bshd): q, v standard normal; k normal with std K^-0.5, so a key has unit norm on average and
 * the unnormalised recurrences stay bounded (std 1 with the in-kernel L2 norm, which normalises it
 * anyway); seeds seed (q), seed + 1 (k), seed + 2 (v), seed + 5 (output gradient), and seed + 3, seed + 4
 * for a family's side inputs.
 *
 * @module
 */
import { Tensor } from "../mod.ts";
import type { LinearReferenceProblem } from "../reference/sequences.ts";
import { DELTA_RULE_TOLERANCE } from "../reference/tolerance.ts";
import { leastBytes, modeFactor } from "./flops.ts";
import type { CaseSettings, CheckRow, Mode, OpCase } from "./problem.ts";
import { byRelRms, hostValues, poisoned, trainingCall } from "./problem.ts";
import type { Shape } from "./shape.ts";

/** The sizes of a linear problem: batch, tokens, value heads, query/key heads, key and value dims. */
export type LinearSizes = Pick<LinearReferenceProblem, "B" | "T" | "H" | "HK" | "K" | "V">;

/** An oracle's speed in multiply-adds of K x V state work per second, forward and backward. */
export interface OracleRates {
  /** The forward recurrence. */
  forward: number;
  /** The backward (its forward replay included). */
  backward: number;
}

/**
 * Seconds a linear oracle would take over `batches` batch rows of a shape (a rough estimate: it only
 * decides whether to warn or refuse), its work being the K x V state per token and value head.
 */
export function stateWorkSeconds(
  shape: Shape,
  batches: number,
  backward: boolean,
  rates: OracleRates,
): number {
  const work = batches * shape.seq * shape.heads * shape.dim * shape.dimV;
  return work / rates.forward + (backward ? work / rates.backward : 0);
}

/** q, k, v and the output gradient of a linear problem (the module's distributions), and what else a case made. */
export class LinearTensors implements Disposable {
  /** The sizes. */
  readonly sizes: LinearSizes;
  /** `[B, T, HK, K]`, standard normal. */
  readonly q: Tensor;
  /** `[B, T, HK, K]`, std K^-0.5 (1 with the in-kernel L2 norm). */
  readonly k: Tensor;
  /** `[B, T, H, V]`, standard normal. */
  readonly v: Tensor;
  /** The output gradient, `[B, T, H, V]`, standard normal. */
  readonly dO: Tensor;
  readonly #settings: CaseSettings;
  readonly #owned = new DisposableStack();

  /** Draws the tensors of `settings` (disposed together with what {@link own} is given). */
  constructor(settings: CaseSettings) {
    const { shape, dtype, device, seed, l2norm } = settings;
    this.#settings = settings;
    const { B, T, H, HK, K, V } = this.sizes = {
      B: shape.batch,
      T: shape.seq,
      H: shape.heads,
      HK: shape.headsQk,
      K: shape.dim,
      V: shape.dimV,
    };
    try {
      this.q = this.own(Tensor.randn([B, T, HK, K], { dtype, device, seed }));
      this.k = this.own(
        Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: l2norm ? 1 : K ** -0.5 }),
      );
      this.v = this.own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 }));
      this.dO = this.own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 5 }));
    } catch (e) {
      this.#owned.dispose();
      throw e;
    }
  }

  /** A float32 tensor uniform in [low, high], seeded `seed + offset` (a gate, beta). */
  uniform(shape: number[], offset: number, low: number, high: number): Tensor {
    const { device, seed } = this.#settings;
    return this.own(Tensor.rand(shape, { device, seed: seed + offset, low, high }));
  }

  /** Disposes `t` with the others. */
  own<X extends Tensor>(t: X): X {
    return this.#owned.use(t);
  }

  /** Disposes every tensor made (the last made first). */
  [Symbol.dispose](): void {
    this.#owned.dispose();
  }
}

/** A per-token input besides q, k, v (a gate, beta), `[B, T, H]` or `[B, T, H, K]`, float32. */
export interface SideInput<S extends string> {
  /** Its name in the op's and the oracle's arguments; its gradient is `d<name>` in both. */
  readonly name: S;
  /** The values. */
  readonly tensor: Tensor;
  /** The relative RMS bound of its gradient. */
  readonly bound: number;
}

/** How a case calls its op's forward. */
export interface ForwardCall {
  /** Also return the final state. */
  finalState: boolean;
  /** A backward follows (the delta rule then saves its chunk states). */
  training: boolean;
  /** Write the output here. */
  output?: Tensor;
}

/** The gradients of a linear op: dq, dk, dv and, for each side input x, dx. */
export type LinearGradients<S extends string> =
  & Disposable
  & { dq: Tensor; dk: Tensor; dv: Tensor }
  & Partial<Record<`d${S}`, Tensor>>;

/** A forward's result, which runs its own backward (every linear family's does). */
export interface LinearResult<G> extends Disposable {
  /** `[B, T, H, V]`. */
  readonly output: Tensor;
  /** `[B, H, K, V]` float32, when asked. */
  readonly finalState?: Tensor;
  /** The gradients from the output's. */
  backward(dOutput: Tensor): G;
}

/** Host values of one batch row as the oracles take them: q, k, v and the side inputs by name. */
export type HostProblem<S extends string> = LinearReferenceProblem & Partial<Record<S, Float64Array>>;

/** What an oracle's forward returns that the case compares. */
export interface OracleOutputs {
  /** `[B, T, H, V]`. */
  output: Float64Array;
  /** `[B, H, K, V]`. */
  finalState: Float64Array;
}

/** What an oracle's backward returns that the case compares. */
export type OracleGradients<S extends string> =
  & { dq: Float64Array; dk: Float64Array; dv: Float64Array }
  & Partial<Record<`d${S}`, Float64Array>>;

/** A family's float64 oracle; `onProgress` hears of the heads done, where the oracle reports them. */
export interface LinearOracle<S extends string> {
  /** The forward. */
  forward(x: HostProblem<S>, onProgress: (heads: number) => void): OracleOutputs;
  /** The backward from an output gradient. */
  backward(x: HostProblem<S>, dOutput: Float64Array, onProgress: (heads: number) => void): OracleGradients<S>;
}

/** What a family adds to q, k and v: its side inputs, forward, oracle and FLOPs. */
export interface LinearFamily<S extends string, G extends LinearGradients<S>> {
  /** Inputs besides q, k, v, in the order of their rows. */
  sides: readonly SideInput<S>[];
  /** What the inputs line adds (e.g. a fixed decay). */
  note?: string;
  /** Runs the op. */
  forward(call: ForwardCall): LinearResult<G>;
  /** The float64 oracle. */
  oracle: LinearOracle<S>;
  /** FLOPs of one forward. */
  flops: number;
}

/**
 * Runs `run` on each of the first `batches` batch rows alone and joins the `keys` of its results (each a
 * row's array, laid out batch-major): rows are independent, so this is the run over all of them, and
 * progress can move at least a row at a time.
 */
export function byRows(
  batches: number,
  keys: readonly string[],
  run: (row: number) => object,
): Record<string, Float64Array | undefined> {
  const joined: Record<string, Float64Array | undefined> = {};
  for (let b = 0; b < batches; b++) {
    const part = run(b) as Record<string, Float64Array | undefined>;
    for (const key of keys) {
      const a = part[key];
      if (a === undefined) continue;
      const all = joined[key] ??= new Float64Array(a.length * batches);
      all.set(a, a.length * b);
    }
  }
  return joined;
}

// The verdict on a result of the op against the oracle's; one the op or the oracle did not give fails.
function verdictOf(
  name: string,
  got: Float64Array | undefined,
  want: Float64Array | undefined,
  bound: number,
): CheckRow {
  if (got !== undefined && want !== undefined) return byRelRms(name, got, want, bound);
  const bad = got === undefined ? "not returned by the op" : "not given by the oracle";
  return {
    name,
    maxAbs: NaN,
    relRms: NaN,
    bound: `rel RMS <= ${bound.toExponential(1)}`,
    pass: false,
    problem: bad,
  };
}

/**
 * A random case of a linear op: q, k, v and the output gradient made here, the rest by `build` (which
 * owns what it makes through the tensors it is given). Outputs and states are held to the delta rule's
 * tolerance for the dtype, side inputs' gradients to their own bounds.
 */
export function linearOpCase<S extends string, G extends LinearGradients<S>>(
  settings: CaseSettings,
  build: (t: LinearTensors) => LinearFamily<S, G>,
): OpCase {
  const { dtype, device, l2norm } = settings;
  const t = new LinearTensors(settings);
  let family: LinearFamily<S, G>;
  try {
    family = build(t);
  } catch (e) {
    t[Symbol.dispose]();
    throw e;
  }
  const { B, T, H, HK, K, V } = t.sizes;
  const { q, k, v, dO } = t;
  const { sides, oracle } = family;
  const tol = DELTA_RULE_TOLERANCE[dtype as "float32"];
  // Side inputs of one shape share an entry of the inputs line: "g, beta [1, 64, 2] float32".
  const groups = new Map<string, string[]>();
  for (const s of sides) {
    const key = `[${s.tensor.shape.join(", ")}] ${s.tensor.dtype}`;
    groups.set(key, [...groups.get(key) ?? [], s.name]);
  }

  return {
    description: [
      `q, k [${B}, ${T}, ${HK}, ${K}] ${dtype}`,
      `v [${B}, ${T}, ${H}, ${V}] ${dtype}`,
      ...[...groups].map(([shape, names]) => `${names.join(", ")} ${shape}`),
      "scale K^-0.5",
      ...(l2norm ? ["q, k L2-normalised"] : []),
      ...(family.note ? [family.note] : []),
    ].join("; "),
    modes: ["fwd", "fwdbwd"],

    check(batches, backward, progress): CheckRow[] {
      using output = poisoned([B, T, H, V], dtype, device);
      using r = family.forward({ finalState: true, training: backward, output });
      using grads = backward ? r.backward(dO) : undefined;
      // The oracle's inputs: the first `batches` rows, exactly as the op read them, one row at a time.
      const firstRows = (x: Tensor | undefined) => x && hostValues(x, batches * x.numel / B);
      const inputs: [string, Tensor][] = [
        ["q", q],
        ["k", k],
        ["v", v],
        ...sides.map((s): [string, Tensor] => [s.name, s.tensor]),
      ];
      const host = inputs.map(([name, x]) => [name, firstRows(x)!] as const);
      const rowOf = (a: Float64Array, b: number) =>
        a.subarray(b * a.length / batches, (b + 1) * a.length / batches);
      const problem = (b: number) => {
        const x: Record<string, unknown> = { B: 1, T, H, HK, K, V };
        for (const [name, a] of host) x[name] = rowOf(a, b);
        return x as HostProblem<S>;
      };
      const total = batches * H * (backward ? 2 : 1);
      const heads = (before: number) => (done: number) => progress(before + done, total);
      progress(0, total);
      const want = byRows(batches, ["output", "finalState"], (b) => {
        const o = oracle.forward(problem(b), heads(b * H));
        progress((b + 1) * H, total);
        return o;
      });
      const rows = [
        // The buffer the op was given, so an element it did not write (still NaN) fails.
        verdictOf("output", firstRows(output), want.output, tol.output),
        verdictOf("final state", firstRows(r.finalState), want.finalState, tol.state),
      ];
      if (!grads) return rows;
      const dOut = firstRows(dO)!;
      const bounds = [
        ...(["dq", "dk", "dv"] as const).map((name) => [name, tol.dqkv] as const),
        ...sides.map((s) => [`d${s.name}` as const, s.bound] as const),
      ];
      const grad = byRows(batches, bounds.map(([name]) => name), (b) => {
        const g = oracle.backward(problem(b), rowOf(dOut, b), heads((batches + b) * H));
        progress((batches + b + 1) * H, total);
        return g;
      });
      // Each side input's gradient is named after it (dg, dgk, dgate, dbeta), as LinearGradients says.
      const got = grads as Partial<Record<string, Tensor>>;
      for (const [name, bound] of bounds) rows.push(verdictOf(name, firstRows(got[name]), grad[name], bound));
      return rows;
    },

    // fwd into an output made once; fwdbwd with the states a backward needs.
    call: (mode: Mode) =>
      trainingCall(
        mode,
        "a linear op",
        () => t.own(Tensor.empty([B, T, H, V], { dtype, device })),
        (output) => family.forward({ finalState: false, training: output === undefined, output }),
        dO,
      ),

    flops: (mode: Mode) => family.flops * modeFactor("linear", mode),

    // The forward's q, k, v and side inputs read once, o (shaped like v) written once, as
    // bench/gla_side_by_side.ts counts bytes; it states no count for forward + backward.
    bytes: (mode: Mode) =>
      mode === "fwd" ? leastBytes([q, k, v, ...sides.map((s) => s.tensor)], [v]) : undefined,

    [Symbol.dispose]: () => t[Symbol.dispose](),
  };
}
