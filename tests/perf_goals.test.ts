// The performance goals' checker (bench/perf_goals.ts): the shipped goals name rows the side-by-side scripts
// record, and the verdicts are right for met, missed and unmeasured goals. Runs anywhere (no GPU).
import assert from "node:assert/strict";
import { floorFraction } from "../bench/ceilings.ts";
import {
  type GoalRecord,
  goalsTable,
  judgeGoals,
  parseGoals,
  parseRecords,
  type PerfGoal,
} from "../bench/perf_goals.ts";

const bench = (name: string) => Deno.readTextFileSync(new URL(`../bench/${name}`, import.meta.url));

const record = (over: Partial<GoalRecord>): GoalRecord => ({
  op: "attention",
  shape: "B1_S128_H2_KV2_D64",
  mode: "fwd",
  ref: "sdpa_cudnn",
  ms: 1,
  ref_ms: 1,
  speedup: 1,
  tflops: 100,
  gbps: null,
  ...over,
});

Deno.test("perf goals: every shipped goal names a row the side-by-side scripts record", () => {
  const goals = parseGoals(bench("perf_goals.json"));
  assert.ok(goals.length >= 10);
  // The attention script's shapes (bench/sdpa_attention.py) and the linear script's (its FLA anchors).
  const sdpa = bench("sdpa_attention.py");
  const attentionShapes = [...sdpa.matchAll(/\((\d+), (\d+), (\d+), (\d+), (\d+), (True|False)\)/g)].map((
    m,
  ) => `B${m[1]}_S${m[2]}_H${m[3]}_KV${m[4]}_D${m[5]}${m[6] === "True" ? "_causal" : ""}`);
  const linear = bench("linear_side_by_side.ts");
  const modes: Record<string, string[]> = {
    attention: ["fwd", "bwd", "fwdbwd"],
    chunkGatedDeltaRule: ["fwd", "fwdbwd"],
    GatedDeltaNetDecodeFwdOp: ["decode"],
  };
  for (const g of goals) {
    assert.ok(modes[g.op]?.includes(g.mode), `${g.row}: ${g.op} ${g.mode} is not a recorded op and mode`);
    if (g.op === "attention") {
      assert.ok(attentionShapes.includes(g.shape), `${g.row}: ${g.shape} is not one of ${attentionShapes}`);
      assert.ok(sdpa.includes(`"${g.ref}"`), `${g.row}: ${g.ref} is not an SDPA backend of the script`);
    } else {
      assert.ok(linear.includes(`${g.shape}:`), `${g.row}: ${g.shape} is not a shape of the linear script`);
      assert.ok(linear.includes(`"${g.ref}"`), `${g.row}: ${g.ref} is not a reference of the linear script`);
    }
  }
});

Deno.test("perf goals: met, missed and unmeasured goals; the last matching record wins", () => {
  const goal = (over: Partial<PerfGoal>): PerfGoal => ({
    row: "r",
    op: "attention",
    shape: "B1_S128_H2_KV2_D64",
    mode: "fwd",
    ref: "sdpa_cudnn",
    metric: "speedup",
    goal: 1.0,
    ...over,
  });
  const goals = [
    goal({ row: "met" }),
    goal({ row: "missed", mode: "bwd" }),
    goal({ row: "tflops", metric: "tflops", goal: 650 }),
    goal({ row: "other ref", ref: "sdpa_flash2" }),
    goal({ row: "prefix", op: "chunkGatedDeltaRule", shape: "B2_T16384_H16_D128", ref: "fla.chunk_gated" }),
    goal({ row: "null value", metric: "gbps" }),
  ];
  const records = [
    record({ speedup: 0.5 }),
    record({ speedup: 1.02, tflops: 651 }), // later: wins over the line above
    record({ mode: "bwd", speedup: 0.83 }),
    record({
      op: "chunkGatedDeltaRule",
      shape: "B2_T16384_H16_D128",
      ref: "fla.chunk_gated_delta_rule (ANCHORS.md)",
    }),
  ];
  const v = Object.fromEntries(judgeGoals(goals, records).map((x) => [x.goal.row, x]));
  assert.equal(v.met.met, true);
  assert.equal(v.met.value, 1.02);
  assert.equal(v.missed.met, false);
  assert.equal(v.tflops.met, true);
  assert.equal(v["other ref"].met, null, "a record of another reference does not answer the goal");
  assert.equal(v["other ref"].record, null);
  assert.equal(v.prefix.met, true, "the reference matches by its start (live or from ANCHORS.md)");
  assert.equal(v["null value"].met, null, "a missing value is not measured, never met");
  const table = goalsTable(Object.values(v));
  assert.match(table, /\| missed \| .* \| no \|/);
  assert.match(table, /\| other ref \| .* \| not measured \|/);
  assert.match(table, /3 of 6 goals met \(2 not measured\)$/);
  // The fraction of the floor beside each verdict: 651 of 699 TFLOP/s; n/a for a goal not measured.
  assert.match(table, /\| met \| .* \| 651 \| n\/a \| 93% \|/);
  assert.match(table, /\| other ref \| .* \| n\/a \| n\/a \| n\/a \|/);
});

Deno.test("perf goals: the fraction of the floor is the nearer of the two ceilings", () => {
  assert.equal(floorFraction(null, null), null);
  assert.ok(Math.abs(floorFraction(699, null)! - 1) < 1e-12);
  assert.ok(Math.abs(floorFraction(null, 3827)! - 3827 / 4252) < 1e-12, "a decode row: bytes alone");
  // A GDN forward: 150 TFLOP/s is 21% of the peak, 2126 GB/s is 50% of the copy rate: the bytes bound it.
  assert.ok(Math.abs(floorFraction(150, 2126)! - 0.5) < 1e-12);
});

Deno.test("perf goals: both results layouts read; malformed goals and results refused by name", () => {
  const row = record({});
  assert.equal(parseRecords(JSON.stringify({ records: [row] })).length, 1);
  assert.equal(parseRecords(JSON.stringify({ results: [row, row] })).length, 2);
  assert.equal(parseRecords(JSON.stringify({ records: [{ ...row, speedup: "fast" }] }))[0].speedup, null);
  assert.throws(() => parseRecords("{}"), /`records` or `results`/);
  const good = {
    row: "r",
    op: "attention",
    shape: "S",
    mode: "fwd",
    ref: "sdpa_cudnn",
    metric: "speedup",
    goal: 1,
  };
  assert.throws(() => parseGoals("[]"), /`goals` array/);
  assert.throws(() => parseGoals(JSON.stringify({ goals: [{ ...good, metric: "ms" }] })), /goal 0: `metric`/);
  assert.throws(() => parseGoals(JSON.stringify({ goals: [good, { ...good, goal: 0 }] })), /goal 1: `goal`/);
  assert.throws(() => parseGoals(JSON.stringify({ goals: [{ ...good, shape: "" }] })), /`shape`/);
});
