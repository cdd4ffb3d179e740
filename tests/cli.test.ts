// The command line (cli.ts) run as users run it, in a child process: info, check against the float64
// oracle on small shapes (CPU always, CUDA when a GPU is present), bench and chart writing their
// files, and the usage errors (exit status 2, the usage printed). Plus the verdict rules, so a check
// that should fail does.
import assert from "node:assert/strict";
import { byMaxAbs, byRelRms, byRowTolerance } from "../cli/problem.ts";
import { type LinearFamily, linearOpCase } from "../cli/linear_problem.ts";
import { chunkLinearAttn, type GlaGradients } from "../mod.ts";
import { gatedLinearReference, gatedLinearReferenceBackward } from "../reference/linear_attention.ts";
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
    // The forward's GB/s counts q, k, v, o, g and beta once (bench/gla_side_by_side.ts's convention).
    assert.match(
      r.stdout,
      /^ {2}time fwd +\d+\.\d{3} ms \(median of 2\) +[\d.e+-]+ TFLOP\/s +[\d.e+-]+ GB\/s$/m,
      explain(r),
    );
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

// The gated linear family and KDA: each op's shape (grouped q/k heads, DV apart from D), dtype, and the
// outputs its check compares (forward, then the gradients named after the inputs).
const LINEAR_OPS: { op: string; fn: string; shape: string; dtype: string; grads: string[] }[] = [
  { op: "gla", fn: "chunkGla", shape: "B2_T80_H4_HK2_D32_DV16", dtype: "bf16", grads: ["dgk"] },
  { op: "simple-gla", fn: "chunkSimpleGla", shape: "B1_T100_H2_D32", dtype: "fp16", grads: ["dg"] },
  { op: "retention", fn: "chunkRetention", shape: "B2_T70_H3_D16_DV32", dtype: "fp32", grads: [] },
  { op: "linear-attn", fn: "chunkLinearAttn", shape: "B1_T90_H4_HK1_D32", dtype: "bf16", grads: [] },
  { op: "kda", fn: "chunkKda", shape: "B2_T70_H4_HK2_D32", dtype: "bf16", grads: ["dgate", "dbeta"] },
];

for (const { op, fn, shape, dtype, grads } of LINEAR_OPS) {
  deviceTest(`cli check ${op} (${fn}), forward and --backward: PASS against the oracle`, async (device) => {
    await withSeed(async (seed) => {
      const args = [
        "check",
        op,
        "--shape",
        shape,
        "--dtype",
        dtype,
        "--device",
        device,
        "--seed",
        String(seed),
      ];
      const forward = await attnkit(...args, "--iterations", "0", "--quiet");
      expectPass(forward, ["output", "final state"]);
      assert.doesNotMatch(forward.stdout, /^ {2}dq /m, "no gradients without --backward");
      const r = await attnkit(...args, "--backward", "--iterations", "1", "--quiet");
      expectPass(r, ["output", "final state", "dq", "dk", "dv", ...grads]);
      assert.match(r.stdout, new RegExp(`^attnkit check ${op} ${shape} \\w+ on `, "m"), explain(r));
      assert.match(
        r.stdout,
        /^ {2}time fwdbwd +\d+\.\d{3} ms \(one call\) +[\d.e+-]+ TFLOP\/s$/m,
        explain(r),
      );
    });
  });
}

Deno.test("cli: the linear ops refuse what their functions do not take, before making a tensor", async () => {
  for (const { op, fn } of LINEAR_OPS) {
    const cases: [string[], RegExp][] = [
      [
        ["--shape", "B1_T16_H2_D16", "--l2norm"],
        new RegExp(`--l2norm: ${op} \\(${fn}\\) takes no useQkL2norm`),
      ],
      [["--shape", "B1_T16_H4_HK3_D16"], /H4 is not a multiple of HK3/],
      [
        ["--shape", "B1_T16_H2_D16_DV320"],
        new RegExp(`${op} \\(${fn}\\) takes head dims D and DV of at most 256`),
      ],
      [["--shape", "B1_T16_H2_KV2_D16"], /HKV does not apply/],
    ];
    for (const [args, message] of cases) {
      const r = await attnkit("check", op, "--device", "cpu", ...args);
      assert.equal(r.code, 2, `${op} ${args.join(" ")}\n${explain(r)}`);
      assert.match(r.stderr, message, `${op} ${args.join(" ")}`);
      assert.match(r.stderr, /Usage: attnkit check <op>/);
    }
  }
  const bench = await attnkit(
    "bench",
    "gla",
    "--shapes",
    "B1_T16_H2_D16",
    "--out",
    "x",
    "--l2norm",
    "--device",
    "cpu",
  );
  assert.equal(bench.code, 2, explain(bench));
  assert.match(bench.stderr, /--l2norm: gla \(chunkGla\) takes no useQkL2norm/);
  // The aliases of FLA's names.
  for (
    const [alias, op] of [["simple_gla", "simple-gla"], ["retnet", "retention"], [
      "linear_attn",
      "linear-attn",
    ]]
  ) {
    const r = await attnkit(
      "check",
      alias,
      "--shape",
      "B1_T16_H1_D16",
      "--device",
      "cpu",
      "--iterations",
      "0",
    );
    assert.equal(r.code, 0, explain(r));
    assert.match(r.stdout, new RegExp(`^attnkit check ${op} B1_T16_H1_D16 `, "m"));
  }
});

