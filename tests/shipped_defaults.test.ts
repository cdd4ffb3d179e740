// The planner's untuned choices against the measured tables kept in bench/results (*_sweep.json, recorded
// by tools/tune_sweep.ts on the GPU): at every shape of the newest table of each op and keys, the kernels
// the planner picks were measured and are within NOISE of the fastest setting. Runs anywhere: `explain`
// plans for a GPU by name.
import assert from "node:assert/strict";
import { explain, type PlanQuery, withTuning } from "../mod.ts";
import {
  judgePlanner,
  newestTables,
  parseShape,
  readSweepTables,
  sweepQuery,
  type SweepTable,
} from "../tools/sweep_tables.ts";

// The same setting's median of 20 flushed calls moved by up to 0.5% between runs in one session on the
// H200 (e.g. 2.080 / 2.084 / 2.086 ms); a rule within 3% of the fastest is as good as the table can tell.
const NOISE = 1.03;
const RESULTS = new URL("../bench/results", import.meta.url).pathname;

const plannerKernels = (q: PlanQuery) => explain(q).kernels.map((k) => k.name);

Deno.test("shipped defaults: the planner's untuned choice is the fastest measured, at every shape of every table", async () => {
  const tables = newestTables(await readSweepTables(RESULTS));
  assert.ok(tables.length > 0, "no *_sweep.json in bench/results");
  const wrong: string[] = [];
  for (const { file, table } of tables) {
    for (const v of judgePlanner(table, plannerKernels)) {
      if (v.ratio === null) {
        wrong.push(
          `${file.split("/").pop()} ${v.shape}: the planner's kernels (${
            v.planner.join(" + ")
          }) were not measured`,
        );
      } else if (v.ratio > NOISE) {
        wrong.push(
          `${file} ${v.shape}: the planner's ${v.plannerMs} ms is ${v.ratio.toFixed(3)}x the fastest, ` +
            `${v.best.ms} ms with ${JSON.stringify(v.best.spec)}`,
        );
      }
    }
  }
  assert.deepEqual(wrong, [], "refit the rule, or re-measure the table (tools/tune_sweep.ts --regenerate)");
});

Deno.test("shipped defaults: a rule that contradicts a table is caught (the check can fail)", async () => {
  const { table } = newestTables(await readSweepTables(RESULTS)).find((t) =>
    t.table.op === "gdn-bwd-recompute"
  )!;
  // A dstates tile of 32 at 72 heads (the split kernel's smaller tile) loses about 5% at B3_T5000_H24_D128.
  const pinned = withTuning({ "linear.bwd.dstates.tile": "32" }, () => judgePlanner(table, plannerKernels));
  const row = pinned.find((v) => v.shape === "B3_T5000_H24_D128")!;
  assert.ok(row.ratio !== null && row.ratio > NOISE, `ratio ${row.ratio}`);
  // A planner choice that no setting of the table ran is reported as unmeasured, not as fast.
  const unmeasured: SweepTable = {
    ...table,
    rows: [{ shape: "B1_T4096_H16_D128", settings: table.rows[0].settings.slice(0, 1) }],
  };
  const [v] = judgePlanner(unmeasured, () => ["a kernel the table never ran"]);
  assert.equal(v.plannerMs, null);
  assert.equal(v.ratio, null);
});

Deno.test("sweep tables: shapes read back into the planner's queries; unknown parts and GPUs are refused", () => {
  assert.deepEqual(parseShape("B2_S3000_H24_KV8_D128_causal"), {
    b: 2,
    s: 3000,
    h: 24,
    kv: 8,
    d: 128,
    causal: true,
  });
  assert.deepEqual(sweepQuery("gdn-fwdbwd", "B3_T5000_H24_D128", "h200"), {
    op: "linear.bwd",
    gpu: "h200",
    dtype: "bfloat16",
    b: 3,
    t: 5000,
    h: 24,
    k: 128,
    l2norm: true,
    saved: true,
  });
  assert.deepEqual(sweepQuery("attn-bwd", "B2_S3000_H24_KV8_D128_causal", "h200"), {
    op: "attention.bwd",
    gpu: "h200",
    dtype: "bfloat16",
    b: 2,
    sq: 3000,
    hq: 24,
    hkv: 8,
    d: 128,
  });
  assert.throws(() => parseShape("B2_T4096_x"), /cannot read "x"/);
  assert.throws(() => sweepQuery("gdn-fwd", "B2_H16_D128", "h200"), /T missing/);
  const table = { kind: "tuning sweep", gpu: "Some GPU", op: "gdn-fwd", rows: [] } as unknown as SweepTable;
  assert.throws(() => judgePlanner(table, () => []), /no GPU named like Some GPU/);
});

Deno.test("sweep tables: tune_sweep --record writes a table, --regenerate re-measures it into a new file", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const tool = new URL("../tools/tune_sweep.ts", import.meta.url).pathname;
    const run = async (...args: string[]) => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", tool, "--device", "cpu", "--commit", "test", ...args],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.ok(out.success, new TextDecoder().decode(out.stderr));
    };
    const first = `${dir}/2026-01-01_tiles_sweep.json`;
    await run(
      "--op",
      "gdn-bwd-recompute",
      "--shapes",
      "B1_T80_H2_D64,B1_T40_H1_D64",
      "--keys",
      "linear.bwd.dstates.tile",
      "--iterations",
      "1",
      "--record",
      first,
    );
    await Deno.mkdir(`${dir}/fresh`);
    await run("--regenerate", "--results", dir, "--out", `${dir}/fresh`);
    for (const folder of [dir, `${dir}/fresh`]) {
      const [{ table }] = await readSweepTables(folder);
      assert.equal(table.op, "gdn-bwd-recompute");
      assert.equal(table.commit, "test");
      assert.deepEqual(table.rows.map((r) => r.shape), ["B1_T80_H2_D64", "B1_T40_H1_D64"]);
      // auto and the three tiles of the key, each timed (the CPU serves every tile).
      for (const row of table.rows) {
        assert.deepEqual(row.settings.map((s) => s.spec["linear.bwd.dstates.tile"]), [
          "auto",
          "32",
          "64",
          "128",
        ]);
        assert.ok(row.settings.every((s) => typeof s.ms === "number" && s.ms > 0));
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
