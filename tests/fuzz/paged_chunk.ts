// The fuzz catalog's generator for the forwards on a paged state pool: valid calls of pagedChunkKda and
// pagedChunkGdn, and of recurrentKda and recurrentGatedDeltaRule with stateIndices (dense or packed, padding
// indices, repeated or not, fresh slots, float32 or bfloat16 pools, indices checked or not), and mutations
// that make a call certainly invalid (an index past the pool, a live slot named twice among them); the
// chunked ones with a replay state at times.
import * as ak from "../../mod.ts";
import type { Case, Rng, Scope } from "./cases.ts";
import { caseMakers } from "./family.ts";

const { valid, invalid } = caseMakers("paged chunk");

/** The paged chunk generator (registered in cases.ts). */
export function pagedChunkCases(rng: Rng, scope: Scope, bad: boolean): Case {
  const kda = rng.chance(0.5);
  const dtype = rng.pick<ak.DType>(["float32", "bfloat16"]);
  const H = rng.pick([1, 2]), K = rng.pick([8, 16]), V = rng.pick([8, 16]);
  const packed = rng.chance(0.4);
  const lengths = Array.from({ length: rng.int(1, 3) }, () => rng.pick([0, 1, 5, 17]));
  const N = lengths.length, B = packed ? 1 : N;
  const T = packed ? lengths.reduce((a, b) => a + b, 0) : rng.pick([1, 5, 17]);
  const cu = [0];
  for (const l of lengths) cu.push(cu[cu.length - 1] + l);
  const q = scope.randn([B, T, H, K], dtype, rng.int(0, 999));
  const k = scope.keep(
    ak.Tensor.randn([B, T, H, K], { dtype, device: scope.device, seed: rng.int(0, 999), std: 0.25 }),
  );
  const v = scope.randn([B, T, H, V], dtype, rng.int(0, 999));
  const gate = scope.rand(kda ? [B, T, H, K] : [B, T, H], rng.int(0, 999), -0.5, 0);
  const beta = scope.rand([B, T, H], rng.int(0, 999));
  const pool = scope.randn([N + 2, H, V, K], rng.pick(["float32", "bfloat16"] as const), rng.int(0, 999));
  const int32 = (x: number[]) => scope.keep(ak.Tensor.from(x, { dtype: "int32", device: scope.device }));
  const idx = int32(Array.from({ length: N }, (_, n) => (rng.chance(0.2) ? -rng.int(0, 1) : n + 1)));
  const options: ak.PagedChunkOptions = packed ? { cuSeqlens: cu } : {};
  if (rng.chance(0.4)) {
    options.hasInitialState = scope.keep(
      ak.Tensor.from(Array.from({ length: N }, () => (rng.chance(0.5) ? 1 : 0)), {
        dtype: "bool",
        device: scope.device,
      }),
    );
  }
  if (rng.chance(0.3)) options.checkIndices = rng.chance(0.5);
  // The recurrent forms with stateIndices take the same pool through their initialState.
  const recurrent = rng.chance(0.3), seedName = rng.chance(0.5);
  const replay = (slots: number) => {
    const r = ak.ReplayState.zeros(slots, {
      heads: H,
      keyDim: K,
      valueDim: V,
      gate: kda ? "channel" : "head",
      dtype: dtype as "float32" | "bfloat16",
      device: scope.device,
    });
    for (const t of [r.q, r.k, r.v, r.gate, r.beta, r.count]) scope.keep(t);
    return r;
  };
  if (!recurrent && rng.chance(0.3)) options.replayState = replay(N + 2);
  const run = (o: unknown, pl: unknown = pool, s: unknown = idx): ak.Tensor => {
    if (recurrent) {
      const pooled = { layout: "bshd", initialState: pl, stateIndices: s, ...(o as object) } as never;
      // recurrentGdn is recurrentGatedDeltaRule under the seeds' name.
      const gdn = seedName ? ak.recurrentGdn : ak.recurrentGatedDeltaRule;
      return (kda ? ak.recurrentKda(q, k, v, gate, beta, pooled) : gdn(q, k, v, gate, beta, pooled)).output;
    }
    return kda
      ? ak.pagedChunkKda(q, k, v, gate, beta, pl as ak.Tensor, s as ak.Tensor, o as ak.PagedChunkOptions)
      : ak.pagedChunkGdn(q, k, v, gate, beta, pl as ak.Tensor, s as ak.Tensor, o as ak.PagedChunkGdnOptions);
  };
  // The index mutations keep the check on (unchecked, CUDA skips an index past the pool by design).
  const checked = { ...options, checkIndices: true };
  const name = `${recurrent ? "recurrent " : ""}${kda ? "kda" : "gdn"}`;
  if (!bad) return valid(name, () => scope.keep(run(options)));
  switch (rng.int(0, 5)) {
    case 5:
      return recurrent
        ? invalid("a replay state on a recurrent form", () => run({ ...options, replayState: replay(N + 2) }))
        : invalid("a replay state of another pool", () => run({ ...options, replayState: replay(N + 3) }));
    case 0:
      return invalid(
        "unknown option",
        () => run({ ...options, [rng.pick(["state_indices", "outputFinalState", "impl"])]: 1 }),
      );
    case 1:
      return invalid(
        "a pool of another shape",
        () => run(options, scope.randn([N + 2, H, V + 1, K], "float32", 1)),
      );
    case 2:
      return invalid("indices of another dtype", () => run(options, pool, scope.randn([N], "float32", 2)));
    case 3: {
      // One entry at or far past the pool's N + 2 slots, the others valid.
      const past = Array.from({ length: N }, (_, n) => n + 1);
      past[rng.int(0, N - 1)] = rng.pick([N + 2, N + 3, 2 ** 31 - 1]);
      return invalid("an index past the pool", () => run(checked, pool, int32(past)));
    }
    default: {
      // Two sequences naming one live slot (a lone sequence: one past the pool instead).
      if (N === 1) return invalid("an index past the pool", () => run(checked, pool, int32([N + 2])));
      const twice = Array.from({ length: N }, (_, n) => n + 1);
      const a = rng.int(0, N - 1), b = (a + rng.int(1, N - 1)) % N;
      twice[b] = twice[a];
      return invalid("a live slot named twice", () => run(checked, pool, int32(twice)));
    }
  }
}
