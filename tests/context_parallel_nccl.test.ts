// The NCCL communicator: on any machine, its refusals (ids, ranks, devices, a library that is not
// there, the id file); on a GPU with NCCL installed, a group of one rank: the all-gather and the
// context-parallel recipe over it against the unsharded op (two ranks need two GPUs: bench/NOTES_context_parallel.md).
import assert from "node:assert/strict";
import {
  AttnkitError,
  captureGraphAsync,
  chunkGatedDeltaRule,
  compare,
  contextParallelGdn,
  ContextParallelPlan,
  NcclGroup,
  ncclUniqueId,
  shareNcclId,
  Tensor,
} from "../mod.ts";
import { HAS_CUDA, refuses } from "./helpers.ts";

const ID = "ab".repeat(128);

/** NCCL loads here (a GPU host with NCCL): the CUDA tests run. */
function ncclPresent(): boolean {
  if (!HAS_CUDA) return false;
  try {
    ncclUniqueId();
    return true;
  } catch {
    return false;
  }
}
const HAS_NCCL = ncclPresent();

Deno.test("NCCL: bad ids, ranks, worlds and devices are refused before NCCL is touched", () => {
  refuses(() => NcclGroup.create({ rank: 0, world: 1, id: "12" }), /options.id: expected the 256 hex digits/);
  refuses(
    () => NcclGroup.create({ rank: 2, world: 2, id: ID }),
    /options.rank: expected an integer in \[0, 2\)/,
  );
  refuses(() => NcclGroup.create({ rank: 0, world: 0, id: ID }), /options.world: expected an integer >= 1/);
  refuses(() => NcclGroup.create({ rank: 0, world: 1, id: ID, device: "cpu" }), /NCCL runs on CUDA devices/);
  refuses(() => NcclGroup.create({ rank: 0, world: 1, id: ID, nccl: true } as never), /nccl/);
});

Deno.test("NCCL: a library that is not there is reported with the path and how to install NCCL", () => {
  assert.throws(
    () => ncclUniqueId({ library: "/nonexistent/libnccl.so.2" }),
    (e: unknown) =>
      e instanceof AttnkitError && e.code === "LIBRARY_NOT_FOUND" &&
      /\/nonexistent\/libnccl.so.2/.test(e.message) && /nvidia-nccl/.test(e.message),
  );
});

Deno.test("NCCL: shareNcclId reads rank 0's id from the file, and gives up on a file that never comes", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/id`, ID);
    assert.equal(await shareNcclId(`${dir}/id`, { rank: 1 }), ID);
    await assert.rejects(
      shareNcclId(`${dir}/missing`, { rank: 3, timeoutMs: 100 }),
      (e: unknown) => e instanceof AttnkitError && /no id appeared/.test(e.message),
    );
    await assert.rejects(shareNcclId("", { rank: 1 }), /path: expected a file path/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: `NCCL: a group of one rank gathers and runs the recipe like the unsharded op [cuda]${
    HAS_NCCL ? "" : " (no GPU or no NCCL: skipped)"
  }`,
  ignore: !HAS_NCCL,
  fn: async () => {
    using group = NcclGroup.create({ rank: 0, world: 1, id: ncclUniqueId() });
    using x = Tensor.randn([3, 5], { device: "cuda", seed: 1 });
    using gathered = await group.allGather(x);
    assert.deepEqual(gathered.shape, [1, 3, 5]);
    using first = gathered.select(0, 0);
    assert.equal(compare(first, x).maxAbs, 0);
    const cu = [0, 100, 260];
    const plan = ContextParallelPlan.fromFragments(cu, [[[0, 260]]], 0);
    const o = { dtype: "bfloat16", device: "cuda" } as const;
    using q = Tensor.randn([1, 260, 2, 64], { ...o, seed: 2 });
    using k = Tensor.randn([1, 260, 2, 64], { ...o, seed: 3 });
    using v = Tensor.randn([1, 260, 2, 64], { ...o, seed: 4 });
    using g = Tensor.rand([1, 260, 2], { device: "cuda", seed: 5, low: -0.2, high: 0 });
    using beta = Tensor.rand([1, 260, 2], { device: "cuda", seed: 6 });
    using r = await contextParallelGdn(q, k, v, g, beta, { plan, group, useQkL2norm: true });
    using whole = chunkGatedDeltaRule(q, k, v, g, beta, { layout: "bshd", cuSeqlens: cu, useQkL2norm: true });
    assert.equal(compare(r.output, whole.output).maxAbs, 0, "one rank runs the unsharded kernels");
  },
});

Deno.test({
  name: `NCCL: a captured recipe step replays bit for bit for every layout copied into its routing [cuda]${
    HAS_NCCL ? "" : " (no GPU or no NCCL: skipped)"
  }`,
  ignore: !HAS_NCCL,
  fn: async () => {
    using group = NcclGroup.create({ rank: 0, world: 1, id: ncclUniqueId() });
    const T = 260, o = { dtype: "bfloat16", device: "cuda" } as const;
    using q = Tensor.randn([1, T, 2, 128], { ...o, seed: 2 });
    using k = Tensor.randn([1, T, 2, 128], { ...o, seed: 3 });
    using v = Tensor.randn([1, T, 2, 128], { ...o, seed: 4 });
    using g = Tensor.rand([1, T, 2], { device: "cuda", seed: 5, low: -0.2, high: 0 });
    using beta = Tensor.rand([1, T, 2], { device: "cuda", seed: 6 });
    using dO = Tensor.randn([1, T, 2, 128], { ...o, seed: 7 });
    // Documents of one rank's span; every layout fits the caps, so one routing serves them all.
    const layouts = [[0, 100, 260], [0, 5, 130, 131, 260], [0, 260], [0, 64, 128, 192, 260]];
    const caps = { slots: 1, maxSubsequences: 4 };
    const routingOf = (cu: number[]) =>
      ContextParallelPlan.fromFragments(cu, [[[0, T]]], 0).routing("cuda", caps);
    using routing = routingOf(layouts[0]);
    const step = async (r: typeof routing) => {
      const f = await contextParallelGdn(q, k, v, g, beta, { routing: r, group, useQkL2norm: true });
      const grads = await f.backward(dO);
      return { f, grads };
    };
    const release = (s: Awaited<ReturnType<typeof step>>) => {
      s.grads[Symbol.dispose]();
      s.f[Symbol.dispose]();
    };
    release(await step(routing)); // loads the kernels outside the capture
    using graph = await captureGraphAsync(() => step(routing));
    try {
      for (const cu of layouts) {
        using fresh = routingOf(cu);
        routing.copyFrom(fresh);
        graph.replay();
        graph.synchronize();
        const eager = await step(fresh);
        try {
          const got = graph.result;
          const pairs: [string, Tensor, Tensor][] = [
            ["output", got.f.output, eager.f.output],
            ["exit states", got.f.exitStates, eager.f.exitStates],
            ...(["dq", "dk", "dv", "dg", "dbeta"] as const).map((n) =>
              [n, got.grads[n]!, eager.grads[n]!] as [string, Tensor, Tensor]
            ),
          ];
          for (const [what, a, e] of pairs) {
            assert.equal(compare(a, e).maxAbs, 0, `layout ${cu}: ${what} differs from the eager step`);
          }
        } finally {
          release(eager);
        }
      }
    } finally {
      release(graph.result);
    }
  },
});
