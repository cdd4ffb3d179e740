/**
 * Times one op at one or more shapes under every value of the tuning keys given (their cross product),
 * on the GPU: what a kernel engineer runs before changing a planner's rule. Each setting's plan is
 * printed with its time; settings that cannot serve the call are reported and skipped. Outputs are
 * compared with the planner's own choice, so a setting that computes something else is flagged.
 *
 * `--record FILE` keeps the table (`tools/sweep_tables.ts`): recorded as
 * `bench/results/<date>_<name>_sweep.json`, it is one of the measured tables the planner's untuned
 * choices are held to (`tests/shipped_defaults.test.ts`). `--regenerate` re-measures the newest table of
 * each op and keys in `--results` into new dated files (in `--out`): the re-tune of the shipped defaults, after a
 * kernel change or on another GPU (a rule the new tables contradict then fails the test until refitted).
 *
 * Ops: gdn-fwd, gdn-fwdbwd (the forward saving its states), gdn-bwd-recompute, attn-fwd, attn-bwd.
 * Shapes: B<b>_T<t>_H<h>_D<d> (linear) or B<b>_S<s>_H<h>[_KV<hkv>]_D<d>[_causal] (attention); bf16.
 *
 * @example
 * ```sh
 * deno run -A tools/tune_sweep.ts --op gdn-fwd --shapes B2_T16384_H16_D128 \
 *   --keys linear.fwd.state,linear.fwd.state.tile
 * deno run -A tools/tune_sweep.ts --op gdn-bwd-recompute --shapes B1_T4096_H16_D128,B3_T5000_H24_D128 \
 *   --keys linear.bwd.states.tile,linear.bwd.dstates.tile --record bench/results/2026-12-03_gdn_bwd_tiles_sweep.json
 * deno run -A tools/tune_sweep.ts --regenerate --results bench/results --out /tmp/sweeps --commit abc1234
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "./script_args.ts";
import {
  attention,
  attentionBackward,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  compare,
  deviceInfo,
  GroupedQueryAttentionDenseFwdOp,
  lastPlan,
  Tensor,
  timeIt,
  tuning,
  withTuning,
} from "../mod.ts";
import { gitCommit } from "../bench/records.ts";
import {
  newestTables,
  parseShape,
  readSweepTables,
  SWEEP_OPS,
  type SweepOp,
  type SweepRow,
  type SweepSetting,
  type SweepTable,
} from "./sweep_tables.ts";

// `--device cpu` runs the tool itself on a machine without a GPU (tiny shapes; CPU plans name no kernels).
let device = "cuda";

/** The op's call on fresh inputs, and its output (for the comparison). */
function makeOp(op: string, s: Record<string, number | boolean>): { run: () => Tensor; dispose: () => void } {
  const own: Tensor[] = [];
  const t = (x: Tensor) => (own.push(x), x);
  const opt = { dtype: "bfloat16" as const, device };
  const dispose = () => own.forEach((x) => x.dispose());
  if (op.startsWith("gdn")) {
    const B = s.b as number, T = s.t as number, H = s.h as number, D = s.d as number;
    const q = t(Tensor.randn([B, T, H, D], { ...opt, seed: 1 }));
    const k = t(Tensor.randn([B, T, H, D], { ...opt, seed: 2 }));
    const v = t(Tensor.randn([B, T, H, D], { ...opt, seed: 3 }));
    const g = t(Tensor.rand([B, T, H], { device, seed: 4, low: -0.1, high: 0 }));
    const beta = t(Tensor.rand([B, T, H], { device, seed: 5 }));
    const dO = t(Tensor.randn([B, T, H, D], { ...opt, seed: 6 }));
    const o = { layout: "bshd", useQkL2norm: true } as const;
    if (op === "gdn-fwd") return { run: () => chunkGatedDeltaRule(q, k, v, g, beta, o).output, dispose };
    return {
      run: () => {
        using r = op === "gdn-fwdbwd"
          ? chunkGatedDeltaRule(q, k, v, g, beta, { ...o, saveForBackward: true })
          : undefined;
        const grads = chunkGatedDeltaRuleBackward(dO, q, k, v, g, beta, { ...o, saved: r?.saved });
        for (const x of [grads.dk, grads.dv, grads.dbeta, grads.dg]) x?.dispose();
        return grads.dq;
      },
      dispose,
    };
  }
  const B = s.b as number,
    S = s.s as number,
    H = s.h as number,
    D = s.d as number,
    KV = (s.kv as number) ?? H;
  const isCausal = s.causal === true;
  const q = t(Tensor.randn([B, S, H, D], { ...opt, seed: 1 }));
  const k = t(Tensor.randn([B, S, KV, D], { ...opt, seed: 2 }));
  const v = t(Tensor.randn([B, S, KV, D], { ...opt, seed: 3 }));
  const options = { layout: "bshd", isCausal } as const;
  if (op === "attn-fwd") {
    const forward = new GroupedQueryAttentionDenseFwdOp(options); // the output alone, no LSE
    return { run: () => forward.forward(q, k, v), dispose };
  }
  const dO = t(Tensor.randn([B, S, H, D], { ...opt, seed: 4 }));
  const y = attention(q, k, v, { ...options, returnLse: true });
  own.push(y.output, y.lse);
  return {
    run: () => {
      const r = attentionBackward(dO, q, k, v, y.output, y.lse, options);
      r.dk.dispose();
      r.dv.dispose();
      return r.dq;
    },
    dispose,
  };
}