Deno.test("cli bench: the gated linear family and KDA write records naming the op and its function", async () => {
  const dir = await Deno.makeTempDir({ prefix: "attnkit_cli_linear_" });
  try {
    for (const { op, fn } of LINEAR_OPS) {
      const r = await attnkit(
        "bench",
        op,
        "--shapes",
        "B1_T64_H2_D32,B2_T40_H2_HK1_D16_DV32",
        "--device",
        "cpu",
        "--out",
        dir,
        "--iterations",
        "1",
        "--warmup",
        "0",
      );
      assert.equal(r.code, 0, explain(r));
      const json = JSON.parse(await Deno.readTextFile(`${dir}/${op}.json`));
      assert.deepEqual(
        json.records.map((x: { shape: string; mode: string }) => `${x.shape} ${x.mode}`),
        [
          "B1_T64_H2_D32 fwd",
          "B1_T64_H2_D32 fwdbwd",
          "B2_T40_H2_HK1_D16_DV32 fwd",
          "B2_T40_H2_HK1_D16_DV32 fwdbwd",
        ],
      );
      for (const rec of json.records) {
        assert.equal(rec.op, fn);
        assert.equal(rec.dtype, "bfloat16");
        assert.ok(rec.ms > 0 && rec.tflops > 0, JSON.stringify(rec));
        // GB/s of the forward only: bench/gla_side_by_side.ts counts no bytes for forward + backward.
        assert.ok(rec.mode === "fwd" ? rec.gbps > 0 : rec.gbps === null, JSON.stringify(rec));
      }
      assert.match(await Deno.readTextFile(`${dir}/${op}.md`), new RegExp(`^# ${fn}`));
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// Feature-map linear attention: two feature maps (and the identity in float32), causal and bidirectional.
// `extra`: the eps and cosformer flags, and what the inputs line then says.
const FMAP_CASES: {
  phi: string;
  shape: string;
  dtype: string;
  form: string[];
  extra?: [string[], RegExp];
}[] = [
  { phi: "elu+1", shape: "B2_T70_H2_D32_DV16", dtype: "bf16", form: [] },
  { phi: "relu", shape: "B1_T90_H3_D16", dtype: "fp16", form: ["--bidirectional"] },
  { phi: "identity", shape: "B1_T40_H2_D16", dtype: "fp32", form: ["--bidirectional"] },
  {
    phi: "relu",
    shape: "B2_T50_H2_D16_DV24",
    dtype: "bf16",
    form: [],
    extra: [["--cosformer"], /; eps 1e-6; cosformer weights cos, sin\(pi t \/ 2T\);/],
  },
  {
    phi: "elu+1",
    shape: "B1_T33_H2_D16",
    dtype: "fp32",
    form: ["--bidirectional"],
    extra: [["--eps", "0.01", "--cosformer"], /; eps 0\.01; cosformer weights/],
  },
];

deviceTest(
  "cli check fmap (featureMapLinearAttention), forward and --backward: PASS against the oracle",
  async (device) => {
    await withSeed(async (seed) => {
      for (const { phi, shape, dtype, form, extra } of FMAP_CASES) {
        const flags = [...form, ...(extra?.[0] ?? [])];
        const args = ["check", "fmap", "--shape", shape, "--dtype", dtype, "--feature-map", phi, ...flags];
        const common = ["--device", device, "--seed", String(seed), "--quiet"];
        const forward = await attnkit(...args, ...common, "--iterations", "0");
        expectPass(forward, ["output"]);
        assert.doesNotMatch(forward.stdout, /^ {2}dq /m, "no gradients without --backward");
        const r = await attnkit(...args, ...common, "--backward", "--iterations", "1");
        expectPass(r, ["output", "dq", "dk", "dv"]);
        assert.match(r.stdout, new RegExp(`^attnkit check fmap ${shape} \\w+ on `, "m"), explain(r));
        const formName = form.length ? "bidirectional" : "causal";
        assert.match(r.stdout, new RegExp(`; phi ${phi.replace("+", "\\+")}; ${formName};`), explain(r));
        if (extra) assert.match(r.stdout, extra[1], explain(r));
        assert.match(
          r.stdout,
          /^ {2}time fwd +\d+\.\d{3} ms \(one call\) +[\d.e+-]+ TFLOP\/s +[\d.e+-]+ GB\/s$/m,
          explain(r),
        );
        assert.match(
          r.stdout,
          /^ {2}time fwdbwd +\d+\.\d{3} ms \(one call\) +[\d.e+-]+ TFLOP\/s$/m,
          explain(r),
        );
      }
    });
  },
);

deviceTest(
  "cli check the decode steps (gdn, deltanet, gla, attention): PASS against the oracle, GB/s beside the time",
  async (device) => {
    await withSeed(async (seed) => {
      const common = ["--device", device, "--seed", String(seed), "--iterations", "2", "--quiet"];
      const stateCases = [
        ["gdn-decode", "bf16", ["--l2norm"], /g, beta \[3, 4\] float32/],
        ["gdn-decode", "fp32", [], /g, beta \[3, 4\] float32/],
        ["deltanet-decode", "fp16", ["--l2norm"], /; beta \[3, 4\] float32/],
        ["deltanet-decode", "fp32", [], /; beta \[3, 4\] float32/],
        ["gla-decode", "bf16", [], /gk \[3, 4, 32\] float32 in \[-0\.25, 0\]/],
        ["gla-decode", "fp32", [], /gk \[3, 4, 32\] float32 in \[-0\.25, 0\]/],
      ] as const;
      for (const [op, dtype, flags, sides] of stateCases) {
        const r = await attnkit(
          "check",
          op,
          "--shape",
          "B3_H4_HK2_D32_DV64",
          "--dtype",
          dtype,
          ...flags,
          ...common,
        );
        expectPass(r, ["output", "new state"]);
        assert.match(
          r.stdout,
          new RegExp(`^attnkit check ${op} B3_T1_H4_HK2_D32_DV64 \\w+ on `, "m"),
          explain(r),
        );
        assert.match(r.stdout, /state \[3, 4, 32, 64\] float32 \(std 0\.1\)/, explain(r));
        assert.match(r.stdout, sides, explain(r));
        // Memory-bound: GB/s, no TFLOP/s.
        assert.match(r.stdout, /^ {2}time fwd +\d+\.\d{3} ms \(median of 2\) +[\d.e+-]+ GB\/s$/m, explain(r));
      }
      const a = await attnkit(
        "check",
        "attention-decode",
        "--shape",
        "B2_S100_H8_HKV2_D64",
        "--dtype",
        "fp16",
        ...common,
      );
      expectPass(a, ["output"]);
      assert.match(a.stdout, /^attnkit check attention-decode B2_SKV100_H8_KV2_D64 float16 on /m, explain(a));
      assert.match(a.stdout, /^ {2}time fwd +\d+\.\d{3} ms \(median of 2\) +[\d.e+-]+ GB\/s$/m, explain(a));
      // Paged (random pages) and ragged caches: the oracle reads each sequence's valid rows.
      for (const flags of [["--ragged"], ["--page-size", "16"], ["--page-size", "16", "--ragged"]]) {
        const p = await attnkit(
          "check",
          "attention-decode",
          "--shape",
          "B3_S100_H8_HKV2_D64",
          ...flags,
          ...common,
        );
        expectPass(p, ["output"]);
        if (flags.includes("--ragged")) {
          assert.match(p.stdout, /rows per sequence uniform in \[1, 100\]/, explain(p));
        }
        if (flags.includes("--page-size")) {
          assert.match(p.stdout, /k, v paged cache \[336, 2, 64\] bfloat16 in pages of 16 rows/, explain(p));
        }
      }
    });
  },
);

deviceTest(
  "cli check the pool decode steps (kda-decode, gdn-pool-decode): PASS against pagedDecodeReference, GB/s beside the time",
  async (device) => {
    await withSeed(async (seed) => {
      const common = ["--device", device, "--seed", String(seed), "--iterations", "2", "--quiet"];
      // Each row: the op, its flags, and what the inputs line says of the gate and the pool.
      const poolCases = [
        ["kda-decode", ["--dtype", "bf16"], /gate bounded \(lowerBound -5\) per key channel/, "float32"],
        [
          "kda-decode",
          ["--dtype", "fp32", "--gate-transform", "softplus", "--state-dtype", "bf16"],
          /gate softplus per key channel/,
          "bfloat16",
        ],
        ["kda-decode", ["--dtype", "fp16", "--lower-bound=-2"], /gate bounded \(lowerBound -2\)/, "float32"],
        ["gdn-pool-decode", ["--dtype", "bf16"], /gate softplus per head/, "float32"],
        [
          "gdn-pool-decode",
          ["--dtype", "fp32", "--state-dtype", "bf16"],
          /gate softplus per head/,
          "bfloat16",
        ],
      ] as const;
      for (const [op, flags, gate, pool] of poolCases) {
        const r = await attnkit("check", op, "--shape", "B5_H4_HK2_D32_DV16", ...flags, ...common);
        expectPass(r, ["output", "new state", "other slots"]);
        assert.match(
          r.stdout,
          new RegExp(`^attnkit check ${op} B5_T1_H4_HK2_D32_DV16 \\w+ on `, "m"),
          explain(r),
        );
        assert.match(r.stdout, gate, explain(r));
        // A pool larger than B, random slots, padding rows (B > 1).
        assert.match(
          r.stdout,
          new RegExp(`pool \\[(\\d+), 4, 16, 32\\] ${pool} \\(std 0\\.1\\)`),
          explain(r),
        );
        assert.ok(Number(/pool \[(\d+),/.exec(r.stdout)![1]) > 6, explain(r));
        assert.match(r.stdout, /live rows \d \(fresh \d: their slots NaN\), padding rows [1-9]/, explain(r));
        assert.match(r.stdout, /^ {2}time fwd +\d+\.\d{3} ms \(median of 2\) +[\d.e+-]+ GB\/s$/m, explain(r));
      }
      // One row, no padding; and the first rows of a larger batch only.
      const single = await attnkit("check", "kda-decode", "--shape", "B1_H2_D64", ...common);
      expectPass(single, ["output", "new state", "other slots"]);
      assert.match(
        single.stdout,
        /live rows 1 \(fresh [01]: their slots NaN\), padding rows 0/,
        explain(single),
      );
      const some = await attnkit(
        "check",
        "gdn-pool-decode",
        "--shape",
        "B9_H2_D16",
        "--oracle-batches",
        "4",
        ...common,
      );
      expectPass(some, ["output", "new state", "other slots"]);
      assert.match(some.stdout, /batch rows 4 of 9/, explain(some));
    });
  },
);

Deno.test("cli: fmap and the decode ops refuse what they do not take, before making a tensor", async () => {
  const check = (op: string, shape: string, ...flags: string[]) => ["check", op, "--shape", shape, ...flags];
  const cases: [string[], RegExp][] = [
    [
      check("fmap", "B1_T16_H2_D16", "--feature-map", "softplus"),
      /--feature-map: unknown feature map "softplus"; feature maps: elu\+1, relu, identity, softmax_free/,
    ],
    [check("fmap", "B1_T16_H2_HK1_D16"), /HK does not apply to fmap/],
    [check("fmap", "B1_T16_H2_D16", "--causal"), /--causal: fmap is causal unless --bidirectional/],
    [check("fmap", "B1_T16_H2_D16_causal"), /fmap is causal unless --bidirectional; drop "causal"/],
    [check("fmap", "B1_T16_H2_D16", "--l2norm"), /--l2norm: fmap \(featureMapLinearAttention\) takes no/],
    [check("gla", "B1_T16_H2_D16", "--feature-map", "relu"), /--feature-map: applies to fmap only, not gla/],
    [check("gdn", "B1_T16_H2_D16", "--bidirectional"), /--bidirectional: applies to fmap only, not gdn/],
    [check("gla", "B1_T16_H2_D16", "--cosformer"), /--cosformer: applies to fmap only, not gla/],
    [check("kda", "B1_T16_H2_D16", "--eps", "0.1"), /--eps: applies to fmap only, not kda/],
    [check("fmap", "B1_T16_H2_D16", "--eps=-1"), /--eps: expected a number of at least 0, got "-1"/],
    [check("gdn", "B1_T16_H2_D16", "--seed=1.5"), /--seed: expected a whole number of at least 0, got "1.5"/],
    [
      check("fmap", "B1_T16_H2_D16", "--feature-map", "softmax_free", "--eps", "1e-3"),
      /--eps: softmax_free has no normaliser to add it to/,
    ],
    [
      check("gdn-decode", "B1_H2_D16", "--backward"),
      /--backward: gdn-decode \(GatedDeltaNetDecodeFwdOp\) is a decode step, forward only/,
    ],
    [
      check("attention-decode", "B1_SKV16_H2_D16", "--backward"),
      /--backward: attention-decode \(GroupedQueryAttentionDecodeWithKVCacheFwdOp\) is a decode step/,
    ],
    [
      ["bench", "gdn-decode", "--shapes", "B1_H2_D16", "--out", "x", "--modes", "fwd,fwdbwd"],
      /--modes: gdn-decode \(GatedDeltaNetDecodeFwdOp\) times fwd, not fwdbwd/,
    ],
    [check("gdn-decode", "B1_T4_H2_D16"), /gdn-decode steps one token per sequence; T, if given, is 1/],
    [check("gdn-decode", "B1_H2_HKV2_D16"), /HKV does not apply to gdn-decode/],
    [check("gdn-decode", "B1_H2_D16", "--causal"), /--causal: gdn-decode .* with no mask to choose/],
    [check("gdn-decode", "B1_H2_D320"), /takes head dims D and DV of at most 256, got D320/],
    [check("gdn", "B1_T16_H2_D16", "--ragged"), /--ragged: applies to attention-decode only, not gdn/],
    [
      check("attention", "B1_S16_H2_D16", "--page-size", "16"),
      /--page-size: applies to attention-decode only/,
    ],
    [
      check("attention-decode", "B1_SKV16_H2_D16", "--page-size", "0"),
      /--page-size: expected rows a page, a positive integer, got "0"/,
    ],
    [
      check("gla-decode", "B1_H2_D16", "--l2norm"),
      /--l2norm: gla-decode \(GLADecodeFwdOp\) takes no useQkL2norm/,
    ],
    [
      check("deltanet-decode", "B1_T2_H2_D16"),
      /deltanet-decode steps one token per sequence; T, if given, is 1/,
    ],
    [
      check("gla-decode", "B1_H2_D16", "--backward"),
      /--backward: gla-decode \(GLADecodeFwdOp\) is a decode step, forward only/,
    ],
    [check("attention-decode", "B1_SKV16_H2_HK1_D16"), /HK does not apply to attention-decode/],
    [check("attention-decode", "B1_SKV16_H2_D16_DV8"), /DV does not apply to attention-decode/],
    [check("attention-decode", "B1_H2_D16"), /missing SKV \(or S\), the cache length/],
    [check("attention-decode", "B1_S4_SKV16_H2_D16"), /one query token per sequence; S, beside SKV, is 1/],
    [check("attention-decode", "B1_SKV16_H2_D16_causal"), /with no mask to choose; drop "causal"/],
    [check("attention-decode", "B1_SKV16_H2_D16", "--dtype", "fp32"), /attention-decode runs in float16 or/],
    [
      check("gdn-pool-decode", "B1_H2_D16", "--gate-transform", "bounded"),
      /--gate-transform: applies to kda-decode only, not gdn-pool-decode/,
    ],
    [
      check("gdn-decode", "B1_H2_D16", "--lower-bound=-1"),
      /--lower-bound: applies to kda-decode only, not gdn-decode/,
    ],
    [
      check("gdn-decode", "B1_H2_D16", "--state-dtype", "bf16"),
      /--state-dtype: applies to kda-decode and gdn-pool-decode only, not gdn-decode/,
    ],
    [
      check("kda-decode", "B1_H2_D16", "--gate-transform", "tanh"),
      /--gate-transform: expected bounded or softplus, got "tanh"/,
    ],
    [
      check("kda-decode", "B1_H2_D16", "--lower-bound", "1"),
      /--lower-bound: expected a finite number of at most 0, got "1"/,
    ],
    [
      check("kda-decode", "B1_H2_D16", "--lower-bound", "x"),
      /--lower-bound: expected a finite number of at most 0, got "x"/,
    ],
    [
      check("kda-decode", "B1_H2_D16", "--gate-transform", "softplus", "--lower-bound=-1"),
      /--lower-bound: the softplus gate transform has no lower bound; drop the flag/,
    ],
    [
      check("gdn-pool-decode", "B1_H2_D16", "--state-dtype", "fp16"),
      /--state-dtype: expected fp32 or bf16, got "fp16"/,
    ],
    [
      check("kda-decode", "B1_H2_D16", "--l2norm"),
      /--l2norm: kda-decode \(recurrentKdaDecode\) L2-normalises q and k in every step; drop the flag/,
    ],
    [
      check("gdn-pool-decode", "B1_H2_D16", "--backward"),
      /--backward: gdn-pool-decode \(recurrentGdnDecode\) is a decode step, forward only/,
    ],
    [check("kda-decode", "B1_T2_H2_D16"), /kda-decode steps one token per sequence; T, if given, is 1/],
    [check("kda-decode", "B1_H2_D320"), /takes head dims D and DV of at most 256, got D320/],
    [
      check("kda", "B1_T16_H2_D16", "--gate-transform", "softplus"),
      /--gate-transform: applies to kda-decode only, not kda/,
    ],
  ];
  for (const [args, message] of cases) {
    const r = await attnkit(...args, "--device", "cpu");
    assert.equal(r.code, 2, `${args.join(" ")}\n${explain(r)}`);
    assert.match(r.stderr, message, args.join(" "));
    assert.match(r.stderr, new RegExp(`Usage: attnkit ${args[0]} <op>`), args.join(" "));
  }
});

Deno.test("cli bench: decode ops record GB/s (no TFLOP/s); fmap names its feature map and form", async () => {
  const dir = await Deno.makeTempDir({ prefix: "attnkit_cli_decode_" });
  try {
    // Recorded references as the decode and feature-map benchmarks write them: a decode step's mode is
    // "decode", the feature map's op names its phi and form.
    const refPath = `${dir}/ref.json`;
    const ref = (op: string, shape: string, mode: string, dtype: string, refMs: number) => ({
      op,
      shape,
      dtype,
      mode,
      ms: 1,
      ref: "fla",
      ref_ms: refMs,
    });
    await Deno.writeTextFile(
      refPath,
      JSON.stringify({
        records: [
          ref("GatedDeltaNetDecodeFwdOp", "B2_T1_H4_D32", "decode", "bfloat16 (fp32 state)", 0.5),
          ref("recurrentKdaDecode(softplus, bfloat16 state)", "B2_T1_H4_D32", "fwd", "bfloat16", 0.25),
          ref("featureMapLinearAttention(relu, causal)", "B1_T32_H2_D16", "fwd", "bfloat16", 7),
          ref("featureMapLinearAttention(relu, bidirectional)", "B1_T32_H2_D16", "fwd", "bfloat16", 9),
          ref("GroupedQueryAttentionDecodeWithKVCacheFwdOp", "B2_SKV64_H4_KV2_D64", "fwd", "bfloat16", 3),
          ref(
            "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(page 16, ragged)",
            "B2_SKV64_H4_KV2_D64",
            "fwd",
            "bfloat16",
            4,
          ),
        ],
      }),
    );
    const bench = async (op: string, shapes: string, ...flags: string[]) => {
      const r = await attnkit(
        "bench",
        op,
        "--shapes",
        shapes,
        "--device",
        "cpu",
        "--out",
        dir,
        "--ref",
        refPath,
        "--iterations",
        "1",
        "--warmup",
        "0",
        ...flags,
      );
      assert.equal(r.code, 0, explain(r));
      return JSON.parse(await Deno.readTextFile(`${dir}/${op}.json`)).records as Record<string, unknown>[];
    };
    const rows = (records: Record<string, unknown>[]) => records.map((x) => `${x.op} ${x.shape} ${x.mode}`);

    const gdn = await bench("gdn-decode", "B2_H4_D32,B1_T1_H4_HK2_D32_DV64", "--l2norm");
    assert.deepEqual(rows(gdn), [
      "GatedDeltaNetDecodeFwdOp B2_T1_H4_D32 fwd",
      "GatedDeltaNetDecodeFwdOp B1_T1_H4_HK2_D32_DV64 fwd",
    ]);
    // The pool steps name a non-default gate transform and a bfloat16 pool: each pairs with its own kind.
    const kdaPool = await bench(
      "kda-decode",
      "B2_H4_D32",
      "--gate-transform",
      "softplus",
      "--state-dtype",
      "bf16",
    );
    assert.deepEqual(rows(kdaPool), ["recurrentKdaDecode(softplus, bfloat16 state) B2_T1_H4_D32 fwd"]);
    assert.equal(kdaPool[0].ref_ms, 0.25);
    const gdnPool = await bench("gdn-pool-decode", "B2_H4_D32");
    assert.deepEqual(rows(gdnPool), ["recurrentGdnDecode B2_T1_H4_D32 fwd"]);
    assert.equal(gdnPool[0].ref_ms, null);
    const attn = await bench("attention-decode", "B2_S64_H4_KV2_D64");
    assert.deepEqual(rows(attn), ["GroupedQueryAttentionDecodeWithKVCacheFwdOp B2_SKV64_H4_KV2_D64 fwd"]);
    // The cache layout is part of the record's name: each pairs with its own layout only.
    const paged = await bench("attention-decode", "B2_S64_H4_KV2_D64", "--page-size", "16", "--ragged");
    assert.deepEqual(rows(paged), [
      "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(page 16, ragged) B2_SKV64_H4_KV2_D64 fwd",
    ]);
    assert.deepEqual([attn[0].ref_ms, paged[0].ref_ms], [3, 4]);
    const pagedFull = await bench("attention-decode", "B2_S64_H4_KV2_D64", "--page-size", "16");
    assert.deepEqual(rows(pagedFull), [
      "GroupedQueryAttentionDecodePagedWithKVCacheFwdOp(page 16) B2_SKV64_H4_KV2_D64 fwd",
    ]);
    assert.equal(pagedFull[0].ref_ms, null);
    for (const rec of [...gdn, ...kdaPool, ...gdnPool, ...attn, ...paged]) {
      assert.ok((rec.ms as number) > 0 && (rec.gbps as number) > 0, JSON.stringify(rec));
      assert.equal(rec.tflops, null);
    }
    // The recorded decode step pairs with fwd; the other shape has no reference.
    assert.deepEqual(gdn.map((x) => x.ref_ms), [0.5, null]);

    const fmap = await bench("fmap", "B1_T32_H2_D16", "--feature-map", "relu", "--bidirectional");
    assert.deepEqual(rows(fmap), [
      "featureMapLinearAttention(relu, bidirectional) B1_T32_H2_D16 fwd",
      "featureMapLinearAttention(relu, bidirectional) B1_T32_H2_D16 fwdbwd",
    ]);
    assert.deepEqual(fmap.map((x) => x.ref_ms), [9, null], "paired with its own form only");
    const cos = await bench(
      "fmap",
      "B1_T32_H2_D16",
      "--feature-map",
      "relu",
      "--cosformer",
      "--modes",
      "fwd",
    );
    assert.deepEqual(rows(cos), ["featureMapLinearAttention(relu, causal, cosformer) B1_T32_H2_D16 fwd"]);
    assert.equal(cos[0].ref_ms, null, "the causal form's reference is not cosformer's");
    assert.ok((fmap[0].gbps as number) > 0 && fmap[1].gbps === null, JSON.stringify(fmap));
    for (const rec of fmap) assert.ok((rec.tflops as number) > 0, JSON.stringify(rec));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
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
  assert.match(
    r.stderr,
    new RegExp(
      'unknown op "flashmla"; ops: gdn, deltanet, kda, gla, simple-gla, retention, linear-attn, fmap, ' +
        "attention, gdn-decode, deltanet-decode, gla-decode, kda-decode, gdn-pool-decode, attention-decode",
    ),
  );
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
  // The pool decode steps' row rule: 2^-16 (plus the dtype's) of |ref| and of the row's scale.
  const exact = { relative: 0, absolute: 0 };
  assert.equal(byRowTolerance("o", [1, 2, 3, 4 + 1e-4], oracle, 4, exact).pass, true);
  const off = byRowTolerance("o", [1, 2, 3.01, 4], oracle, 4, exact);
  assert.equal(off.pass, false);
  assert.match(off.problem ?? "", /^element 2: /);
  // A padding row (all zero in the oracle) admits nothing but zero; a magnitude widens the row's scale.
  assert.equal(byRowTolerance("o", [1e-9, 0], [0, 0], 2, exact).pass, false);
  assert.equal(byRowTolerance("o", [1e-9, 0], [0, 0], 2, exact, [1, 1]).pass, true);
});

Deno.test("cli linear case: rows joined over batch rows pass; an output off the oracle or a missing gradient fails", () => {
  const settings = {
    shape: parseShape("B3_T40_H2_HK1_D16_DV8", "linear-attn"),
    dtype: "float32" as const,
    device: "cpu" as const,
    seed: 7,
    l2norm: false,
  };
  // chunkLinearAttn against the oracle, which decays by g when `decay` (the op never does, nor returns dg).
  const linearAttn = (decay: boolean) =>
    linearOpCase(settings, (t): LinearFamily<"g", GlaGradients> => {
      const { B, T, H } = t.sizes;
      const g = t.uniform([B, T, H], 3, -0.5, -0.25);
      return {
        sides: decay ? [{ name: "g", tensor: g, bound: 1 }] : [],
        forward: ({ finalState, output }) =>
          chunkLinearAttn(t.q, t.k, t.v, {
            layout: "bshd",
            outputFinalState: finalState,
            out: output && { output },
          }),
        oracle: {
          forward: (x) => gatedLinearReference(x),
          backward: (x, dOut) => gatedLinearReferenceBackward(x, dOut),
        },
        flops: 1,
      };
    });
  const verdicts = (decay: boolean, batches: number) => {
    using c = linearAttn(decay);
    return Object.fromEntries(c.check(batches, true, () => {}).map((r) => [r.name, r]));
  };
  for (const batches of [1, 3]) {
    const rows = verdicts(false, batches);
    assert.deepEqual(Object.keys(rows), ["output", "final state", "dq", "dk", "dv"]);
    for (const r of Object.values(rows)) assert.ok(r.pass, `${batches} rows: ${JSON.stringify(r)}`);
  }
  const off = verdicts(true, 2);
  for (const name of ["output", "final state", "dq", "dk", "dv"]) assert.equal(off[name].pass, false, name);
  assert.equal(off.dg.pass, false);
  assert.equal(off.dg.problem, "not returned by the op");
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
  // The decode benchmarks' names, and a decode shape without T; fmap's with DV.
  for (
    const [name, op, canonical] of [
      ["B256_T1_H32_D128", "gdn-decode", "B256_T1_H32_D128"],
      ["B256_H32_HK16_D128_DV64", "gdn-decode", "B256_T1_H32_HK16_D128_DV64"],
      ["B256_H32_D128", "kda-decode", "B256_T1_H32_D128"],
      ["B64_T1_H16_HK4_D128", "gdn-pool-decode", "B64_T1_H16_HK4_D128"],
      ["B1_Skv65536_H32_KV8_D128", "attention-decode", "B1_SKV65536_H32_KV8_D128"],
      ["B4_S1_SKV8192_H32_D128", "attention-decode", "B4_SKV8192_H32_D128"],
      ["B4_T4096_H64_D128_DV64", "fmap", "B4_T4096_H64_D128_DV64"],
    ] as const
  ) {
    assert.equal(shapeName(parseShape(name, op), op), canonical);
  }
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
      const bad = await attnkit("tune", "flashmla", "--shapes", "B1_T8_H2_D64");
      assert.equal(bad.code, 2, explain(bad));
      assert.match(bad.stderr, /unknown op "flashmla"/);
      // The ops without a tune option are refused, saying so.
      for (
        const op of [
          "gla",
          "simple_gla",
          "retention",
          "linear-attn",
          "kda",
          "fmap",
          "gdn-decode",
          "kda-decode",
        ]
      ) {
        const untuned = await attnkit("tune", op, "--shapes", "B1_T1_H2_D64", "--cache", cache);
        assert.equal(untuned.code, 2, explain(untuned));
        assert.match(untuned.stderr, /\(\w+\) has nothing to tune: it takes no tune option/);
      }
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
      // The decode op class takes tune too: forward only.
      const decodeArgs = ["tune", "attention-decode", "--shapes", "B1_SKV64_H4_KV2_D64", "--cache", cache];
      const decode = await attnkit(...decodeArgs, "--device", device);
      assert.equal(decode.code, 0, explain(decode));
      assert.match(decode.stdout, /^B1_SKV64_H4_KV2_D64 decode: \S+ \(tuned\)$/m, explain(decode));
      assert.equal(Object.keys(JSON.parse(Deno.readTextFileSync(cache)).entries).length, 3);
      const decodeBackward = await attnkit(...decodeArgs, "--backward");
      assert.equal(decodeBackward.code, 2, explain(decodeBackward));
      assert.match(decodeBackward.stderr, /--backward: attention-decode .* is a decode step, forward only/);
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
