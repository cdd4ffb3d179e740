/**
 * The command line's decode steps of the linear family against a `[B, H, K, V]` float32 state: one token
 * per sequence, a new state written beside the given one, on random inputs, against the family's float64
 * recurrence over that one token from the same state. `gdn-decode` (`GatedDeltaNetDecodeFwdOp`) and
 * `deltanet-decode` (`DeltaNetDecodeFwdOp`) against `deltaRuleReference`, `gla-decode` (`GLADecodeFwdOp`,
 * a log decay per key channel) against `gatedLinearReference`, each with T = 1 and `initialState`: output
 * and new state held to `DELTA_RULE_TOLERANCE`, the rule of the decode tests. Forward only; timed in GB/s,
 * the least bytes a step moves (`leastBytes`): the fp32 state read and the new one written once, the
 * token's inputs read once and o written once.
 *
 * Inputs: q, k, v and the gates as the chunked cases draw them (linear_problem.ts, linear.ts, gla.ts) for
 * one token, viewed without the token axis (q, k `[B, HK, K]`, v `[B, H, V]`, g and beta `[B, H]`, gk
 * `[B, H, K]`); the state float32 normal with std 0.1 (seed + 6), which keeps the outputs bounded whatever
 * K: with q of unit std and k of unit norm, the state adds about its std to each element of the output
 * `scale S^T q` and of `S^T k`, a tenth of v's in the delta rule's residual `v - S^T k`.
 *
 * @module
 */
import { DeltaNetDecodeFwdOp, GatedDeltaNetDecodeFwdOp, GLADecodeFwdOp, Tensor } from "../mod.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";
import { gatedLinearReference } from "../reference/linear_attention.ts";
import { DELTA_RULE_TOLERANCE } from "../reference/tolerance.ts";
import { leastBytes } from "./flops.ts";
import { deltaGates } from "./linear.ts";
import { GLA_GATE_LOW } from "./gla.ts";
import { LinearTensors } from "./linear_problem.ts";
import type { CaseSettings, CheckRow, Mode, OpCase } from "./problem.ts";
import { byRelRms, hostValues, poisoned } from "./problem.ts";

/** The decode steps of the linear family the command line runs. */
export type StateDecodeOp = "gdn-decode" | "deltanet-decode" | "gla-decode";

/** The standard deviation of the random state a step starts from. */
const STATE_STD = 0.1;

// One step of an op on its inputs, into the given buffers.
type Step = (state: Tensor, out: { output: Tensor; newState: Tensor }) => void;

/** A random decode step of one linear op against its state. */
export function stateDecodeCase(settings: CaseSettings, op: StateDecodeOp): OpCase {
  const { dtype, device, seed, l2norm } = settings;
  // The chunked case's draws over one token (the shape's seq is 1), then viewed as the decode op's.
  const t = new LinearTensors(settings);
  const { B, H, HK, K, V } = t.sizes;
  // Host values of the first `batches` rows of a [B, ...] tensor.
  const firstRows = (x: Tensor, batches: number) => hostValues(x, batches * x.numel / B);
  let inputs: Tensor[], step: Step, sides: string[], state: Tensor;
  let oracle: (batches: number, state: Tensor, progress: (done: number, total: number) => void) => {
    output: Float64Array;
    finalState: Float64Array;
  };
  try {
    const q = t.own(t.q.reshape([B, HK, K]));
    const k = t.own(t.k.reshape([B, HK, K]));
    const v = t.own(t.v.reshape([B, H, V]));
    const common = (batches: number, state: Tensor) => ({
      B: batches,
      T: 1,
      H,
      HK,
      K,
      V,
      q: firstRows(q, batches),
      k: firstRows(k, batches),
      v: firstRows(v, batches),
      initialState: firstRows(state, batches),
      scale: K ** -0.5,
    });
    if (op === "gla-decode") {
      const gk = t.own(t.uniform([B, 1, H, K], 3, GLA_GATE_LOW, 0).reshape([B, H, K]));
      const glaOp = new GLADecodeFwdOp();
      inputs = [q, k, v, gk];
      sides = [`gk [${B}, ${H}, ${K}] float32 in [${GLA_GATE_LOW}, 0]`];
      step = (state, out) => void glaOp.forward(q, k, v, gk, state, out);
      oracle = (batches, state, progress) => {
        progress(0, batches * H);
        const r = gatedLinearReference({ ...common(batches, state), gk: firstRows(gk, batches) });
        progress(batches * H, batches * H);
        return r;
      };
    } else {
      const gated = op === "gdn-decode";
      const gates = deltaGates(t, gated);
      const beta = t.own(gates.beta.reshape([B, H]));
      const g = gates.g ? t.own(gates.g.reshape([B, H])) : undefined;
      inputs = [q, k, v, ...(g ? [g] : []), beta];
      sides = [`${g ? "g, " : ""}beta [${B}, ${H}] float32`];
      if (g) {
        const gdnOp = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: l2norm });
        step = (state, out) => void gdnOp.forward(q, k, v, g, beta, state, out);
      } else {
        const deltaOp = new DeltaNetDecodeFwdOp({ useQkL2norm: l2norm });
        step = (state, out) => void deltaOp.forward(q, k, v, beta, state, out);
      }
      oracle = (batches, state, progress) =>
        deltaRuleReference({
          ...common(batches, state),
          ...(g ? { g: firstRows(g, batches) } : {}),
          beta: firstRows(beta, batches),
          l2norm,
          onProgress: progress,
        });
    }
    state = t.own(Tensor.randn([B, H, K, V], { device, seed: seed + 6, std: STATE_STD }));
  } catch (e) {
    t[Symbol.dispose]();
    throw e;
  }
  const tol = DELTA_RULE_TOLERANCE[dtype as "float32"];

  return {
    description: [
      `q, k [${B}, ${HK}, ${K}] ${dtype}`,
      `v [${B}, ${H}, ${V}] ${dtype}`,
      ...sides,
      `state [${B}, ${H}, ${K}, ${V}] float32 (std ${STATE_STD})`,
      "scale K^-0.5",
      ...(l2norm ? ["q, k L2-normalised"] : []),
    ].join("; "),
    modes: ["fwd"],

    check(batches, _backward, progress): CheckRow[] {
      // Both results into NaN-poisoned buffers: an element the step does not write fails.
      using output = poisoned([B, H, V], dtype, device);
      using newState = poisoned([B, H, K, V], "float32", device);
      step(state, { output, newState });
      // [B, HK, K] is [B, T, HK, K] with T = 1: the recurrence over one token from the given state.
      const want = oracle(batches, state, progress);
      return [
        byRelRms("output", firstRows(output, batches), want.output, tol.output),
        byRelRms("new state", firstRows(newState, batches), want.finalState, tol.state),
      ];
    },

    call(mode: Mode): () => void {
      if (mode !== "fwd") throw new Error(`${op} times fwd only, not ${mode}`);
      const output = t.own(Tensor.empty([B, H, V], { dtype, device }));
      const newState = t.own(Tensor.empty([B, H, K, V], { dtype: "float32", device }));
      return () => step(state, { output, newState });
    },

    // Written: o (shaped like v, in its dtype) and the new state (like the state).
    bytes: (mode: Mode) => mode === "fwd" ? leastBytes([...inputs, state], [inputs[2], state]) : undefined,

    [Symbol.dispose]: () => t[Symbol.dispose](),
  };
}
