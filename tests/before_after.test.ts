// The before / after comparison of bench/before_after.ts (issue 19's "no recorded shape slows by more than
// 3%"): rows paired by op, shape and mode over rounds, judged by the median of the per-round ratios.
import assert from "node:assert/strict";
import { compareRounds, type Timed } from "../bench/before_after.ts";

const timed = (rows: [string, number][]): Timed[] =>
  rows.map(([op, ms]) => ({ op, shape: "B1_T64_H2_D64", dtype: "bfloat16", mode: "fwd", ms }));

Deno.test("before/after: each row's verdict is the median of its rounds, not one noisy round", () => {
  const before = timed([["a", 1], ["b", 2], ["c", 1]]);
  const rounds: [Timed[], Timed[]][] = [
    [before, timed([["a", 1.10], ["b", 2.00], ["c", 0.90]])], // a's one bad round
    [before, timed([["a", 1.01], ["b", 2.10], ["c", 0.95]])],
    [before, timed([["a", 1.00], ["b", 2.08], ["c", 0.96]])],
  ];
  const rows = compareRounds(rounds);
  const by = Object.fromEntries(rows.map((r) => [r.key.split(" ")[0], r]));
  assert.equal(by.a.verdict, "same");
  assert.ok(Math.abs(by.a.median - 1.01) < 1e-12);
  assert.equal(by.b.verdict, "slower"); // 2.08 / 2 = 1.04 > 1.03
  assert.ok(Math.abs(by.b.after - 2.08) < 1e-12 && by.b.before === 2);
  assert.equal(by.c.verdict, "faster");
  assert.deepEqual(by.a.ratios.map((x) => Number(x.toFixed(3))), [1.1, 1.01, 1]);
  // A tighter limit turns a's 1% into a slowdown.
  assert.equal(compareRounds(rounds, 1.005).find((r) => r.key.startsWith("a "))!.verdict, "slower");
});

Deno.test("before/after: a row one side lacks is n/a in the rounds that lack it", () => {
  const rows = compareRounds([
    [timed([["a", 1]]), timed([["a", 1], ["new", 3]])],
    [timed([["a", 1], ["new", 2]]), timed([["a", 1], ["new", 2]])],
  ]);
  const fresh = rows.find((r) => r.key.startsWith("new "))!;
  assert.deepEqual(fresh.ratios, [1]);
  assert.equal(fresh.verdict, "same");
  const never = compareRounds([[timed([["x", 1]]), timed([["y", 1]])]]);
  assert.deepEqual(never.map((r) => r.verdict), ["n/a", "n/a"]);
});
