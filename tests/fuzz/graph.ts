// The fuzz catalog's generator for graph capture: on a GPU, captured convolution + decode steps replayed
// with random slots (padding among them) and captured elementwise work; everywhere, certainly invalid
// uses: the CPU as the device, a body that is not a function or reads the device back, bad options, a
// disposed graph, and (on a GPU) replays whose slots the device-side check must refuse; captureGraphAsync
// too (awaited captured work, and its refusals).
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("graph");

function slotTensor(scope: Scope, values: number[]): ak.Tensor {
  return scope.keep(ak.Tensor.from(values, { dtype: "int32", device: scope.device }));
}

// A conv + decode step on a small pool: the slots `live` draws, or bad ones.
function decodeStep(rng: Rng, scope: Scope, slots: number, indices: ak.Tensor) {
  const [H, K] = [rng.pick([1, 2]), rng.pick([32, 64])];
  const B = indices.shape[0], C = 3 * H * K;
  const x = scope.randn([B, C], "bfloat16", rng.int(0, 999));
  const weight = scope.randn([C, 4], "float32", 1);
  const conv = scope.keep(ak.Tensor.zeros([slots, 3, C], { dtype: "bfloat16", device: scope.device }));
  const pool = scope.keep(ak.Tensor.zeros([slots, H, K, K], { device: scope.device }));
  const gate = scope.randn([1, B, H], "float32", 2), beta = scope.randn([1, B, H], "float32", 3);
  const aLog = scope.randn([H], "float32", 4), dtBias = scope.randn([H], "float32", 5);
  const qkv = scope.keep(ak.Tensor.empty([B, C], { dtype: "bfloat16", device: scope.device }));
  return () => {
    ak.causalConv1dDecode(x, weight, conv, { stateIndices: indices, activation: "silu", out: qkv });
    return ak.recurrentGdnDecode(qkv, gate, beta, aLog, dtBias, pool, indices);
  };
}

/** The graph generator (registered in cases.ts). */
export function graphCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const gpu = scope.device !== "cpu";
  if (!bad && gpu) {
    const slots = rng.int(2, 9), B = rng.int(1, slots - 1);
    const live = Array.from({ length: B }, (_, b) => (rng.chance(0.2) ? rng.int(-2, 0) : b + 1));
    const indices = slotTensor(scope, live);
    if (rng.chance(0.5)) {
      return valid("captured conv + decode, replayed", () => {
        using graph = ak.captureGraph(decodeStep(rng, scope, slots, indices));
        for (let r = rng.int(1, 3); r > 0; --r) graph.replay();
        graph.synchronize();
        return scope.keep(graph.result);
      });
    }
    const x = scope.randn([rng.int(1, 64)], "float32", rng.int(0, 99));
    if (rng.chance(0.3)) {
      return valid("captured awaited work", async () => {
        using graph = await ak.captureGraphAsync(async () => {
          using twice = x.mul(2);
          return await Promise.resolve(twice.add(1));
        });
        graph.replay();
        graph.synchronize();
        return scope.keep(graph.result);
      });
    }
    return valid("captured elementwise work", () => {
      using graph = ak.captureGraph(() => {
        using twice = x.mul(2);
        return twice.add(1);
      });
      graph.replay();
      graph.synchronize();
      return scope.keep(graph.result);
    });
  }
  const device = gpu ? scope.device : "cuda";
  if (rng.chance(0.2)) {
    return rng.chance(0.5)
      ? invalid(
        "an awaited body on the CPU",
        () => ak.captureGraphAsync(() => Promise.resolve(1), { device: "cpu" }),
      )
      : invalid(
        "an awaited body that is not a function",
        () => ak.captureGraphAsync(rng.pick([null, 2, {}]) as never),
      );
  }
  switch (rng.int(0, gpu ? 6 : 3)) {
    case 0:
      return invalid("the CPU as the device", () => ak.captureGraph(() => {}, { device: "cpu" }));
    case 1:
      return invalid(
        "a body that is not a function",
        () => ak.captureGraph(rng.pick([null, 1, "f", {}]) as never),
      );
    case 2:
      return invalid("an unknown option", () => ak.captureGraph(() => {}, { mode: "global" } as never));
    case 3:
      return invalid("a device that does not exist", () => ak.captureGraph(() => {}, { device: "cuda:77" }));
    case 4:
      return invalid("a host read in the body", () => {
        const x = scope.randn([4], "float32", 1);
        return ak.captureGraph(() => x.toArray(), { device });
      });
    case 5:
      return invalid("a replay of a disposed graph", () => {
        const x = scope.randn([4], "float32", 1);
        const graph = ak.captureGraph(() => scope.keep(x.add(1)), { device });
        graph.dispose();
        graph.replay();
      });
    default: {
      const slots = rng.int(2, 6);
      const wrong = rng.chance(0.5) ? [1, slots + rng.int(0, 3)] : [1, 1];
      const indices = slotTensor(scope, wrong);
      return invalid(
        rng.chance(0.5) ? "a slot past the pool, found on replay" : "a slot twice, found on replay",
        () => {
          using graph = ak.captureGraph(decodeStep(rng, scope, slots, indices), { device });
          scope.keep(graph.result);
          graph.replay();
          graph.synchronize();
        },
      );
    }
  }
}
