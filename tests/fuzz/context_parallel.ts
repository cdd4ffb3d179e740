// The fuzz catalog's generator for context parallelism: plans of random fragment tables (1 to 4 ranks,
// cuts anywhere, empty fragments and sequences), the summary algebra, prepared spans, and whole
// forward + backward runs over simulated ranks on small inputs; and mutations that make a call
// certainly invalid (tables that do not tile the stream, plans and groups that disagree, spans of the
// wrong length, summaries of the wrong shape).
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("context parallel");

/** Random sequence offsets over `total` tokens (some sequences empty). */
function offsets(rng: Rng, total: number): number[] {
  const cuts = Array.from({ length: rng.int(0, 3) }, () => rng.int(0, total)).sort((a, b) => a - b);
  return [0, ...cuts, total];
}

/** A fragment table that tiles [0, total): random cuts dealt to `world` ranks (some empty). */
function table(rng: Rng, total: number, world: number): ak.Fragment[][] {
  const cuts = Array.from({ length: rng.int(world - 1, world + 2) }, () => rng.int(0, total)).sort((a, b) =>
    a - b
  );
  const bounds = [0, ...cuts, total];
  const rows: ak.Fragment[][] = Array.from({ length: world }, () => []);
  for (let i = 0; i + 1 < bounds.length; i++) rows[i % world].push([bounds[i], bounds[i + 1]]);
  for (const row of rows) if (row.length === 0) row.push([total, total]);
  return rows;
}

/** Every rank's forward (and backward when asked) over its span of fresh global inputs. */
async function runAll(scope: Scope, rng: Rng, cu: number[], rows: ak.Fragment[][], backward: boolean) {
  const total = cu[cu.length - 1], H = rng.int(1, 2), K = rng.pick([8, 16]), kda = rng.chance(0.5);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16"]);
  const q = scope.randn([1, total, 1, K], dtype, rng.int(0, 999));
  const k = scope.keep(
    ak.Tensor.randn([1, total, 1, K], { dtype, device: scope.device, seed: rng.int(0, 999), std: 0.3 }),
  );
  const v = scope.randn([1, total, H, K], dtype, rng.int(0, 999));
  const g = scope.rand(kda ? [1, total, H, K] : [1, total, H], rng.int(0, 999), -0.3, 0);
  const beta = scope.rand([1, total, H], rng.int(0, 999));
  const groups = ak.SimulatedGroup.create(rows.length);
  const viaRouting = rng.chance(0.5);
  const outputs = await Promise.all(groups.map(async (group) => {
    const plan = ak.ContextParallelPlan.fromFragments(cu, rows, group.rank);
    using ids = plan.globalTokenIds(scope.device);
    using sq = q.indexSelect(1, ids), sk = k.indexSelect(1, ids), sv = v.indexSelect(1, ids);
    using sg = g.indexSelect(1, ids), sb = beta.indexSelect(1, ids);
    // Half the runs through routings with caps (what a captured graph reads; the same caps on every
    // rank), half through the plans.
    using routing = viaRouting
      ? plan.routing(scope.device, { slots: plan.slots + 1, maxSubsequences: plan.subsequences.length + 1 })
      : undefined;
    const layout = routing ? { routing } : { plan };
    using r = kda
      ? await ak.contextParallelKda(sq, sk, sv, sg, sb, { ...layout, group, fastmath: rng.chance(0.5) })
      : await ak.contextParallelGdn(sq, sk, sv, sg, sb, { ...layout, group, useQkL2norm: rng.chance(0.5) });
    if (backward) {
      using grads = await r.backward(sv);
      return scope.keep(grads.dk.clone());
    }
    return scope.keep(r.output.clone());
  }));
  return outputs[outputs.length - 1];
}

/** Every rank's convolution history (and its gradient's way back) over fresh global tokens. */
async function convHistory(scope: Scope, rng: Rng, cu: number[], rows: ak.Fragment[][]) {
  const total = cu[cu.length - 1], C = rng.pick([1, 4]), width = rng.int(1, 6);
  const x = scope.randn([1, total, C], rng.pick<ak.DType>(["float32", "bfloat16"]), rng.int(0, 999));
  const groups = ak.SimulatedGroup.create(rows.length);
  // A routing with caps (the same on every rank, as one routing per rank serving every layout needs)
  // or the plan itself.
  const plans = rows.map((_, r) => ak.ContextParallelPlan.fromFragments(cu, rows, r));
  const caps = rng.chance(0.5)
    ? {
      slots: plans[0].slots + rng.int(0, 1),
      maxSubsequences: Math.max(...plans.map((p) => p.subsequences.length)) + rng.int(0, 1),
      convHistory: width - 1,
    }
    : undefined;
  const out = await Promise.all(groups.map(async (group) => {
    const plan = plans[group.rank];
    using ids = plan.globalTokenIds(scope.device);
    using xs = x.indexSelect(1, ids);
    using routing = caps ? plan.routing(scope.device, caps) : undefined;
    using h = await ak.contextParallelConvHistory(
      xs,
      routing ? { routing, group, width } : { plan, group, width },
    );
    using back = await h.backward(h.history);
    return scope.keep(back.clone());
  }));
  return out[0];
}

