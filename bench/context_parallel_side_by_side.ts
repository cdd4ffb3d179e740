/**
 * Context-parallel Gated DeltaNet against one GPU running the whole sequence (issue 18's target: at
 * B1_T131072_H16_D128, forward and forward + backward at least 1.8x the single-GPU time on two GPUs, the
 * all-gather timed on its own). bf16, one sequence cut into contiguous shards.
 *
 * - `--launch N`: starts N processes, rank r on GPU r (`CUDA_VISIBLE_DEVICES=r`), over NCCL; rank 0 also
 *   times the single-GPU op and writes `<results>/<date>_context_parallel.{json,md}`.
 * - `--simulate N`: the N ranks in this process on one device (`SimulatedGroup`, through the host): what
 *   each rank computes, timed rank by rank, for the recipe's overhead on one GPU (or `--device cpu` with a
 *   small `--shape` to try the script).
 *
 * Each rank's time is the median of `--iterations` calls (after warm-up), synchronised between ranks by
 * the collectives themselves; reported is the slowest rank.
 *
 * @example
 * ```sh
 * deno run -A bench/context_parallel_side_by_side.ts --launch 2 --results $OUT
 * deno run -A bench/context_parallel_side_by_side.ts --simulate 2 --device cpu --shape B1_T512_H2_D32 --iterations 2
 * ```
 *
 * @module
 */
import { numberOption, scriptArgs } from "../tools/script_args.ts";
import {
  chunkGatedDeltaRule,
  type Communicator,
  contextParallelGdn,
  ContextParallelPlan,
  deviceInfo,
  NcclGroup,
  shareNcclId,
  SimulatedGroup,
  synchronize,
  Tensor,
} from "../mod.ts";
import { linearForwardFlops, modeFactor } from "../cli/flops.ts";
import { type BenchRecord, saveRecords } from "./records.ts";

const args = scriptArgs({
  args: Deno.args,
  options: {
    shape: { type: "string", default: "B1_T131072_H16_D128" },
    launch: { type: "string" },
    simulate: { type: "string" },
    rank: { type: "string" },
    world: { type: "string" },
    id: { type: "string" },
    device: { type: "string", default: "cuda" },
    iterations: { type: "string", default: "10" },
    results: { type: "string" },
    out: { type: "string" },
  },
}).values;

const m = /^B1_T(\d+)_H(\d+)_D(\d+)$/.exec(args.shape!);
if (!m) throw new Error(`--shape: expected B1_T<t>_H<h>_D<d>, got ${args.shape}`);
const [T, H, D] = [Number(m[1]), Number(m[2]), Number(m[3])];
const ITER = numberOption("--iterations", args.iterations);
const device = args.device!;

/** Median ms of fn (awaited), after one warm-up call, by the host clock around a synchronisation. */
async function time(fn: () => Promise<void> | void): Promise<number> {
  await fn();
  const samples: number[] = [];
  for (let i = 0; i < ITER; i++) {
    if (device !== "cpu") synchronize(device);
    const t0 = performance.now();
    await fn();
    if (device !== "cpu") synchronize(device);
    samples.push(performance.now() - t0);
  }
  return samples.sort((a, b) => a - b)[Math.floor(samples.length / 2)];
}

/** The whole sequence's inputs (every rank makes the same ones from the seeds, then takes its span). */
function inputs() {
  const o = { dtype: "bfloat16" as const, device };
  return {
    q: Tensor.randn([1, T, H, D], { ...o, seed: 1 }),
    k: Tensor.randn([1, T, H, D], { ...o, seed: 2 }),
    v: Tensor.randn([1, T, H, D], { ...o, seed: 3 }),
    g: Tensor.rand([1, T, H], { device, seed: 4, low: -0.1, high: 0 }),
    beta: Tensor.rand([1, T, H], { device, seed: 5 }),
    dO: Tensor.randn([1, T, H, D], { ...o, seed: 6 }),
  };
}

