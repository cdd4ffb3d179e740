/**
 * The command line's linear-attention cases: DeltaNet (`chunkDeltaRule`) and Gated DeltaNet
 * (`chunkGatedDeltaRule`) on random inputs in the `"bshd"` layout, against the float64 recurrence.
 *
 * Inputs: q, v standard normal; k normal with std K^-0.5 (unit norm on average, a stable recurrence;
 * std 1 with the in-kernel L2 norm); g uniform in [-0.25, 0] and beta uniform in [0, 1], float32.
 *
 * @module
 */
import { chunkDeltaRule, chunkGatedDeltaRule, type DeltaRuleResult, Tensor } from "../mod.ts";
import { deltaRuleReference, deltaRuleReferenceBackward } from "../reference/delta_rule.ts";
import { DELTA_RULE_TOLERANCE } from "../reference/tolerance.ts";
import { linearForwardFlops, modeFactor } from "./flops.ts";
import {
  byRelRms,
  type CaseSettings,
  type CheckRow,
  hostValues,
  type Mode,
  type OpCase,
  poisoned,
} from "./problem.ts";
import type { Shape } from "./shape.ts";

// Multiply-adds of K x V state work per second the float64 oracle manages on one core (measured
// roughly; the estimate only decides whether to warn).
const ORACLE_FORWARD_RATE = 1e8;
const ORACLE_BACKWARD_RATE = 2.5e7;

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function linearOracleSeconds(shape: Shape, batches: number, backward: boolean): number {
  const work = batches * shape.seq * shape.heads * shape.dim * shape.dimV;
  return work / ORACLE_FORWARD_RATE + (backward ? work / ORACLE_BACKWARD_RATE : 0);
}

/** The random inputs of a linear problem (the module's distributions) and an output gradient. */
export interface LinearInputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  /** Gated DeltaNet only. */
  g?: Tensor;
  beta: Tensor;
  dO: Tensor;
  /** Every tensor made; disposing the inputs disposes these (a caller may add its own). */
  owned: Tensor[];
}

/** Random inputs of a DeltaNet (`gated` false) or Gated DeltaNet problem, bshd. */
export function linearInputs(settings: CaseSettings, gated: boolean): LinearInputs {
  const { shape, dtype, device, seed, l2norm } = settings;
  const B = shape.batch, T = shape.seq, H = shape.heads, HK = shape.headsQk, K = shape.dim, V = shape.dimV;
  const owned: Tensor[] = [];
  const own = (t: Tensor) => (owned.push(t), t);
  try {
    return {
      q: own(Tensor.randn([B, T, HK, K], { dtype, device, seed })),
      k: own(Tensor.randn([B, T, HK, K], { dtype, device, seed: seed + 1, std: l2norm ? 1 : K ** -0.5 })),
      v: own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 2 })),
      g: gated ? own(Tensor.rand([B, T, H], { device, seed: seed + 3, low: -0.25, high: 0 })) : undefined,
      beta: own(Tensor.rand([B, T, H], { device, seed: seed + 4 })),
      dO: own(Tensor.randn([B, T, H, V], { dtype, device, seed: seed + 5 })),
      owned,
      [Symbol.dispose]: () => owned.forEach((t) => t.dispose()),
    };
  } catch (e) {
    for (const t of owned) t.dispose();
    throw e;
  }
}

/** A random DeltaNet or Gated DeltaNet problem. */
export function linearCase(settings: CaseSettings, gated: boolean): OpCase {
  const { shape, dtype, device, l2norm } = settings;
  const B = shape.batch, T = shape.seq, H = shape.heads, HK = shape.headsQk, K = shape.dim, V = shape.dimV;
  const scale = K ** -0.5;
  const inputs = linearInputs(settings, gated);
  const { q, k, v, g, beta, dO, owned } = inputs;
  const own = (t: Tensor) => (owned.push(t), t);
  const options = { layout: "bshd" as const, useQkL2norm: l2norm };
  const forward = (
    extra: { outputFinalState?: boolean; saveForBackward?: boolean; out?: { output: Tensor } },
  ) =>
    gated
      ? chunkGatedDeltaRule(q, k, v, g!, beta, { ...options, ...extra })
      : chunkDeltaRule(q, k, v, beta, { ...options, ...extra });
  const tol = DELTA_RULE_TOLERANCE[dtype as "float32"];

  return {
    description: `q, k [${B}, ${T}, ${HK}, ${K}] ${dtype}; v [${B}, ${T}, ${H}, ${V}] ${dtype}; ` +
      `${gated ? "g, beta" : "beta"} [${B}, ${T}, ${H}] float32; scale K^-0.5${
        l2norm ? "; q, k L2-normalised" : ""
      }`,
    modes: ["fwd", "fwdbwd"],

    check(batches, backward, progress): CheckRow[] {
      using output = poisoned([B, T, H, V], dtype, device);
      using r: DeltaRuleResult = forward({
        outputFinalState: true,
        saveForBackward: backward,
        out: { output },
      });
      using grads = backward ? r.backward(dO) : undefined;
      // The oracle's inputs: the first `batches` rows, exactly as the op read them.
      const qkCount = batches * T * HK * K, vCount = batches * T * H * V, gCount = batches * T * H;
      const inputs = {
        B: batches,
        T,
        H,
        HK,
        K,
        V,
        q: hostValues(q, qkCount),
        k: hostValues(k, qkCount),
        v: hostValues(v, vCount),
        g: g ? hostValues(g, gCount) : undefined,
        beta: hostValues(beta, gCount),
        scale,
        l2norm,
      };
      const total = batches * H * (backward ? 2 : 1);
      progress(0, total);
      const oracle = deltaRuleReference({ ...inputs, onProgress: (d) => progress(d, total) });
      const rows = [
        byRelRms("output", hostValues(r.output, vCount), oracle.output, tol.output),
        byRelRms("final state", hostValues(r.finalState!, batches * H * K * V), oracle.finalState, tol.state),
      ];
      if (grads) {
        const dOut = hostValues(dO, vCount);
        const want = deltaRuleReferenceBackward(
          { ...inputs, onProgress: (d) => progress(batches * H + d, total) },
          dOut,
        );
        rows.push(
          byRelRms("dq", hostValues(grads.dq, qkCount), want.dq, tol.dqkv),
          byRelRms("dk", hostValues(grads.dk, qkCount), want.dk, tol.dqkv),
          byRelRms("dv", hostValues(grads.dv, vCount), want.dv, tol.dqkv),
          byRelRms("dbeta", hostValues(grads.dbeta, gCount), want.dbeta, tol.dsmall),
        );
        if (grads.dg) rows.push(byRelRms("dg", hostValues(grads.dg, gCount), want.dg, tol.dsmall));
      }
      return rows;
    },

    call(mode: Mode): () => void {
      if (mode === "fwd") {
        const output = own(Tensor.empty([B, T, H, V], { dtype, device }));
        return () => {
          using _r = forward({ out: { output } });
        };
      }
      if (mode === "fwdbwd") {
        return () => {
          using r = forward({ saveForBackward: true });
          using _grads = r.backward(dO);
        };
      }
      throw new Error(`linear ops time fwd and fwdbwd, not ${mode}`);
    },

    flops: (mode: Mode) => linearForwardFlops(B, T, H, K, V) * modeFactor("linear", mode),

    [Symbol.dispose]: inputs[Symbol.dispose],
  };
}
