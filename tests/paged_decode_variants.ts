// The registry row linear.paged_decode in tests/variants.test.ts: its dtype, K = 128 with a grouped-head
// GDN step and K = 64 with a KDA step (both gate forms of the kernel), each against the float64 oracle
// (tests/paged_decode_fixtures.ts, which also checks that the plan chose the fused path).
import type { KernelRow } from "../build/registry.ts";
import type { DType } from "../mod.ts";
import { runCase } from "./paged_decode_fixtures.ts";

/** Runs the fused paged decode row on the CUDA device. */
export function pagedDecodeExercise(row: KernelRow, seed: number): void {
  const dtype = row.dtype as DType;
  runCase("cuda", {
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
    steps: 2,
  }, seed);
  runCase("cuda", {
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
    steps: 2,
  }, seed + 1);
}