/** One rank's forward, forward + backward and all-gather times. */
async function rankTimes(group: Communicator, world: number) {
  const cut = (r: number) => Math.round((T * r) / world);
  const fragments = Array.from({ length: world }, (_, r) => [[cut(r), cut(r + 1)] as const]);
  const plan = ContextParallelPlan.fromFragments([0, T], fragments, group.rank);
  using routing = plan.routing(device);
  const x = inputs();
  using ids = plan.globalTokenIds(device);
  const span = Object.fromEntries(Object.entries(x).map(([k, t]) => [k, t.indexSelect(1, ids)]));
  for (const t of Object.values(x)) t.dispose();
  const o = { routing, group, useQkL2norm: true };
  const fwd = await time(async () => {
    (await contextParallelGdn(span.q, span.k, span.v, span.g, span.beta, o))[Symbol.dispose]();
  });
  const fwdbwd = await time(async () => {
    using r = await contextParallelGdn(span.q, span.k, span.v, span.g, span.beta, o);
    (await r.backward(span.dO))[Symbol.dispose]();
  });
  using summary = Tensor.zeros([2, H, D, 2 * D], { device });
  const gather = await time(async () => {
    (await group.allGather(summary)).dispose();
  });
  for (const t of Object.values(span)) t.dispose();
  return { fwd, fwdbwd, gather };
}

async function singleTimes() {
  const x = inputs();
  const o = { layout: "bshd", useQkL2norm: true } as const;
  const fwd = await time(() => chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta, o)[Symbol.dispose]());
  const fwdbwd = await time(() => {
    using r = chunkGatedDeltaRule(x.q, x.k, x.v, x.g, x.beta, o);
    r.backward(x.dO)[Symbol.dispose]();
  });
  for (const t of Object.values(x)) t.dispose();
  return { fwd, fwdbwd };
}

function report(world: number, how: string, ranks: { fwd: number; fwdbwd: number; gather: number }[]) {
  return singleTimes().then((one) => {
    const slowest = (k: "fwd" | "fwdbwd" | "gather") => Math.max(...ranks.map((r) => r[k]));
    const records: BenchRecord[] = (["fwd", "fwdbwd"] as const).map((mode) => ({
      op: "contextParallelGdn",
      shape: args.shape!,
      dtype: "bfloat16",
      mode,
      ms: slowest(mode),
      ref: `chunkGatedDeltaRule on one device (${how})`,
      ref_ms: one[mode],
      speedup: one[mode] / slowest(mode),
      tflops: linearForwardFlops(1, T, H, D, D) * modeFactor("linear", mode) / (slowest(mode) * 1e9),
      gbps: null,
      path: `${world} ranks, contiguous shards`,
      note: `all-gather of a 2-slot summary ${slowest("gather").toFixed(3)} ms (slowest rank)`,
    }));
    for (const r of records) console.log(JSON.stringify(r));
    if (args.results) {
      const gpu = device === "cpu" ? "CPU backend" : deviceInfo(device).name;
      saveRecords(
        args.results,
        "context_parallel",
        "Context-parallel Gated DeltaNet vs one device",
        gpu,
        records,
      );
    }
  });
}

if (args.simulate) {
  const world = Number(args.simulate);
  const groups = SimulatedGroup.create(world);
  const ranks = await Promise.all(groups.map((g) => rankTimes(g, world)));
  await report(
    world,
    "simulated ranks in one process: each rank's time includes waiting for the others",
    ranks,
  );
} else if (args.launch) {
  // One process per rank, each on its own GPU; the id passes through a file.
  const world = Number(args.launch);
  const idFile = await Deno.makeTempFile({ prefix: "attnkit-cp-id-" });
  await Deno.remove(idFile);
  const outs = Array.from({ length: world }, (_, r) => `${idFile}.rank${r}.json`);
  const children = Array.from({ length: world }, (_, r) =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL(import.meta.url).pathname,
        "--rank",
        `${r}`,
        "--world",
        `${world}`,
        "--id",
        idFile,
        "--shape",
        args.shape!,
        "--iterations",
        args.iterations!,
        "--out",
        outs[r],
      ],
      env: { CUDA_VISIBLE_DEVICES: `${r}` },
    }).spawn());
  for (const c of children) if (!(await c.status).success) throw new Error("a rank failed");
  const ranks = outs.map((f) => JSON.parse(Deno.readTextFileSync(f)));
  await report(world, "NCCL, one process per GPU", ranks);
} else if (args.rank !== undefined) {
  const rank = Number(args.rank), world = Number(args.world);
  const id = await shareNcclId(args.id!, { rank });
  using group = NcclGroup.create({ rank, world, id });
  const times = await rankTimes(group, world);
  Deno.writeTextFileSync(args.out!, JSON.stringify(times));
} else {
  throw new Error("pass --launch N (NCCL, one process per GPU) or --simulate N (one process)");
}
