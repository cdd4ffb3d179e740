/**
 * The command line's delta-rule cases: DeltaNet (`chunkDeltaRule`) and Gated DeltaNet
 * (`chunkGatedDeltaRule`) on random inputs in the `"bshd"` layout, against the float64 recurrence
 * (`deltaRuleReference`), held to `DELTA_RULE_TOLERANCE`.
 *
 * Inputs: q, k, v as every linear case draws them (linear_problem.ts); g uniform in [-0.25, 0] (a decay
 * of 0.78 to 1 per token, the range the delta-rule tests use) and beta uniform in [0, 1], float32.
 *
 * @module
 */
import { chunkDeltaRule, chunkGatedDeltaRule, type DeltaRuleGradients, type Tensor } from "../mod.ts";
import { deltaRuleReference, deltaRuleReferenceBackward } from "../reference/delta_rule.ts";
import { DELTA_RULE_TOLERANCE } from "../reference/tolerance.ts";
import { linearForwardFlops } from "./flops.ts";
import {
  type LinearFamily,
  linearOpCase,
  type LinearTensors,
  type SideInput,
  stateWorkSeconds,
} from "./linear_problem.ts";
import type { CaseSettings, OpCase } from "./problem.ts";
import type { Shape } from "./shape.ts";

// Multiply-adds of K x V state work per second the float64 oracle manages on one core (measured
// roughly; the estimate only decides whether to warn).
const ORACLE_RATES = { forward: 1e8, backward: 2.5e7 };

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function linearOracleSeconds(shape: Shape, batches: number, backward: boolean): number {
  return stateWorkSeconds(shape, batches, backward, ORACLE_RATES);
}

/** Gated DeltaNet's decay g (when `gated`) and beta, `[B, T, H]` float32, owned by `t`. */
export function deltaGates(t: LinearTensors, gated: boolean): { g?: Tensor; beta: Tensor } {
  const { B, T, H } = t.sizes;
  return {
    g: gated ? t.uniform([B, T, H], 3, -0.25, 0) : undefined,
    beta: t.uniform([B, T, H], 4, 0, 1),
  };
}

/** A random DeltaNet (`gated` false) or Gated DeltaNet problem. */
export function linearCase(settings: CaseSettings, gated: boolean): OpCase {
  const { dtype, l2norm } = settings;
  const tol = DELTA_RULE_TOLERANCE[dtype as "float32"];
  return linearOpCase(settings, (t): LinearFamily<"g" | "beta", DeltaRuleGradients> => {
    const { q, k, v } = t;
    const { B, T, H, K, V } = t.sizes;
    const { g, beta } = deltaGates(t, gated);
    const sides: SideInput<"g" | "beta">[] = [
      ...(g ? [{ name: "g" as const, tensor: g, bound: tol.dsmall }] : []),
      { name: "beta", tensor: beta, bound: tol.dsmall },
    ];
    const fixed = { scale: K ** -0.5, l2norm };
    return {
      sides,
      forward: ({ finalState, training, output }) => {
        const o = {
          layout: "bshd" as const,
          useQkL2norm: l2norm,
          outputFinalState: finalState,
          saveForBackward: training,
          out: output && { output },
        };
        return g ? chunkGatedDeltaRule(q, k, v, g, beta, o) : chunkDeltaRule(q, k, v, beta, o);
      },
      oracle: {
        forward: (x, onProgress) => deltaRuleReference({ ...x, beta: x.beta!, ...fixed, onProgress }),
        backward: (x, dOut, onProgress) =>
          deltaRuleReferenceBackward({ ...x, beta: x.beta!, ...fixed, onProgress }, dOut),
      },
      flops: linearForwardFlops(B, T, H, K, V),
    };
  });
}
