// Packed chunked calls under graph capture: a packed call plans from its capacity (T tokens, N sequences)
// and reads cu_seqlens only on the device, so the Gated DeltaNet and KDA forward + backward, and a packed
// paged prefill, captured once, replay bit for bit against the same calls made eagerly, for offsets that
// change every round (empty sequences, a one-token sequence, tokens past the last offset, every token
// live). Offsets that decrease or pass T are found by the replay's device check: synchronize() names
// cu_seqlens and the graph stays usable. Rows past the last offset: the forward leaves its output rows as
// they are (not compared), the backward writes zero gradients there (compared).
import assert from "node:assert/strict";
import {
  captureGraph,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleBackward,
  chunkKda,
  chunkKdaBackward,
  compare,
  pagedChunkGdn,
  Tensor,
} from "../mod.ts";
import { expectNoLeak, HAS_CUDA, withSeed } from "./helpers.ts";

const cuda = { ignore: !HAS_CUDA };
const dev = "cuda" as const;
const [T, H, D] = [200, 2, 128];
/** KDA's gradients summed with float atomics (compared to 1e-6, not bit for bit). */
const ATOMIC = ["dq", "dk", "dbeta", "dgate"];

/** Rounds of offsets for three sequences over T = 200 tokens. */
const ROUNDS = [
  [0, 60, 100, 200],
  [0, 0, 130, 150], // an empty sequence, 50 tokens past the last offset
  [0, 1, 65, 64 + 65], // a one-token sequence, a chunk and a token, and a tail
  [0, 0, 0, 0], // nothing live
];

function sameBits(actual: Tensor, expected: Tensor, what: string, rows = Infinity): void {
  using a32 = actual.cast("float32");
  using e32 = expected.cast("float32");
  const a = a32.toArray(), e = e32.toArray();
  assert.equal(a.length, e.length, `${what}: length`);
  // Token-major [1, T, heads, width]: the first `rows` tokens.
  const limit = rows === Infinity ? a.length : (a.length / T) * rows;
  for (let i = 0; i < limit; ++i) {
    if (!Object.is(a[i], e[i])) assert.fail(`${what}: element ${i} is ${a[i]}, the eager call gave ${e[i]}`);
  }
}

function setInt32(t: Tensor, values: number[]): void {
  using host = Tensor.from(values, { dtype: "int32", device: dev });
  t.copyFrom(host);
}

function refill(t: Tensor, seed: number, low?: number, high?: number, std = 1): void {
  using fresh = low === undefined
    ? Tensor.randn(t.shape, { dtype: t.dtype, device: dev, seed, std })
    : Tensor.rand(t.shape, { dtype: t.dtype, device: dev, seed, low, high });
  t.copyFrom(fresh);
}

interface Inputs extends Disposable {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  gate: Tensor;
  beta: Tensor;
  h0: Tensor;
  dO: Tensor;
  cu: Tensor;
  refresh(seed: number): void;
}

function inputs(seed: number, kda: boolean): Inputs {
  const bf = { dtype: "bfloat16" as const, device: dev };
  const x = {
    q: Tensor.randn([1, T, H, D], { ...bf, seed }),
    // KDA normalises nothing: keys of norm about 1 keep its state bounded.
    k: Tensor.randn([1, T, H, D], { ...bf, seed: seed + 1, std: kda ? D ** -0.5 : 1 }),
    v: Tensor.randn([1, T, H, D], { ...bf, seed: seed + 2 }),
    gate: Tensor.rand(kda ? [1, T, H, D] : [1, T, H], { device: dev, seed: seed + 3, low: -0.3, high: 0 }),
    beta: Tensor.rand([1, T, H], { device: dev, seed: seed + 4 }),
    h0: Tensor.randn([3, H, D, D], { device: dev, seed: seed + 5, std: 0.1 }),
    dO: Tensor.randn([1, T, H, D], { ...bf, seed: seed + 6 }),
    cu: Tensor.from(ROUNDS[0], { dtype: "int32", device: dev }),
  };
  return {
    ...x,
    refresh(s: number) {
      for (const [i, t] of [x.q, x.v, x.dO].entries()) refill(t, s + i);
      refill(x.k, s + 5, undefined, undefined, kda ? D ** -0.5 : 1);
      refill(x.gate, s + 7, -0.3, 0);
      refill(x.beta, s + 8, 0, 1);
    },
    [Symbol.dispose]() {
      for (const t of Object.values(x)) t.dispose();
    },
  };
}

