// The registry rows linear.paged_decode.{bulk, fused} in tests/variants.test.ts, each pinned through the
// tuning table: its dtype with a grouped-head GDN step (K = 128, V inside one tile), a KDA step on a
// bf16 pool (K = 64) and a wide GDN step (K = 256, V over two tiles of the bulk kernel, the last one
// partial), each against the float64 oracle (tests/paged_decode_fixtures.ts).
import assert from "node:assert/strict";
import { type KernelRow, rowName } from "../build/registry.ts";
import { type DType, lastPlan, withTuning } from "../mod.ts";
import { runCase, type Spec } from "./paged_decode_fixtures.ts";

/** Runs one paged decode row on the CUDA device. */
export function pagedDecodeExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as DType;
  const cases: Spec[] = [
    {
      B: 6,
      H: 4,
      HK: 2,
      K: 128,
      V: 40,
      slots: 9,
      perChannel: false,
      kind: "softplus",
      dtype,
      poolDtype: "float32",
    },
    {
      B: 5,
      H: 3,
      HK: 3,
      K: 64,
      V: 24,
      slots: 8,
      perChannel: true,
      kind: "bounded",
      lowerBound: -5,
      dtype,
      poolDtype: "bfloat16",
    },
    {
      B: 3,
      H: 2,
      HK: 1,
      K: 256,
      V: 40,
      slots: 5,
      perChannel: false,
      kind: "softplus",
      dtype,
      poolDtype: "float32",
    },
  ].map((c) => ({ ...c, steps: 2 }) as Spec);
  withTuning({ "linear.paged_decode": row.variant }, () => {
    cases.forEach((c, i) => {
      runCase("cuda", c, seed + i);
      const ran = lastPlan()?.kernels.map((k) => k.name) ?? [];
      assert.ok(ran.includes(rowName(row)), `${rowName(row)} did not run: ${JSON.stringify(lastPlan())}`);
    });
  });
}
