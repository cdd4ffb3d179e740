// The command line (cli.ts) run as users run it, in a child process: info, check against the float64
// oracle on small shapes (CPU always, CUDA when a GPU is present), bench and chart writing their
// files, and the usage errors (exit status 2, the usage printed). Plus the verdict rules, so a check
// that should fail does.
import assert from "node:assert/strict";
import { byMaxAbs, byRelRms } from "../cli/problem.ts";
import { renderChart } from "../cli/chart.ts";
import { parseResults } from "../cli/results.ts";
import { parseShape, shapeName } from "../cli/shape.ts";
import { deviceTest, withSeed } from "./helpers.ts";

const CLI = new URL("../cli.ts", import.meta.url).pathname;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function attnkit(...args: string[]): Promise<Run> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

function explain(r: Run): string {
  return `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
}

// Every compared output printed PASS, the summary says PASS, exit status 0.
function expectPass(r: Run, outputs: string[]): void {
  assert.equal(r.code, 0, explain(r));
  for (const name of outputs) {
    assert.match(r.stdout, new RegExp(`^  ${name} +max abs .* PASS$`, "m"), `${name}\n${explain(r)}`);
  }
  assert.match(r.stdout, /^PASS$/m, explain(r));
}

Deno.test("cli info: library, devices and kernels", async () => {
  const r = await attnkit("info");
  assert.equal(r.code, 0, explain(r));
  assert.match(r.stdout, /^attnkit \d+\.\d+\.\d+/);
  assert.match(r.stdout, /^library +\S+libattnkit/m);
  assert.match(r.stdout, /^devices +cpu$/m);
  assert.match(r.stdout, /^kernels +\d+ in the registry/m);
  assert.match(r.stdout, /^ {2}attention\.fwd +/m);
  const all = await attnkit("info", "--kernels");
  assert.equal(all.code, 0, explain(all));
  assert.ok(all.stdout.split("\n").length > r.stdout.split("\n").length, "--kernels lists every kernel");
});

deviceTest("cli check gdn --backward: PASS against the oracle", async (device) => {
  await withSeed(async (seed) => {
    const r = await attnkit(
      "check",
      "gdn",
      "--shape",
      "B2_T80_H2_D32",
      "--device",
      device,
      "--backward",
      "--seed",
      String(seed),
      "--iterations",
      "2",
      "--quiet",
    );
    expectPass(r, ["output", "final state", "dq", "dk", "dv", "dbeta", "dg"]);
    assert.match(r.stdout, /^attnkit check gdn B2_T80_H2_D32 bfloat16 on /m);
    assert.match(r.stdout, /^ {2}time fwd +\d+\.\d{3} ms \(median of 2\) +[\d.e+-]+ TFLOP\/s$/m, explain(r));
    assert.match(r.stdout, /^ {2}time fwdbwd +\d+\.\d{3} ms/m, explain(r));
  });
});

deviceTest("cli check deltanet (grouped q/k heads, fp16, L2 norm): PASS", async (device) => {
  await withSeed(async (seed) => {
    const r = await attnkit(
      "check",
      "deltanet",
      "--shape",
      "B1_T70_H4_HK2_D32",
      "--dtype",
      "fp16",
      "--l2norm",
      "--device",
      device,
      "--seed",
      String(seed),
      "--iterations",
      "0",
    );
    expectPass(r, ["output", "final state"]);
    assert.doesNotMatch(r.stdout, /time fwd/, "--iterations 0 skips timing");
  });
});

deviceTest("cli check attention (GQA, causal, backward): PASS", async (device) => {
  await withSeed(async (seed) => {
    const r = await attnkit(
      "check",
      "attention",
      "--shape",
      "B2_S72_H4_HKV2_D64",
      "--causal",
      "--backward",
      "--device",
      device,
      "--seed",
      String(seed),
      "--iterations",
      "1",
    );
    expectPass(r, ["output", "lse", "dq", "dk", "dv"]);
    assert.match(r.stdout, /B2_S72_H4_KV2_D64_causal/);
  });
});

Deno.test("cli check attention: fewer keys than queries (rows with no key) and --oracle-batches", async () => {
  const r = await attnkit(
    "check",
    "attention",
    "--shape",
    "B3_S40_SKV24_H2_D32_causal",
    "--dtype",
    "f16",
    "--device",
    "cpu",
    "--oracle-batches",
    "2",
    "--iterations",
    "0",
  );
  expectPass(r, ["output", "lse"]);
  assert.match(r.stdout, /batch rows 2 of 3/);
});

Deno.test("cli: a bad flag exits 2 with the command's usage", async () => {
  const r = await attnkit("check", "gdn", "--shape", "B1_T16_H1_D16", "--device", "cpu", "--frobnicate");
  assert.equal(r.code, 2, explain(r));
  assert.match(r.stderr, /--frobnicate/);
  assert.match(r.stderr, /Usage: attnkit check <op>/);
  assert.equal(r.stdout, "");
  for (
    const args of [["bench", "gdn", "--shapes", "B1_T16_H1_D16", "--out", "x", "--nope"], [
      "info",
      "--verbose",
    ]]
  ) {
    const b = await attnkit(...args);
    assert.equal(b.code, 2, explain(b));
    assert.match(b.stderr, new RegExp(`Usage: attnkit ${args[0]}`));
  }
});

Deno.test("cli: an unknown op names the ops; an unknown command the commands", async () => {
  const r = await attnkit("check", "flashmla", "--shape", "B1_T16_H1_D16");
  assert.equal(r.code, 2, explain(r));
  assert.match(r.stderr, /unknown op "flashmla"; ops: gdn, deltanet, attention/);
  const c = await attnkit("verify");
  assert.equal(c.code, 2, explain(c));
  assert.match(c.stderr, /unknown command "verify"/);
  assert.match(c.stderr, /check <op>/);
});

Deno.test("cli: bad values are refused, naming the flag", async () => {
  const cases: [string[], RegExp][] = [
    [["check", "gdn", "--device", "cpu"], /missing --shape/],
    [["check", "gdn", "--shape", "B1_T16_H1", "--device", "cpu"], /missing D/],
    [["check", "gdn", "--shape", "B1_T16_H1_D16_X3", "--device", "cpu"], /cannot read "X3"/],
    [["check", "gdn", "--shape", "B1_T16_H1_D16", "--causal", "--device", "cpu"], /causal by construction/],
    [["check", "attention", "--shape", "B1_S16_H3_HKV2_D16", "--device", "cpu"], /not a multiple/],
    [
      ["check", "attention", "--shape", "B1_S16_H2_D16", "--dtype", "fp32", "--device", "cpu"],
      /float16 or bfloat16/,
    ],
    [["check", "gdn", "--shape", "B1_T16_H1_D16", "--dtype", "int8", "--device", "cpu"], /expected bf16/],
    [["check", "gdn", "--shape", "B1_T16_H1_D16", "--seed", "-1", "--device", "cpu"], /--seed/],
    [["check", "gdn", "--shape", "B1_T16_H1_D16", "--device", "tpu"], /--device: expected cpu, cuda/],
    [["check", "gdn", "--shape", "B2_T16_H1_D16", "--oracle-batches", "3", "--device", "cpu"], /more than/],
    [
      ["bench", "gdn", "--shapes", "B1_T16_H1_D16", "--out", "x", "--modes", "bwd", "--device", "cpu"],
      /fwd and fwdbwd/,
    ],
    [["chart", "a.json", "--metric", "pie"], /--metric/],
  ];
  for (const [args, message] of cases) {
    const r = await attnkit(...args);
    assert.equal(r.code, 2, `${args.join(" ")}\n${explain(r)}`);
    assert.match(r.stderr, message, args.join(" "));
  }
});

Deno.test("cli check: a check the CPU would take minutes over is refused up front with a way out", async () => {
  const t0 = performance.now();
  const r = await attnkit("check", "gdn", "--shape", "B8_T8192_H32_D128", "--device", "cpu");
  assert.equal(r.code, 2, explain(r));
  assert.match(r.stderr, /would take about [\d.]+ (s|min)/);
  assert.match(r.stderr, /--oracle-batches|smaller shape/);
  assert.match(r.stderr, /--force/);
  assert.ok(performance.now() - t0 < 30_000, "refused before allocating anything");
});

Deno.test("cli bench + chart: JSON records, markdown and SVG; --ref pairs recorded times", async () => {
  const dir = await Deno.makeTempDir({ prefix: "attnkit_cli_" });
  try {
    // A recorded reference for one of the two shapes, in the side-by-side benchmarks' layout.
    const refPath = `${dir}/ref.json`;
    await Deno.writeTextFile(
      refPath,
      JSON.stringify({
        gpu: "cpu",
        records: [
          {
            op: "chunkDeltaRule",
            shape: "B1_T48_H2_D16",
            dtype: "bfloat16",
            mode: "fwd",
            ms: 9,
            ref: "fla",
            ref_ms: 10,
          },
        ],
      }),
    );
    const r = await attnkit(
      "bench",
      "deltanet",
      "--shapes",
      "B1_T48_H2_D16,B2_T32_H1_D16",
      "--device",
      "cpu",
      "--out",
      `${dir}/out`,
      "--ref",
      refPath,
      "--iterations",
      "2",
      "--warmup",
      "0",
    );
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stderr, /bench deltanet B1_T48_H2_D16 fwd \(1\/4\)/, "progress on stderr");
    const json = JSON.parse(await Deno.readTextFile(`${dir}/out/deltanet.json`));
    assert.equal(json.gpu, "cpu");
    assert.equal(json.records.length, 4);
    for (const rec of json.records) {
      assert.deepEqual(
        Object.keys(rec).sort(),
        ["dtype", "gbps", "mode", "ms", "op", "ref", "ref_ms", "shape", "speedup", "tflops"],
      );
      assert.equal(rec.op, "chunkDeltaRule");
      assert.ok(rec.ms > 0 && rec.tflops > 0, JSON.stringify(rec));
    }
    const paired = json.records.find((x: { shape: string; mode: string }) =>
      x.shape === "B1_T48_H2_D16" && x.mode === "fwd"
    );
    assert.equal(paired.ref, "fla");
    assert.equal(paired.ref_ms, 10);
    assert.ok(Math.abs(paired.speedup - 10 / paired.ms) < 1e-9);
    assert.equal(json.records.filter((x: { ref: string | null }) => x.ref === null).length, 3);
    const md = await Deno.readTextFile(`${dir}/out/deltanet.md`);
    assert.match(md, /^# chunkDeltaRule/);
    assert.match(md, /\| chunkDeltaRule \| B2_T32_H1_D16 \| bfloat16 \| fwdbwd \| \d+\.\d{3} \|/);
    const svg = await Deno.readTextFile(`${dir}/out/deltanet.svg`);
    assert.equal(svg, renderChart(parseResults(json)), "the chart is the renderer's, of the JSON written");

    // chart: the JSON back into an SVG file, with options.
    const c = await attnkit(
      "chart",
      `${dir}/out/deltanet.json`,
      "-o",
      `${dir}/chart.svg`,
      "--metric",
      "speedup",
    );
    assert.equal(c.code, 0, explain(c));
    assert.equal(
      await Deno.readTextFile(`${dir}/chart.svg`),
      renderChart(parseResults(json), { metric: "speedup" }),
    );
    const missing = await attnkit("chart", `${dir}/none.json`);
    assert.equal(missing.code, 1, explain(missing));
    assert.match(missing.stderr, /none\.json/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli verdicts: NaN, stray infinities and errors past the bound fail", () => {
  const oracle = [1, 2, 3, 4];
  assert.equal(byRelRms("o", [1, 2, 3, 4.001], oracle, 1e-3).pass, true);
  assert.equal(byRelRms("o", [1, 2, 3, 4.1], oracle, 1e-3).pass, false);
  const nan = byRelRms("o", [1, NaN, 3, 4], oracle, 1);
  assert.equal(nan.pass, false);
  assert.match(nan.problem ?? "", /NaN/);
  assert.equal(byMaxAbs("o", [1, 2, Infinity, 4], oracle, 10, "why").pass, false);
  assert.equal(byMaxAbs("o", [1, 2, 3.5, 4], oracle, 0.4, "why").pass, false);
  assert.equal(byMaxAbs("o", [1, 2, 3.3, 4], oracle, 0.4, "why").pass, true);
});

Deno.test("cli shapes: the names of the recorded results read back to themselves", () => {
  for (const name of ["B1_T8192_H96_D128", "B4_T2048_H16_HK4_D128_DV64"]) {
    assert.equal(shapeName(parseShape(name, "gdn"), "gdn"), name);
  }
  assert.equal(
    shapeName(parseShape("B4_S4096_H32_HKV8_D128_causal", "attention"), "attention"),
    "B4_S4096_H32_KV8_D128_causal",
  );
  assert.equal(
    shapeName(parseShape("B4_T4096_H32_KV32_D128", "attention"), "attention"),
    "B4_S4096_H32_D128",
  );
  assert.equal(shapeName(parseShape("B1_S8_SKV16_H2_D8", "attention"), "attention"), "B1_S8_SKV16_H2_D8");
});

deviceTest(
  "cli tune attention: tunes into the given cache, then reads it back; --clear empties it",
  async (device) => {
    const dir = Deno.makeTempDirSync({ prefix: "attnkit-cli-tune-" });
    try {
      const cache = `${dir}/tune.json`;
      const args = [
        "tune",
        "attention",
        "--shapes",
        "B1_S40_H4_KV2_D64_causal",
        "--device",
        device,
        "--cache",
        cache,
      ];
      const first = await attnkit(...args, "--backward");
      assert.equal(first.code, 0, explain(first));
      assert.match(first.stdout, /^B1_S40_H4_KV2_D64_causal forward: \S+ \(tuned\)$/m, explain(first));
      assert.match(first.stdout, /^B1_S40_H4_KV2_D64_causal backward: \S+ \(tuned\)$/m, explain(first));
      assert.match(first.stdout, /^ {2}planner +\d+\.\d+ ms$/m);
      const entries = Object.keys(JSON.parse(Deno.readTextFileSync(cache)).entries);
      assert.equal(entries.length, 2);
      const again = await attnkit(...args);
      assert.match(again.stdout, /forward: \S+ \(cached\)$/m, explain(again));
      const cleared = await attnkit("tune", "attention", "--cache", cache, "--clear");
      assert.equal(cleared.code, 0, explain(cleared));
      assert.throws(() => Deno.statSync(cache), Deno.errors.NotFound);
      const bad = await attnkit("tune", "gla", "--shapes", "B1_T8_H2_D64");
      assert.equal(bad.code, 2, explain(bad));
      assert.match(bad.stderr, /tune: expected the op "attention", "gdn" or "deltanet"/);
      // The delta-rule op classes, forward and backward, into the same cache.
      const gdn = await attnkit(
        "tune",
        "gdn",
        "--shapes",
        "B1_T70_H2_D64",
        "--device",
        device,
        "--cache",
        cache,
        "--backward",
      );
      assert.equal(gdn.code, 0, explain(gdn));
      assert.match(gdn.stdout, /^B1_T70_H2_D64 forward: \S+ \(tuned\)$/m, explain(gdn));
      assert.match(gdn.stdout, /^B1_T70_H2_D64 backward: \S+ \(tuned\)$/m, explain(gdn));
      assert.equal(Object.keys(JSON.parse(Deno.readTextFileSync(cache)).entries).length, 2);
      const causal = await attnkit("tune", "deltanet", "--shapes", "B1_T70_H2_D64_causal", "--cache", cache);
      assert.equal(causal.code, 2, explain(causal));
      assert.match(causal.stderr, /deltanet is causal by construction/);
      const flag = await attnkit("tune", "gdn", "--shapes", "B1_T70_H2_D64", "--causal", "--cache", cache);
      assert.equal(flag.code, 2, explain(flag));
      assert.match(flag.stderr, /--causal: gdn is causal by construction/);
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
);
