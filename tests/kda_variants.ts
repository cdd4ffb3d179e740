// KDA's registry rows in tests/variants.test.ts: each row runs on a case its planner sends to it (K =
// the row's head dim, V not a multiple of the 64-column tile, T with a tail chunk, gates down to -5
// with spikes of -20, grouped q/k heads), held to the float64 oracle with the tolerances of
// tests/kda_fixtures.ts (the backward's rows: every gradient); the plan of the call must name the row.
import assert from "node:assert/strict";
import { type KernelRow, rowName } from "../build/registry.ts";
import { type DType, lastPlan } from "../mod.ts";
import { expectClose, host, KdaCase, tol } from "./kda_fixtures.ts";

/** Runs one row of stage `linear.kda.*` on the CUDA device. */
export function kdaExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as DType;
  const spec = {
    fn: "chunkKda",
    B: 2,
    T: 150,
    H: 4,
    HK: 2,
    K: row.d,
    V: 72,
    dtype,
    gateLow: -5,
    spike: -20,
  } as const;
  using c = new KdaCase("cuda", spec, seed);
  const t = tol(dtype);
  const ref = c.reference();
  using r = c.forward();
  const forwardRow = row.stage === "linear.kda.prep" || row.stage === "linear.kda.fwd";
  if (forwardRow) assertRan(row);
  expectClose(r.output, ref.output, t.output, `output ${rowName(row)}`);
  expectClose(host(r.finalState!), c.fromKv(ref.finalState), t.state, `final state ${rowName(row)}`);
  if (forwardRow) return;
  const { dOutput, dFinalState } = c.cotangents(seed);
  const g = c.referenceBackward(dOutput, dFinalState);
  using grads = c.backward(dOutput, dFinalState);
  assertRan(row);
  expectClose(grads.dq, g.dq, t.dqkv, `dq ${rowName(row)}`);
  expectClose(grads.dk, g.dk, t.dqkv, `dk ${rowName(row)}`);
  expectClose(grads.dv, g.dv, t.dqkv, `dv ${rowName(row)}`);
  expectClose(grads.dgate, g.dgate, t.dgate, `dgate ${rowName(row)}`);
  expectClose(grads.dbeta, g.dbeta, t.dsmall, `dbeta ${rowName(row)}`);
}

// The plan of the last call must name the row: a row the planner never picks is not exercised.
function assertRan(row: KernelRow): void {
  const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
  assert.ok(
    ran.includes(rowName(row)),
    `${rowName(row)} did not run; the plan was ${JSON.stringify(lastPlan())}`,
  );
}
