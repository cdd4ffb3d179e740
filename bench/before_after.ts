/**
 * Times the recorded shapes of every op family through the public API of the attnkit checkout at
 * `--root` (default this one), so that two versions of the library can be compared in the same GPU
 * session: run it once per checkout (each loads its own library) and `--compare` the two JSON files.
 *
 * Shapes (ANCHORS.md and the bench/results tables): Gated DeltaNet and DeltaNet forward, and forward +
 * backward (the forward saving its states), at B1_T8192_H96_D128, B2_T16384_H16_D128,
 * B4_T4096_H64_D128, B8_T2048_H32_D256, B8_T1024_H8_D64; Gated DeltaNet decode [256, 32, 128, 128]
 * fp32; attention forward and backward at B4_S4096_H32_D128 (causal and not), B4_S4096_H32_KV8_D128
 * causal and B8_S2048_H16_D64 causal. Inputs bf16. Every sample clears the L2 first (256 MB written),
 * as do_bench does; the median of `--iterations` is recorded.
 *
 * @example
 * ```sh
 * deno run -A bench/before_after.ts --root .before --out $OUT/before.json
 * deno run -A bench/before_after.ts --out $OUT/after.json
 * deno run -A bench/before_after.ts --compare $OUT/before.json,$OUT/after.json --md $OUT/table.md
 * # over rounds: each row judged by the median of its per-round ratios (slower past --limit, default 1.03)
 * deno run -A bench/before_after.ts --compare b1.json,a1.json --compare b2.json,a2.json --compare b3.json,a3.json
 * ```
 *
 * @module
 */
import { checkedOptions, numberOption, scriptArgs, ScriptUsageError } from "../tools/script_args.ts";

/** One timing: `{op, shape, dtype, mode, ms}`. */
export interface Timed {
  /** The function or op timed. */
  op: string;
  /** E.g. `B2_T16384_H16_D128`. */
  shape: string;
  /** The inputs' dtype. */
  dtype: string;
  /** `fwd`, `fwdbwd`, `bwd` or `decode`. */
  mode: string;
  /** Median milliseconds. */
  ms: number;
}

const LINEAR = [
  [1, 8192, 96, 128],
  [2, 16384, 16, 128],
  [4, 4096, 64, 128],
  [8, 2048, 32, 256],
  [8, 1024, 8, 64],
] as const;

const ATTENTION = [
  { b: 4, s: 4096, h: 32, hkv: 32, d: 128, causal: true },
  { b: 4, s: 4096, h: 32, hkv: 32, d: 128, causal: false },
  { b: 4, s: 4096, h: 32, hkv: 8, d: 128, causal: true },
  { b: 8, s: 2048, h: 16, hkv: 16, d: 64, causal: true },
] as const;

// deno-lint-ignore no-explicit-any
type Module = any;

