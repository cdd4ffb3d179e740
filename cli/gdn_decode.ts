/**
 * The command line's `gdn-decode` case: one step of `GatedDeltaNetDecodeFwdOp` (one token per sequence
 * against a `[B, H, K, V]` float32 state, a new state written beside it) on random inputs, against the
 * float64 delta-rule recurrence over that one token from the same state (`deltaRuleReference` with T = 1
 * and `initialState`): output and new state held to `DELTA_RULE_TOLERANCE`, the rule of the decode tests.
 * Forward only; timed in GB/s, the least bytes a step moves (`leastBytes`): the fp32 state read and the
 * new one written once, q, k, v, g, beta read once and o written once.
 *
 * Inputs: q, k, v, g and beta as the chunked gdn case draws them (linear_problem.ts, linear.ts) for one
 * token, viewed without the token axis (q, k `[B, HK, K]`, v `[B, H, V]`, g and beta `[B, H]`); the state
 * float32 normal with std 0.1 (seed + 6), which keeps the outputs bounded whatever K: with q of unit std
 * and k of unit norm, the state adds about its std to each element of the output `scale S^T q` and of
 * `S^T k`, a tenth of v's in the residual `v - S^T k`.
 *
 * @module
 */
import { GatedDeltaNetDecodeFwdOp, Tensor } from "../mod.ts";
import { deltaRuleReference } from "../reference/delta_rule.ts";
import { DELTA_RULE_TOLERANCE } from "../reference/tolerance.ts";
import { leastBytes } from "./flops.ts";
import { deltaGates } from "./linear.ts";
import { LinearTensors } from "./linear_problem.ts";
import type { CaseSettings, CheckRow, Mode, OpCase } from "./problem.ts";
import { byRelRms, hostValues, poisoned } from "./problem.ts";

/** The standard deviation of the random state a step starts from. */
const STATE_STD = 0.1;

/** A random Gated DeltaNet decode step. */
export function gdnDecodeCase(settings: CaseSettings): OpCase {
  const { dtype, device, seed, l2norm } = settings;
  // The chunked case's draws over one token (the shape's seq is 1), then viewed as the decode op's.
  const t = new LinearTensors(settings);
  const { B, H, HK, K, V } = t.sizes;
  let q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor;
  try {
    const gates = deltaGates(t, true);
    q = t.own(t.q.reshape([B, HK, K]));
    k = t.own(t.k.reshape([B, HK, K]));
    v = t.own(t.v.reshape([B, H, V]));
    g = t.own(gates.g!.reshape([B, H]));
    beta = t.own(gates.beta.reshape([B, H]));
    state = t.own(Tensor.randn([B, H, K, V], { device, seed: seed + 6, std: STATE_STD }));
  } catch (e) {
    t[Symbol.dispose]();
    throw e;
  }
  const op = new GatedDeltaNetDecodeFwdOp({ useQkL2norm: l2norm });
  const tol = DELTA_RULE_TOLERANCE[dtype as "float32"];

  return {
    description: [
      `q, k [${B}, ${HK}, ${K}] ${dtype}`,
      `v [${B}, ${H}, ${V}] ${dtype}`,
      `g, beta [${B}, ${H}] float32`,
      `state [${B}, ${H}, ${K}, ${V}] float32 (std ${STATE_STD})`,
      "scale K^-0.5",
      ...(l2norm ? ["q, k L2-normalised"] : []),
    ].join("; "),
    modes: ["fwd"],

    check(batches, _backward, progress): CheckRow[] {
      // Both results into NaN-poisoned buffers: an element the step does not write fails.
      using output = poisoned([B, H, V], dtype, device);
      using newState = poisoned([B, H, K, V], "float32", device);
      op.forward(q, k, v, g, beta, state, { output, newState });
      const firstRows = (x: Tensor) => hostValues(x, batches * x.numel / B);
      progress(0, batches * H);
      // [B, HK, K] is [B, T, HK, K] with T = 1: the recurrence over one token from the given state.
      const want = deltaRuleReference({
        B: batches,
        T: 1,
        H,
        HK,
        K,
        V,
        q: firstRows(q),
        k: firstRows(k),
        v: firstRows(v),
        g: firstRows(g),
        beta: firstRows(beta),
        initialState: firstRows(state),
        scale: K ** -0.5,
        l2norm,
        onProgress: progress,
      });
      return [
        byRelRms("output", firstRows(output), want.output, tol.output),
        byRelRms("new state", firstRows(newState), want.finalState, tol.state),
      ];
    },

    call(mode: Mode): () => void {
      if (mode !== "fwd") throw new Error(`gdn-decode times fwd only, not ${mode}`);
      const output = t.own(Tensor.empty([B, H, V], { dtype, device }));
      const newState = t.own(Tensor.empty([B, H, K, V], { dtype: "float32", device }));
      return () => void op.forward(q, k, v, g, beta, state, { output, newState });
    },

    // Written: o (shaped like v, in its dtype) and the new state (like the state).
    bytes: (mode: Mode) => mode === "fwd" ? leastBytes([q, k, v, g, beta, state], [v, state]) : undefined,

    [Symbol.dispose]: () => t[Symbol.dispose](),
  };
}