/** The context-parallel generator (registered in cases.ts). */
export function contextParallelCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const total = rng.pick([0, 1, 5, 40, 70]);
  const cu = offsets(rng, total);
  const world = rng.int(1, 4);
  const rows = table(rng, total, world);
  const summary = (lead: number[], K: number, V: number, seed: number): ak.StateSummary => ({
    bias: scope.randn([...lead, K, V], "float32", seed),
    transition: scope.randn([...lead, K, K], "float32", seed + 1),
    [Symbol.dispose]() {},
  });
  if (!bad) {
    switch (rng.int(0, 4)) {
      case 0:
        return valid("plan, routing and the folds of neutral summaries", () => {
          const plan = ak.ContextParallelPlan.fromFragments(cu, rows, rng.int(0, world - 1));
          scope.keep(plan.globalTokenIds(scope.device));
          using routing = plan.routing(scope.device, rng.chance(0.5) ? {} : { slots: plan.slots + 1 });
          using gathered = ak.neutralSummary([world, routing.slots + 1, 1], 4, 3, scope.device);
          scope.keep(ak.composeExitCotangents(gathered, routing));
          return scope.keep(ak.composeEntryStates(gathered, routing));
        });
      case 1:
        return valid("summary algebra", () => {
          const a = summary([2], 4, 3, 1), b = summary([2], 4, 3, 3);
          using n = ak.neutralSummary([2], 4, 3, scope.device);
          using ab = ak.composeSummaries(a, b);
          using abn = ak.composeSummaries(ab, n);
          return scope.keep(ak.mergeState(a.bias, abn));
        });
      case 2:
        return valid("prepared span summaries", () => {
          const x = scope.randn([1, total, 1, 8], "float32", 5);
          const g = scope.rand([1, total, 1], 6, -0.2, 0);
          using prepared = rng.chance(0.5)
            ? ak.chunkGdnPrepare(x, x, x, g, g, { cuSeqlens: cu })
            : ak.chunkKdaPrepare(x, x, x, scope.rand([1, total, 1, 8], 7, -0.2, 0), g, { cuSeqlens: cu });
          const segment = rng.int(0, cu.length - 1);
          if (rng.chance(0.5)) {
            using s = prepared.stateSummaries([segment]);
            return scope.keep(s.transition.clone());
          }
          // The backward's pieces: reverse summaries, then the span's backward from zero entries.
          const N = cu.length - 1;
          using entry = ak.Tensor.zeros([N, 1, 8, 8], { device: scope.device });
          using r = prepared.reverseSummaries(x, entry, [segment]);
          using grads = prepared.backward(x, entry, entry);
          scope.keep(grads.dv!.clone());
          return scope.keep(r.bias.clone());
        });
      case 3:
        return rng.chance(0.5)
          ? valid("forward over simulated ranks", () => runAll(scope, rng, cu, rows, false))
          : valid("convolution history and its backward", () => convHistory(scope, rng, cu, rows));
      default:
        return valid("forward and backward over simulated ranks", () => runAll(scope, rng, cu, rows, true));
    }
  }
  const x = scope.randn([1, 8, 1, 8], "float32", 7);
  const g = scope.rand([1, 8, 1], 8, -0.2, 0);
  switch (rng.int(0, 10)) {
    case 0:
      return invalid(
        "fragments that overlap or leave a gap",
        () =>
          ak.ContextParallelPlan.fromFragments(
            [0, 10],
            rng.pick([[[[0, 6]], [[4, 10]]], [[[0, 4]], [[6, 10]]]]),
            0,
          ),
      );
    case 1:
      return invalid(
        "a rank outside the table, or a fragment past the end",
        () =>
          rng.chance(0.5)
            ? ak.ContextParallelPlan.fromFragments(cu, rows, world)
            : ak.ContextParallelPlan.fromFragments(cu, [[[0, total + 1]]], 0),
      );
    case 2:
      return invalid("a summary whose shapes do not fit", () => {
        const a = summary([2], 4, 3, 1);
        const b = rng.chance(0.5) ? summary([3], 4, 3, 3) : { bias: a.bias, transition: a.bias };
        return ak.composeSummaries(a, b as ak.StateSummary);
      });
    case 3:
      return invalid(
        "a state of another shape",
        () => ak.mergeState(scope.randn([2, 4, 4], "float32", 1), summary([2], 4, 3, 1)),
      );
    case 4:
      return invalid(
        "a span of a batch of two, offsets that miss its end, reverse summaries of a segment it lacks",
        () =>
          rng.chance(0.5)
            ? ak.chunkGdnPrepare(scope.randn([2, 8, 1, 8], "float32", 1), x, x, g, g)
            : rng.chance(0.5)
            ? ak.chunkGdnPrepare(x, x, x, g, g, { cuSeqlens: [0, 5] })
            : (() => {
              // Reverse summaries of a segment past the span's.
              using prepared = ak.chunkGdnPrepare(x, x, x, g, g);
              using entry = ak.Tensor.zeros([1, 1, 8, 8], { device: scope.device });
              return prepared.reverseSummaries(x, entry, [rng.pick([2, -1, 0.5])]);
            })(),
      );
    case 9:
      return invalid(
        "routing caps below the layout, a copy from another layout, or a plan and a routing",
        () => {
          const plan = ak.ContextParallelPlan.fromFragments([0, 8], [[[0, 4]], [[4, 8]]], 0);
          switch (rng.int(0, 2)) {
            case 0:
              return plan.routing(scope.device, rng.pick([{ slots: 0 }, { maxSubsequences: 0 }]));
            case 1: {
              using a = plan.routing(scope.device, { maxSubsequences: 2 });
              using b = plan.routing(scope.device, { maxSubsequences: 3 });
              return ak.ContextParallelRouting.prototype.copyFrom.call(
                a,
                rng.chance(0.5) ? b : ({} as never),
              );
            }
            default: {
              using routing = plan.routing(scope.device);
              const group = ak.SimulatedGroup.create(2)[0];
              const xs = scope.keep(x.slice(1, 0, 4)), gs = scope.keep(g.slice(1, 0, 4));
              return ak.contextParallelGdn(xs, xs, xs, gs, gs, { plan, routing, group });
            }
          }
        },
      );
    case 5:
      return invalid("a group that is not the plan's", () => {
        const plan = ak.ContextParallelPlan.fromFragments([0, 8], [[[0, 8]], [[8, 8]]], 0);
        const [, other] = ak.SimulatedGroup.create(2);
        return ak.contextParallelGdn(x, x, x, g, g, { plan, group: other });
      });
    case 6:
      return invalid("a span of another length, or an option of the other variant", () => {
        const plan = ak.ContextParallelPlan.fromFragments([0, 16], [[[0, 16]]], 0);
        const group = ak.SimulatedGroup.create(1)[0];
        if (rng.chance(0.5)) return ak.contextParallelGdn(x, x, x, g, g, { plan, group });
        const fitting = ak.ContextParallelPlan.fromFragments([0, 8], [[[0, 8]]], 0);
        return ak.contextParallelKda(x, x, x, g, g, { plan: fitting, group, useQkL2norm: true } as never);
      });
    case 7:
      return invalid(
        "a convolution history of no width, of another span, of a routing of another width",
        () => {
          const plan = ak.ContextParallelPlan.fromFragments([0, 8], [[[0, 8]]], 0);
          const group = ak.SimulatedGroup.create(1)[0];
          const x8 = scope.randn([1, 8, 2], "float32", 1);
          switch (rng.int(0, 3)) {
            case 0:
              return ak.contextParallelConvHistory(x8, { plan, group, width: 0 });
            case 1:
              return ak.contextParallelConvHistory(scope.randn([1, 9, 2], "float32", 1), {
                plan,
                group,
                width: 4,
              });
            case 2: {
              // A routing built for another history length.
              using routing = plan.routing(scope.device, { convHistory: rng.pick([0, 1, 5]) });
              return ak.contextParallelConvHistory(x8, { routing, group, width: 4 });
            }
            default: {
              // The routing is the case's own: disposed whatever the call does.
              using routing = plan.routing(scope.device);
              return ak.contextParallelConvHistory(x8, { plan, routing, group, width: 2 } as never);
            }
          }
        },
      );
    case 8:
      return invalid(
        "an NCCL group of a bad id, rank or device, a missing library, an id file of no path",
        () => {
          const id = "ab".repeat(128);
          switch (rng.int(0, 4)) {
            case 0:
              return ak.NcclGroup.create({ rank: 0, world: 1, id: rng.pick(["", "xyz", id.slice(2)]) });
            case 1:
              return ak.NcclGroup.create({ rank: rng.pick([-1, 2, 0.5]), world: 2, id });
            case 2:
              return ak.NcclGroup.create({
                rank: 0,
                world: 1,
                id,
                device: rng.pick(["cpu", "gpu", "cuda:99"]),
              });
            case 3:
              return ak.ncclUniqueId({ library: "/nonexistent/libnccl.so.2" });
            default:
              return ak.shareNcclId("", { rank: 1 });
          }
        },
      );
    default:
      return invalid("a group of no ranks", () => ak.SimulatedGroup.create(rng.pick([0, -1, 1.5])));
  }
}