async function measure(root: string, iterations: number): Promise<Timed[]> {
  const ak: Module = await import(new URL(`${root.replace(/\/$/, "")}/mod.ts`, `file://${Deno.cwd()}/`).href);
  const device = "cuda";
  const flush = ak.Tensor.empty([64 << 20], { dtype: "float32", device });
  const time = (fn: () => void) =>
    ak.timeIt(fn, { device, warmup: 3, iterations, before: () => void flush.fill(0) }).medianMs as number;
  const out: Timed[] = [];
  const record = (op: string, shape: string, mode: string, ms: () => number) => {
    // A version that cannot run a case (an option it lacks) loses that row, not the whole run.
    try {
      const t = ms();
      out.push({ op, shape, dtype: "bfloat16", mode, ms: t });
      console.error(`${root}: ${op} ${shape} ${mode} ${t.toFixed(3)} ms`);
    } catch (e) {
      console.error(`${root}: ${op} ${shape} ${mode} skipped: ${e instanceof Error ? e.message : e}`);
    }
  };
  // Versions before the single calling convention (output gradient first, layout on every call) take
  // the backward's tensors in their own order and the op classes without a layout.
  const gradientFirst = /^function\s*\w*\(\s*dOutput\b/.test(String(ak.attentionBackward));
  for (const [B, T, H, D] of LINEAR) {
    const shape = `B${B}_T${T}_H${H}_D${D}`;
    const opt = { dtype: "bfloat16", device };
    const q = ak.Tensor.randn([B, T, H, D], { ...opt, seed: 1 });
    const k = ak.Tensor.randn([B, T, H, D], { ...opt, seed: 2 });
    const v = ak.Tensor.randn([B, T, H, D], { ...opt, seed: 3 });
    const g = ak.Tensor.rand([B, T, H], { device, seed: 4, low: -0.1, high: 0 });
    const beta = ak.Tensor.rand([B, T, H], { device, seed: 5 });
    const dO = ak.Tensor.randn([B, T, H, D], { ...opt, seed: 6 });
    const output = ak.Tensor.empty([B, T, H, D], opt);
    for (const gated of [true, false]) {
      const name = gated ? "chunkGatedDeltaRule" : "chunkDeltaRule";
      const fwd = (o: Record<string, unknown>) =>
        gated
          ? ak.chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", useQkL2norm: true, ...o })
          : ak.chunkDeltaRule(q, k, v, beta, { layout: "bshd", useQkL2norm: true, ...o });
      const bwd = (saved: unknown) => {
        const inputs = gated ? [q, k, v, g, beta] : [q, k, v, beta];
        const backward = gated ? ak.chunkGatedDeltaRuleBackward : ak.chunkDeltaRuleBackward;
        const tensors = gradientFirst ? [dO, ...inputs] : [...inputs, dO];
        return backward(...tensors, { layout: "bshd", useQkL2norm: true, saved });
      };
      record(name, shape, "fwd", () => time(() => void fwd({ out: { output } })));
      record(
        name,
        shape,
        "fwdbwd",
        () =>
          time(() => {
            const r = fwd({ saveForBackward: true });
            bwd(r.saved)[Symbol.dispose]();
            r[Symbol.dispose]();
          }),
      );
    }
    for (const t of [q, k, v, g, beta, dO, output]) t.dispose();
  }
  {
    const [B, H, D] = [256, 32, 128];
    const x = (seed: number, shape: number[]) => ak.Tensor.randn(shape, { dtype: "bfloat16", device, seed });
    const q = x(1, [B, H, D]), k = x(2, [B, H, D]), v = x(3, [B, H, D]);
    const g = ak.Tensor.rand([B, H], { device, seed: 4, low: -0.1, high: 0 });
    const beta = ak.Tensor.rand([B, H], { device, seed: 5 });
    const state = ak.Tensor.randn([B, H, D, D], { device, seed: 6 });
    const op = new ak.GatedDeltaNetDecodeFwdOp({ useQkL2norm: true, inPlace: true });
    const output = ak.Tensor.empty([B, H, D], { dtype: "bfloat16", device });
    record(
      "GatedDeltaNetDecodeFwdOp",
      "B256_H32_D128_fp32state",
      "decode",
      () =>
        time(() => {
          op.forward(q, k, v, g, beta, state, { output });
        }),
    );
    for (const t of [q, k, v, g, beta, state, output]) t.dispose();
  }
  for (const c of ATTENTION) {
    const shape = `B${c.b}_S${c.s}_H${c.h}${c.hkv !== c.h ? `_KV${c.hkv}` : ""}_D${c.d}${
      c.causal ? "_causal" : ""
    }`;
    const opt = { dtype: "bfloat16", device };
    const q = ak.Tensor.randn([c.b, c.s, c.h, c.d], { ...opt, seed: 1 });
    const k = ak.Tensor.randn([c.b, c.s, c.hkv, c.d], { ...opt, seed: 2 });
    const v = ak.Tensor.randn([c.b, c.s, c.hkv, c.d], { ...opt, seed: 3 });
    const dO = ak.Tensor.randn([c.b, c.s, c.h, c.d], { ...opt, seed: 4 });
    const options = { layout: "bshd", isCausal: c.causal } as const;
    const y = ak.attention(q, k, v, { ...options, returnLse: true });
    const output = ak.Tensor.empty(q.shape, opt);
    // The forward as timed before results carried their LSE: the output alone.
    const forward = new ak.GroupedQueryAttentionDenseFwdOp(gradientFirst ? options : { isCausal: c.causal });
    record(
      "attention",
      shape,
      "fwd",
      () => time(() => void forward.forward(q, k, v, { output })),
    );
    record(
      "attentionBackward",
      shape,
      "bwd",
      () =>
        time(() => {
          (gradientFirst
            ? ak.attentionBackward(dO, q, k, v, y.output, y.lse, options)
            : ak.attentionBackward(q, k, v, y.output, dO, y.lse, options))[Symbol.dispose]();
        }),
    );
    for (const t of [q, k, v, dO, output]) t.dispose();
    y[Symbol.dispose]();
  }
  flush.dispose();
  return out;
}

/** One row of a before / after comparison over rounds. */
export interface ComparedRow {
  /** `op shape mode`. */
  key: string;
  /** The median milliseconds before and after, over the rounds that have the row on both sides. */
  before: number;
  /** See `before`. */
  after: number;
  /** Each round's after / before (rounds lacking the row on either side are left out). */
  ratios: number[];
  /** The median of `ratios` (NaN when no round has the row on both sides). */
  median: number;
  /** `slower` / `faster` when the median is past the limit either way, else `same`. */
  verdict: "slower" | "faster" | "same" | "n/a";
}

function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * Pairs each round's before and after timings by op, shape and mode and judges every row by the median
 * of its per-round ratios: `slower` past `limit` (1.03: the "no recorded shape slows by more than 3%"
 * rule), `faster` below its inverse. A median over alternating rounds keeps one noisy round from
 * deciding, as a single ratio would.
 *
 * @example
 * ```ts
 * import { compareRounds } from "./bench/before_after.ts";
 * const t = (ms: number) => [{ op: "attention", shape: "B1", dtype: "bfloat16", mode: "fwd", ms }];
 * const rows = compareRounds([[t(1), t(1.05)], [t(1), t(1.01)], [t(1), t(1.04)]]);
 * console.log(rows[0].median, rows[0].verdict); // 1.04 "slower"
 * ```
 */
export function compareRounds(rounds: [Timed[], Timed[]][], limit = 1.03): ComparedRow[] {
  const key = (t: Timed) => `${t.op} ${t.shape} ${t.mode}`;
  const keys = [...new Set(rounds.flatMap(([b, a]) => [...b, ...a].map(key)))];
  return keys.map((k) => {
    const pairs = rounds.flatMap(([b, a]) => {
      const before = b.find((t) => key(t) === k), after = a.find((t) => key(t) === k);
      return before && after ? [[before.ms, after.ms]] : [];
    });
    const ratios = pairs.map(([b, a]) => a / b), m = median(ratios);
    const verdict = Number.isNaN(m) ? "n/a" : m > limit ? "slower" : m < 1 / limit ? "faster" : "same";
    return {
      key: k,
      before: median(pairs.map((p) => p[0])),
      after: median(pairs.map((p) => p[1])),
      ratios,
      median: m,
      verdict,
    };
  });
}

const fixed = (x: number) => Number.isNaN(x) ? "n/a" : x.toFixed(3);

// The rows as markdown, the rows past the limit named below the table.
function roundsTable(rows: ComparedRow[], limit: number): string {
  const lines = [
    "| op shape mode | before ms | after ms | after / before, each round | median | verdict |",
    "| --- | ---: | ---: | --- | ---: | --- |",
    ...rows.map((r) =>
      `| ${r.key} | ${fixed(r.before)} | ${fixed(r.after)} | ${r.ratios.map(fixed).join(" ")} | ${
        fixed(r.median)
      } | ${r.verdict} |`
    ),
  ];
  const slower = rows.filter((r) => r.verdict === "slower");
  lines.push(
    "",
    slower.length === 0
      ? `No row slower by more than ${((limit - 1) * 100).toFixed(0)}% (median of the rounds).`
      : `Slower by more than ${((limit - 1) * 100).toFixed(0)}%: ${slower.map((r) => r.key).join("; ")}.`,
  );
  return lines.join("\n");
}

// --compare's values as [before, after] file pairs, or a ScriptUsageError naming the bad one.
function comparePairs(values: string[]): [string, string][] {
  return values.map((pair) => {
    const files = pair.split(",");
    if (files.length !== 2) {
      throw new ScriptUsageError(`--compare: expected BEFORE.json,AFTER.json, got "${pair}"`);
    }
    return [files[0], files[1]];
  });
}

// --limit as a ratio of at least 1, or a ScriptUsageError.
function ratioLimit(text: string): number {
  const limit = Number(text);
  if (!(limit >= 1)) throw new ScriptUsageError(`--limit: expected a ratio of at least 1, got "${text}"`);
  return limit;
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    options: {
      root: { type: "string", default: "." },
      out: { type: "string" },
      iterations: { type: "string", default: "20" },
      compare: { type: "string", multiple: true },
      limit: { type: "string", default: "1.03" },
      md: { type: "string" },
    },
  });
  if (values.compare) {
    const pairs = checkedOptions(() => comparePairs(values.compare!));
    const limit = checkedOptions(() => ratioLimit(values.limit!));
    const read = async (path: string) => JSON.parse(await Deno.readTextFile(path)) as Timed[];
    const rounds = await Promise.all(
      pairs.map(async ([b, a]) => [await read(b), await read(a)] as [Timed[], Timed[]]),
    );
    const table = roundsTable(compareRounds(rounds, limit), limit);
    console.log(table);
    if (values.md) await Deno.writeTextFile(values.md, `${table}\n`);
  } else {
    const results = await measure(values.root!, numberOption("--iterations", values.iterations));
    const text = JSON.stringify(results, null, 1);
    if (values.out) await Deno.writeTextFile(values.out, text);
    else console.log(text);
  }
}