function settings(keys: string[]): Record<string, string>[] {
  const all = Object.fromEntries(tuning().keys.map((k) => [k.name, ["auto", ...k.values]]));
  let out: Record<string, string>[] = [{}];
  for (const key of keys) {
    if (!all[key]) throw new Error(`unknown tuning key ${key}; the keys: ${Object.keys(all).join(", ")}`);
    out = out.flatMap((s) => all[key].map((v) => ({ ...s, [key]: v })));
  }
  return out;
}

/** Times every setting of `keys` at one shape; prints each as it goes. */
function sweepShape(op: SweepOp, shape: string, keys: string[], iterations: number): SweepRow {
  const { run, dispose } = makeOp(op, parseShape(shape));
  using flush = Tensor.empty([device === "cpu" ? 1 : 64 << 20], { dtype: "float32", device });
  using reference = run();
  const rows: SweepSetting[] = [];
  console.log(`== ${op} ${shape}`);
  for (const spec of settings(keys)) {
    try {
      rows.push(withTuning(spec, () => {
        using out = run();
        const kernels = lastPlan()?.kernels.map((k) => k.name) ?? [];
        const d = compare(out, reference);
        const differs = d.relRms > 1e-2 || d.nanCount > 0;
        console.log(`${JSON.stringify(spec)}: ${kernels.join(" + ")}`);
        if (differs) console.log(`  ! output differs from auto's: ${d.relRms}`);
        const ms = timeIt(() =>
          run().dispose(), { device, iterations, before: () => void flush.fill(0) }).medianMs;
        console.log(`  ${ms.toFixed(3)} ms`);
        // A setting that computes something else is kept but never counts as a timing.
        return differs
          ? { spec, kernels, ms: null, note: `output differs from auto's (relative RMS ${d.relRms})` }
          : { spec, kernels, ms };
      }));
    } catch (e) {
      const why = (e as Error).message.split("\n")[0];
      console.log(`${JSON.stringify(spec)}: cannot serve: ${why}`);
      rows.push({ spec, kernels: [], ms: null, note: why });
    }
  }
  dispose();
  return { shape, settings: rows };
}

function sweep(
  op: SweepOp,
  shapes: string[],
  keys: string[],
  iterations: number,
  commit: string,
): SweepTable {
  const rows = shapes.map((shape) => sweepShape(op, shape, keys, iterations));
  const date = new Date().toISOString().slice(0, 10);
  return {
    kind: "tuning sweep",
    date,
    gpu: device === "cpu" ? "CPU backend" : deviceInfo(device).name,
    commit,
    op,
    dtype: "bfloat16",
    keys,
    iterations,
    rows,
  };
}

function write(file: string, table: SweepTable): void {
  Deno.writeTextFileSync(file, JSON.stringify(table, null, 1) + "\n");
  console.log(`recorded ${file}`);
}

if (import.meta.main) {
  const { values } = scriptArgs({
    args: Deno.args,
    strict: true,
    options: {
      op: { type: "string", default: "gdn-fwd" },
      shapes: { type: "string", default: "B2_T16384_H16_D128" },
      keys: { type: "string", default: "" },
      iterations: { type: "string", default: "20" },
      record: { type: "string" },
      regenerate: { type: "boolean", default: false },
      results: { type: "string", default: "bench/results" },
      out: { type: "string" }, // where --regenerate writes (default: --results)
      commit: { type: "string" }, // for copies of the tree without .git
      device: { type: "string", default: "cuda" },
    },
  });
  device = values.device!;
  const iterations = numberOption("--iterations", values.iterations);
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new Error("--iterations: expected an integer >= 1");
  }
  const commit = values.commit ?? gitCommit();
  if (values.regenerate) {
    const date = new Date().toISOString().slice(0, 10);
    for (const { file, table } of newestTables(await readSweepTables(values.results!))) {
      const name = file.split("/").pop()!.replace(/^[0-9-]+[a-z]?_/, "");
      const fresh = sweep(table.op, table.rows.map((r) => r.shape), table.keys, table.iterations, commit);
      write(`${values.out ?? values.results}/${date}_${name}`, fresh);
    }
  } else {
    if (!(SWEEP_OPS as readonly string[]).includes(values.op!)) {
      throw new Error(`--op: expected one of ${SWEEP_OPS.join(", ")}, got ${values.op}`);
    }
    const keys = values.keys!.split(",").filter(Boolean);
    const table = sweep(
      values.op as SweepOp,
      values.shapes!.split(",").filter(Boolean),
      keys,
      iterations,
      commit,
    );
    if (values.record) write(values.record, table);
  }
}
