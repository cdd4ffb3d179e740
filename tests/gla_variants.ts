// The gated linear family's registry rows in tests/variants.test.ts: each row runs on a case its
// planner sends to it (the decay policy of the row's variant, K = the row's head dim, V not a multiple
// of the 64-column tile, T with a tail chunk, gate spikes), held to the float64 oracle with the
// tolerances of tests/gla_ops_fixtures.ts; the plan of the call must name the row.
import assert from "node:assert/strict";
import { type KernelRow, rowName } from "../build/registry.ts";
import { type DType, GLADecodeFwdOp, lastPlan, type Tensor } from "../mod.ts";
import { expectClose, GlaCase, type GlaSpec, host, tol } from "./gla_ops_fixtures.ts";
import { poisoned } from "./linear_fixtures.ts";

function expectRan(row: KernelRow, what: string): void {
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(
    ran.includes(rowName(row)),
    `${rowName(row)} did not run (${what}); the plan was ${JSON.stringify(lastPlan())}`,
  );
}

function spec(row: KernelRow): GlaSpec {
  return {
    fn: row.variant === "scalar" ? "chunkSimpleGla" : "chunkGla",
    B: 2,
    T: 150,
    H: 3,
    K: row.d,
    V: 72,
    dtype: row.dtype as DType,
    spikes: true,
  };
}

/** Runs one row of stage `linear.gla.*` on the CUDA device. */
export function glaExercise(row: KernelRow, seed: number): void {
  if (row.stage === "linear.gla.decode") return decodeExercise(row, seed);
  const s = spec(row);
  using c = new GlaCase("cuda", s, seed);
  const t = tol(s.dtype);
  const ref = c.reference();
  // The split forward's two stages run on the forward; the others on the backward.
  const forward = row.stage === "linear.gla.prep" || row.stage === "linear.gla.pass";
  using r = c.forward();
  if (forward) expectRan(row, "forward");
  expectClose(r.output, ref.output, t.output, `output ${rowName(row)}`);
  expectClose(r.finalState!, ref.finalState, t.state, `final state ${rowName(row)}`);
  if (forward) return;
  const { dOutput, dFinalState } = c.cotangents(seed);
  const g = c.referenceBackward(dOutput, dFinalState);
  using grads = c.backward(dOutput, dFinalState);
  expectRan(row, "backward");
  expectClose(grads.dq, g.dq, t.dqkv, `dq ${rowName(row)}`);
  expectClose(grads.dk, g.dk, t.dqkv, `dk ${rowName(row)}`);
  expectClose(grads.dv, g.dv, t.dqkv, `dv ${rowName(row)}`);
  if (grads.dgk) expectClose(grads.dgk, g.dgk, t.dgate, `dgk ${rowName(row)}`);
  if (grads.dg) expectClose(grads.dg, g.dg, t.dgate, `dg ${rowName(row)}`);
  expectClose(grads.dInitialState!, g.dInitialState, t.dsmall, `dInitialState ${rowName(row)}`);
}

// One decode step of 3 sequences against the oracle's one-token recurrence.
function decodeExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as DType;
  using c = new GlaCase(
    "cuda",
    { fn: "chunkGla", B: 3, T: 1, H: 4, K: 48, V: 40, dtype, spikes: true },
    seed,
  );
  const ref = c.reference();
  const own: Tensor[] = [];
  try {
    const at = (x: Tensor) => {
      const y = x.select(1, 0);
      own.push(y);
      return y;
    };
    const out = { output: poisoned([3, 4, 40], dtype, "cuda") };
    own.push(out.output);
    using state = c.initialState!.clone();
    const r = new GLADecodeFwdOp({ inPlace: true }).forward(at(c.q), at(c.k), at(c.v), at(c.gk!), state, out);
    expectRan(row, "decode");
    expectClose(host(r.output), ref.output, tol(dtype).output, `decode output ${rowName(row)}`);
    expectClose(state, ref.finalState, tol(dtype).state, `decode state ${rowName(row)}`);
  } finally {
    for (const x of own) x.dispose();
  }
}
