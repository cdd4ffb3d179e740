/**
 * The command line's KDA case: `chunkKda(q, k, v, gate, beta)` (the gated delta rule with a log decay
 * per key channel) on random inputs in the `"bshd"` layout against the float64 recurrence
 * (`kdaReference`): output, final state and dq, dk, dv held to `DELTA_RULE_TOLERANCE`, dbeta to its
 * small-gradient bound, dgate to `GATE_GRADIENT_TOLERANCE.kda`. FLOPs as the delta rule's
 * (bench/kda_side_by_side.ts).
 *
 * Inputs: q, k, v as every linear case draws them (linear_problem.ts; k's std K^-0.5 keeps the delta
 * write stable); gate float32 uniform in [-0.5, 0], the KDA tests' default range and the one their
 * 16-bit dgate bound holds on (a decay inside every kernel's supported range; FLA's `logsigmoid`-like
 * gates reach further down, which the timing does not depend on); beta uniform in [0, 1].
 *
 * @module
 */
import { chunkKda, type KdaGradients } from "../mod.ts";
import { kdaReference, kdaReferenceBackward } from "../reference/kda.ts";
import { DELTA_RULE_TOLERANCE, GATE_GRADIENT_TOLERANCE } from "../reference/tolerance.ts";
import { linearForwardFlops } from "./flops.ts";
import { type HostProblem, type LinearFamily, linearOpCase, stateWorkSeconds } from "./linear_problem.ts";
import type { CaseSettings, OpCase } from "./problem.ts";
import type { Shape } from "./shape.ts";

// Multiply-adds of K x V state work per second of the oracle on one core (measured roughly: a fresh
// decayed state per token makes it a few times slower than the delta rule's forward; the estimate only
// decides whether to warn).
const ORACLE_RATES = { forward: 2.5e7, backward: 1.5e7 };

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function kdaOracleSeconds(shape: Shape, batches: number, backward: boolean): number {
  return stateWorkSeconds(shape, batches, backward, ORACLE_RATES);
}

/** A random KDA problem. */
export function kdaCase(settings: CaseSettings): OpCase {
  const key = settings.dtype as "float32";
  return linearOpCase(settings, (t): LinearFamily<"gate" | "beta", KdaGradients> => {
    const { q, k, v } = t;
    const { B, T, H, K, V } = t.sizes;
    const gate = t.uniform([B, T, H, K], 3, -0.5, 0);
    const beta = t.uniform([B, T, H], 4, 0, 1);
    // The side inputs are always given here; the oracle takes them as required fields.
    const inputs = (x: HostProblem<"gate" | "beta">) => ({
      ...x,
      gate: x.gate!,
      beta: x.beta!,
      scale: K ** -0.5,
    });
    return {
      sides: [
        { name: "gate", tensor: gate, bound: GATE_GRADIENT_TOLERANCE.kda[key] },
        { name: "beta", tensor: beta, bound: DELTA_RULE_TOLERANCE[key].dsmall },
      ],
      forward: ({ finalState, output }) =>
        chunkKda(q, k, v, gate, beta, {
          layout: "bshd",
          outputFinalState: finalState,
          out: output && { output },
        }),
      oracle: {
        forward: (x) => kdaReference(inputs(x)),
        backward: (x, dOut) => kdaReferenceBackward(inputs(x), dOut),
      },
      flops: linearForwardFlops(B, T, H, K, V),
    };
  });
}
