/**
 * The command line's cases of the gated linear family, one builder for the four decays: `gla`
 * (`chunkGla`, a log decay per key channel gk `[B, T, H, K]`), `simple-gla` (`chunkSimpleGla`, a scalar
 * log decay per token g `[B, T, H]`), `retention` (`chunkRetention`, the fixed decay `log(1 - 2^(-5 - h))`
 * of head h) and `linear-attn` (`chunkLinearAttn`, no decay, no normaliser). Each runs on random inputs in
 * the `"bshd"` layout against the float64 recurrence (`gatedLinearReference`), outputs and dq, dk, dv held
 * to `DELTA_RULE_TOLERANCE`, dgk and dg to `GATE_GRADIENT_TOLERANCE.gla`.
 *
 * Inputs: q, k, v as every linear case draws them (linear_problem.ts); gk and g float32 uniform in
 * [-0.25, 0], the range the family's tests draw by default and the one its 16-bit dgk / dg bound was
 * measured on (FLA's benchmarks draw `logsigmoid(randn)`, a heavier tail; the timing does not depend on
 * the values). Retention's oracle takes the float32 decays the op builds, so both see the same numbers.
 *
 * @module
 */
import {
  chunkGla,
  chunkLinearAttn,
  chunkRetention,
  chunkSimpleGla,
  type GlaGradients,
  type GlaOptions,
  type GlaResult,
} from "../mod.ts";
import {
  gatedLinearReference,
  gatedLinearReferenceBackward,
  retentionLogDecay,
} from "../reference/linear_attention.ts";
import { GATE_GRADIENT_TOLERANCE } from "../reference/tolerance.ts";
import { glaForwardFlops } from "./flops.ts";
import { type LinearFamily, linearOpCase, type SideInput, stateWorkSeconds } from "./linear_problem.ts";
import type { CaseSettings, OpCase } from "./problem.ts";
import type { Shape } from "./shape.ts";

/** The ops of the gated linear family. */
export type GlaOp = "gla" | "simple-gla" | "retention" | "linear-attn";

// Multiply-adds of K x V state work per second of the oracle on one core (measured roughly against the
// delta rule's: a plain decayed update, no delta write; the estimate only decides whether to warn).
const ORACLE_RATES = { forward: 1.5e8, backward: 5e7 };

/** The lowest log decay drawn per token (and key channel); the decode step draws its gk the same way. */
export const GLA_GATE_LOW = -0.25;

/** Seconds the float64 oracle would take over `batches` batch rows of a shape (a rough estimate). */
export function glaOracleSeconds(shape: Shape, batches: number, backward: boolean): number {
  return stateWorkSeconds(shape, batches, backward, ORACLE_RATES);
}

/** A random problem of one op of the gated linear family. */
export function glaCase(settings: CaseSettings, op: GlaOp): OpCase {
  const bound = GATE_GRADIENT_TOLERANCE.gla[settings.dtype as "float32"];
  return linearOpCase(settings, (t): LinearFamily<"gk" | "g", GlaGradients> => {
    const { q, k, v } = t;
    const { B, T, H, K, V } = t.sizes;
    let sides: SideInput<"gk" | "g">[] = [], note: string | undefined;
    let run: (o: GlaOptions) => GlaResult;
    let gGamma: Float64Array | undefined;
    if (op === "gla") {
      const gk = t.uniform([B, T, H, K], 3, GLA_GATE_LOW, 0);
      sides = [{ name: "gk", tensor: gk, bound }];
      run = (o) => chunkGla(q, k, v, gk, o);
    } else if (op === "simple-gla") {
      const g = t.uniform([B, T, H], 3, GLA_GATE_LOW, 0);
      sides = [{ name: "g", tensor: g, bound }];
      run = (o) => chunkSimpleGla(q, k, v, { ...o, g });
    } else if (op === "retention") {
      gGamma = Float64Array.from(retentionLogDecay(H), Math.fround); // chunkRetention's float32 values
      note = "decay log(1 - 2^(-5 - h)) of head h";
      run = (o) => chunkRetention(q, k, v, o);
    } else {
      note = "no decay, no normaliser";
      run = (o) => chunkLinearAttn(q, k, v, o);
    }
    const fixed = { scale: K ** -0.5, gGamma };
    return {
      sides,
      note,
      forward: ({ finalState, output }) =>
        run({ layout: "bshd", outputFinalState: finalState, out: output && { output } }),
      oracle: {
        forward: (x) => gatedLinearReference({ ...x, ...fixed }),
        backward: (x, dOut) => gatedLinearReferenceBackward({ ...x, ...fixed }, dOut),
      },
      flops: glaForwardFlops(B, T, H, K, V),
    };
  });
}