/** Forward with an initial state and the final state, then the backward: every tensor a step returns. */
function step(x: Inputs, kda: boolean): Record<string, Tensor> {
  // KDA normalises nothing itself; the delta rule normalises q and k here.
  const o = {
    layout: "bshd" as const,
    cuSeqlens: x.cu,
    initialState: x.h0,
    ...(kda ? {} : { useQkL2norm: true }),
  };
  const args = [x.q, x.k, x.v, x.gate, x.beta] as const;
  const f = kda ? chunkKda(...args, { ...o, outputFinalState: true }) : chunkGatedDeltaRule(...args, {
    ...o,
    outputFinalState: true,
  });
  const g = kda ? chunkKdaBackward(x.dO, ...args, o) : chunkGatedDeltaRuleBackward(x.dO, ...args, o);
  const gate: Record<string, Tensor> = kda
    ? { dgate: (g as { dgate: Tensor }).dgate }
    : { dg: (g as { dg?: Tensor }).dg! };
  return {
    output: f.output,
    finalState: f.finalState!,
    dq: g.dq,
    dk: g.dk,
    dv: g.dv,
    ...gate,
    dbeta: g.dbeta,
    dInitialState: g.dInitialState!,
  };
}

function disposeAll(r: Record<string, Tensor>): void {
  for (const t of Object.values(r)) t.dispose();
}

for (const [name, kda] of [["Gated DeltaNet", false], ["KDA", true]] as const) {
  Deno.test({
    name: `captureGraph: a packed ${name} forward + backward replays bit for bit for changing offsets [cuda]`,
    ...cuda,
    fn: () =>
      withSeed((seed) =>
        expectNoLeak(dev, () => {
          using x = inputs(seed, kda);
          disposeAll(step(x, kda)); // loads the kernels outside the capture
          using graph = captureGraph(() => step(x, kda));
          try {
            for (const [r, offsets] of ROUNDS.entries()) {
              setInt32(x.cu, offsets);
              x.refresh(seed + 100 * (r + 1));
              const eager = step(x, kda);
              try {
                graph.replay();
                graph.synchronize();
                const live = offsets[offsets.length - 1];
                for (const [key, t] of Object.entries(graph.result)) {
                  if (kda && ATOMIC.includes(key)) {
                    // KDA's backward sums these with float atomics: their last bits vary between calls.
                    const c = compare(t, eager[key]);
                    assert.ok(
                      c.nanCount === 0 && c.relRms <= 1e-6,
                      `round ${r}: ${key}: relative RMS ${c.relRms}`,
                    );
                    continue;
                  }
                  // Output rows past the last offset are left as they are: not compared.
                  sameBits(t, eager[key], `round ${r}: ${key}`, key === "output" ? live : Infinity);
                }
              } finally {
                disposeAll(eager);
              }
            }
            // Decreasing offsets, then offsets past T: found on the device, reported by synchronize().
            for (const bad of [[0, 100, 50, 150], [0, 10, 20, T + 1]]) {
              setInt32(x.cu, bad);
              graph.replay();
              assert.throws(() => graph.synchronize(), /cu_seqlens/);
            }
            // The graph stays usable.
            setInt32(x.cu, ROUNDS[0]);
            const eager = step(x, kda);
            try {
              graph.replay();
              graph.synchronize();
              sameBits(graph.result.dv, eager.dv, "after the failed checks: dv");
            } finally {
              disposeAll(eager);
            }
          } finally {
            disposeAll(graph.result);
          }
        })
      ),
  });
}

Deno.test({
  name: "captureGraph: a packed paged prefill advances the pool bit for bit for changing offsets [cuda]",
  ...cuda,
  fn: () =>
    withSeed((seed) =>
      expectNoLeak(dev, () => {
        const slots = 5;
        using x = inputs(seed, false);
        using idx = Tensor.from([1, 3, 4], { dtype: "int32", device: dev });
        using fresh = Tensor.zeros([3], { dtype: "bool", device: dev });
        using poolG = Tensor.full([slots, H, D, D], NaN, { device: dev });
        using poolE = Tensor.full([slots, H, D, D], NaN, { device: dev });
        const call = (pool: Tensor) =>
          pagedChunkGdn(x.q, x.k, x.v, x.gate, x.beta, pool, idx, {
            cuSeqlens: x.cu,
            hasInitialState: fresh,
            useQkL2norm: true,
          });
        call(poolE).dispose();
        poolE.fill(NaN);
        using graph = captureGraph(() => call(poolG));
        try {
          for (const [r, offsets] of ROUNDS.entries()) {
            setInt32(x.cu, offsets);
            x.refresh(seed + 100 * (r + 1));
            using yE = call(poolE);
            graph.replay();
            graph.synchronize();
            sameBits(graph.result, yE, `round ${r}: output`, offsets[offsets.length - 1]);
            sameBits(poolG, poolE, `round ${r}: state pool`);
          }
        } finally {
          graph.result.dispose();
        }
      })
    ),
});
